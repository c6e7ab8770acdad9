// DType: the element types a Tensor can hold, and compile-time traits that
// map C++ types to them.
//
// Thread safety: stateless.
#ifndef COSESSION_GRAPH_DTYPE_H_
#define COSESSION_GRAPH_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace cosession {

enum class DType { kFloat, kDouble, kInt32, kInt64, kBool };

// "float", "double", "int32", "int64", "bool".
absl::string_view DTypeName(DType dtype);

// Size of one element in bytes. Inline: every tensor allocation asks.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return sizeof(float);
    case DType::kDouble:
      return sizeof(double);
    case DType::kInt32:
      return sizeof(int32_t);
    case DType::kInt64:
      return sizeof(int64_t);
    case DType::kBool:
      return sizeof(bool);
  }
  return 0;
}

bool IsFloating(DType dtype);
bool IsInteger(DType dtype);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kDouble;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

// Calls `fn.template operator()<T>()` with T the C++ type of `dtype`.
// Usage: VisitDType(dt, [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat:
      return fn.template operator()<float>();
    case DType::kDouble:
      return fn.template operator()<double>();
    case DType::kInt32:
      return fn.template operator()<int32_t>();
    case DType::kInt64:
      return fn.template operator()<int64_t>();
    case DType::kBool:
      return fn.template operator()<bool>();
  }
  return fn.template operator()<float>();  // unreachable for valid enums
}

}  // namespace cosession

#endif  // COSESSION_GRAPH_DTYPE_H_
