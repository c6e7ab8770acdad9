#include "cosession/pipeline/dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/csv_reader.h"

namespace cosession {
namespace {

absl::Status OptionError(absl::string_view option, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("CsvDataset: ", option, " ", problem));
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound), unbiased, the same on every platform (unlike
// std::uniform_int_distribution, whose algorithm the standard leaves open).
uint64_t UniformBelow(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const uint64_t limit = max - max % bound;
  uint64_t r;
  do {
    r = engine();
  } while (r >= limit);
  return r % bound;
}

// A Fisher-Yates permutation of 0..n-1 from a stream keyed by (seed, salt).
std::vector<int64_t> Permutation(int64_t n, uint64_t seed, uint64_t salt) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  const uint64_t a = SplitMix64(state);
  state ^= salt * 0xd1b54a32d192ed03ULL;
  const uint64_t b = SplitMix64(state);
  std::seed_seq seq{static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                    static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
  std::mt19937_64 engine(seq);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(
        UniformBelow(engine, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

// Salts that keep the split's stream apart from the epochs' streams.
constexpr uint64_t kEpochSalt = 1;
constexpr uint64_t kSplitSalt = 0x5b17'0000'0000'0001ULL;

}  // namespace

absl::StatusOr<std::shared_ptr<const CsvDataset>> CsvDataset::Create(
    CsvDatasetOptions options) {
  if (options.files.empty()) return OptionError("files", "is empty");
  for (const std::string& file : options.files) {
    if (file.empty()) return OptionError("files", "holds an empty path");
  }
  if (options.num_columns < 2) {
    return OptionError("num_columns",
                       absl::StrCat("must be at least 2 (features and a "
                                    "label), got ",
                                    options.num_columns));
  }
  if (options.label_column < -1 ||
      options.label_column >= options.num_columns) {
    return OptionError(
        "label_column",
        absl::StrCat("must be -1 (the last column) or in [0, ",
                     options.num_columns, "), got ", options.label_column));
  }
  if (options.label_column == -1) {
    options.label_column = options.num_columns - 1;
  }
  if (options.skip_lines < 0) {
    return OptionError("skip_lines", absl::StrCat("must not be negative, got ",
                                                  options.skip_lines));
  }
  if (options.feature_dtype != DType::kFloat) {
    return OptionError(
        "feature_dtype",
        absl::StrCat("must be float, got ", DTypeName(options.feature_dtype)));
  }
  if (options.label_dtype != DType::kInt32 &&
      options.label_dtype != DType::kInt64) {
    return OptionError("label_dtype",
                       absl::StrCat("must be int32 or int64, got ",
                                    DTypeName(options.label_dtype)));
  }
  if (options.num_classes.has_value() && *options.num_classes < 1) {
    return OptionError("num_classes", absl::StrCat("must be >= 1, got ",
                                                   *options.num_classes));
  }
  if (options.keep_rows.has_value()) {
    absl::flat_hash_set<int64_t> seen;
    for (int64_t row : *options.keep_rows) {
      if (row < 0) {
        return OptionError("keep_rows",
                           absl::StrCat("holds a negative row index: ", row));
      }
      if (!seen.insert(row).second) {
        return OptionError("keep_rows",
                           absl::StrCat("lists row ", row, " twice"));
      }
    }
    std::sort(options.keep_rows->begin(), options.keep_rows->end());
  }
  if (options.batch_size < 1) {
    return OptionError("batch_size", absl::StrCat("must be positive, got ",
                                                  options.batch_size));
  }
  if (options.num_epochs < 1 && options.num_epochs != -1) {
    return OptionError("num_epochs",
                       absl::StrCat("must be positive or -1 (forever), got ",
                                    options.num_epochs));
  }
  if (options.prefetch_batches < 1) {
    return OptionError(
        "prefetch_batches",
        absl::StrCat("must be positive, got ", options.prefetch_batches));
  }
  return std::shared_ptr<const CsvDataset>(new CsvDataset(std::move(options)));
}

absl::StatusOr<std::shared_ptr<const DatasetRows>> CsvDataset::Load() const {
  const int64_t features = num_features();
  const int64_t label_column = options_.label_column;
  auto rows = std::make_shared<DatasetRows>();
  rows->num_features = features;
  const std::vector<int64_t>* keep =
      options_.keep_rows.has_value() ? &*options_.keep_rows : nullptr;
  size_t next_kept = 0;  // keep_rows is sorted
  int64_t row_index = 0;
  const double min_label =
      options_.label_dtype == DType::kInt32
          ? static_cast<double>(std::numeric_limits<int32_t>::min())
          : -9.2233720368547758e18;
  const double max_label =
      options_.label_dtype == DType::kInt32
          ? static_cast<double>(std::numeric_limits<int32_t>::max())
          : 9.2233720368547748e18;
  for (const std::string& file : options_.files) {
    absl::StatusOr<CsvTable> table =
        ReadCsvFile(file, {.num_columns = options_.num_columns,
                           .skip_lines = options_.skip_lines});
    if (!table.ok()) return table.status();
    for (int64_t r = 0; r < table->num_rows(); ++r, ++row_index) {
      absl::Span<const double> row = table->row(r);
      const double label = row[label_column];
      if (options_.num_classes.has_value() &&
          !(label >= 0 && label < static_cast<double>(*options_.num_classes) &&
            std::floor(label) == label)) {
        return absl::InvalidArgumentError(absl::StrCat(
            file, ":", table->lines[r], ": column ", label_column + 1,
            ": label ", label, " is out of range [0, ", *options_.num_classes,
            ") (num_classes)"));
      }
      if (keep != nullptr) {
        if (next_kept >= keep->size() || (*keep)[next_kept] != row_index) {
          continue;
        }
        ++next_kept;
      }
      if (std::floor(label) != label || label < min_label ||
          label > max_label) {
        return absl::InvalidArgumentError(absl::StrCat(
            file, ":", table->lines[r], ": column ", label_column + 1,
            ": label '", label, "' is not an integer in the range of ",
            DTypeName(options_.label_dtype)));
      }
      rows->labels.push_back(static_cast<int64_t>(label));
      for (int64_t c = 0; c < options_.num_columns; ++c) {
        if (c != label_column) {
          rows->features.push_back(static_cast<float>(row[c]));
        }
      }
    }
  }
  if (keep != nullptr && next_kept < keep->size()) {
    return OptionError("keep_rows",
                       absl::StrCat("holds row index ", (*keep)[next_kept],
                                    ", past the last row: the files have ",
                                    row_index, " rows"));
  }
  return std::shared_ptr<const DatasetRows>(std::move(rows));
}

int64_t CsvDataset::BatchesPerEpoch(int64_t num_rows) const {
  const int64_t b = options_.batch_size;
  return options_.drop_remainder ? num_rows / b : (num_rows + b - 1) / b;
}

std::vector<int64_t> EpochOrder(int64_t n, std::optional<uint64_t> seed,
                                int64_t epoch) {
  if (!seed.has_value()) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    return order;
  }
  return Permutation(n, *seed, kEpochSalt + static_cast<uint64_t>(epoch));
}

DatasetStream::DatasetStream(std::shared_ptr<const CsvDataset> dataset,
                             std::shared_ptr<const DatasetRows> rows,
                             int64_t start_at_batch)
    : dataset_(std::move(dataset)),
      rows_(std::move(rows)),
      next_batch_(std::max<int64_t>(start_at_batch, 0)),
      batches_per_epoch_(dataset_->BatchesPerEpoch(rows_->size())) {}

absl::StatusOr<DatasetBatch> DatasetStream::Next() {
  const CsvDatasetOptions& options = dataset_->options();
  const int64_t per_epoch = batches_per_epoch_;
  if (per_epoch == 0 || (options.num_epochs != -1 &&
                         next_batch_ / per_epoch >= options.num_epochs)) {
    return absl::OutOfRangeError("End of sequence");
  }
  const int64_t epoch = next_batch_ / per_epoch;
  const int64_t in_epoch = next_batch_ % per_epoch;
  if (epoch != order_epoch_) {
    order_ = EpochOrder(rows_->size(), options.shuffle_seed, epoch);
    order_epoch_ = epoch;
  }
  const int64_t begin = in_epoch * options.batch_size;
  const int64_t end = std::min(begin + options.batch_size, rows_->size());
  const int64_t b = end - begin;
  const int64_t f = rows_->num_features;
  DatasetBatch batch;
  batch.features = Tensor::Allocate(DType::kFloat, TensorShape{b, f});
  batch.labels = Tensor::Allocate(options.label_dtype, TensorShape{b});
  absl::Span<float> features = batch.features.mutable_flat<float>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t row = order_[begin + i];
    std::copy_n(rows_->features.begin() + row * f, f, features.begin() + i * f);
    if (options.label_dtype == DType::kInt32) {
      batch.labels.mutable_flat<int32_t>()[i] =
          static_cast<int32_t>(rows_->labels[row]);
    } else {
      batch.labels.mutable_flat<int64_t>()[i] = rows_->labels[row];
    }
  }
  ++next_batch_;
  return batch;
}

absl::StatusOr<RowSplit> SeededRowSplit(int64_t num_rows, double first_fraction,
                                        uint64_t seed) {
  if (num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SeededRowSplit: num_rows must not be negative, got ", num_rows));
  }
  if (!(first_fraction >= 0.0 && first_fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SeededRowSplit: first_fraction must be in [0, 1], got ",
                     first_fraction));
  }
  const auto first_size = static_cast<int64_t>(
      std::llround(static_cast<double>(num_rows) * first_fraction));
  std::vector<int64_t> order = Permutation(num_rows, seed, kSplitSalt);
  RowSplit split;
  split.first.assign(order.begin(), order.begin() + first_size);
  split.second.assign(order.begin() + first_size, order.end());
  std::sort(split.first.begin(), split.first.end());
  std::sort(split.second.begin(), split.second.end());
  return split;
}

}  // namespace cosession
