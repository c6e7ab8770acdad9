// CsvDataset: batches read from CSV files (plain or gzip), composed of the
// pipeline's stages (pipeline/dataset.h) -- TensorFlow's
//   tf.data.experimental.CsvDataset(files).filter(rows)
//       .shuffle(every_row, seed).batch(batch_size, drop_remainder)
//       .repeat(num_epochs)
// What it adds to the stages is the loading: the files read once, every
// row checked before training starts (a held-out row too), and a kept
// subset of rows by index (a seeded train/eval split).
//
//   auto dataset = CsvDataset::Create({.files = {"digits.csv.gz"},
//                                      .num_columns = 65,
//                                      .keep_rows = split.first,
//                                      .shuffle_seed = 42,
//                                      .batch_size = 32,
//                                      .num_epochs = 10});
//   Dataset batches = CsvBatches(*dataset);  // into IteratorGetNext
//
// The stream:
//   * Rows: every file's rows in order (rows of file 2 after those of file
//     1), numbered from 0 across files; with keep_rows, only those rows, in
//     that file order (keep_rows is a set). CsvDatasetRows yields them, one
//     element (features, label) per row; the rows are loaded on the pool
//     when the first element is asked for, once per CsvDatasetRows chain.
//   * CsvBatches = CsvDatasetRows(d).Shuffle(every row, shuffle_seed) (when
//     seeded).Batch(batch_size, drop_remainder).Repeat(num_epochs): each
//     epoch is a uniform permutation of the kept rows (a shuffle buffer that
//     holds all of them), different each epoch, the same in every run;
//     batches never span epochs (an epoch's last batch is smaller, or
//     dropped with drop_remainder); after num_epochs epochs (-1: never) the
//     stream ends.
// The chain is deterministic, so resuming is exact as for every
// deterministic Dataset: Skip(n) on a new iterator continues with what an
// uninterrupted run yields after n batches (Repeat skips whole epochs
// without replaying them once it has counted one).
//
// An element of CsvDatasetRows: features, float [F] (F = num_columns - 1,
// in column order without the label); label, an int32 or int64 scalar. A
// batch: features [B, F], labels [B].
//
// Errors: Create returns InvalidArgument naming the bad option. Load (run
// on a pool thread by the pipeline) returns the reader's errors (see
// io/csv_reader.h: NotFound, DataLoss, InvalidArgument with file and
// line), InvalidArgument "<file>:<line>: column K: label '3.5' is not an
// integer" (or out of the label dtype's range), "<file>:<line>: column K:
// label 15 is out of range [0, 10) (num_classes)", and InvalidArgument when a
// keep_rows index is past the last row. A pipeline over the dataset ends
// with the same error.
//
// Thread safety: a CsvDataset is immutable and may be shared by any number
// of threads and iterators. Load and LoadBatch are blocking file I/O.
#ifndef COSESSION_PIPELINE_CSV_DATASET_H_
#define COSESSION_PIPELINE_CSV_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/tensor.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

struct CsvDatasetOptions {
  // Read in this order; each may be plain text or gzip.
  std::vector<std::string> files{};
  // Columns of every row, the label included (required, >= 2). A row with
  // another count is InvalidArgument "<file>:<line>: expected N columns,
  // got M".
  int64_t num_columns = 0;
  // 0-based column of the label; -1 = the last column.
  int64_t label_column = -1;
  // Leading lines of each file to ignore (a header).
  int64_t skip_lines = 0;
  // kFloat only.
  DType feature_dtype = DType::kFloat;
  // kInt32 or kInt64; the label column must hold integers in its range.
  DType label_dtype = DType::kInt32;
  // When set, every label must be in [0, num_classes) (class indices); Load
  // checks every row of the files, kept or not, so that a bad row anywhere
  // (a held-out one too) is found before training starts.
  std::optional<int64_t> num_classes{};
  // 0-based indices (across files) of the rows to keep; unset = all rows.
  // No negative index, no index twice.
  std::optional<std::vector<int64_t>> keep_rows{};
  // Unset = no shuffling (file order every epoch).
  std::optional<uint64_t> shuffle_seed{};
  int64_t batch_size = 32;
  // Drop the last, smaller batch of each epoch.
  bool drop_remainder = false;
  // Passes over the rows; -1 = forever.
  int64_t num_epochs = 1;
  // Capacity, in batches, of the prefetch buffer between the producer and
  // IteratorGetNext (>= 1); IteratorGetNext's default buffer_size.
  int64_t prefetch_batches = 8;
};

struct DatasetBatch {
  Tensor features{};  // float [B, F]
  Tensor labels{};    // label_dtype [B]
};

// The kept rows, decoded.
struct DatasetRows {
  int64_t num_features = 0;
  std::vector<float> features{};  // row-major, size() * num_features
  std::vector<int64_t> labels{};
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

class CsvDataset {
 public:
  static absl::StatusOr<std::shared_ptr<const CsvDataset>> Create(
      CsvDatasetOptions options);

  const CsvDatasetOptions& options() const { return options_; }
  int64_t num_features() const { return options_.num_columns - 1; }

  // Reads every file and keeps the chosen rows. Blocking I/O.
  absl::StatusOr<std::shared_ptr<const DatasetRows>> Load() const;

  // Load, then every kept row, in file order, as one batch (an evaluation
  // set); batch_size, shuffle_seed and num_epochs play no part.
  absl::StatusOr<DatasetBatch> LoadBatch() const;

 private:
  explicit CsvDataset(CsvDatasetOptions options)
      : options_(std::move(options)) {}
  CsvDatasetOptions options_;
};

// The kept rows as a pipeline source, one element (features, label) per
// row in file order; loaded on the pool at the first Next or Skip, once
// for every iterator of this Dataset (each Repeat pass included). Skip
// moves past rows without building them.
Dataset CsvDatasetRows(std::shared_ptr<const CsvDataset> dataset);

// The dataset's batches (see the file comment): CsvDatasetRows composed
// with Shuffle, Batch and Repeat as its options say. What
// DatasetIteratorGetNext feeds the IteratorGetNext op
// (pipeline/dataset_iterator.h).
Dataset CsvBatches(std::shared_ptr<const CsvDataset> dataset);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_CSV_DATASET_H_
