// AttrValue: a compile-time parameter of an op (a constant's value, a dtype,
// the axes of a reduction, a transpose flag...). Immutable once the op is in
// the graph.
#ifndef COSESSION_GRAPH_ATTR_VALUE_H_
#define COSESSION_GRAPH_ATTR_VALUE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "graph/dtype.h"
#include "graph/tensor.h"
#include "graph/tensor_shape.h"

namespace cosession {

using AttrValue = std::variant<int64_t, double, bool, std::string, DType,
                               std::vector<int64_t>, TensorShape, Tensor>;
using AttrMap = absl::flat_hash_map<std::string, AttrValue>;

}  // namespace cosession

#endif  // COSESSION_GRAPH_ATTR_VALUE_H_
