// CsvRows: CSV rows parsed from a dataset of lines (TextLines, ReadLines,
// TcpLines) into (features, label) elements -- the shape of a classifier's
// input, as TensorFlow's CsvDataset with a label column:
//
//   Dataset rows = CsvRows(Dataset::TextLines({"digits.csv.gz"}),
//                          {.num_columns = 65, .num_classes = 10});
//   // elements: (float [64], int32 [])
//
// A row is `num_columns` decimal numbers (io/csv_reader.h's format and
// parser: std::from_chars, no quoting); blank lines are skipped. The label
// column is removed from the features. Errors name the line's origin:
// InvalidArgument "digits.csv:17: expected 65 columns, got 64",
// "...: column 3: 'abc' is not a number", "...: column 65: label 15 is out
// of range [0, 10) (num_classes)", "...: column 65: label '3.5' is not an
// integer in the range of int32".
//
// Thread safety: the dataset is immutable; the parse function is
// reentrant, so `parallelism` > 1 parses on the pool.
#ifndef COSESSION_PIPELINE_CSV_ROWS_H_
#define COSESSION_PIPELINE_CSV_ROWS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "cosession/graph/dtype.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

struct CsvRowOptions {
  // Columns of every row, the label included (>= 2).
  int64_t num_columns = 0;
  // 0-based column of the label; -1 = the last column.
  int64_t label_column = -1;
  // kInt32 or kInt64.
  DType label_dtype = DType::kInt32;
  // When set, every label must be in [0, num_classes).
  std::optional<int64_t> num_classes{};
  char delimiter = ',';
  // Rows parsed at once (Map's parallelism; in input order).
  int64_t parallelism = 1;
};

Dataset CsvRows(Dataset lines, CsvRowOptions options);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_CSV_ROWS_H_
