// Helpers shared by the kernel files (graph/kernels/*.cc): NumPy
// broadcasting at build and run time, strided iteration, reduction axes,
// dtype checks for shape functions, run-time error messages and cost
// estimates.
//
// Internal to the kernels; not part of the public API. Stateless and
// thread-safe.
#ifndef COSESSION_GRAPH_KERNELS_KERNEL_UTIL_H_
#define COSESSION_GRAPH_KERNELS_KERNEL_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/tensor_shape.h"

namespace cosession::kernels {

using Strides = absl::InlinedVector<int64_t, 6>;

// ---- Shapes ----

// The NumPy broadcast of two shapes (aligned at the right; a dimension of 1
// stretches). Works on partial shapes: an unknown dimension stays unknown
// unless the other side fixes it, an unknown rank gives an unknown rank.
// InvalidArgument ("Incompatible shapes: [2,3] vs. [4]") when two known
// dimensions differ and neither is 1.
absl::StatusOr<TensorShape> BroadcastShapes(const TensorShape& a,
                                            const TensorShape& b);

// Row-major strides of a fully defined shape.
Strides ContiguousStrides(const TensorShape& shape);

// Strides that read a tensor of shape `in` while iterating over the (fully
// defined) broadcast shape `out`: 0 along dimensions that `in` lacks or has
// as 1.
Strides BroadcastStrides(const TensorShape& in, const TensorShape& out);

// `axis` in [-rank, rank) mapped to [0, rank); InvalidArgument otherwise.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

// For each dimension of a rank-`rank` tensor, whether `axes` reduces it
// (empty `axes` = every dimension). Duplicates are allowed.
absl::StatusOr<absl::InlinedVector<bool, 6>> ReducedDims(
    absl::Span<const int64_t> axes, int rank);

// The shape left by reducing `in` over `reduced` (kept as 1 with
// `keep_dims`).
TensorShape ReducedShape(const TensorShape& in, absl::Span<const bool> reduced,
                         bool keep_dims);

// ---- Strided iteration ----

// Visits the elements of a row-major iteration over `dims` in order, calling
// fn(i, j0, j1) where i is the linear index and jk = sum(index[d] *
// strides_k[d]). Adjacent dimensions that both stride sets traverse
// contiguously are merged, so the inner loop is as long as possible.
template <typename Fn>
void ForEachStrided(absl::Span<const int64_t> dims,
                    absl::Span<const int64_t> strides0,
                    absl::Span<const int64_t> strides1, Fn&& fn) {
  Strides d, s0, s1;  // merged dims, outermost first
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0) return;
    if (dims[k] == 1) continue;
    if (!d.empty() && s0.back() == strides0[k] * dims[k] &&
        s1.back() == strides1[k] * dims[k]) {
      d.back() *= dims[k];
      s0.back() = strides0[k];
      s1.back() = strides1[k];
      continue;
    }
    d.push_back(dims[k]);
    s0.push_back(strides0[k]);
    s1.push_back(strides1[k]);
  }
  if (d.empty()) {
    fn(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  const int rank = static_cast<int>(d.size());
  const int64_t inner = d[rank - 1];
  const int64_t inner0 = s0[rank - 1];
  const int64_t inner1 = s1[rank - 1];
  Strides index(rank - 1, 0);
  int64_t i = 0, base0 = 0, base1 = 0;
  while (true) {
    int64_t j0 = base0, j1 = base1;
    for (int64_t k = 0; k < inner; ++k, ++i, j0 += inner0, j1 += inner1) {
      fn(i, j0, j1);
    }
    int k = rank - 2;
    for (; k >= 0; --k) {
      ++index[k];
      base0 += s0[k];
      base1 += s1[k];
      if (index[k] < d[k]) break;
      base0 -= s0[k] * d[k];
      base1 -= s1[k] * d[k];
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

// ---- Shape-function checks ----

// InvalidArgument unless input `i` has one of the dtypes `allowed`.
absl::Status ExpectDType(const InferenceContext& c, int i,
                         absl::Span<const DType> allowed);

inline constexpr DType kNumericDTypes[] = {DType::kFloat, DType::kDouble,
                                           DType::kInt32, DType::kInt64};
inline constexpr DType kFloatingDTypes[] = {DType::kFloat, DType::kDouble};

// ---- Registration ----

// The definition of an op with a synchronous kernel. (Designated
// initialisers that skip OpDef fields trip g++ 12's
// -Wmissing-field-initializers wherever no precompiled header hides it.)
OpDef SyncOpDef(std::string name, ShapeFn shape_fn, SyncKernel kernel,
                CostFn cost, bool stateful = false);

// ---- Kernels ----

// InvalidArgument carrying `message` and naming the running op.
absl::Status KernelError(const KernelContext& ctx, absl::string_view message);

// Cost estimates (element operations).
int64_t ZeroCost(const KernelContext& ctx);
// Elements of input 0 (unary elementwise ops, reductions, copies).
int64_t FirstInputElementsCost(const KernelContext& ctx);
// Elements of the broadcast of inputs 0 and 1.
int64_t BroadcastElementsCost(const KernelContext& ctx);
// Elements of all inputs together.
int64_t AllInputElementsCost(const KernelContext& ctx);

}  // namespace cosession::kernels

#endif  // COSESSION_GRAPH_KERNELS_KERNEL_UTIL_H_
