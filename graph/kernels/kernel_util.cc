#include "cosession/graph/kernels/kernel_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/status.h"

namespace cosession::kernels {

absl::StatusOr<TensorShape> BroadcastShapes(const TensorShape& a,
                                            const TensorShape& b) {
  if (a.unknown_rank() || b.unknown_rank()) return TensorShape::Unknown();
  const int rank = std::max(a.dims(), b.dims());
  TensorShape out;
  for (int d = 0; d < rank; ++d) {
    const int da = d - (rank - a.dims());
    const int db = d - (rank - b.dims());
    const int64_t x = da < 0 ? 1 : a.dim_size(da);
    const int64_t y = db < 0 ? 1 : b.dim_size(db);
    int64_t dim;
    if (x == y) {
      dim = x;
    } else if (x == 1) {
      dim = y;
    } else if (y == 1) {
      dim = x;
    } else if (x == kUnknownDim) {
      dim = y;  // x must be 1 or y: either way the result is y
    } else if (y == kUnknownDim) {
      dim = x;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "Incompatible shapes: ", a.DebugString(), " vs. ", b.DebugString()));
    }
    out.AddDim(dim);
  }
  return out;
}

Strides ContiguousStrides(const TensorShape& shape) {
  Strides strides(shape.dims());
  int64_t stride = 1;
  for (int d = shape.dims() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape.dim_size(d);
  }
  return strides;
}

Strides BroadcastStrides(const TensorShape& in, const TensorShape& out) {
  const Strides contiguous = ContiguousStrides(in);
  const int offset = out.dims() - in.dims();
  Strides strides(out.dims(), 0);
  for (int d = offset; d < out.dims(); ++d) {
    if (in.dim_size(d - offset) != 1) strides[d] = contiguous[d - offset];
  }
  return strides;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for a tensor of rank ",
                     rank, " (expected [", -rank, ", ", rank, "))"));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

absl::StatusOr<absl::InlinedVector<bool, 6>> ReducedDims(
    absl::Span<const int64_t> axes, int rank) {
  absl::InlinedVector<bool, 6> reduced(rank, axes.empty());
  for (int64_t axis : axes) {
    COSESSION_ASSIGN_OR_RETURN(int d, NormalizeAxis(axis, rank));
    reduced[d] = true;
  }
  return reduced;
}

TensorShape ReducedShape(const TensorShape& in, absl::Span<const bool> reduced,
                         bool keep_dims) {
  TensorShape out;
  for (int d = 0; d < in.dims(); ++d) {
    if (!reduced[d]) {
      out.AddDim(in.dim_size(d));
    } else if (keep_dims) {
      out.AddDim(1);
    }
  }
  return out;
}

absl::Status ExpectDType(const InferenceContext& c, int i,
                         absl::Span<const DType> allowed) {
  const DType dtype = c.input_dtype(i);
  if (std::find(allowed.begin(), allowed.end(), dtype) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "input ", i, " ('", c.input(i).name(), "') has dtype ", DTypeName(dtype),
      ", which ", c.op(), " does not support (expected one of ",
      absl::StrJoin(allowed, ", ",
                    [](std::string* out, DType t) {
                      absl::StrAppend(out, DTypeName(t));
                    }),
      ")"));
}

OpDef SyncOpDef(std::string name, ShapeFn shape_fn, SyncKernel kernel,
                CostFn cost, bool stateful) {
  OpDef def;
  def.name = std::move(name);
  def.shape_fn = std::move(shape_fn);
  def.kernel = std::move(kernel);
  def.cost = cost;
  def.stateful = stateful;
  return def;
}

absl::Status KernelError(const KernelContext& ctx, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(
      message, " [op '", ctx.node().name(), "' (", ctx.node().type(), ")]"));
}

int64_t ZeroCost(const KernelContext&) { return 0; }

int64_t FirstInputElementsCost(const KernelContext& ctx) {
  return ctx.num_inputs() == 0 ? 0 : ctx.input(0).NumElements();
}

int64_t BroadcastElementsCost(const KernelContext& ctx) {
  const TensorShape& a = ctx.input(0).shape();
  const TensorShape& b = ctx.input(1).shape();
  const int rank = std::max(a.dims(), b.dims());
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    const int da = d - (rank - a.dims());
    const int db = d - (rank - b.dims());
    const int64_t x = da < 0 ? 1 : a.dim_size(da);
    const int64_t y = db < 0 ? 1 : b.dim_size(db);
    n *= (x == 0 || y == 0) ? 0 : std::max(x, y);
  }
  return n;
}

int64_t AllInputElementsCost(const KernelContext& ctx) {
  int64_t n = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) n += ctx.input(i).NumElements();
  return n;
}

}  // namespace cosession::kernels
