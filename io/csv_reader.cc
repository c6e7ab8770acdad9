#include "cosession/io/csv_reader.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "cosession/io/maybe_gzip_file.h"

namespace cosession {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

absl::string_view Trim(absl::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && (IsBlank(s.back()) || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The number `field` holds, if it holds one (finite, nothing else).
bool ParseNumber(absl::string_view field, double& value) {
  absl::string_view s = Trim(field);
  if (s.empty()) return false;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (*begin == '+') ++begin;  // from_chars accepts only '-'
  if (begin == end) return false;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  return ec == std::errc() && ptr == end && std::isfinite(value);
}

}  // namespace

bool IsBlankLine(absl::string_view line) { return Trim(line).empty(); }

namespace {

// A field that is up to 16 decimal digits, perhaps after a '-': most CSV
// numbers are (counts, pixels, labels). The int64 holds them exactly, and
// its conversion rounds to the nearest double as from_chars does, several
// times cheaper. Returns the end of the digits and sets `value`, or
// returns nullptr for anything else -- a fraction, an exponent, more
// digits -- which from_chars then reads.
const char* ParseSmallInteger(const char* p, const char* end, double& value) {
  const bool negative = p < end && *p == '-';
  const char* digits = negative ? p + 1 : p;
  const char* q = digits;
  int64_t n = 0;
  while (q < end && q - digits < 16 && static_cast<unsigned>(*q - '0') < 10) {
    n = n * 10 + (*q - '0');
    ++q;
  }
  if (q == digits) return nullptr;
  if (q < end && (*q == '.' || *q == 'e' || *q == 'E' ||
                  static_cast<unsigned>(*q - '0') < 10)) {
    return nullptr;
  }
  // -0 is -0.0, as from_chars reads it.
  value = negative ? -static_cast<double>(n) : static_cast<double>(n);
  return q;
}

// The common row, in one pass: every field a number (blanks around it
// allowed), exactly num_columns of them. False, with `values` as it was,
// at anything else; ParseFieldsExactly then says what.
bool ParseFieldsFast(absl::string_view line, int64_t num_columns,
                     char delimiter, std::vector<double>& values) {
  const size_t old_size = values.size();
  const char* p = line.data();
  const char* const end = p + line.size();
  for (int64_t column = 0; column < num_columns; ++column) {
    while (p < end && IsBlank(*p)) ++p;
    if (p < end && *p == '+') ++p;  // from_chars accepts only '-'
    double value = 0;
    if (const char* next = ParseSmallInteger(p, end, value)) {
      p = next;
    } else {
      auto [after, ec] = std::from_chars(p, end, value);
      if (ec != std::errc() || after == p || !std::isfinite(value)) break;
      p = after;
    }
    while (p < end && (IsBlank(*p) || *p == '\r')) ++p;
    values.push_back(value);
    if (column + 1 == num_columns) {
      if (p == end) return true;
      break;
    }
    if (p == end || *p != delimiter) break;
    ++p;
  }
  values.resize(old_size);
  return false;
}

// The row field by field, counting first, so that a short or long row is
// reported as such before any of its fields.
absl::Status ParseFieldsExactly(absl::string_view line, int64_t num_columns,
                                char delimiter, std::vector<double>& values) {
  int64_t columns = 1;
  for (char c : line) columns += c == delimiter ? 1 : 0;
  if (columns != num_columns) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", num_columns, " columns, got ", columns));
  }
  int64_t column = 0;
  while (true) {
    const size_t sep = line.find(delimiter);
    absl::string_view field = line.substr(0, sep);
    ++column;
    double value = 0;
    if (!ParseNumber(field, value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column ", column, ": '", Trim(field), "' is not a number"));
    }
    values.push_back(value);
    if (sep == absl::string_view::npos) break;
    line.remove_prefix(sep + 1);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseCsvFields(absl::string_view line, int64_t num_columns,
                            char delimiter, std::vector<double>& values) {
  if (ParseFieldsFast(line, num_columns, delimiter, values)) {
    return absl::OkStatus();
  }
  return ParseFieldsExactly(line, num_columns, delimiter, values);
}

absl::StatusOr<CsvTable> ParseCsv(absl::string_view text,
                                  absl::string_view source,
                                  const CsvReadOptions& options) {
  CsvTable table;
  table.num_columns = options.num_columns;
  int64_t line_number = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    absl::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == absl::string_view::npos ? text.size() : eol + 1);
    ++line_number;
    if (line_number <= options.skip_lines) continue;
    if (Trim(line).empty()) continue;

    if (table.num_columns == 0) {
      table.num_columns = 1;
      for (char c : line) table.num_columns += c == options.delimiter ? 1 : 0;
    }
    if (absl::Status s = ParseCsvFields(line, table.num_columns,
                                        options.delimiter, table.values);
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(source, ":", line_number, ": ", s.message()));
    }
    table.lines.push_back(line_number);
  }
  if (table.lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no rows"));
  }
  return table;
}

absl::StatusOr<std::string> ReadMaybeGzipFile(const std::string& path) {
  constexpr size_t kChunk = 1 << 16;
  absl::StatusOr<MaybeGzipFile> file = MaybeGzipFile::Open(path, kChunk);
  if (!file.ok()) return file.status();
  std::string data;
  while (true) {
    const size_t old_size = data.size();
    data.resize(old_size + kChunk);
    absl::StatusOr<size_t> n = file->Read(data.data() + old_size, kChunk);
    if (!n.ok()) return n.status();
    data.resize(old_size + *n);
    if (*n == 0) return data;
  }
}

absl::StatusOr<CsvTable> ReadCsvFile(const std::string& path,
                                     const CsvReadOptions& options) {
  absl::StatusOr<std::string> text = ReadMaybeGzipFile(path);
  if (!text.ok()) return text.status();
  return ParseCsv(*text, path, options);
}

}  // namespace cosession
