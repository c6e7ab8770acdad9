// Training ops: the fused variable updates of the optimizers
// (graph/optimizers.h) -- ApplyGradientDescent, ApplyMomentum, ApplyAdam --
// with TensorFlow's update rules.
//
// Each op names the variables it updates by node id in attrs ("variable",
// and the slots "accumulation" or "m"/"v"), as Assign does, and takes the
// hyperparameters and the gradient as inputs. It has no outputs: a train op
// runs it as a target.
//
// Atomicity: an op holds the lock of its variable while it updates the slots
// too (locks taken in the order variable, then slots; nothing takes them in
// another order), so one update of a variable and its slots is atomic. Values
// are replaced, never written in place (graph/tensor.h): an earlier read of
// the variable stays a stable snapshot.
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/kernels/kernel_util.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/status.h"
#include "graph/tensor_eigen.h"

namespace cosession {
namespace {

const Node& VariableAttr(const KernelContext& ctx, absl::string_view attr) {
  return *ctx.node().graph().node(
      static_cast<int>(ctx.node().attr<int64_t>(attr)));
}

// Input `i` of an Apply* op is a scalar hyperparameter; returns it as T.
template <typename T>
absl::StatusOr<T> ScalarInput(const KernelContext& ctx, int i,
                              absl::string_view what) {
  const Tensor& t = ctx.input(i);
  if (t.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Op '", ctx.node().name(), "': ", what,
                     " must be a scalar, got shape ", t.shape().DebugString()));
  }
  return t.flat<T>()[0];
}

absl::Status CheckCurrent(const KernelContext& ctx, const Node& variable,
                          const Tensor* current, const Tensor& grad) {
  if (current == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Op '", ctx.node().name(), "': attempting to use uninitialized value ",
        variable.name()));
  }
  if (current->shape() != grad.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Op '", ctx.node().name(), "': the gradient of shape ",
        grad.shape().DebugString(), " does not match variable '",
        variable.name(), "' of shape ", current->shape().DebugString()));
  }
  return absl::OkStatus();
}

// Replaces slot variable `slot` by fn(current slot value), which returns the
// new value; under the slot's lock.
template <typename Fn>
absl::Status UpdateSlot(KernelContext& ctx, const Node& slot,
                        const Tensor& grad, Fn fn) {
  return ctx.resources()
      .UpdateVariable(slot,
                      [&](const Tensor* current) -> absl::StatusOr<Tensor> {
                        COSESSION_RETURN_IF_ERROR(
                            CheckCurrent(ctx, slot, current, grad));
                        return fn(*current);
                      })
      .status();
}

// ---- ApplyGradientDescent: var -= lr * grad.
// Inputs: learning_rate, grad.
template <typename T>
absl::Status GradientDescent(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(T lr, ScalarInput<T>(ctx, 0, "learning_rate"));
  const Tensor& grad = ctx.input(1);
  const Node& variable = VariableAttr(ctx, "variable");
  return ctx.resources()
      .UpdateVariable(
          variable,
          [&](const Tensor* current) -> absl::StatusOr<Tensor> {
            COSESSION_RETURN_IF_ERROR(
                CheckCurrent(ctx, variable, current, grad));
            Tensor next = Tensor::Allocate(current->dtype(), current->shape());
            MutableFlatMap<T>(next) =
                FlatMap<T>(*current) - lr * FlatMap<T>(grad);
            return next;
          })
      .status();
}

// ---- ApplyMomentum: accum = momentum * accum + grad;
// var -= lr * accum, or with Nesterov var -= lr * (grad + momentum * accum).
// Inputs: learning_rate, grad, momentum.
template <typename T>
absl::Status Momentum(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(T lr, ScalarInput<T>(ctx, 0, "learning_rate"));
  const Tensor& grad = ctx.input(1);
  COSESSION_ASSIGN_OR_RETURN(T momentum, ScalarInput<T>(ctx, 2, "momentum"));
  const bool nesterov = ctx.node().attr<bool>("use_nesterov");
  const Node& variable = VariableAttr(ctx, "variable");
  const Node& accumulation = VariableAttr(ctx, "accumulation");
  return ctx.resources()
      .UpdateVariable(
          variable,
          [&](const Tensor* current) -> absl::StatusOr<Tensor> {
            COSESSION_RETURN_IF_ERROR(
                CheckCurrent(ctx, variable, current, grad));
            Tensor accum;
            COSESSION_RETURN_IF_ERROR(UpdateSlot(
                ctx, accumulation, grad, [&](const Tensor& old) {
                  accum = Tensor::Allocate(old.dtype(), old.shape());
                  MutableFlatMap<T>(accum) =
                      momentum * FlatMap<T>(old) + FlatMap<T>(grad);
                  return accum;
                }));
            Tensor next = Tensor::Allocate(current->dtype(), current->shape());
            if (nesterov) {
              MutableFlatMap<T>(next) =
                  FlatMap<T>(*current) -
                  lr * (FlatMap<T>(grad) + momentum * FlatMap<T>(accum));
            } else {
              MutableFlatMap<T>(next) =
                  FlatMap<T>(*current) - lr * FlatMap<T>(accum);
            }
            return next;
          })
      .status();
}

