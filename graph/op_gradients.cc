// The gradient functions of the differentiable core ops (see
// graph/gradients.h for which, and the contract of GradientFn in
// graph/op_registry.h), set by RegisterGradients.
//
// Each function builds only the gradients `wanted` asks for, and
// returns an invalid Output for the others. An invalid output gradient means
// zero (Gradients() calls a function only when at least one is valid).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/graph/gradients.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

using GradientResult = absl::StatusOr<std::vector<Output>>;
using OutputGrads = absl::Span<const Output>;

// Output `i` of `op`. (Output holds a mutable Node*, gradient functions get
// a const Node&; nothing modifies the node.)
Output OutputOf(const Node& op, int i) {
  return Output(const_cast<Node*>(&op), i);
}

// A scalar constant of a floating `dtype`.
Output ScalarOf(Graph& g, DType dtype, double value) {
  return ops::Const(g, VisitDType(dtype, [&]<typename T>() {
                      return Tensor::Scalar<T>(static_cast<T>(value));
                    }));
}

// `make()` when the caller wants the gradient of input `i`, else none.
template <typename Fn>
Output IfWanted(const WantedInputs& wanted, int i, Fn&& make) {
  return wanted[i] ? make() : Output();
}

// ---- Broadcasting ----

// `grad`, the gradient of the output of a broadcasting binary op, summed
// down to the shape of its input `x` (`other` is the op's other input).
// Decided at build time when the shapes tell which dimensions x was
// stretched along (a Sum, or nothing when none was); otherwise, for an
// unknown dimension of x facing one that is not 1, at run time by
// SumToShapeOf.
Output ReduceToInput(Graph& g, Output grad, Output x, Output other) {
  const TensorShape& xs = x.shape();
  const TensorShape& os = other.shape();
  if (xs.unknown_rank() || os.unknown_rank()) {
    return ops::SumToShapeOf(g, grad, x);
  }
  const int rank = std::max(xs.dims(), os.dims());
  const int x_offset = rank - xs.dims();
  const int other_offset = rank - os.dims();
  std::vector<int64_t> missing;    // dimensions x lacks
  std::vector<int64_t> stretched;  // dimensions where x is 1 and other not
  for (int d = 0; d < rank; ++d) {
    if (d < x_offset) {
      missing.push_back(d);
      continue;
    }
    const int64_t dx = xs.dim_size(d - x_offset);
    const int64_t dother = d < other_offset ? 1 : os.dim_size(d - other_offset);
    if (dother == 1) continue;  // x's dimension is the output's
    if (dx == 1) {
      // Summing over a dimension of size 1 is harmless when other's unknown
      // dimension turns out to be 1 too.
      stretched.push_back(d);
    } else if (dx == kUnknownDim) {
      return ops::SumToShapeOf(g, grad, x);  // x may be 1 here at run time
    }
  }
  if (!stretched.empty()) {
    grad = ops::Sum(g, grad, std::move(stretched), /*keep_dims=*/true);
  }
  if (!missing.empty()) {
    grad = ops::Sum(g, grad, std::move(missing), /*keep_dims=*/false);
  }
  return grad;
}

// ---- Elementwise binary ops ----

GradientResult AddGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs& wanted) {
  const Output x = op.input(0), y = op.input(1);
  return std::vector<Output>{
      IfWanted(wanted, 0, [&] { return ReduceToInput(g, dz[0], x, y); }),
      IfWanted(wanted, 1, [&] { return ReduceToInput(g, dz[0], y, x); })};
}

GradientResult SubGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs& wanted) {
  const Output x = op.input(0), y = op.input(1);
  return std::vector<Output>{
      IfWanted(wanted, 0, [&] { return ReduceToInput(g, dz[0], x, y); }),
      // Negated after the reduction, on fewer elements.
      IfWanted(wanted, 1,
               [&] { return ops::Neg(g, ReduceToInput(g, dz[0], y, x)); })};
}

GradientResult MulGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs& wanted) {
  const Output x = op.input(0), y = op.input(1);
  return std::vector<Output>{
      IfWanted(wanted, 0,
               [&] { return ReduceToInput(g, ops::Mul(g, dz[0], y), x, y); }),
      IfWanted(wanted, 1,
               [&] { return ReduceToInput(g, ops::Mul(g, dz[0], x), y, x); })};
}

// z = x / y: dx = dz / y, dy = -dz * x / y^2 = -dz * z / y.
GradientResult DivGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs& wanted) {
  const Output x = op.input(0), y = op.input(1), z = OutputOf(op, 0);
  return std::vector<Output>{
      IfWanted(wanted, 0,
               [&] { return ReduceToInput(g, ops::Div(g, dz[0], y), x, y); }),
      IfWanted(wanted, 1, [&] {
        return ops::Neg(
            g, ReduceToInput(g, ops::Div(g, ops::Mul(g, dz[0], z), y), y, x));
      })};
}

