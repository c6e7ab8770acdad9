#include "cosession/graph/dtype.h"

namespace cosession {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "float";
    case DType::kDouble:
      return "double";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
  }
  return "invalid";
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat || dtype == DType::kDouble;
}

bool IsInteger(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64;
}

}  // namespace cosession
