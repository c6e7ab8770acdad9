// CsvDataset: a deterministic stream of batches read from CSV files (plain
// or gzip) -- the data side of an input pipeline, as TensorFlow's
//   tf.data.experimental.CsvDataset(files).filter(rows).shuffle(seed)
//       .batch(batch_size, drop_remainder).repeat(num_epochs)
// The asynchronous side: CsvBatches below makes it a source of the stage
// pipeline (pipeline/dataset.h), which the IteratorGetNext op reads
// (pipeline/dataset_iterator.h).
//
//   auto dataset = CsvDataset::Create({.files = {"digits.csv.gz"},
//                                      .num_columns = 65,
//                                      .keep_rows = split.first,
//                                      .shuffle_seed = 42,
//                                      .batch_size = 32,
//                                      .num_epochs = 10});
//
// The stream, by batch index b = 0, 1, ...:
//   * Rows: every file's rows in order (rows of file 2 after those of file
//     1), numbered from 0 across files; with keep_rows, only those rows, in
//     that file order (keep_rows is a set).
//   * Epoch e is one pass over the kept rows in EpochOrder(n, seed, e): the
//     file order without a seed, else a uniform permutation that depends
//     only on (seed, e) -- a full shuffle (the rows are in memory, so no
//     shuffle buffer is needed), different each epoch, the same in every run
//     and on every platform (own Fisher-Yates over std::mt19937_64).
//   * Each epoch is cut into batches of batch_size rows; its last batch is
//     smaller (or dropped, with drop_remainder). Batches never span epochs,
//     so batch b is batch b % P of epoch b / P (P = BatchesPerEpoch()).
//   * After num_epochs epochs (-1: never) the stream ends: OutOfRange.
// Hence starting at batch b yields exactly the tail, from b on, of the
// stream an uninterrupted run produces: resuming after a restart is exact.
//
// A batch: features, float [B, F] (F = num_columns - 1, in column order
// without the label); labels, int32 or int64 [B].
//
// Errors: Create returns InvalidArgument naming the bad option. Load (run
// on a pool thread by the pipeline) returns the reader's errors (see
// io/csv_reader.h: NotFound, DataLoss, InvalidArgument with file and
// line), InvalidArgument "<file>:<line>: column K: label '3.5' is not an
// integer" (or out of the label dtype's range), "<file>:<line>: column K:
// label 15 is out of range [0, 10) (num_classes)", and InvalidArgument when a
// keep_rows index is past the last row.
//
// Thread safety: a CsvDataset is immutable and may be shared by any number
// of threads and iterators. Load is blocking file I/O. A DatasetStream is a
// plain single-threaded cursor.
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

// The kept rows, decoded: what a stream batches.
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

  // Batches in one epoch of `num_rows` rows (0 when drop_remainder drops
  // them all: the stream is then empty).
  int64_t BatchesPerEpoch(int64_t num_rows) const;

 private:
  explicit CsvDataset(CsvDatasetOptions options)
      : options_(std::move(options)) {}
  CsvDatasetOptions options_;
};

// The order in which epoch `epoch` visits rows 0..n-1: identity without a
// seed, else a permutation that depends only on (seed, epoch).
std::vector<int64_t> EpochOrder(int64_t n, std::optional<uint64_t> seed,
                                int64_t epoch);

// The batches of a dataset over loaded rows, from batch `start_at_batch` on
// (see the file comment). Single-threaded.
class DatasetStream {
 public:
  // `start_at_batch` >= 0; past the end the stream is just empty.
  DatasetStream(std::shared_ptr<const CsvDataset> dataset,
                std::shared_ptr<const DatasetRows> rows,
                int64_t start_at_batch);

  // The next batch; OutOfRange ("End of sequence") after the last one, and
  // on every later call.
  absl::StatusOr<DatasetBatch> Next();
  // The index of the batch Next() returns.
  int64_t next_batch() const { return next_batch_; }

 private:
  std::shared_ptr<const CsvDataset> dataset_;
  std::shared_ptr<const DatasetRows> rows_;
  int64_t next_batch_;
  int64_t batches_per_epoch_;
  int64_t order_epoch_ = -1;  // the epoch `order_` belongs to
  std::vector<int64_t> order_;
};

// The dataset's batches as a pipeline source (pipeline/dataset.h): elements
// (features, labels), the stream above from its batch 0; the rows are
// loaded on the pool when the first element is asked for. Skip(n) jumps
// to batch n without building the batches before it. A thin adapter, so
// that CsvDataset feeds the one IteratorGetNext op and composes with the
// other stages (e.g. .Prefetch, .Take).
Dataset CsvBatches(std::shared_ptr<const CsvDataset> dataset);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_CSV_DATASET_H_