GradientResult MaximumGrad(Graph& g, const Node& op, OutputGrads dz,
                           const WantedInputs& wanted) {
  const Output x = op.input(0), y = op.input(1);
  const std::vector<Output> split = ops::MaximumGrad(g, dz[0], x, y);
  return std::vector<Output>{
      IfWanted(wanted, 0, [&] { return ReduceToInput(g, split[0], x, y); }),
      IfWanted(wanted, 1, [&] { return ReduceToInput(g, split[1], y, x); })};
}

// ---- Elementwise unary ops ----

GradientResult IdentityGrad(Graph&, const Node&, OutputGrads dz,
                            const WantedInputs&) {
  return std::vector<Output>{dz[0]};
}

GradientResult NegGrad(Graph& g, const Node&, OutputGrads dz,
                       const WantedInputs&) {
  return std::vector<Output>{ops::Neg(g, dz[0])};
}

GradientResult SquareGrad(Graph& g, const Node& op, OutputGrads dz,
                          const WantedInputs&) {
  const Output x = op.input(0);
  return std::vector<Output>{
      ops::Mul(g, dz[0], ops::Mul(g, ScalarOf(g, x.dtype(), 2.0), x))};
}

// y = sqrt(x): dx = dz / (2 y).
GradientResult SqrtGrad(Graph& g, const Node& op, OutputGrads dz,
                        const WantedInputs&) {
  const Output y = OutputOf(op, 0);
  return std::vector<Output>{
      ops::Div(g, ops::Mul(g, dz[0], ScalarOf(g, y.dtype(), 0.5)), y)};
}

GradientResult ExpGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs&) {
  const Output y = OutputOf(op, 0);
  return std::vector<Output>{ops::Mul(g, dz[0], y)};
}

GradientResult LogGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs&) {
  return std::vector<Output>{ops::Div(g, dz[0], op.input(0))};
}

// The fused activation gradients take the activation's output.
template <Output (*kFusedGrad)(Graph&, Output, Output, std::string)>
GradientResult ActivationGrad(Graph& g, const Node& op, OutputGrads dz,
                              const WantedInputs&) {
  const Output y = OutputOf(op, 0);
  return std::vector<Output>{kFusedGrad(g, dz[0], y, "")};
}

// Only between float and double: integers carry no gradient.
GradientResult CastGrad(Graph& g, const Node& op, OutputGrads dz,
                        const WantedInputs&) {
  const DType from = op.input(0).dtype();
  if (!IsFloating(from) || !IsFloating(op.output_dtype(0))) {
    return std::vector<Output>{Output()};
  }
  return std::vector<Output>{ops::Cast(g, dz[0], from)};
}

// ---- AddN, MatMul ----

GradientResult AddNGrad(Graph&, const Node& op, OutputGrads dz,
                        const WantedInputs& wanted) {
  std::vector<Output> grads(op.num_inputs());
  for (int i = 0; i < op.num_inputs(); ++i) {
    if (wanted[i]) grads[i] = dz[0];
  }
  return grads;
}

// z = op(a) op(b), op = transpose or not. Each gradient is one MatMul with
// transpose flags, never a Transpose op:
//   z = a b     : da = dz b^T,     db = a^T dz
//   z = a b^T   : da = dz b,       db = dz^T a
//   z = a^T b   : da = b dz^T,     db = a dz
//   z = a^T b^T : da = b^T dz^T,   db = dz^T a^T
GradientResult MatMulGrad(Graph& g, const Node& op, OutputGrads dz,
                          const WantedInputs& wanted) {
  const Output a = op.input(0), b = op.input(1), d = dz[0];
  const bool ta = op.attr<bool>("transpose_a");
  const bool tb = op.attr<bool>("transpose_b");
  auto matmul = [&](Output l, Output r, bool tl, bool tr) {
    return ops::MatMul(g, l, r, tl, tr);
  };
  Output da, db;
  if (!ta && !tb) {
    da = IfWanted(wanted, 0, [&] { return matmul(d, b, false, true); });
    db = IfWanted(wanted, 1, [&] { return matmul(a, d, true, false); });
  } else if (!ta && tb) {
    da = IfWanted(wanted, 0, [&] { return matmul(d, b, false, false); });
    db = IfWanted(wanted, 1, [&] { return matmul(d, a, true, false); });
  } else if (ta && !tb) {
    da = IfWanted(wanted, 0, [&] { return matmul(b, d, false, true); });
    db = IfWanted(wanted, 1, [&] { return matmul(a, d, false, false); });
  } else {
    da = IfWanted(wanted, 0, [&] { return matmul(b, d, true, true); });
    db = IfWanted(wanted, 1, [&] { return matmul(d, a, true, true); });
  }
  return std::vector<Output>{da, db};
}

