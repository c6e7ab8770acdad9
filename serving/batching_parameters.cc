#include "cosession/serving/batching_parameters.h"

#include <algorithm>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"
#include "cosession/serving/text_proto.h"

namespace cosession {
namespace {

// A wrapper field's value (`name { value: N }`), at least `min`.
absl::StatusOr<int64_t> WrapperInt(const TextProtoField& field, int64_t min,
                                   absl::string_view source) {
  const TextProtoMessage* m = field.message.get();
  if (m == nullptr || m->fields.size() != 1 || m->fields[0].name != "value") {
    return TextProtoError(
        source, field.line,
        absl::StrCat("field '", field.name, "' wants { value: ... }"));
  }
  absl::StatusOr<int64_t> v = TextProtoInt(m->fields[0], min, source);
  if (!v.ok()) {
    return TextProtoError(
        source, field.line,
        absl::StrCat("field '", field.name, "' wants an integer >= ", min,
                     ", got '", m->fields[0].scalar, "'"));
  }
  return v;
}

}  // namespace

BatchingOptions DefaultBatchingOptions() {
  BatchingOptions o;
  o.max_batch_size = 1000;
  o.batch_timeout = std::chrono::microseconds(0);
  o.max_enqueued_batches = 10;
  o.num_batch_threads =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return o;
}

absl::StatusOr<BatchingOptions> ParseBatchingParameters(
    absl::string_view text, absl::string_view source) {
  BatchingOptions o = DefaultBatchingOptions();
  COSESSION_ASSIGN_OR_RETURN(TextProtoMessage message,
                             ParseTextProto(text, source));
  for (const TextProtoField& f : message.fields) {
    const std::string& field = f.name;
    if (field == "max_batch_size" || field == "batch_timeout_micros" ||
        field == "max_enqueued_batches" || field == "num_batch_threads" ||
        field == "max_execution_batch_size") {
      const int64_t min = field == "batch_timeout_micros" ? 0 : 1;
      COSESSION_ASSIGN_OR_RETURN(int64_t v, WrapperInt(f, min, source));
      if (field == "max_batch_size") o.max_batch_size = v;
      if (field == "batch_timeout_micros") {
        o.batch_timeout = std::chrono::microseconds(v);
      }
      if (field == "max_enqueued_batches") o.max_enqueued_batches = v;
      if (field == "num_batch_threads") {
        if (v > 1024) {
          return TextProtoError(source, f.line, "num_batch_threads above 1024");
        }
        o.num_batch_threads = static_cast<int>(v);
      }
    } else if (field == "thread_pool_name" ||
               field == "enable_large_batch_splitting") {
      const TextProtoMessage* m = f.message.get();
      if (m == nullptr || m->fields.size() != 1 ||
          m->fields[0].name != "value") {
        return TextProtoError(
            source, f.line,
            absl::StrCat("field '", field, "' wants { value: ... }"));
      }
    } else if (field == "allowed_batch_sizes") {
      COSESSION_ASSIGN_OR_RETURN(int64_t v, TextProtoInt(f, 1, source));
      o.allowed_batch_sizes.push_back(v);
    } else if (field == "pad_variable_length_inputs") {
      if (f.message != nullptr || (f.scalar != "true" && f.scalar != "false")) {
        return TextProtoError(source, f.line,
                              "pad_variable_length_inputs wants true or false");
      }
    } else {
      return TextProtoUnknownField(f, "BatchingParameters", source);
    }
  }
  return o;
}

}  // namespace cosession