// ---- ApplyAdam (Kingma & Ba, as TensorFlow applies it):
//   lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m = beta1 * m + (1 - beta1) * grad
//   v = beta2 * v + (1 - beta2) * grad^2
//   var -= lr_t * m / (sqrt(v) + epsilon)
// Inputs: beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon,
// grad.
template <typename T>
absl::Status Adam(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(T beta1_power,
                             ScalarInput<T>(ctx, 0, "beta1_power"));
  COSESSION_ASSIGN_OR_RETURN(T beta2_power,
                             ScalarInput<T>(ctx, 1, "beta2_power"));
  COSESSION_ASSIGN_OR_RETURN(T lr, ScalarInput<T>(ctx, 2, "learning_rate"));
  COSESSION_ASSIGN_OR_RETURN(T beta1, ScalarInput<T>(ctx, 3, "beta1"));
  COSESSION_ASSIGN_OR_RETURN(T beta2, ScalarInput<T>(ctx, 4, "beta2"));
  COSESSION_ASSIGN_OR_RETURN(T epsilon, ScalarInput<T>(ctx, 5, "epsilon"));
  const Tensor& grad = ctx.input(6);
  const T lr_t = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
  const Node& variable = VariableAttr(ctx, "variable");
  const Node& m_slot = VariableAttr(ctx, "m");
  const Node& v_slot = VariableAttr(ctx, "v");
  return ctx.resources()
      .UpdateVariable(
          variable,
          [&](const Tensor* current) -> absl::StatusOr<Tensor> {
            COSESSION_RETURN_IF_ERROR(
                CheckCurrent(ctx, variable, current, grad));
            auto g = FlatMap<T>(grad);
            Tensor m, v;
            COSESSION_RETURN_IF_ERROR(
                UpdateSlot(ctx, m_slot, grad, [&](const Tensor& old) {
                  m = Tensor::Allocate(old.dtype(), old.shape());
                  MutableFlatMap<T>(m) =
                      beta1 * FlatMap<T>(old) + (T(1) - beta1) * g;
                  return m;
                }));
            COSESSION_RETURN_IF_ERROR(
                UpdateSlot(ctx, v_slot, grad, [&](const Tensor& old) {
                  v = Tensor::Allocate(old.dtype(), old.shape());
                  MutableFlatMap<T>(v) =
                      beta2 * FlatMap<T>(old) + (T(1) - beta2) * g.square();
                  return v;
                }));
            Tensor next = Tensor::Allocate(current->dtype(), current->shape());
            MutableFlatMap<T>(next) =
                FlatMap<T>(*current) -
                lr_t * FlatMap<T>(m) / (FlatMap<T>(v).sqrt() + epsilon);
            return next;
          })
      .status();
}

// Dispatches on the gradient's dtype (the last input), float or double.
template <absl::Status (*FloatKernel)(KernelContext&),
          absl::Status (*DoubleKernel)(KernelContext&)>
absl::Status Dispatch(KernelContext& ctx) {
  const DType dtype = ctx.input(ctx.num_inputs() - 1).dtype();
  if (dtype == DType::kFloat) return FloatKernel(ctx);
  if (dtype == DType::kDouble) return DoubleKernel(ctx);
  return absl::InvalidArgumentError(
      absl::StrCat("Op '", ctx.node().name(), "' needs float or double, got ",
                   DTypeName(dtype)));
}

