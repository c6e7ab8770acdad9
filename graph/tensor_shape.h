// TensorShape: the dimensions of a tensor.
//
// A shape may be partially known while a graph is being built: a dimension of
// -1 (kUnknownDim) is unknown, and TensorShape::Unknown() has unknown rank.
// Every Tensor has a fully defined shape. Value type; thread-compatible.
#ifndef COSESSION_GRAPH_TENSOR_SHAPE_H_
#define COSESSION_GRAPH_TENSOR_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace cosession {

inline constexpr int64_t kUnknownDim = -1;

class TensorShape {
 public:
  using Dims = absl::InlinedVector<int64_t, 4>;

  // A scalar (rank 0).
  TensorShape() = default;
  TensorShape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit TensorShape(absl::Span<const int64_t> dims)
      : dims_(dims.begin(), dims.end()) {}

  // A shape of unknown rank.
  static TensorShape Unknown();

  bool unknown_rank() const { return unknown_rank_; }
  // Number of dimensions; -1 when the rank is unknown.
  int dims() const {
    return unknown_rank_ ? -1 : static_cast<int>(dims_.size());
  }
  int64_t dim_size(int i) const { return dims_[i]; }
  absl::Span<const int64_t> dim_sizes() const { return dims_; }
  void set_dim(int i, int64_t size) { dims_[i] = size; }
  void AddDim(int64_t size) { dims_.push_back(size); }

  // True when the rank and every dimension are known. Inline, as
  // num_elements: tensors are made per op.
  bool IsFullyDefined() const {
    if (unknown_rank_) return false;
    for (int64_t d : dims_) {
      if (d < 0) return false;
    }
    return true;
  }
  // Product of the dimensions (1 for a scalar); -1 unless fully defined.
  int64_t num_elements() const {
    if (!IsFullyDefined()) return -1;
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }

  // True when some tensor could have both shapes (unknowns match anything).
  bool IsCompatibleWith(const TensorShape& other) const;

  // "[2,3]", "[?,3]", "<unknown>".
  std::string DebugString() const;

  // Checks that every dimension is >= 0 (or unknown) and the element count
  // does not overflow.
  absl::Status Validate() const;

  friend bool operator==(const TensorShape& a, const TensorShape& b) {
    return a.unknown_rank_ == b.unknown_rank_ && a.dims_ == b.dims_;
  }
  friend bool operator!=(const TensorShape& a, const TensorShape& b) {
    return !(a == b);
  }

 private:
  Dims dims_;
  bool unknown_rank_ = false;
};

}  // namespace cosession

#endif  // COSESSION_GRAPH_TENSOR_SHAPE_H_
