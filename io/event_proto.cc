#include "cosession/io/event_proto.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "cosession/io/proto_wire.h"

namespace cosession {
namespace {

using proto_wire::kLengthDelimited;
using proto_wire::kVarint;
using proto_wire::PutBytes;
using proto_wire::PutDouble;
using proto_wire::PutFixed;
using proto_wire::PutFloat;
using proto_wire::PutInt64;
using proto_wire::PutKey;
using proto_wire::PutVarint;

void PutPackedDoubles(std::string& out, uint32_t field,
                      const std::vector<double>& values) {
  if (values.empty()) return;
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, values.size() * 8);
  for (double v : values) PutFixed(out, std::bit_cast<uint64_t>(v), 8);
}

std::string EncodeHistogram(const HistogramProto& h) {
  std::string out;
  PutDouble(out, 1, h.min);
  PutDouble(out, 2, h.max);
  PutDouble(out, 3, h.num);
  PutDouble(out, 4, h.sum);
  PutDouble(out, 5, h.sum_squares);
  PutPackedDoubles(out, 6, h.bucket_limit);
  PutPackedDoubles(out, 7, h.bucket);
  return out;
}

std::string EncodeSummaryValue(const SummaryValue& value) {
  std::string out;
  PutBytes(out, 1, value.tag);
  if (const float* simple = std::get_if<float>(&value.value)) {
    PutFloat(out, 2, *simple);
  } else {
    PutBytes(out, 5, EncodeHistogram(std::get<HistogramProto>(value.value)));
  }
  return out;
}

std::string EncodeSummary(const Summary& summary) {
  std::string out;
  for (const SummaryValue& value : summary.value) {
    PutBytes(out, 1, EncodeSummaryValue(value));
  }
  return out;
}

std::string EncodeSessionLog(const SessionLog& log) {
  std::string out;
  if (log.status != SessionLog::kStatusUnspecified) {
    PutKey(out, 1, kVarint);
    PutVarint(out, static_cast<uint64_t>(log.status));
  }
  if (!log.checkpoint_path.empty()) PutBytes(out, 2, log.checkpoint_path);
  if (!log.msg.empty()) PutBytes(out, 3, log.msg);
  return out;
}

}  // namespace

std::string EncodeEvent(const Event& event) {
  std::string out;
  PutDouble(out, 1, event.wall_time);
  if (event.step != 0) PutInt64(out, 2, event.step);
  if (const auto* version = std::get_if<FileVersion>(&event.what)) {
    PutBytes(out, 3, version->version);
  } else if (const auto* summary = std::get_if<Summary>(&event.what)) {
    PutBytes(out, 5, EncodeSummary(*summary));
  } else if (const auto* log = std::get_if<SessionLog>(&event.what)) {
    PutBytes(out, 7, EncodeSessionLog(*log));
  } else if (const auto* graph = std::get_if<SerializedGraphDef>(&event.what)) {
    PutBytes(out, 4, graph->bytes);
  } else if (const auto* meta =
                 std::get_if<SerializedMetaGraphDef>(&event.what)) {
    PutBytes(out, 9, meta->bytes);
  } else if (const auto* run = std::get_if<TaggedRunMetadata>(&event.what)) {
    std::string tagged;
    PutBytes(tagged, 1, run->tag);
    PutBytes(tagged, 2, run->run_metadata);
    PutBytes(out, 8, tagged);
  }
  return out;
}

const std::vector<double>& DefaultHistogramBucketLimits() {
  static const std::vector<double>* limits = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    auto* all = new std::vector<double>;
    all->reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) {
      all->push_back(-*it);
    }
    all->push_back(0.0);
    all->insert(all->end(), positive.begin(), positive.end());
    return all;
  }();
  return *limits;
}

absl::StatusOr<HistogramProto> MakeHistogram(absl::Span<const double> values) {
  const std::vector<double>& limits = DefaultHistogramBucketLimits();
  std::vector<double> counts(limits.size(), 0.0);
  HistogramProto h;
  h.min = DBL_MAX;  // an empty histogram keeps TensorFlow's initial min/max
  h.max = -DBL_MAX;
  for (double v : values) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram of a tensor holding ", v));
    }
    // The first limit above v closes v's bucket.
    const size_t b =
        std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
    counts[std::min(b, limits.size() - 1)] += 1.0;
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.num += 1.0;
    h.sum += v;
    h.sum_squares += v * v;
  }
  // Collapse each run of empty buckets into one (ending at the run's last
  // limit), as TensorFlow does, so files stay small.
  for (size_t i = 0; i < counts.size();) {
    double limit = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < counts.size() && counts[i] <= 0.0) {
        limit = limits[i];
        ++i;
      }
    }
    h.bucket_limit.push_back(limit);
    h.bucket.push_back(count);
  }
  return h;
}

absl::StatusOr<HistogramProto> MakeHistogram(const Tensor& values) {
  std::vector<double> as_double;
  as_double.reserve(values.NumElements());
  VisitDType(values.dtype(), [&]<typename T>() {
    for (T v : values.flat<T>()) as_double.push_back(static_cast<double>(v));
  });
  return MakeHistogram(as_double);
}

}  // namespace cosession