// Shape function shared by the Apply* ops: every input but the last is a
// scalar hyperparameter of the variable's dtype; the last, the gradient,
// has the variable's dtype and a compatible shape.
absl::Status ApplyShape(InferenceContext& c) {
  if (c.num_inputs() < 2) {
    return absl::InvalidArgumentError("an Apply op needs at least 2 inputs");
  }
  COSESSION_ASSIGN_OR_RETURN(int64_t id, c.attr<int64_t>("variable"));
  if (id < 0 || id >= c.graph().num_nodes() ||
      c.graph().node(static_cast<int>(id))->type() != "Variable") {
    return absl::InvalidArgumentError(
        "attr 'variable' does not name a Variable");
  }
  const Node& variable = *c.graph().node(static_cast<int>(id));
  const DType dtype = variable.output_dtype(0);
  if (!IsFloating(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", variable.name(), "' is ", DTypeName(dtype),
                     "; optimizers update float or double variables"));
  }
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " ('", c.input(i).name(), "') is ",
          DTypeName(c.input_dtype(i)), " but variable '", variable.name(),
          "' is ", DTypeName(dtype)));
    }
  }
  for (int i = 0; i + 1 < c.num_inputs(); ++i) {
    if (c.input_shape(i).IsFullyDefined() &&
        c.input_shape(i).num_elements() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " ('", c.input(i).name(),
                       "') must be a scalar, got shape ",
                       c.input_shape(i).DebugString()));
    }
  }
  const TensorShape& grad = c.input_shape(c.num_inputs() - 1);
  if (!grad.IsCompatibleWith(variable.output_shape(0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the gradient of shape ", grad.DebugString(),
                     " does not match variable '", variable.name(),
                     "' of shape ", variable.output_shape(0).DebugString()));
  }
  return absl::OkStatus();
}

// About ten element operations per element of the gradient.
int64_t ApplyCost(const KernelContext& ctx) {
  return 10 * ctx.input(ctx.num_inputs() - 1).NumElements();
}

Node* CheckedVariable(Output variable, const std::string& op_name,
                      absl::string_view role) {
  if (!variable.valid() || variable.node()->type() != "Variable") {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "Cannot add op '", op_name, "': its ", role, " '",
        variable.valid() ? variable.name() : std::string("<empty>"),
        "' is not a Variable")));
  }
  return variable.node();
}

Operation AddApply(Graph& g, const char* type, std::string name,
                   absl::Span<const std::pair<const char*, Output>> variables,
                   std::vector<Output> inputs, AttrMap extra = {}) {
  if (name.empty()) name = type;
  NodeSpec spec{type, name, std::move(inputs), {}, std::move(extra)};
  for (const auto& [role, variable] : variables) {
    spec.attrs[role] = static_cast<int64_t>(
        CheckedVariable(variable, name, role)->id());
  }
  return Operation(g.AddNode(std::move(spec)));
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  auto must = [](absl::Status s) {
    if (!s.ok()) throw StatusError(std::move(s));
  };
  must(r.Register({.name = "ApplyGradientDescent",
                   .shape_fn = ApplyShape,
                   .kernel = Dispatch<GradientDescent<float>,
                                      GradientDescent<double>>,
                   .cost = ApplyCost,
                   .stateful = true}));
  must(r.Register({.name = "ApplyMomentum",
                   .shape_fn = ApplyShape,
                   .kernel = Dispatch<Momentum<float>, Momentum<double>>,
                   .cost = ApplyCost,
                   .stateful = true}));
  must(r.Register({.name = "ApplyAdam",
                   .shape_fn = ApplyShape,
                   .kernel = Dispatch<Adam<float>, Adam<double>>,
                   .cost = ApplyCost,
                   .stateful = true}));
}

namespace ops {

Operation ApplyGradientDescent(Graph& g, Output variable, Output learning_rate,
                               Output grad, std::string name) {
  const std::pair<const char*, Output> vars[] = {{"variable", variable}};
  return AddApply(g, "ApplyGradientDescent", std::move(name), vars,
                  {learning_rate, grad});
}

Operation ApplyMomentum(Graph& g, Output variable, Output accumulation,
                        Output learning_rate, Output grad, Output momentum,
                        bool use_nesterov, std::string name) {
  const std::pair<const char*, Output> vars[] = {
      {"variable", variable}, {"accumulation", accumulation}};
  AttrMap attrs;
  attrs["use_nesterov"] = use_nesterov;
  return AddApply(g, "ApplyMomentum", std::move(name), vars,
                  {learning_rate, grad, momentum}, std::move(attrs));
}

Operation ApplyAdam(Graph& g, Output variable, Output m, Output v,
                    Output beta1_power, Output beta2_power,
                    Output learning_rate, Output beta1, Output beta2,
                    Output epsilon, Output grad, std::string name) {
  const std::pair<const char*, Output> vars[] = {
      {"variable", variable}, {"m", m}, {"v", v}};
  return AddApply(g, "ApplyAdam", std::move(name), vars,
                  {beta1_power, beta2_power, learning_rate, beta1, beta2,
                   epsilon, grad});
}

}  // namespace ops
}  // namespace cosession
