// Array ops: Reshape, Transpose, Fill, ZerosLike, OnesLike.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/kernels/kernel_util.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

using kernels::ForEachStrided;
using kernels::KernelError;

// ---- Reshape ----

// Index of the one -1 in `shape`, -1 when there is none; InvalidArgument for
// a second -1 or a dimension below -1.
absl::StatusOr<int> InferredDim(const TensorShape& shape) {
  int inferred = -1;
  for (int d = 0; d < shape.dims(); ++d) {
    if (shape.dim_size(d) == kUnknownDim) {
      if (inferred >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "only one dimension may be -1, got ", shape.DebugString()));
      }
      inferred = d;
    } else if (shape.dim_size(d) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid target shape ", shape.DebugString()));
    }
  }
  return inferred;
}

// `target` with its -1 resolved for a tensor of `count` elements.
absl::StatusOr<TensorShape> ResolveReshape(const TensorShape& target,
                                           int64_t count) {
  COSESSION_ASSIGN_OR_RETURN(int inferred, InferredDim(target));
  int64_t known = 1;
  for (int d = 0; d < target.dims(); ++d) {
    if (d != inferred) known *= target.dim_size(d);
  }
  TensorShape resolved = target;
  if (inferred >= 0) {
    if (known == 0 || count % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Cannot reshape a tensor with ", count, " elements to shape ",
          target.DebugString(), ": the -1 cannot be inferred"));
    }
    resolved.set_dim(inferred, count / known);
  } else if (known != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Cannot reshape a tensor with ", count, " elements to shape ",
        target.DebugString(), " (", known, " elements)"));
  }
  return resolved;
}

absl::Status ReshapeShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_ASSIGN_OR_RETURN(TensorShape target, c.attr<TensorShape>("shape"));
  if (target.unknown_rank()) {
    return absl::InvalidArgumentError(
        "the target shape must have a known rank");
  }
  COSESSION_RETURN_IF_ERROR(InferredDim(target).status());
  // With an unknown element count, the -1 stays unknown until run time.
  const int64_t count = c.input_shape(0).num_elements();
  if (count >= 0) {
    COSESSION_ASSIGN_OR_RETURN(target, ResolveReshape(target, count));
  }
  c.AddOutput(c.input_dtype(0), std::move(target));
  return absl::OkStatus();
}

absl::Status ReshapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  absl::StatusOr<TensorShape> shape =
      ResolveReshape(ctx.node().attr<TensorShape>("shape"), x.NumElements());
  if (!shape.ok()) return KernelError(ctx, shape.status().message());
  ctx.set_output(0, x.Reshaped(*std::move(shape)));
  return absl::OkStatus();
}

// ---- Transpose ----

// `perm` checked against `rank`; empty = reverse the dimensions.
absl::StatusOr<std::vector<int>> ResolvePerm(absl::Span<const int64_t> perm,
                                             int rank) {
  std::vector<int> resolved(rank);
  if (perm.empty()) {
    for (int d = 0; d < rank; ++d) resolved[d] = rank - 1 - d;
    return resolved;
  }
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("perm [", absl::StrJoin(perm, ","),
                     "] is not a permutation of the dimensions of a rank-",
                     rank, " tensor"));
  };
  if (static_cast<int>(perm.size()) != rank) return invalid();
  std::vector<bool> seen(rank, false);
  for (int d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]]) return invalid();
    seen[perm[d]] = true;
    resolved[d] = static_cast<int>(perm[d]);
  }
  return resolved;
}

