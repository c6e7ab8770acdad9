// Neural-network ops: SparseSoftmaxCrossEntropyWithLogits.
#include <cmath>
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
using kernels::KernelError;

inline constexpr DType kLabelDTypes[] = {DType::kInt32, DType::kInt64};

// ---- SparseSoftmaxCrossEntropyWithLogits ----

absl::Status SparseSoftmaxCrossEntropyShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(2, 2));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kernels::kFloatingDTypes));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 1, kLabelDTypes));
  TensorShape logits = c.input_shape(0);
  TensorShape labels = c.input_shape(1);
  if (logits.unknown_rank()) logits = TensorShape{kUnknownDim, kUnknownDim};
  if (labels.unknown_rank()) labels = TensorShape{kUnknownDim};
  if (logits.dims() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits ('", c.input(0).name(),
                     "') must be a [batch, classes] matrix, got shape ",
                     logits.DebugString()));
  }
  if (labels.dims() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels ('", c.input(1).name(),
        "') must be a [batch] vector, got shape ", labels.DebugString()));
  }
  int64_t batch = logits.dim_size(0);
  if (batch == kUnknownDim) {
    batch = labels.dim_size(0);
  } else if (labels.dim_size(0) != kUnknownDim && labels.dim_size(0) != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits and labels must have the same batch size, got logits of shape ",
        logits.DebugString(), " and labels of shape ", labels.DebugString()));
  }
  c.AddOutput(c.input_dtype(0), TensorShape{batch});
  c.AddOutput(c.input_dtype(0), TensorShape{batch, logits.dim_size(1)});
  return absl::OkStatus();
}

// InvalidArgument naming the first example whose label is outside
// [0, classes).
template <typename L>
absl::Status CheckLabels(const KernelContext& ctx, absl::Span<const L> labels,
                         int64_t classes) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return KernelError(
          ctx, absl::StrCat(
                   "Received a label value of ", labels[i], " for example ", i,
                   ", which is outside the valid range of [0, ", classes, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseSoftmaxCrossEntropyKernel(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  if (logits.shape().dims() != 2 || labels.shape().dims() != 1 ||
      labels.shape().dim_size(0) != logits.shape().dim_size(0)) {
    return KernelError(
        ctx, absl::StrCat("logits must be [batch, classes] and labels [batch]"
                          ", got ",
                          logits.shape().DebugString(), " and ",
                          labels.shape().DebugString()));
  }
  const int64_t batch = logits.shape().dim_size(0);
  const int64_t classes = logits.shape().dim_size(1);
  // Checked before any arithmetic: with no classes every label is invalid,
  // so the rows below are never empty.
  std::vector<int64_t> label_values(batch);
  COSESSION_RETURN_IF_ERROR(
      VisitDType(labels.dtype(), [&]<typename L>() -> absl::Status {
        if constexpr (!std::is_integral_v<L> || std::is_same_v<L, bool>) {
          return KernelError(ctx, "labels must be int32 or int64");
        } else {
          auto values = labels.flat<L>();
          COSESSION_RETURN_IF_ERROR(CheckLabels<L>(ctx, values, classes));
          for (int64_t i = 0; i < batch; ++i) label_values[i] = values[i];
          return absl::OkStatus();
        }
      }));
  return VisitDType(logits.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      return KernelError(ctx, absl::StrCat("dtype ", DTypeName(logits.dtype()),
                                           " is not supported"));
    } else {
      Tensor loss = Tensor::Allocate(logits.dtype(), TensorShape{batch});
      Tensor backprop = Tensor::AllocateWithShapeOf(logits.dtype(), logits);
      auto losses = loss.mutable_flat<T>();
      if (logits.NumElements() > 0) {
        auto x = MatrixMap<T>(logits);
        auto p = MutableMatrixMap<T>(backprop);
        for (int64_t r = 0; r < batch; ++r) {
          // With the row max subtracted exp() cannot overflow, and the
          // largest term of the sum is exp(0) = 1, so log(sum) is finite.
          const T max = x.row(r).maxCoeff();
          p.row(r) = (x.row(r).array() - max).exp().matrix();
          const T sum = p.row(r).sum();
          losses[r] = std::log(sum) - (x(r, label_values[r]) - max);
          p.row(r) /= sum;
          p(r, label_values[r]) -= T(1);
        }
      }
      ctx.set_output(0, std::move(loss));
      ctx.set_output(1, std::move(backprop));
      return absl::OkStatus();
    }
  });
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };
  must(r.Register(kernels::SyncOpDef(
      "SparseSoftmaxCrossEntropyWithLogits", SparseSoftmaxCrossEntropyShape,
      SparseSoftmaxCrossEntropyKernel, kernels::FirstInputElementsCost)));
}

namespace ops {

std::vector<Output> SparseSoftmaxCrossEntropyWithLogits(Graph& g, Output logits,
                                                        Output labels,
                                                        std::string name) {
  Node* node = g.AddNode({"SparseSoftmaxCrossEntropyWithLogits",
                          std::move(name),
                          {logits, labels},
                          {},
                          {}});
  return {Output(node, 0), Output(node, 1)};
}

}  // namespace ops
}  // namespace cosession
