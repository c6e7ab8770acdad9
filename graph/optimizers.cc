#include "cosession/graph/optimizers.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/gradients.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

absl::Status CheckOption(bool ok, absl::string_view optimizer,
                         absl::string_view option, double value,
                         absl::string_view requirement) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(optimizer, "Optimizer: ", option, " must be ", requirement,
                   ", got ", value));
}

absl::Status CheckVariable(const Output& variable) {
  if (!variable.valid() || variable.node()->type() != "Variable") {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", variable.valid() ? variable.name() : std::string("<empty>"),
        "' is not a Variable, so an optimizer cannot update it"));
  }
  if (!IsFloating(variable.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", variable.name(), "' is ", DTypeName(variable.dtype()),
        "; optimizers update float or double variables"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<GradientAndVariable>> Optimizer::ComputeGradients(
    Graph& g, Output loss, std::vector<Output> var_list) const {
  if (var_list.empty()) {
    for (Node* node : g.GetCollection(kTrainableVariablesCollection)) {
      var_list.emplace_back(node, 0);
    }
    if (var_list.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_,
                       "Optimizer: the graph has no trainable "
                       "variables to optimize"));
    }
  }
  for (const Output& variable : var_list) {
    COSESSION_RETURN_IF_ERROR(CheckVariable(variable));
  }
  const Output ys[] = {loss};
  COSESSION_ASSIGN_OR_RETURN(std::vector<Output> gradients,
                             Gradients(g, ys, var_list));
  std::vector<GradientAndVariable> pairs;
  pairs.reserve(var_list.size());
  for (size_t i = 0; i < var_list.size(); ++i) {
    pairs.push_back({gradients[i], var_list[i]});
  }
  return pairs;
}

absl::StatusOr<Operation> Optimizer::ApplyGradients(
    Graph& g, absl::Span<const GradientAndVariable> grads_and_vars,
    Output global_step, std::string name) {
  COSESSION_RETURN_IF_ERROR(ValidateOptions());
  std::vector<std::string> without_gradient;
  for (const GradientAndVariable& pair : grads_and_vars) {
    COSESSION_RETURN_IF_ERROR(CheckVariable(pair.variable));
    if (!pair.gradient.valid())
      without_gradient.push_back(pair.variable.name());
  }
  if (without_gradient.size() == grads_and_vars.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, "Optimizer: no gradient for any variable (",
                     absl::StrJoin(without_gradient, ", "),
                     "); does the loss depend on them?"));
  }
  if (global_step.valid() && (global_step.node()->type() != "Variable" ||
                              global_step.dtype() != DType::kInt64)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, "Optimizer: global_step '", global_step.name(),
                     "' must be an int64 Variable (GetOrCreateGlobalStep)"));
  }
  // Builders report build-time mismatches by throwing StatusError; this
  // function's contract is a Status.
  try {
    std::vector<Operation> updates;
    for (const GradientAndVariable& pair : grads_and_vars) {
      if (pair.gradient.valid()) {
        updates.push_back(ApplyDense(g, pair.gradient, pair.variable));
      }
    }
    std::vector<Operation> finished = Finish(g, std::move(updates));
    if (name.empty()) name = name_;
    if (!global_step.valid()) return ops::Group(g, std::move(finished), name);
    Output one = ops::WithControlDependencies(
        g, std::move(finished), ops::Const<int64_t>(g, 1, name + "/one"),
        name + "/after_updates");
    return Operation(ops::AssignAdd(g, global_step, one, name).node());
  } catch (const StatusError& e) {
    return e.status();
  }
}

absl::StatusOr<Operation> Optimizer::Minimize(Graph& g, Output loss,
                                              Output global_step,
                                              std::vector<Output> var_list,
                                              std::string name) {
  COSESSION_RETURN_IF_ERROR(ValidateOptions());
  COSESSION_ASSIGN_OR_RETURN(std::vector<GradientAndVariable> pairs,
                             ComputeGradients(g, loss, std::move(var_list)));
  return ApplyGradients(g, pairs, global_step, std::move(name));
}

absl::StatusOr<Output> Optimizer::GetSlot(Output variable,
                                          absl::string_view slot) const {
  auto it = slots_.find(std::make_pair(
      static_cast<const Node*>(variable.node()), std::string(slot)));
  if (it == slots_.end()) {
    return absl::NotFoundError(absl::StrCat(
        name_, "Optimizer has no slot '", slot, "' for '",
        variable.valid() ? variable.name() : std::string("<empty>"), "'"));
  }
  return it->second;
}

std::vector<Operation> Optimizer::Finish(Graph&,
                                         std::vector<Operation> updates) {
  return updates;
}

Output Optimizer::ZerosSlot(Graph& g, Output variable, absl::string_view slot,
                            absl::string_view suffix) {
  auto key = std::make_pair(static_cast<const Node*>(variable.node()),
                            std::string(slot));
  if (auto it = slots_.find(key); it != slots_.end()) return it->second;
  const std::string name = absl::StrCat(variable.node()->name(), "/", suffix);
  const TensorShape& shape = variable.shape();
  // A fully defined shape needs no tensor in the graph, only a Fill; a
  // partial one takes its shape from the variable's initial value at
  // initialisation time.
  Output zeros =
      shape.IsFullyDefined()
          ? ops::Fill(g, shape, Scalar(g, 0, variable.dtype(), name + "/zero"),
                      name + "/zeros")
          : ops::ZerosLike(g,
                           ops::VariableInitializer(variable).node()->input(0),
                           name + "/zeros");
  Output slot_variable = ops::Variable(g, zeros, name, /*trainable=*/false);
  slots_.emplace(std::move(key), slot_variable);
  return slot_variable;
}