absl::Status TransposeShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                             c.attr<std::vector<int64_t>>("perm"));
  const TensorShape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    TensorShape out = TensorShape::Unknown();
    if (!perm.empty()) {
      COSESSION_RETURN_IF_ERROR(
          ResolvePerm(perm, static_cast<int>(perm.size())).status());
      out = TensorShape{};
      for (size_t d = 0; d < perm.size(); ++d) out.AddDim(kUnknownDim);
    }
    c.AddOutput(c.input_dtype(0), std::move(out));
    return absl::OkStatus();
  }
  COSESSION_ASSIGN_OR_RETURN(std::vector<int> resolved,
                             ResolvePerm(perm, in.dims()));
  TensorShape out;
  for (int d : resolved) out.AddDim(in.dim_size(d));
  c.AddOutput(c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

absl::Status TransposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TensorShape& in = x.shape();
  absl::StatusOr<std::vector<int>> perm =
      ResolvePerm(ctx.node().attr<std::vector<int64_t>>("perm"), in.dims());
  if (!perm.ok()) return KernelError(ctx, perm.status().message());
  bool identity = true;
  for (int d = 0; d < in.dims(); ++d) identity &= (*perm)[d] == d;
  if (identity) {
    ctx.set_output(0, x);  // tensors are immutable: share the buffer
    return absl::OkStatus();
  }
  const kernels::Strides in_strides = kernels::ContiguousStrides(in);
  TensorShape out_shape;
  kernels::Strides read_strides;  // input stride of each output dimension
  for (int d : *perm) {
    out_shape.AddDim(in.dim_size(d));
    read_strides.push_back(in_strides[d]);
  }
  const kernels::Strides write_strides = kernels::ContiguousStrides(out_shape);
  Tensor out = Tensor::Allocate(x.dtype(), out_shape);
  VisitDType(x.dtype(), [&]<typename T>() {
    const T* src = x.flat<T>().data();
    T* dst = out.mutable_flat<T>().data();
    ForEachStrided(out_shape.dim_sizes(), write_strides, read_strides,
                   [&](int64_t, int64_t o, int64_t i) { dst[o] = src[i]; });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// ---- Fill, ZerosLike, OnesLike ----

absl::Status FillShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_ASSIGN_OR_RETURN(TensorShape shape, c.attr<TensorShape>("shape"));
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shape must be fully defined, got ", shape.DebugString()));
  }
  if (c.input_shape(0).dims() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the value must be a scalar, got shape ",
                     c.input_shape(0).DebugString()));
  }
  c.AddOutput(c.input_dtype(0), std::move(shape));
  return absl::OkStatus();
}

template <typename T>
void FillWith(Tensor& out, T value) {
  for (T& v : out.mutable_flat<T>()) v = value;
}

absl::Status FillKernel(KernelContext& ctx) {
  const Tensor& value = ctx.input(0);
  if (value.shape().dims() != 0) {
    return KernelError(ctx,
                       absl::StrCat("the value must be a scalar, got shape ",
                                    value.shape().DebugString()));
  }
  Tensor out =
      Tensor::Allocate(value.dtype(), ctx.node().attr<TensorShape>("shape"));
  VisitDType(value.dtype(),
             [&]<typename T>() { FillWith<T>(out, value.scalar<T>()); });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

absl::Status LikeShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

absl::Status ZerosLikeKernel(KernelContext& ctx) {
  ctx.set_output(0, Tensor(ctx.input(0).dtype(), ctx.input(0).shape()));
  return absl::OkStatus();
}

// Ones of every dtype (true for bool).
absl::Status OnesLikeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor out = Tensor::AllocateWithShapeOf(x.dtype(), x);
  VisitDType(x.dtype(), [&]<typename T>() { FillWith<T>(out, T(1)); });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

int64_t OutputShapeElementsCost(const KernelContext& ctx) {
  return ctx.node().output_shape(0).num_elements();
}

}  // namespace

void RegisterArrayOps(OpRegistry& r) {
  using kernels::FirstInputElementsCost;
  using kernels::SyncOpDef;
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };
  must(r.Register(
      SyncOpDef("Reshape", ReshapeShape, ReshapeKernel, kernels::ZeroCost)));
  must(r.Register(SyncOpDef("Transpose", TransposeShape, TransposeKernel,
                            FirstInputElementsCost)));
  must(r.Register(
      SyncOpDef("Fill", FillShape, FillKernel, OutputShapeElementsCost)));
  must(r.Register(SyncOpDef("ZerosLike", LikeShape, ZerosLikeKernel,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("OnesLike", LikeShape, OnesLikeKernel,
                            FirstInputElementsCost)));
}

namespace ops {

Output Reshape(Graph& g, Output x, TensorShape shape, std::string name) {
  NodeSpec spec{"Reshape", std::move(name), {x}, {}, {}};
  spec.attrs["shape"] = std::move(shape);
  return Output(g.AddNode(std::move(spec)), 0);
}

Output Transpose(Graph& g, Output x, std::vector<int64_t> perm,
                 std::string name) {
  NodeSpec spec{"Transpose", std::move(name), {x}, {}, {}};
  spec.attrs["perm"] = std::move(perm);
  return Output(g.AddNode(std::move(spec)), 0);
}

Output Fill(Graph& g, TensorShape shape, Output value, std::string name) {
  NodeSpec spec{"Fill", std::move(name), {value}, {}, {}};
  spec.attrs["shape"] = std::move(shape);
  return Output(g.AddNode(std::move(spec)), 0);
}

Output ZerosLike(Graph& g, Output x, std::string name) {
  return Output(g.AddNode({"ZerosLike", std::move(name), {x}, {}, {}}), 0);
}

Output OnesLike(Graph& g, Output x, std::string name) {
  return Output(g.AddNode({"OnesLike", std::move(name), {x}, {}, {}}), 0);
}

}  // namespace ops
}  // namespace cosession
