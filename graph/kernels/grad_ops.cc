// Gradient helper ops: SumToShapeOf, ReshapeToShapeOf (shapes known only at
// run time), SumGrad, MeanGrad, MaxGrad (reductions), MaximumGrad, and the
// fused activation gradients ReluGrad, SigmoidGrad, TanhGrad, SoftmaxGrad.
//
// Only graph/gradients.cc and gradient functions build these, but each
// kernel still checks its inputs' run-time shapes: the shapes seen at build
// time may be partial (an unknown batch dimension).
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/graph/kernels/kernel_util.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor_eigen.h"

namespace cosession {
namespace {

using kernels::ExpectDType;
using kernels::ForEachStrided;
using kernels::KernelError;
using kernels::kFloatingDTypes;

absl::Status UnsupportedDType(const KernelContext& ctx, DType dtype) {
  return KernelError(
      ctx, absl::StrCat("dtype ", DTypeName(dtype), " is not supported"));
}

// The more specific of two shapes some tensor could have both of;
// InvalidArgument naming both when none.
absl::StatusOr<TensorShape> MergeShapes(const TensorShape& a,
                                        const TensorShape& b) {
  if (a.unknown_rank()) return b;
  if (b.unknown_rank()) return a;
  if (!a.IsCompatibleWith(b)) {
    return absl::InvalidArgumentError(absl::StrCat("shapes ", a.DebugString(),
                                                   " and ", b.DebugString(),
                                                   " are incompatible"));
  }
  TensorShape merged = a;
  for (int d = 0; d < a.dims(); ++d) {
    if (merged.dim_size(d) == kUnknownDim) merged.set_dim(d, b.dim_size(d));
  }
  return merged;
}

// Inputs [first, num_inputs) share one floating dtype.
absl::Status ExpectFloating(const InferenceContext& c, int first = 0) {
  COSESSION_RETURN_IF_ERROR(c.ExpectSameDType(first));
  return ExpectDType(c, first, kFloatingDTypes);
}

int64_t SecondInputElementsCost(const KernelContext& ctx) {
  return ctx.input(1).NumElements();
}

// ---- SumToShapeOf ----

absl::Status SumToShapeOfShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(2, 2));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kFloatingDTypes));
  // `like` must broadcast to `grad`: their broadcast is `grad`'s shape.
  COSESSION_RETURN_IF_ERROR(
      kernels::BroadcastShapes(c.input_shape(0), c.input_shape(1)).status());
  c.AddOutput(c.input_dtype(0), c.input_shape(1));
  return absl::OkStatus();
}

// True when `small` broadcasts to exactly `big` (aligned at the right).
bool BroadcastsTo(const TensorShape& small, const TensorShape& big) {
  if (small.dims() > big.dims()) return false;
  const int offset = big.dims() - small.dims();
  for (int d = 0; d < small.dims(); ++d) {
    const int64_t s = small.dim_size(d);
    if (s != 1 && s != big.dim_size(d + offset)) return false;
  }
  return true;
}

absl::Status SumToShapeOfKernel(KernelContext& ctx) {
  const Tensor& grad = ctx.input(0);
  const TensorShape& target = ctx.input(1).shape();
  if (grad.shape() == target) {
    ctx.set_output(0, grad);  // nothing was broadcast: share the buffer
    return absl::OkStatus();
  }
  if (!BroadcastsTo(target, grad.shape())) {
    return KernelError(
        ctx, absl::StrCat("cannot sum a gradient of shape ",
                          grad.shape().DebugString(), " down to shape ",
                          target.DebugString()));
  }
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      Tensor out(grad.dtype(), target);  // zero-filled accumulators
      T* acc = out.mutable_flat<T>().data();
      const T* g = grad.flat<T>().data();
      ForEachStrided(grad.shape().dim_sizes(),
                     kernels::ContiguousStrides(grad.shape()),
                     kernels::BroadcastStrides(target, grad.shape()),
                     [&](int64_t, int64_t i, int64_t o) { acc[o] += g[i]; });
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- ReshapeToShapeOf ----

absl::Status ReshapeToShapeOfShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(2, 2));
  const int64_t from = c.input_shape(0).num_elements();
  const int64_t to = c.input_shape(1).num_elements();
  if (from >= 0 && to >= 0 && from != to) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape ", c.input_shape(0).DebugString(), " to ",
        c.input_shape(1).DebugString(), ": the element counts differ"));
  }
  c.AddOutput(c.input_dtype(0), c.input_shape(1));
  return absl::OkStatus();
}

