// CSV reading: text of comma-separated numbers, plain or gzip-compressed
// (detected by content, not by name), into a table of doubles.
//
//   absl::StatusOr<CsvTable> table = ReadCsvFile("digits.csv.gz",
//                                                {.num_columns = 65});
//
// Format: one row per line ("\n" or "\r\n"), fields separated by
// `delimiter`, no quoting, no header (skip_lines skips leading lines).
// Lines that are empty or only whitespace are skipped (they still count for
// line numbers). Each field is a decimal number, optionally surrounded by
// spaces or tabs; anything else, an empty field, "nan" and "inf" included,
// is an error.
//
// Errors (every message starts with the file name and, for a row, its
// 1-based line number; columns are 1-based too):
//   InvalidArgument  "<file>:<line>: expected N columns, got M"
//                    "<file>:<line>: column K: 'abc' is not a number"
//                    "<file>: no rows" (an empty file, or only blank lines)
//   NotFound         "<file>: No such file or directory" (and the other
//                    errno codes, mapped by absl::ErrnoToStatus)
//   DataLoss         "<file>: corrupt gzip data: ..." (a damaged or
//                    truncated gzip stream)
// Bad input never crashes.
//
// ReadCsvFile is blocking file I/O: call it from a thread that may block
// (the dataset pipeline in pipeline/dataset.h runs it on a pool thread), never
// from a step's path. The whole file is held in memory.
//
// Thread safety: the functions are reentrant; a CsvTable is a plain value.
#ifndef COSESSION_IO_CSV_READER_H_
#define COSESSION_IO_CSV_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cosession {

struct CsvTable {
  int64_t num_columns = 0;
  // Row-major: num_rows() * num_columns values.
  std::vector<double> values{};
  // The 1-based source line of each row, for messages about it.
  std::vector<int64_t> lines{};

  int64_t num_rows() const { return static_cast<int64_t>(lines.size()); }
  absl::Span<const double> row(int64_t r) const {
    return absl::MakeConstSpan(values.data() + r * num_columns,
                               static_cast<size_t>(num_columns));
  }
};

struct CsvReadOptions {
  // Columns every row must have; 0 = as many as the first row has.
  int64_t num_columns = 0;
  char delimiter = ',';
  // Leading lines to ignore (a header).
  int64_t skip_lines = 0;
};

// One row: appends the `num_columns` numbers of `line` (no '\n'; a
// trailing '\r' is ignored) to `values`. InvalidArgument "expected N
// columns, got M" or "column K: 'abc' is not a number", without a source:
// the caller prefixes where the line came from. Some values may have been
// appended on error.
absl::Status ParseCsvFields(absl::string_view line, int64_t num_columns,
                            char delimiter, std::vector<double>& values);

// True when `line` is empty or only spaces, tabs and a '\r' (skipped rows).
bool IsBlankLine(absl::string_view line);

// Parses `text`; `source` names it in error messages.
absl::StatusOr<CsvTable> ParseCsv(absl::string_view text,
                                  absl::string_view source,
                                  const CsvReadOptions& options = {});

// The bytes of `path`, gunzipped when they are a gzip stream. Blocking.
absl::StatusOr<std::string> ReadMaybeGzipFile(const std::string& path);

// ReadMaybeGzipFile then ParseCsv. Blocking.
absl::StatusOr<CsvTable> ReadCsvFile(const std::string& path,
                                     const CsvReadOptions& options = {});

}  // namespace cosession

#endif  // COSESSION_IO_CSV_READER_H_