Output Optimizer::Scalar(Graph& g, double value, DType dtype,
                         absl::string_view name) {
  Tensor t = dtype == DType::kDouble
                 ? Tensor::Scalar<double>(value)
                 : Tensor::Scalar<float>(static_cast<float>(value));
  return ops::Const(g, std::move(t), std::string(name));
}

// ---- GradientDescent

absl::Status GradientDescentOptimizer::ValidateOptions() const {
  return CheckOption(
      std::isfinite(options_.learning_rate) && options_.learning_rate >= 0,
      name(), "learning_rate", options_.learning_rate, "finite and >= 0");
}

Operation GradientDescentOptimizer::ApplyDense(Graph& g, Output gradient,
                                               Output variable) {
  const std::string base =
      absl::StrCat(name(), "/update_", variable.node()->name());
  return ops::ApplyGradientDescent(
      g, variable,
      Scalar(g, options_.learning_rate, variable.dtype(),
             base + "/learning_rate"),
      gradient, base);
}

// ---- Momentum

absl::Status MomentumOptimizer::ValidateOptions() const {
  COSESSION_RETURN_IF_ERROR(CheckOption(
      std::isfinite(options_.learning_rate) && options_.learning_rate >= 0,
      name(), "learning_rate", options_.learning_rate, "finite and >= 0"));
  return CheckOption(std::isfinite(options_.momentum) && options_.momentum >= 0,
                     name(), "momentum", options_.momentum, "finite and >= 0");
}

Operation MomentumOptimizer::ApplyDense(Graph& g, Output gradient,
                                        Output variable) {
  const std::string base =
      absl::StrCat(name(), "/update_", variable.node()->name());
  Output accumulation = ZerosSlot(g, variable, "momentum", "Momentum");
  return ops::ApplyMomentum(
      g, variable, accumulation,
      Scalar(g, options_.learning_rate, variable.dtype(),
             base + "/learning_rate"),
      gradient,
      Scalar(g, options_.momentum, variable.dtype(), base + "/momentum"),
      options_.use_nesterov, base);
}

// ---- Adam

absl::Status AdamOptimizer::ValidateOptions() const {
  COSESSION_RETURN_IF_ERROR(CheckOption(
      std::isfinite(options_.learning_rate) && options_.learning_rate >= 0,
      name(), "learning_rate", options_.learning_rate, "finite and >= 0"));
  COSESSION_RETURN_IF_ERROR(
      CheckOption(options_.beta1 >= 0 && options_.beta1 < 1, name(), "beta1",
                  options_.beta1, "in [0, 1)"));
  COSESSION_RETURN_IF_ERROR(
      CheckOption(options_.beta2 >= 0 && options_.beta2 < 1, name(), "beta2",
                  options_.beta2, "in [0, 1)"));
  return CheckOption(std::isfinite(options_.epsilon) && options_.epsilon > 0,
                     name(), "epsilon", options_.epsilon, "finite and > 0");
}

AdamOptimizer::Powers AdamOptimizer::PowersFor(Graph& g, DType dtype) {
  if (auto it = powers_.find(dtype); it != powers_.end()) return it->second;
  // TensorFlow's names; a second dtype gets suffixed ones.
  Powers powers{
      ops::Variable(g, Scalar(g, options_.beta1, dtype, "beta1_power/initial"),
                    "beta1_power", /*trainable=*/false),
      ops::Variable(g, Scalar(g, options_.beta2, dtype, "beta2_power/initial"),
                    "beta2_power", /*trainable=*/false)};
  powers_.emplace(dtype, powers);
  return powers;
}

Operation AdamOptimizer::ApplyDense(Graph& g, Output gradient,
                                    Output variable) {
  const DType dtype = variable.dtype();
  const std::string base =
      absl::StrCat(name(), "/update_", variable.node()->name());
  const Powers powers = PowersFor(g, dtype);
  if (std::find(used_dtypes_.begin(), used_dtypes_.end(), dtype) ==
      used_dtypes_.end()) {
    used_dtypes_.push_back(dtype);
  }
  Output m = ZerosSlot(g, variable, "m", "Adam");
  Output v = ZerosSlot(g, variable, "v", "Adam_1");
  return ops::ApplyAdam(
      g, variable, m, v, powers.beta1_power, powers.beta2_power,
      Scalar(g, options_.learning_rate, dtype, base + "/learning_rate"),
      Scalar(g, options_.beta1, dtype, base + "/beta1"),
      Scalar(g, options_.beta2, dtype, base + "/beta2"),
      Scalar(g, options_.epsilon, dtype, base + "/epsilon"), gradient, base);
}

std::vector<Operation> AdamOptimizer::Finish(Graph& g,
                                             std::vector<Operation> updates) {
  // The powers advance after every update read them (the reads feed the
  // updates, and the assignments wait for the updates).
  std::vector<Operation> finished;
  for (DType dtype : used_dtypes_) {
    const Powers& powers = powers_.at(dtype);
    const std::string base = absl::StrCat(name(), "/", DTypeName(dtype));
    auto advance = [&](Output power, double beta, const char* what) {
      Output next = ops::Mul(g, power, Scalar(g, beta, dtype, base + what),
                             base + what + "_next");
      Output after = ops::WithControlDependencies(g, updates, next,
                                                  base + what + "_after");
      finished.emplace_back(
          ops::Assign(g, power, after, base + what + "_update").node());
    };
    advance(powers.beta1_power, options_.beta1, "/beta1_power");
    advance(powers.beta2_power, options_.beta2, "/beta2_power");
  }
  used_dtypes_.clear();
  return finished;
}

}  // namespace cosession