absl::Status ReshapeToShapeOfKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TensorShape& target = ctx.input(1).shape();
  if (x.NumElements() != ctx.input(1).NumElements()) {
    return KernelError(
        ctx, absl::StrCat("cannot reshape ", x.shape().DebugString(), " to ",
                          target.DebugString(), ": the element counts differ"));
  }
  ctx.set_output(0, x.Reshaped(target));
  return absl::OkStatus();
}

// ---- SumGrad, MeanGrad, MaxGrad ----

// Inputs: grad (the reduction's output gradient), x (its input), and for
// MaxGrad y (its output). Attrs "axes", "keep_dims" copied from the
// reduction. The output has x's shape.
absl::Status ReductionGradShape(InferenceContext& c) {
  const int n = c.op() == "MaxGrad" ? 3 : 2;
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(n, n));
  COSESSION_RETURN_IF_ERROR(ExpectFloating(c));
  COSESSION_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                             c.attr<std::vector<int64_t>>("axes"));
  COSESSION_ASSIGN_OR_RETURN(bool keep_dims, c.attr<bool>("keep_dims"));
  const TensorShape& x = c.input_shape(1);
  if (!x.unknown_rank()) {
    COSESSION_ASSIGN_OR_RETURN(auto reduced,
                               kernels::ReducedDims(axes, x.dims()));
    const TensorShape want = kernels::ReducedShape(x, reduced, keep_dims);
    for (int i : {0, 2}) {
      if (i < n && !c.input_shape(i).IsCompatibleWith(want)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input ", i, " ('", c.input(i).name(), "') has shape ",
            c.input_shape(i).DebugString(), " but the reduction of ",
            x.DebugString(), " has shape ", want.DebugString()));
      }
    }
  }
  c.AddOutput(c.input_dtype(0), x);
  return absl::OkStatus();
}

// Where each element of x lands in the reduction's output, and how many
// elements land on each output element.
struct ReductionLayout {
  kernels::Strides in_strides;
  kernels::Strides out_strides;  // 0 along reduced dimensions
  TensorShape out_shape;
  int64_t count = 1;
};

absl::StatusOr<ReductionLayout> LayoutOf(const KernelContext& ctx) {
  const TensorShape& in = ctx.input(1).shape();
  absl::StatusOr<absl::InlinedVector<bool, 6>> reduced = kernels::ReducedDims(
      ctx.node().attr<std::vector<int64_t>>("axes"), in.dims());
  if (!reduced.ok()) return KernelError(ctx, reduced.status().message());
  ReductionLayout layout;
  layout.in_strides = kernels::ContiguousStrides(in);
  layout.out_strides.assign(in.dims(), 0);
  int64_t stride = 1;
  for (int d = in.dims() - 1; d >= 0; --d) {
    if ((*reduced)[d]) {
      layout.count *= in.dim_size(d);
    } else {
      layout.out_strides[d] = stride;
      stride *= in.dim_size(d);
    }
  }
  layout.out_shape =
      kernels::ReducedShape(in, *reduced, ctx.node().attr<bool>("keep_dims"));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (i != 1 && ctx.input(i).shape() != layout.out_shape) {
      return KernelError(
          ctx, absl::StrCat("input ", i, " has shape ",
                            ctx.input(i).shape().DebugString(),
                            " but the reduction of ", in.DebugString(),
                            " has shape ", layout.out_shape.DebugString()));
    }
  }
  return layout;
}

