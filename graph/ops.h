// Op builders: one function per op type. Each takes the Graph first and an
// optional op name last (empty = the op type; a taken name gets a suffix).
//
// Builders check dtypes and shapes at build time and throw StatusError naming
// the op on a mismatch, or when the graph is finalized. Elementwise binary ops
// broadcast as NumPy does (shapes aligned at the right; a dimension of 1
// stretches).
//
// Where each builder lives: graph/kernels/core_ops.cc (state and structure),
// math_ops.cc (arithmetic, reductions, activations, comparisons),
// array_ops.cc (shape and fill ops), random_ops.cc (seeded random ops).
#ifndef COSESSION_GRAPH_OPS_H_
#define COSESSION_GRAPH_OPS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/status.h"  // StatusError, thrown by the builders
#include "cosession/graph/tensor.h"

namespace cosession {
namespace ops {

// ---- core_ops.cc ----
Output Const(Graph& g, Tensor value, std::string name = "");
template <typename T>
requires std::is_arithmetic_v<T> Output Const(Graph& g, T value,
                                              std::string name = "") {
  return Const(g, Tensor::Scalar<T>(value), std::move(name));
}
// Must be fed. `shape` may be partial; a feed must be compatible with it.
Output Placeholder(Graph& g, DType dtype,
                   TensorShape shape = TensorShape::Unknown(),
                   std::string name = "");
Output Identity(Graph& g, Output input, std::string name = "");
// Identity that runs only after `dependencies` ran.
Output WithControlDependencies(Graph& g, std::vector<Operation> dependencies,
                               Output input, std::string name = "");
// Does nothing, after its control inputs ran.
Operation NoOp(Graph& g, std::vector<Operation> control_inputs = {},
               std::string name = "");
// Runs all of `ops` (a NoOp with them as control inputs).
Operation Group(Graph& g, std::vector<Operation> ops, std::string name = "");

// A variable: output 0 reads its current value (FailedPrecondition until it
// was assigned). Its initializer (Assign of `initial_value`) is added to the
// "variable_initializers" collection, the variable to "variables", and, when
// `trainable` and of a floating dtype, to "trainable_variables" (what
// optimizers update by default; graph/optimizers.h).
Output Variable(Graph& g, Output initial_value, std::string name = "",
                bool trainable = true);
Output Variable(Graph& g, Tensor initial_value, std::string name = "",
                bool trainable = true);
// The initializer op of a variable made by Variable().
Operation VariableInitializer(Output variable);
// Update the variable `variable` (an output of Variable) and output the new
// value. Each update is atomic.
Output Assign(Graph& g, Output variable, Output value, std::string name = "");
Output AssignAdd(Graph& g, Output variable, Output value,
                 std::string name = "");
Output AssignSub(Graph& g, Output variable, Output value,
                 std::string name = "");

// ---- math_ops.cc ----
Output Add(Graph& g, Output x, Output y, std::string name = "");
Output Sub(Graph& g, Output x, Output y, std::string name = "");
Output Mul(Graph& g, Output x, Output y, std::string name = "");
// Integer division truncates; division by zero is InvalidArgument at run
// time for integers.
Output Div(Graph& g, Output x, Output y, std::string name = "");
Output Maximum(Graph& g, Output x, Output y, std::string name = "");
Output Neg(Graph& g, Output x, std::string name = "");
Output Square(Graph& g, Output x, std::string name = "");
Output Sqrt(Graph& g, Output x, std::string name = "");
Output Exp(Graph& g, Output x, std::string name = "");
Output Log(Graph& g, Output x, std::string name = "");
// Sum of same-shaped tensors.
Output AddN(Graph& g, std::vector<Output> inputs, std::string name = "");
Output MatMul(Graph& g, Output a, Output b, bool transpose_a = false,
              bool transpose_b = false, std::string name = "");
// Reductions over `axes` (negative axes count from the end; empty = all).
Output Sum(Graph& g, Output x, std::vector<int64_t> axes = {},
           bool keep_dims = false, std::string name = "");
Output Mean(Graph& g, Output x, std::vector<int64_t> axes = {},
            bool keep_dims = false, std::string name = "");
Output Max(Graph& g, Output x, std::vector<int64_t> axes = {},
           bool keep_dims = false, std::string name = "");
Output Relu(Graph& g, Output x, std::string name = "");
Output Sigmoid(Graph& g, Output x, std::string name = "");
Output Tanh(Graph& g, Output x, std::string name = "");
// Softmax over the last axis.
Output Softmax(Graph& g, Output logits, std::string name = "");
Output Cast(Graph& g, Output x, DType dtype, std::string name = "");
Output Equal(Graph& g, Output x, Output y, std::string name = "");
// Index (int64) of the largest value along `axis`; the first one on ties.
Output ArgMax(Graph& g, Output x, int64_t axis, std::string name = "");
// True where x is neither infinite nor NaN.
Output IsFinite(Graph& g, Output x, std::string name = "");
// Passes x through; InvalidArgument ("<message> : Tensor had NaN values" /
// "Inf values") when it holds a NaN or an infinity.
Output CheckNumerics(Graph& g, Output x, std::string message,
                     std::string name = "");

// ---- array_ops.cc ----
// `shape` may hold one -1, inferred from the element count.
Output Reshape(Graph& g, Output x, TensorShape shape, std::string name = "");
// `perm` empty = reverse the dimensions.
Output Transpose(Graph& g, Output x, std::vector<int64_t> perm = {},
                 std::string name = "");
// A tensor of `shape` with every element equal to the scalar `value`.
Output Fill(Graph& g, TensorShape shape, Output value, std::string name = "");
Output ZerosLike(Graph& g, Output x, std::string name = "");
Output OnesLike(Graph& g, Output x, std::string name = "");

// ---- random_ops.cc ----
// Seeds follow TensorFlow: with a graph seed or an op seed (non-zero) the
// stream is reproducible; with neither it is not. Each run draws new values.
Output RandomUniform(Graph& g, TensorShape shape, DType dtype = DType::kFloat,
                     int64_t seed = 0, std::string name = "");
Output RandomNormal(Graph& g, TensorShape shape, DType dtype = DType::kFloat,
                    double mean = 0.0, double stddev = 1.0, int64_t seed = 0,
                    std::string name = "");
// Normal, redrawn until within two standard deviations of the mean.
Output TruncatedNormal(Graph& g, TensorShape shape, DType dtype = DType::kFloat,
                       double mean = 0.0, double stddev = 1.0, int64_t seed = 0,
                       std::string name = "");

// ---- training_ops.cc ----
// Fused optimizer updates, with TensorFlow's rules (graph/optimizers.h builds
// them; use these directly only for a custom optimizer). The hyperparameters
// are scalars of the variable's dtype; `grad` has the variable's shape. Each
// update of a variable and its slots (Variables too) is atomic.
Operation ApplyGradientDescent(Graph& g, Output variable, Output learning_rate,
                               Output grad, std::string name = "");
Operation ApplyMomentum(Graph& g, Output variable, Output accumulation,
                        Output learning_rate, Output grad, Output momentum,
                        bool use_nesterov = false, std::string name = "");
Operation ApplyAdam(Graph& g, Output variable, Output m, Output v,
                    Output beta1_power, Output beta2_power,
                    Output learning_rate, Output beta1, Output beta2,
                    Output epsilon, Output grad, std::string name = "");

// ---- nn_ops.cc ----
// TensorFlow's sparse_softmax_cross_entropy_with_logits, as one op with two
// outputs: output 0 = the loss of each example ([batch]), output 1 = its
// gradient w.r.t. the logits, softmax(logits) - onehot(labels) ([batch,
// classes]). `logits` is a float or double [batch, classes] matrix, `labels`
// an int32 or int64 [batch] vector. Computed with the row max subtracted, so
// large logits do not overflow. A label outside [0, classes) is
// InvalidArgument at run time naming the op, the example and the label.
// Gradients flow to the logits through output 0 only (see gradients.h).
std::vector<Output> SparseSoftmaxCrossEntropyWithLogits(Graph& g, Output logits,
                                                        Output labels,
                                                        std::string name = "");

// ---- grad_ops.cc ----
// Helpers of gradient functions (graph/gradients.h); usable by custom ones.
// Each checks its inputs' shapes again at run time (InvalidArgument naming
// the op), since the shapes known at build time may be partial.

// `grad` summed down to the run-time shape of `like` (`like`'s shape must
// broadcast to `grad`'s): the gradient of an input that a binary op
// broadcast. Shares the buffer when the shapes are equal.
Output SumToShapeOf(Graph& g, Output grad, Output like, std::string name = "");
// `x` reshaped to the run-time shape of `like` (same element count).
Output ReshapeToShapeOf(Graph& g, Output x, Output like, std::string name = "");
// The gradients of Sum, Mean and Max w.r.t. their input `x`, given the
// gradient `grad` of their output; `axes` and `keep_dims` as in the
// reduction. SumGrad broadcasts `grad` back to x's shape, MeanGrad also
// divides by the number of elements reduced into each output, MaxGrad
// (also given the reduction's output `y`) routes each gradient to the
// elements equal to the max, split evenly between ties as TensorFlow does.
Output SumGrad(Graph& g, Output grad, Output x, std::vector<int64_t> axes,
               bool keep_dims, std::string name = "");
Output MeanGrad(Graph& g, Output grad, Output x, std::vector<int64_t> axes,
                bool keep_dims, std::string name = "");
Output MaxGrad(Graph& g, Output grad, Output x, Output y,
               std::vector<int64_t> axes, bool keep_dims,
               std::string name = "");
// The gradients of Maximum(x, y) w.r.t. x and y before any reduction to
// their shapes: `grad` where x >= y (output 0), `grad` where x < y (output
// 1), zero elsewhere; ties go to x, as in TensorFlow.
std::vector<Output> MaximumGrad(Graph& g, Output grad, Output x, Output y,
                                std::string name = "");
// Fused gradients of activations, from the activation's output `y`:
// ReluGrad = grad * (y > 0), SigmoidGrad = grad * y * (1 - y),
// TanhGrad = grad * (1 - y^2), SoftmaxGrad = (grad - sum(grad * y, last
// axis)) * y.
Output ReluGrad(Graph& g, Output grad, Output y, std::string name = "");
Output SigmoidGrad(Graph& g, Output grad, Output y, std::string name = "");
Output TanhGrad(Graph& g, Output grad, Output y, std::string name = "");
Output SoftmaxGrad(Graph& g, Output grad, Output y, std::string name = "");

}  // namespace ops

// The int64 scalar variable "global_step" (created, initialised to 0, on first
// call; throws StatusError if it must be created in a finalized graph).
Output GetOrCreateGlobalStep(Graph& g);
// The existing "global_step" variable: NotFound when the graph has none,
// InvalidArgument when "global_step" is not an int64 Variable.
absl::StatusOr<Output> GetGlobalStep(Graph& g);
// A bool vector, one entry per variable of the "variables" collection that
// exists when this is built (in collection order): true = not initialised
// yet. TensorFlow's report_uninitialized_variables (which returns names);
// a session is "ready" when no entry is true. UninitializedVariableNames
// turns a report into names.
Output ReportUninitializedVariables(Graph& g, std::string name = "");
std::vector<std::string> UninitializedVariableNames(const Graph& g,
                                                    const Tensor& report);
// Groups the initializers of every variable in the graph.
Operation GlobalVariablesInitializer(Graph& g);

}  // namespace cosession

#endif  // COSESSION_GRAPH_OPS_H_
