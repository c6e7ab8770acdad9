// AttrValue: a compile-time parameter of an op (a constant's value, a dtype,
// the axes of a reduction, a transpose flag...). Immutable once the op is in
// the graph.
//
// OpaqueAttr is the one attr that is not a value: a shared, immutable host
// object an op needs at run time (the dataset an input op reads). It is
// compared by identity and recovered by its exact type; copies share it.
// Thread safety: as std::shared_ptr<const T> (the object must be safe to read
// from several threads).
#ifndef COSESSION_GRAPH_ATTR_VALUE_H_
#define COSESSION_GRAPH_ATTR_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/tensor.h"
#include "cosession/graph/tensor_shape.h"

namespace cosession {

class OpaqueAttr {
 public:
  OpaqueAttr() = default;
  template <typename T>
  static OpaqueAttr Of(std::shared_ptr<const T> value) {
    OpaqueAttr attr;
    attr.value_ = std::move(value);
    attr.type_ = std::type_index(typeid(T));
    return attr;
  }
  // The object, or nullptr when empty or of another type than T.
  template <typename T>
  std::shared_ptr<const T> get() const {
    if (value_ == nullptr || type_ != std::type_index(typeid(T))) {
      return nullptr;
    }
    return std::static_pointer_cast<const T>(value_);
  }
  friend bool operator==(const OpaqueAttr& a, const OpaqueAttr& b) {
    return a.value_ == b.value_;
  }

 private:
  std::shared_ptr<const void> value_;
  std::type_index type_ = std::type_index(typeid(void));
};

using AttrValue =
    std::variant<int64_t, double, bool, std::string, DType,
                 std::vector<int64_t>, TensorShape, Tensor, OpaqueAttr>;
using AttrMap = absl::flat_hash_map<std::string, AttrValue>;

}  // namespace cosession

#endif  // COSESSION_GRAPH_ATTR_VALUE_H_