// Sum: dx = grad broadcast back; Mean: also divided by the count.
template <bool kMean>
absl::Status SumOrMeanGradKernel(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(ReductionLayout layout, LayoutOf(ctx));
  const Tensor& grad = ctx.input(0);
  const TensorShape& in = ctx.input(1).shape();
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      Tensor out = Tensor::Allocate(grad.dtype(), in);
      T* dx = out.mutable_flat<T>().data();
      const T* g = grad.flat<T>().data();
      // count is 0 only when x is empty, and then nothing is written.
      const T scale = kMean && layout.count > 0
                          ? T(1) / static_cast<T>(layout.count)
                          : T(1);
      ForEachStrided(in.dim_sizes(), layout.in_strides, layout.out_strides,
                     [&](int64_t, int64_t i, int64_t o) {
                       if constexpr (kMean) {
                         dx[i] = g[o] * scale;
                       } else {
                         dx[i] = g[o];
                       }
                     });
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// Each output gradient goes to the elements equal to the max, split evenly
// between ties (TensorFlow's reduce_max gradient). Where the max is NaN no
// element equals it and every gradient is 0.
absl::Status MaxGradKernel(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(ReductionLayout layout, LayoutOf(ctx));
  const Tensor& grad = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const TensorShape& in = x.shape();
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      const T* g = grad.flat<T>().data();
      const T* xs = x.flat<T>().data();
      const T* max = ctx.input(2).flat<T>().data();
      std::vector<int64_t> ties(grad.NumElements(), 0);
      ForEachStrided(in.dim_sizes(), layout.in_strides, layout.out_strides,
                     [&](int64_t, int64_t i, int64_t o) {
                       if (xs[i] == max[o]) ++ties[o];
                     });
      Tensor out = Tensor::Allocate(grad.dtype(), in);
      T* dx = out.mutable_flat<T>().data();
      ForEachStrided(in.dim_sizes(), layout.in_strides, layout.out_strides,
                     [&](int64_t, int64_t i, int64_t o) {
                       dx[i] = xs[i] == max[o] ? g[o] / static_cast<T>(ties[o])
                                               : T(0);
                     });
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- MaximumGrad ----

absl::Status MaximumGradShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(3, 3));
  COSESSION_RETURN_IF_ERROR(ExpectFloating(c));
  COSESSION_ASSIGN_OR_RETURN(
      TensorShape broadcast,
      kernels::BroadcastShapes(c.input_shape(1), c.input_shape(2)));
  COSESSION_ASSIGN_OR_RETURN(TensorShape shape,
                             MergeShapes(c.input_shape(0), broadcast));
  c.AddOutput(c.input_dtype(0), shape);
  c.AddOutput(c.input_dtype(0), shape);
  return absl::OkStatus();
}

absl::Status MaximumGradKernel(KernelContext& ctx) {
  const Tensor& grad = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  absl::StatusOr<TensorShape> shape =
      kernels::BroadcastShapes(x.shape(), y.shape());
  if (!shape.ok()) return KernelError(ctx, shape.status().message());
  if (*shape != grad.shape()) {
    return KernelError(
        ctx, absl::StrCat("the gradient has shape ", grad.shape().DebugString(),
                          " but Maximum of ", x.shape().DebugString(), " and ",
                          y.shape().DebugString(), " has shape ",
                          shape->DebugString()));
  }
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      Tensor dx = Tensor::AllocateWithShapeOf(grad.dtype(), grad);
      Tensor dy = Tensor::AllocateWithShapeOf(grad.dtype(), grad);
      const T* g = grad.flat<T>().data();
      const T* a = x.flat<T>().data();
      const T* b = y.flat<T>().data();
      T* da = dx.mutable_flat<T>().data();
      T* db = dy.mutable_flat<T>().data();
      ForEachStrided(shape->dim_sizes(),
                     kernels::BroadcastStrides(x.shape(), *shape),
                     kernels::BroadcastStrides(y.shape(), *shape),
                     [&](int64_t i, int64_t ia, int64_t ib) {
                       const bool to_x = a[ia] >= b[ib];
                       da[i] = to_x ? g[i] : T(0);
                       db[i] = to_x ? T(0) : g[i];
                     });
      ctx.set_output(0, std::move(dx));
      ctx.set_output(1, std::move(dy));
      return absl::OkStatus();
    }
  });
}

