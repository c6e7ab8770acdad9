#include "cosession/graph/gradients.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

// InvalidArgument unless `t` is a float or double tensor of `g`.
absl::Status CheckDifferentiable(const Graph& g, const Output& t,
                                 absl::string_view what, size_t i) {
  if (!t.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradients: ", what, "[", i, "] is empty"));
  }
  if (&t.node()->graph() != &g) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradients: ", what, "[", i, "] ('", t.name(),
                     "') belongs to another graph"));
  }
  if (!IsFloating(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradients: ", what, "[", i, "] ('", t.name(),
                     "') has dtype ", DTypeName(t.dtype()),
                     "; only float and double tensors have gradients"));
  }
  return absl::OkStatus();
}

absl::Status CheckGradYs(const Graph& g, absl::Span<const Output> ys,
                         absl::Span<const Output> grad_ys) {
  if (grad_ys.empty()) return absl::OkStatus();
  if (grad_ys.size() != ys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradients: got ", grad_ys.size(), " grad_ys for ",
                     ys.size(), " ys; pass one per y or none"));
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    const Output& dy = grad_ys[i];
    if (!dy.valid() || &dy.node()->graph() != &g) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gradients: grad_ys[", i, "] is empty or belongs to another graph"));
    }
    if (dy.dtype() != ys[i].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gradients: grad_ys[", i, "] ('", dy.name(), "') has dtype ",
          DTypeName(dy.dtype()), " but ys[", i, "] ('", ys[i].name(),
          "') has dtype ", DTypeName(ys[i].dtype())));
    }
    if (!dy.shape().IsCompatibleWith(ys[i].shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gradients: grad_ys[", i, "] ('", dy.name(), "') has shape ",
          dy.shape().DebugString(), " but ys[", i, "] ('", ys[i].name(),
          "') has shape ", ys[i].shape().DebugString()));
    }
  }
  return absl::OkStatus();
}

// `status` with the op being differentiated named in front.
absl::Status InOpGradient(const Node& op, const absl::Status& status) {
  return absl::Status(
      status.code(),
      absl::StrCat("Gradients: in the gradient of op '", op.name(), "' (",
                   op.type(), "): ", status.message()));
}

// Checks what a gradient function returned for input `i` of `op`.
absl::Status CheckInputGradient(const Node& op, int i, const Output& grad) {
  const Output& input = op.input(i);
  if (&grad.node()->graph() != &op.graph()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient of input ", i, " belongs to another graph"));
  }
  if (grad.dtype() != input.dtype() ||
      !grad.shape().IsCompatibleWith(input.shape())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient of input ", i, " ('", input.name(), "', ",
                     DTypeName(input.dtype()), " ", input.shape().DebugString(),
                     ") is '", grad.name(), "' (", DTypeName(grad.dtype()), " ",
                     grad.shape().DebugString(), ")"));
  }
  return absl::OkStatus();
}

// The sum of `grads` (all for one tensor): none, the only one, or an AddN.
Output SumOf(Graph& g, std::vector<Output> grads) {
  if (grads.empty()) return Output();
  if (grads.size() == 1) return grads[0];
  return ops::AddN(g, std::move(grads));
}