// ---- Reductions ----

GradientResult SumGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs&) {
  return std::vector<Output>{ops::SumGrad(g, dz[0], op.input(0),
                                          op.attr<std::vector<int64_t>>("axes"),
                                          op.attr<bool>("keep_dims"))};
}

GradientResult MeanGrad(Graph& g, const Node& op, OutputGrads dz,
                        const WantedInputs&) {
  return std::vector<Output>{ops::MeanGrad(
      g, dz[0], op.input(0), op.attr<std::vector<int64_t>>("axes"),
      op.attr<bool>("keep_dims"))};
}

GradientResult MaxGrad(Graph& g, const Node& op, OutputGrads dz,
                       const WantedInputs&) {
  return std::vector<Output>{ops::MaxGrad(
      g, dz[0], op.input(0), OutputOf(op, 0),
      op.attr<std::vector<int64_t>>("axes"), op.attr<bool>("keep_dims"))};
}

// ---- Shapes ----

// Reshape back to the input's shape: a plain Reshape when at most one of its
// dimensions is unknown (Reshape infers one -1), else at run time.
GradientResult ReshapeGrad(Graph& g, const Node& op, OutputGrads dz,
                           const WantedInputs&) {
  const Output x = op.input(0);
  const TensorShape& shape = x.shape();
  int unknown = 0;
  for (int d = 0; d < shape.dims(); ++d) {
    unknown += shape.dim_size(d) == kUnknownDim;
  }
  if (shape.unknown_rank() || unknown > 1) {
    return std::vector<Output>{ops::ReshapeToShapeOf(g, dz[0], x)};
  }
  return std::vector<Output>{ops::Reshape(g, dz[0], shape)};
}

GradientResult TransposeGrad(Graph& g, const Node& op, OutputGrads dz,
                             const WantedInputs&) {
  const std::vector<int64_t>& perm = op.attr<std::vector<int64_t>>("perm");
  // Reversing the dimensions (empty perm) undoes itself.
  std::vector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    inverse[perm[d]] = static_cast<int64_t>(d);
  }
  return std::vector<Output>{ops::Transpose(g, dz[0], std::move(inverse))};
}

// ---- SparseSoftmaxCrossEntropyWithLogits ----

// d loss_i / d logits_i = backprop_i (output 1), scaled by each example's
// loss gradient. The labels are integers and get none. A gradient through
// the backprop output itself would need the softmax's Hessian, which
// TensorFlow does not provide for this op either: an error.
GradientResult SparseSoftmaxCrossEntropyGrad(Graph& g, const Node& op,
                                             OutputGrads dz,
                                             const WantedInputs&) {
  if (dz[1].valid()) {
    return absl::InvalidArgumentError(
        "no gradient is defined through output 1 (the backprop) of "
        "SparseSoftmaxCrossEntropyWithLogits; differentiate its loss "
        "(output 0)");
  }
  const Output backprop = OutputOf(op, 1);
  const Output column = ops::Reshape(g, dz[0], TensorShape{kUnknownDim, 1});
  return std::vector<Output>{ops::Mul(g, column, backprop), Output()};
}

}  // namespace

void RegisterGradients(OpRegistry& r) {
  auto set = [&](absl::string_view op, GradientFn fn) {
    ThrowIfError(r.SetGradient(op, std::move(fn)));
  };
  set("Identity", IdentityGrad);  // also WithControlDependencies
  set("Add", AddGrad);
  set("Sub", SubGrad);
  set("Mul", MulGrad);
  set("Div", DivGrad);
  set("Maximum", MaximumGrad);
  set("Neg", NegGrad);
  set("Square", SquareGrad);
  set("Sqrt", SqrtGrad);
  set("Exp", ExpGrad);
  set("Log", LogGrad);
  set("AddN", AddNGrad);
  set("MatMul", MatMulGrad);
  set("Sum", SumGrad);
  set("Mean", MeanGrad);
  set("Max", MaxGrad);
  set("Relu", ActivationGrad<ops::ReluGrad>);
  set("Sigmoid", ActivationGrad<ops::SigmoidGrad>);
  set("Tanh", ActivationGrad<ops::TanhGrad>);
  set("Softmax", ActivationGrad<ops::SoftmaxGrad>);
  set("Cast", CastGrad);
  set("Reshape", ReshapeGrad);
  set("Transpose", TransposeGrad);
  set("SparseSoftmaxCrossEntropyWithLogits", SparseSoftmaxCrossEntropyGrad);
}

}  // namespace cosession