// ---- Activation gradients ----

// Inputs: grad, y (the activation's output), same shape and floating dtype.
absl::Status ActivationGradShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(2, 2));
  COSESSION_RETURN_IF_ERROR(ExpectFloating(c));
  COSESSION_ASSIGN_OR_RETURN(TensorShape shape,
                             MergeShapes(c.input_shape(0), c.input_shape(1)));
  c.AddOutput(c.input_dtype(0), std::move(shape));
  return absl::OkStatus();
}

struct ReluGradOp {
  template <typename G, typename Y>
  static auto Apply(const G& g, const Y& y) {
    using T = typename G::Scalar;
    return (y > T(0)).select(g, T(0));
  }
};
struct SigmoidGradOp {
  template <typename G, typename Y>
  static auto Apply(const G& g, const Y& y) {
    using T = typename G::Scalar;
    return g * y * (T(1) - y);
  }
};
struct TanhGradOp {
  template <typename G, typename Y>
  static auto Apply(const G& g, const Y& y) {
    using T = typename G::Scalar;
    return g * (T(1) - y.square());
  }
};

absl::Status ExpectSameShapes(const KernelContext& ctx) {
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return KernelError(ctx,
                       absl::StrCat("the gradient has shape ",
                                    ctx.input(0).shape().DebugString(),
                                    " but the activation's output has shape ",
                                    ctx.input(1).shape().DebugString()));
  }
  return absl::OkStatus();
}

template <typename Op>
absl::Status ActivationGradKernel(KernelContext& ctx) {
  COSESSION_RETURN_IF_ERROR(ExpectSameShapes(ctx));
  const Tensor& grad = ctx.input(0);
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      // Mapped before an input may be forwarded (and left empty); the
      // expression is elementwise, so writing it over an input is safe.
      const auto g = FlatMap<T>(grad);
      const auto y = FlatMap<T>(ctx.input(1));
      Tensor& out =
          ctx.ForwardInputOrAllocateOutput({0, 1}, 0, grad.dtype(), grad);
      MutableFlatMap<T>(out) = Op::Apply(g, y);
      return absl::OkStatus();
    }
  });
}

