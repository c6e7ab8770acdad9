#include "cosession/hooks/detail/hook_util.h"

#include "absl/strings/str_cat.h"

namespace cosession::hooks_detail {

absl::StatusOr<double> ScalarAsDouble(const Tensor& value, std::string what) {
  if (value.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must hold one value, got ", value.DebugString(4)));
  }
  switch (value.dtype()) {
    case DType::kFloat:
      return static_cast<double>(value.scalar<float>());
    case DType::kDouble:
      return value.scalar<double>();
    case DType::kInt32:
      return static_cast<double>(value.scalar<int32_t>());
    case DType::kInt64:
      return static_cast<double>(value.scalar<int64_t>());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be numeric, got ", value.DebugString(4)));
  }
}

absl::StatusOr<int64_t> ScalarAsInt64(const Tensor& value, std::string what) {
  if (value.NumElements() != 1 ||
      (value.dtype() != DType::kInt64 && value.dtype() != DType::kInt32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be one int64 or int32 value, got ", value.DebugString(4)));
  }
  if (value.dtype() == DType::kInt32) return value.scalar<int32_t>();
  return value.scalar<int64_t>();
}

std::string DisplayName(const Output& output) {
  std::string name = output.name();
  if (output.index() == 0 && name.size() > 2 &&
      name.compare(name.size() - 2, 2, ":0") == 0) {
    name.resize(name.size() - 2);
  }
  return name;
}

absl::StatusOr<std::shared_ptr<SummaryWriter>> SummaryWriterFor(
    std::shared_ptr<SummaryWriter> given, const std::string& logdir) {
  if (given != nullptr) return given;
  return SummaryWriterCache::Get(logdir);
}

}  // namespace cosession::hooks_detail
