#include "cosession/pipeline/csv_dataset.h"

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <limits>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/io/csv_reader.h"
#include "cosession/pipeline/detail/on_pool.h"

namespace cosession {
namespace {

absl::Status OptionError(absl::string_view option, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("CsvDataset: ", option, " ", problem));
}

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

absl::StatusOr<DatasetBatch> CsvDataset::LoadBatch() const {
  absl::StatusOr<std::shared_ptr<const DatasetRows>> rows = Load();
  if (!rows.ok()) return rows.status();
  const DatasetRows& loaded = **rows;
  const int64_t b = loaded.size();
  const int64_t f = loaded.num_features;
  DatasetBatch batch;
  batch.features = Tensor::Allocate(DType::kFloat, TensorShape{b, f});
  batch.labels = Tensor::Allocate(options_.label_dtype, TensorShape{b});
  std::copy(loaded.features.begin(), loaded.features.end(),
            batch.features.mutable_flat<float>().begin());
  for (int64_t i = 0; i < b; ++i) {
    if (options_.label_dtype == DType::kInt32) {
      batch.labels.mutable_flat<int32_t>()[i] =
          static_cast<int32_t>(loaded.labels[i]);
    } else {
      batch.labels.mutable_flat<int64_t>()[i] = loaded.labels[i];
    }
  }
  return batch;
}

namespace {

// The kept rows of one CsvDatasetRows chain, loaded by the first iterator
// that needs them and shared by every later one: a Repeat makes a new
// iterator per pass, and the files are read once, not once per epoch.
class LoadedRowsCache {
 public:
  std::shared_ptr<const DatasetRows> Get() const {
    std::lock_guard lock(mu_);
    return rows_;
  }
  // Keeps the first rows put (two iterators may load at once; both loads
  // read the same files) and returns the kept ones.
  std::shared_ptr<const DatasetRows> Put(
      std::shared_ptr<const DatasetRows> rows) {
    std::lock_guard lock(mu_);
    if (rows_ == nullptr) rows_ = std::move(rows);
    return rows_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const DatasetRows> rows_ ABSL_GUARDED_BY(mu_);
};

// CsvDatasetRows' stage: row i of the loaded rows as element i.
class CsvDatasetRowsIterator : public ElementIterator {
 public:
  CsvDatasetRowsIterator(std::shared_ptr<const CsvDataset> dataset,
                         std::shared_ptr<LoadedRowsCache> cache,
                         Runtime::executor_type pool)
      : dataset_(std::move(dataset)),
        cache_(std::move(cache)),
        pool_(std::move(pool)),
        rows_(cache_->Get()) {}

  std::optional<Result> TryNext() override {
    if (rows_ == nullptr) return std::nullopt;
    return NextRow();
  }
  boost::asio::awaitable<Result> Next() override {
    if (rows_ == nullptr) {
      absl::Status loaded = co_await Load();
      if (!loaded.ok()) co_return loaded;
    }
    co_return NextRow();
  }
  absl::StatusOr<Taken> TryTakeInto(std::vector<Element>& out,
                                    size_t size) override {
    if (rows_ == nullptr) return Taken::kMustAwait;
    while (out.size() < size) {
      if (next_row_ >= rows_->size()) return Taken::kEnd;
      out.push_back(**NextRow());
    }
    return Taken::kFull;
  }
  boost::asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (rows_ == nullptr) {
      absl::Status loaded = co_await Load();
      if (!loaded.ok()) co_return loaded;
    }
    const int64_t skipped = std::min(n, rows_->size() - next_row_);
    next_row_ += skipped;
    co_return skipped;
  }

 private:
  boost::asio::awaitable<absl::Status> Load() {
    using LoadResult = absl::StatusOr<std::shared_ptr<const DatasetRows>>;
    // Named first: a capturing lambda temporary inside co_await is freed
    // too early by g++ 12 (docs/async_pitfalls.md, item 4).
    auto load = [dataset = dataset_] { return dataset->Load(); };
    LoadResult rows = co_await detail::AsyncOnPool<LoadResult>(
        pool_, std::move(load),
        "CsvDatasetRows: reading the files was cancelled",
        boost::asio::use_awaitable);
    if (!rows.ok()) co_return rows.status();
    rows_ = cache_->Put(*std::move(rows));
    co_return absl::OkStatus();
  }

  Result NextRow() {
    if (next_row_ >= rows_->size()) return std::optional<Element>();
    const int64_t f = rows_->num_features;
    Tensor features = Tensor::Allocate(DType::kFloat, TensorShape{f});
    std::copy_n(rows_->features.begin() + next_row_ * f, f,
                features.mutable_flat<float>().begin());
    const int64_t label = rows_->labels[next_row_];
    ++next_row_;
    // Built in place: MakeElement's vector would be one more allocation
    // and a copy of each tensor per row.
    Element row;
    row.components.reserve(2);
    row.components.emplace_back(std::move(features));
    row.components.emplace_back(
        dataset_->options().label_dtype == DType::kInt32
            ? Tensor::Scalar<int32_t>(static_cast<int32_t>(label))
            : Tensor::Scalar<int64_t>(label));
    return std::optional<Element>(std::move(row));
  }

  std::shared_ptr<const CsvDataset> dataset_;
  std::shared_ptr<LoadedRowsCache> cache_;
  Runtime::executor_type pool_;
  std::shared_ptr<const DatasetRows> rows_;
  int64_t next_row_ = 0;
};

class CsvDatasetRowsNode : public DatasetNode {
 public:
  explicit CsvDatasetRowsNode(std::shared_ptr<const CsvDataset> dataset)
      : dataset_(std::move(dataset)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<CsvDatasetRowsIterator>(dataset_, cache_,
                                                    context.pool);
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{
        ComponentSpec::Of(DType::kFloat, TensorShape{dataset_->num_features()}),
        ComponentSpec::Scalar(dataset_->options().label_dtype)};
  }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("CsvDatasetRows(",
                        absl::StrJoin(dataset_->options().files, ", "), ")");
  }

 private:
  std::shared_ptr<const CsvDataset> dataset_;
  std::shared_ptr<LoadedRowsCache> cache_ = std::make_shared<LoadedRowsCache>();
};

// A shuffle buffer that holds every row: the rows are in memory already,
// so each epoch is a full uniform permutation, not a windowed one.
constexpr int64_t kEveryRow = std::numeric_limits<int64_t>::max();

}  // namespace

Dataset CsvDatasetRows(std::shared_ptr<const CsvDataset> dataset) {
  if (dataset == nullptr) {
    return Dataset::Failed(
        absl::InvalidArgumentError("CsvDatasetRows: the dataset is null"));
  }
  return Dataset::FromNode(
      std::make_shared<CsvDatasetRowsNode>(std::move(dataset)));
}

Dataset CsvBatches(std::shared_ptr<const CsvDataset> dataset) {
  if (dataset == nullptr) {
    return Dataset::Failed(
        absl::InvalidArgumentError("CsvBatches: the dataset is null"));
  }
  const CsvDatasetOptions& options = dataset->options();
  Dataset rows = CsvDatasetRows(dataset);
  if (options.shuffle_seed.has_value()) {
    const int64_t buffer = options.keep_rows.has_value()
                               ? std::max<int64_t>(options.keep_rows->size(), 1)
                               : kEveryRow;
    rows = rows.Shuffle(buffer, *options.shuffle_seed);
  }
  return rows.Batch(options.batch_size, options.drop_remainder)
      .Repeat(options.num_epochs);
}

}  // namespace cosession