// Softmax over the last axis: dx = (grad - sum(grad * y)) * y, row by row.
absl::Status SoftmaxGradKernel(KernelContext& ctx) {
  COSESSION_RETURN_IF_ERROR(ExpectSameShapes(ctx));
  const Tensor& grad = ctx.input(0);
  const Tensor& y = ctx.input(1);
  if (y.shape().dims() < 1) {
    return KernelError(ctx, "softmax outputs must have rank >= 1");
  }
  return VisitDType(grad.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return UnsupportedDType(ctx, grad.dtype());
    } else {
      Tensor out = Tensor::AllocateWithShapeOf(grad.dtype(), grad);
      const int64_t cols = y.shape().dim_size(y.shape().dims() - 1);
      if (y.NumElements() > 0) {
        const int64_t rows = y.NumElements() / cols;
        Eigen::Map<const EigenMatrix<T>> g(grad.flat<T>().data(), rows, cols);
        Eigen::Map<const EigenMatrix<T>> p(y.flat<T>().data(), rows, cols);
        Eigen::Map<EigenMatrix<T>> dx(out.mutable_flat<T>().data(), rows, cols);
        for (int64_t r = 0; r < rows; ++r) {
          const T dot = g.row(r).dot(p.row(r));
          dx.row(r) = ((g.row(r).array() - dot) * p.row(r).array()).matrix();
        }
      }
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- Builders' helpers ----

Output AddReductionGrad(Graph& g, const char* op, std::vector<Output> inputs,
                        std::vector<int64_t> axes, bool keep_dims,
                        std::string name) {
  NodeSpec spec{op, std::move(name), std::move(inputs), {}, {}};
  spec.attrs["axes"] = std::move(axes);
  spec.attrs["keep_dims"] = keep_dims;
  return Output(g.AddNode(std::move(spec)), 0);
}

Output AddBinary(Graph& g, const char* op, Output x, Output y,
                 std::string name) {
  return Output(g.AddNode({op, std::move(name), {x, y}, {}, {}}), 0);
}

}  // namespace

void RegisterGradOps(OpRegistry& r) {
  using kernels::FirstInputElementsCost;
  using kernels::SyncOpDef;
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };
  must(r.Register(SyncOpDef("SumToShapeOf", SumToShapeOfShape,
                            SumToShapeOfKernel, FirstInputElementsCost)));
  must(r.Register(SyncOpDef("ReshapeToShapeOf", ReshapeToShapeOfShape,
                            ReshapeToShapeOfKernel, kernels::ZeroCost)));
  must(r.Register(SyncOpDef("SumGrad", ReductionGradShape,
                            SumOrMeanGradKernel</*kMean=*/false>,
                            SecondInputElementsCost)));
  must(r.Register(SyncOpDef("MeanGrad", ReductionGradShape,
                            SumOrMeanGradKernel</*kMean=*/true>,
                            SecondInputElementsCost)));
  // Two passes over x.
  must(r.Register(SyncOpDef("MaxGrad", ReductionGradShape, MaxGradKernel,
                            SecondInputElementsCost)));
  must(r.Register(SyncOpDef("MaximumGrad", MaximumGradShape, MaximumGradKernel,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("ReluGrad", ActivationGradShape,
                            ActivationGradKernel<ReluGradOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("SigmoidGrad", ActivationGradShape,
                            ActivationGradKernel<SigmoidGradOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("TanhGrad", ActivationGradShape,
                            ActivationGradKernel<TanhGradOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("SoftmaxGrad", ActivationGradShape,
                            SoftmaxGradKernel, FirstInputElementsCost)));
}

namespace ops {

Output SumToShapeOf(Graph& g, Output grad, Output like, std::string name) {
  return AddBinary(g, "SumToShapeOf", grad, like, std::move(name));
}
Output ReshapeToShapeOf(Graph& g, Output x, Output like, std::string name) {
  return AddBinary(g, "ReshapeToShapeOf", x, like, std::move(name));
}

Output SumGrad(Graph& g, Output grad, Output x, std::vector<int64_t> axes,
               bool keep_dims, std::string name) {
  return AddReductionGrad(g, "SumGrad", {grad, x}, std::move(axes), keep_dims,
                          std::move(name));
}
Output MeanGrad(Graph& g, Output grad, Output x, std::vector<int64_t> axes,
                bool keep_dims, std::string name) {
  return AddReductionGrad(g, "MeanGrad", {grad, x}, std::move(axes), keep_dims,
                          std::move(name));
}
Output MaxGrad(Graph& g, Output grad, Output x, Output y,
               std::vector<int64_t> axes, bool keep_dims, std::string name) {
  return AddReductionGrad(g, "MaxGrad", {grad, x, y}, std::move(axes),
                          keep_dims, std::move(name));
}

std::vector<Output> MaximumGrad(Graph& g, Output grad, Output x, Output y,
                                std::string name) {
  Node* node =
      g.AddNode({"MaximumGrad", std::move(name), {grad, x, y}, {}, {}});
  return {Output(node, 0), Output(node, 1)};
}

Output ReluGrad(Graph& g, Output grad, Output y, std::string name) {
  return AddBinary(g, "ReluGrad", grad, y, std::move(name));
}
Output SigmoidGrad(Graph& g, Output grad, Output y, std::string name) {
  return AddBinary(g, "SigmoidGrad", grad, y, std::move(name));
}
Output TanhGrad(Graph& g, Output grad, Output y, std::string name) {
  return AddBinary(g, "TanhGrad", grad, y, std::move(name));
}
Output SoftmaxGrad(Graph& g, Output grad, Output y, std::string name) {
  return AddBinary(g, "SoftmaxGrad", grad, y, std::move(name));
}

}  // namespace ops
}  // namespace cosession
