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
// another order), so one update of a variable and its slots is atomic.
// Updates write in place when nobody else holds the buffers, else into
// copies (copy-on-write, ResourceManager::UpdateVariableInPlace): an earlier
// read of the variable stays a stable snapshot either way, and a training
// step, whose reads of the variables are dropped once used (async/executor.h),
// updates without allocating.
#include <array>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/kernels/kernel_util.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor_eigen.h"

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

absl::Status CheckShape(const KernelContext& ctx, const Node& variable,
                        const Tensor& value, const Tensor& grad) {
  if (value.shape() != grad.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Op '", ctx.node().name(), "': the gradient of shape ",
        grad.shape().DebugString(), " does not match variable '",
        variable.name(), "' of shape ", value.shape().DebugString()));
  }
  return absl::OkStatus();
}

// Updates `variable` and then each of `slots` in place (copy-on-write, see
// ResourceManager::UpdateVariableInPlace), each lock held until the end, and
// calls update(values) with the writable values: variable first. About ten
// element operations per element; big updates are split across threads.
template <size_t kSlots, typename Update>
absl::Status UpdateInPlace(KernelContext& ctx, const Tensor& grad,
                           const Node& variable,
                           std::array<const Node*, kSlots> slots,
                           Update update) {
  std::array<Tensor*, kSlots + 1> values{};
  // Locks the variables one after another (always variable, then slots in
  // order: no other op takes them in another order), then runs the update.
  auto lock_next = [&](auto& self, size_t i, Tensor& value) -> absl::Status {
    COSESSION_RETURN_IF_ERROR(
        CheckShape(ctx, i == 0 ? variable : *slots[i - 1], value, grad));
    values[i] = &value;
    if (i == kSlots) {
      ctx.ParallelFor(grad.NumElements(), 10, [&](int64_t begin, int64_t end) {
        update(values, begin, end - begin);
      });
      return absl::OkStatus();
    }
    return ctx.resources().UpdateVariableInPlace(
        *slots[i], [&](Tensor& next) { return self(self, i + 1, next); });
  };
  return ctx.resources().UpdateVariableInPlace(
      variable, [&](Tensor& value) { return lock_next(lock_next, 0, value); });
}

template <typename T>
auto Segment(Tensor* t, int64_t begin, int64_t len) {
  return MutableFlatMap<T>(*t).segment(begin, len);
}
template <typename T>
auto Segment(const Tensor& t, int64_t begin, int64_t len) {
  return FlatMap<T>(t).segment(begin, len);
}

// ---- ApplyGradientDescent: var -= lr * grad.
// Inputs: learning_rate, grad.
template <typename T>
absl::Status GradientDescent(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(T lr, ScalarInput<T>(ctx, 0, "learning_rate"));
  const Tensor& grad = ctx.input(1);
  return UpdateInPlace<0>(ctx, grad, VariableAttr(ctx, "variable"), {},
                          [&](auto& v, int64_t begin, int64_t len) {
                            Segment<T>(v[0], begin, len) -=
                                lr * Segment<T>(grad, begin, len);
                          });
}

// ---- ApplyMomentum: accum = momentum * accum + grad;
// var -= lr * accum, or with Nesterov var -= lr * (grad + momentum * accum).
// Inputs: learning_rate, momentum, grad.
template <typename T>
absl::Status Momentum(KernelContext& ctx) {
  COSESSION_ASSIGN_OR_RETURN(T lr, ScalarInput<T>(ctx, 0, "learning_rate"));
  COSESSION_ASSIGN_OR_RETURN(T momentum, ScalarInput<T>(ctx, 1, "momentum"));
  const Tensor& grad = ctx.input(2);
  const bool nesterov = ctx.node().attr<bool>("use_nesterov");
  return UpdateInPlace<1>(ctx, grad, VariableAttr(ctx, "variable"),
                          {&VariableAttr(ctx, "accumulation")},
                          [&](auto& v, int64_t begin, int64_t len) {
                            auto var = Segment<T>(v[0], begin, len);
                            auto accum = Segment<T>(v[1], begin, len);
                            auto g = Segment<T>(grad, begin, len);
                            accum = momentum * accum + g;
                            if (nesterov) {
                              var -= lr * (g + momentum * accum);
                            } else {
                              var -= lr * accum;
                            }
                          });
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
  return UpdateInPlace<2>(ctx, grad, VariableAttr(ctx, "variable"),
                          {&VariableAttr(ctx, "m"), &VariableAttr(ctx, "v")},
                          [&](auto& v, int64_t begin, int64_t len) {
                            auto var = Segment<T>(v[0], begin, len);
                            auto m = Segment<T>(v[1], begin, len);
                            auto vel = Segment<T>(v[2], begin, len);
                            auto g = Segment<T>(grad, begin, len);
                            m = beta1 * m + (T(1) - beta1) * g;
                            vel = beta2 * vel + (T(1) - beta2) * g.square();
                            var -= lr_t * m / (vel.sqrt() + epsilon);
                          });
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
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " ('", c.input(i).name(), "') is ",
                       DTypeName(c.input_dtype(i)), " but variable '",
                       variable.name(), "' is ", DTypeName(dtype)));
    }
  }
  for (int i = 0; i + 1 < c.num_inputs(); ++i) {
    if (c.input_shape(i).IsFullyDefined() &&
        c.input_shape(i).num_elements() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " ('", c.input(i).name(),
          "') must be a scalar, got shape ", c.input_shape(i).DebugString()));
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
    spec.attrs[role] =
        static_cast<int64_t>(CheckedVariable(variable, name, role)->id());
  }
  return Operation(g.AddNode(std::move(spec)));
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  auto must = [](absl::Status s) {
    if (!s.ok()) throw StatusError(std::move(s));
  };
  must(r.Register(
      {.name = "ApplyGradientDescent",
       .shape_fn = ApplyShape,
       .kernel = Dispatch<GradientDescent<float>, GradientDescent<double>>,
       .cost = ApplyCost,
       .stateful = true,
       .node_id_attrs = {"variable"}}));
  must(r.Register({.name = "ApplyMomentum",
                   .shape_fn = ApplyShape,
                   .kernel = Dispatch<Momentum<float>, Momentum<double>>,
                   .cost = ApplyCost,
                   .stateful = true,
                   .node_id_attrs = {"variable", "accumulation"}}));
  must(r.Register({.name = "ApplyAdam",
                   .shape_fn = ApplyShape,
                   .kernel = Dispatch<Adam<float>, Adam<double>>,
                   .cost = ApplyCost,
                   .stateful = true,
                   .node_id_attrs = {"variable", "m", "v"}}));
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
                  {learning_rate, momentum, grad}, std::move(attrs));
}

Operation ApplyAdam(Graph& g, Output variable, Output m, Output v,
                    Output beta1_power, Output beta2_power,
                    Output learning_rate, Output beta1, Output beta2,
                    Output epsilon, Output grad, std::string name) {
  const std::pair<const char*, Output> vars[] = {
      {"variable", variable}, {"m", m}, {"v", v}};
  return AddApply(
      g, "ApplyAdam", std::move(name), vars,
      {beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon, grad});
}

}  // namespace ops
}  // namespace cosession
