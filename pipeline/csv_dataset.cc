#include "cosession/pipeline/csv_dataset.h"

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <limits>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/io/csv_reader.h"
#include "cosession/pipeline/detail/on_pool.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession {
namespace {

absl::Status OptionError(absl::string_view option, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("CsvDataset: ", option, " ", problem));
}

// The salt of the epochs' streams (SeededRowSplit has its own).
constexpr uint64_t kEpochSalt = 1;

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
  return SeededPermutation(n, *seed, kEpochSalt + static_cast<uint64_t>(epoch));
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

namespace {

// CsvBatches' stage: the stream of DatasetStream as elements.
class CsvBatchesIterator : public ElementIterator {
 public:
  CsvBatchesIterator(std::shared_ptr<const CsvDataset> dataset,
                     Runtime::executor_type pool)
      : dataset_(std::move(dataset)), pool_(std::move(pool)) {}

  std::optional<Result> TryNext() override {
    if (!stream_.has_value()) return std::nullopt;
    return NextBatch();
  }

  boost::asio::awaitable<Result> Next() override {
    if (!stream_.has_value()) {
      absl::Status loaded = co_await Load();
      if (!loaded.ok()) co_return loaded;
    }
    co_return NextBatch();
  }

  boost::asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (!stream_.has_value()) {
      absl::Status loaded = co_await Load();
      if (!loaded.ok()) co_return loaded;
    }
    const int64_t per_epoch = dataset_->BatchesPerEpoch(rows_->size());
    const int64_t epochs = dataset_->options().num_epochs;
    const int64_t next = stream_->next_batch();
    int64_t skipped = n;
    if (epochs != -1) {
      skipped = std::clamp<int64_t>(per_epoch * epochs - next, 0, n);
    } else if (per_epoch == 0) {
      skipped = 0;
    }
    stream_.emplace(dataset_, rows_, next + skipped);
    co_return skipped;
  }

 private:
  boost::asio::awaitable<absl::Status> Load() {
    if (!load_status_.ok()) co_return load_status_;
    using LoadResult = absl::StatusOr<std::shared_ptr<const DatasetRows>>;
    // Named first: a capturing lambda temporary inside co_await is freed
    // too early by g++ 12 (docs/async_pitfalls.md, item 4).
    auto load = [dataset = dataset_] { return dataset->Load(); };
    LoadResult rows = co_await detail::AsyncOnPool<LoadResult>(
        pool_, std::move(load), "CsvBatches: reading the files was cancelled",
        boost::asio::use_awaitable);
    if (!rows.ok()) {
      if (!absl::IsCancelled(rows.status())) load_status_ = rows.status();
      co_return rows.status();
    }
    rows_ = *std::move(rows);
    stream_.emplace(dataset_, rows_, 0);
    co_return absl::OkStatus();
  }

  Result NextBatch() {
    absl::StatusOr<DatasetBatch> batch = stream_->Next();
    if (absl::IsOutOfRange(batch.status())) return std::optional<Element>();
    if (!batch.ok()) return batch.status();
    return std::optional<Element>(
        MakeElement({std::move(batch->features), std::move(batch->labels)}));
  }

  std::shared_ptr<const CsvDataset> dataset_;
  Runtime::executor_type pool_;
  absl::Status load_status_;
  std::shared_ptr<const DatasetRows> rows_;
  std::optional<DatasetStream> stream_;
};

class CsvBatchesNode : public DatasetNode {
 public:
  explicit CsvBatchesNode(std::shared_ptr<const CsvDataset> dataset)
      : dataset_(std::move(dataset)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<CsvBatchesIterator>(dataset_, context.pool);
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{
        ComponentSpec::Of(DType::kFloat,
                          TensorShape{kUnknownDim, dataset_->num_features()}),
        ComponentSpec::Of(dataset_->options().label_dtype,
                          TensorShape{kUnknownDim})};
  }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("CsvBatches(",
                        absl::StrJoin(dataset_->options().files, ", "), ")");
  }

 private:
  std::shared_ptr<const CsvDataset> dataset_;
};

}  // namespace

Dataset CsvBatches(std::shared_ptr<const CsvDataset> dataset) {
  if (dataset == nullptr) {
    return Dataset::Failed(
        absl::InvalidArgumentError("CsvBatches: the dataset is null"));
  }
  return Dataset::FromNode(
      std::make_shared<CsvBatchesNode>(std::move(dataset)));
}

}  // namespace cosession
