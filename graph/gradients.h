// Reverse-mode automatic differentiation: Gradients() adds to a graph the ops
// that compute the gradients of some outputs (ys) with respect to others
// (xs), as TensorFlow's tf.gradients does.
//
// What gets built: only the ops on a path from an x to a y are
// differentiated, and of each such op only the inputs that lead back to an x
// get gradient ops. So asking for d loss / d W of a first layer adds no op
// computing the gradient w.r.t. the input batch. Gradients reaching one
// output from several consumers are summed with one AddN.
//
// What stops a gradient: an integer or bool tensor (ArgMax, Equal, Cast to
// int32...) carries none, and the ops before an x that no other x precedes
// are not differentiated (an x is a leaf: a Variable's output, a
// Placeholder, or any intermediate tensor). Control edges carry none.
//
// Each op's gradient comes from its OpDef::gradient (graph/op_registry.h),
// set by RegisterGradients for the differentiable core ops: Identity (and
// WithControlDependencies), Add, Sub, Mul, Div, Maximum (ties go to x), Neg,
// Square, Sqrt, Exp, Log, AddN, MatMul (all four transpose combinations,
// through MatMul with transpose flags), Sum, Mean, Max (split evenly between
// ties), Relu, Sigmoid, Tanh, Softmax, Cast (between float and double),
// Reshape, Transpose, SparseSoftmaxCrossEntropyWithLogits (w.r.t. the logits,
// through the loss output only). Broadcasting binary ops reduce each
// gradient to its input's shape, at build time when the shapes decide it and
// with SumToShapeOf at run time otherwise (an unknown batch dimension).
//
// Errors: Gradients returns (never throws) InvalidArgument when a y or an x
// is empty, belongs to another graph or is not float/double, when grad_ys
// has the wrong count, dtype or shape, or when an op on a path from an x to a
// y has no gradient function (the message names the op and its type); and
// whatever building an op fails with (FailedPrecondition for a finalized
// graph); Internal when a gradient function returns a gradient of the wrong
// count, dtype or shape (naming the op). The ops added before an error stay
// in the graph, unused.
//
// Thread safety: like every graph builder, single-threaded per graph; the
// gradient functions must be registered before (OpRegistry::Global() does).
#ifndef COSESSION_GRAPH_GRADIENTS_H_
#define COSESSION_GRAPH_GRADIENTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cosession/graph/graph.h"

namespace cosession {

// Symbolic gradients of sum_i sum(ys[i] * grad_ys[i]) with respect to each
// of xs. grad_ys empty = ones shaped like each y. Result i is an invalid
// Output when ys do not depend on xs[i] (TensorFlow's None).
absl::StatusOr<std::vector<Output>> Gradients(
    Graph& g, absl::Span<const Output> ys, absl::Span<const Output> xs,
    absl::Span<const Output> grad_ys = {});

}  // namespace cosession

#endif  // COSESSION_GRAPH_GRADIENTS_H_
