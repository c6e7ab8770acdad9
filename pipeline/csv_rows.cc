#include "cosession/pipeline/csv_rows.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/io/csv_reader.h"

namespace cosession {
namespace {

absl::Status OptionError(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("CsvRows: ", problem));
}

absl::StatusOr<Element> ParseRow(const CsvRowOptions& options, Element line) {
  const std::string& text = line.text(0);
  std::vector<double> values;
  values.reserve(static_cast<size_t>(options.num_columns));
  if (absl::Status s =
          ParseCsvFields(text, options.num_columns, options.delimiter, values);
      !s.ok()) {
    return absl::InvalidArgumentError(line.origin.Describe(s.message()));
  }
  const int64_t label_column = options.label_column;
  const double label = values[static_cast<size_t>(label_column)];
  if (options.num_classes.has_value() &&
      !(label >= 0 && label < static_cast<double>(*options.num_classes) &&
        std::floor(label) == label)) {
    return absl::InvalidArgumentError(line.origin.Describe(absl::StrCat(
        "column ", label_column + 1, ": label ", label, " is out of range [0, ",
        *options.num_classes, ") (num_classes)")));
  }
  const bool int32 = options.label_dtype == DType::kInt32;
  const double min_label =
      int32 ? static_cast<double>(std::numeric_limits<int32_t>::min())
            : -9.2233720368547758e18;
  const double max_label =
      int32 ? static_cast<double>(std::numeric_limits<int32_t>::max())
            : 9.2233720368547748e18;
  if (std::floor(label) != label || label < min_label || label > max_label) {
    return absl::InvalidArgumentError(line.origin.Describe(
        absl::StrCat("column ", label_column + 1, ": label '", label,
                     "' is not an integer in the range of ",
                     DTypeName(options.label_dtype))));
  }
  Tensor features =
      Tensor::Allocate(DType::kFloat, TensorShape{options.num_columns - 1});
  absl::Span<float> out = features.mutable_flat<float>();
  size_t f = 0;
  for (int64_t c = 0; c < options.num_columns; ++c) {
    if (c != label_column) out[f++] = static_cast<float>(values[c]);
  }
  Tensor label_tensor = Tensor::Allocate(options.label_dtype, TensorShape{});
  if (int32) {
    label_tensor.mutable_flat<int32_t>()[0] = static_cast<int32_t>(label);
  } else {
    label_tensor.mutable_flat<int64_t>()[0] = static_cast<int64_t>(label);
  }
  Element row = MakeElement({std::move(features), std::move(label_tensor)});
  row.origin = std::move(line.origin);
  return row;
}

}  // namespace

Dataset CsvRows(Dataset lines, CsvRowOptions options) {
  if (!lines.ok()) return lines;
  if (options.num_columns < 2) {
    return Dataset::Failed(OptionError(absl::StrCat(
        "num_columns must be at least 2 (features and a label), got ",
        options.num_columns)));
  }
  if (options.label_column < -1 ||
      options.label_column >= options.num_columns) {
    return Dataset::Failed(OptionError(
        absl::StrCat("label_column must be -1 (the last column) or in [0, ",
                     options.num_columns, "), got ", options.label_column)));
  }
  if (options.label_column == -1)
    options.label_column = options.num_columns - 1;
  if (options.label_dtype != DType::kInt32 &&
      options.label_dtype != DType::kInt64) {
    return Dataset::Failed(
        OptionError(absl::StrCat("label_dtype must be int32 or int64, got ",
                                 DTypeName(options.label_dtype))));
  }
  if (options.num_classes.has_value() && *options.num_classes < 1) {
    return Dataset::Failed(OptionError(
        absl::StrCat("num_classes must be >= 1, got ", *options.num_classes)));
  }
  if (std::optional<ElementSpec> spec = lines.spec();
      spec.has_value() && (spec->size() != 1 || !(*spec)[0].is_string)) {
    return Dataset::Failed(OptionError(
        absl::StrCat("the input must yield lines (one string), it yields ",
                     ElementSpecString(*spec))));
  }
  ElementSpec output{
      ComponentSpec::Of(DType::kFloat, TensorShape{options.num_columns - 1}),
      ComponentSpec::Scalar(options.label_dtype)};
  return lines
      .Filter([](const Element& line) -> absl::StatusOr<bool> {
        return !IsBlankLine(line.text(0));
      })
      .Map([options](
               Element line) { return ParseRow(options, std::move(line)); },
           MapOptions{.parallelism = options.parallelism,
                      .deterministic = true,
                      .output_spec = std::move(output),
                      .name = "CsvRows"});
}

}  // namespace cosession