// Gradients() without the catch: graph builders throw StatusError.
absl::StatusOr<std::vector<Output>> BuildGradients(
    Graph& g, absl::Span<const Output> ys, absl::Span<const Output> xs,
    absl::Span<const Output> grad_ys) {
  for (size_t i = 0; i < ys.size(); ++i) {
    COSESSION_RETURN_IF_ERROR(CheckDifferentiable(g, ys[i], "ys", i));
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    COSESSION_RETURN_IF_ERROR(CheckDifferentiable(g, xs[i], "xs", i));
  }
  COSESSION_RETURN_IF_ERROR(CheckGradYs(g, ys, grad_ys));

  // Node ids are a topological order: an op's inputs were added before it.
  const int num_nodes = g.num_nodes();
  const absl::flat_hash_set<Output> x_set(xs.begin(), xs.end());

  // Forward from the xs: `all_outputs_depend[n]` when some floating input of
  // n depends on an x (then all of n's outputs do). Integer and bool tensors
  // carry no gradient, so they end a path.
  std::vector<bool> all_outputs_depend(num_nodes, false);
  auto depends_on_x = [&](const Output& t) {
    return all_outputs_depend[t.node()->id()] || x_set.contains(t);
  };
  // A data edge along which a gradient can flow back to an x.
  auto carries_gradient = [&](const Output& input) {
    return IsFloating(input.dtype()) && depends_on_x(input);
  };
  for (int id = 0; id < num_nodes; ++id) {
    for (const Output& input : g.node(id)->inputs()) {
      if (carries_gradient(input)) {
        all_outputs_depend[id] = true;
        break;
      }
    }
  }

  // Backward from the ys: `between[n]` when a gradient-carrying path leads
  // from an x through n to a y. Only these ops are differentiated.
  std::vector<bool> between(num_nodes, false);
  for (const Output& y : ys) {
    if (depends_on_x(y)) between[y.node()->id()] = true;
  }
  for (int id = num_nodes - 1; id >= 0; --id) {
    if (!between[id]) continue;
    for (const Output& input : g.node(id)->inputs()) {
      if (carries_gradient(input)) between[input.node()->id()] = true;
    }
  }

  // The gradients reaching each tensor, summed when its op is processed.
  absl::flat_hash_map<Output, std::vector<Output>> incoming;
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!depends_on_x(ys[i])) continue;
    incoming[ys[i]].push_back(grad_ys.empty() ? ops::OnesLike(g, ys[i])
                                              : grad_ys[i]);
  }
  absl::flat_hash_map<Output, Output> summed;

  // In reverse topological order every consumer of an op's outputs was
  // processed before the op, so its output gradients are complete.
  for (int id = num_nodes - 1; id >= 0; --id) {
    if (!between[id]) continue;
    const Node& op = *g.node(id);
    std::vector<Output> output_grads(op.num_outputs());
    bool any_output_grad = false;
    for (int j = 0; j < op.num_outputs(); ++j) {
      auto it = incoming.find(Output(g.node(id), j));
      if (it == incoming.end()) continue;
      output_grads[j] = SumOf(g, std::move(it->second));
      incoming.erase(it);
      summed[Output(g.node(id), j)] = output_grads[j];
      any_output_grad |= output_grads[j].valid();
    }
    std::vector<bool> wanted(op.num_inputs(), false);
    bool any_wanted = false;
    for (int i = 0; i < op.num_inputs(); ++i) {
      const Output& input = op.input(i);
      wanted[i] = carries_gradient(input) && between[input.node()->id()];
      any_wanted |= wanted[i];
    }
    // An x that no other x precedes: its inputs need nothing.
    if (!any_wanted || !any_output_grad) continue;
    const GradientFn& gradient = op.op_def().gradient;
    if (!gradient) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gradients: no gradient is defined for op '", op.name(), "' (",
          op.type(), "), which lies on a path from an x to a y"));
    }
    absl::StatusOr<std::vector<Output>> input_grads;
    try {
      input_grads = gradient(g, op, output_grads, WantedInputs(wanted));
    } catch (const StatusError& e) {
      return InOpGradient(op, e.status());
    }
    if (!input_grads.ok()) return InOpGradient(op, input_grads.status());
    if (static_cast<int>(input_grads->size()) != op.num_inputs()) {
      return InOpGradient(
          op, absl::InternalError(absl::StrCat(
                  "the gradient function returned ", input_grads->size(),
                  " gradients for ", op.num_inputs(), " inputs")));
    }
    for (int i = 0; i < op.num_inputs(); ++i) {
      const Output& grad = (*input_grads)[i];
      if (!wanted[i] || !grad.valid()) continue;
      if (absl::Status s = CheckInputGradient(op, i, grad); !s.ok()) {
        return InOpGradient(op, absl::InternalError(s.message()));
      }
      incoming[op.input(i)].push_back(grad);
    }
  }

  std::vector<Output> result;
  result.reserve(xs.size());
  for (const Output& x : xs) {
    auto it = summed.find(x);
    result.push_back(it == summed.end() ? Output() : it->second);
  }
  return result;
}

}  // namespace

absl::StatusOr<std::vector<Output>> Gradients(
    Graph& g, absl::Span<const Output> ys, absl::Span<const Output> xs,
    absl::Span<const Output> grad_ys) {
  try {
    return BuildGradients(g, ys, xs, grad_ys);
  } catch (const StatusError& e) {
    return e.status();
  }
}

}  // namespace cosession
