// Core ops: Const, Placeholder, Identity, NoOp, Variable, Assign/AssignAdd/
// AssignSub, and the global-step and initializer helpers.
#include "absl/strings/str_cat.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

int64_t ZeroCost(const KernelContext&) { return 0; }

absl::Status ConstShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  COSESSION_ASSIGN_OR_RETURN(Tensor value, c.attr<Tensor>("value"));
  if (!value.IsInitialized()) {
    return absl::InvalidArgumentError("the value tensor is uninitialised");
  }
  c.AddOutput(value.dtype(), value.shape());
  return absl::OkStatus();
}

absl::Status DTypeAndShapeAttrs(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  COSESSION_ASSIGN_OR_RETURN(DType dtype, c.attr<DType>("dtype"));
  COSESSION_ASSIGN_OR_RETURN(TensorShape shape, c.attr<TensorShape>("shape"));
  c.AddOutput(dtype, std::move(shape));
  return absl::OkStatus();
}

absl::Status IdentityShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

absl::Status NoOutputs(InferenceContext& c) { return c.ExpectInputs(0, 0); }

// ReportUninitializedVariables: attr "num_variables" = how many of the
// "variables" collection it covers (those that existed when it was built).
absl::Status ReportUninitializedShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  COSESSION_ASSIGN_OR_RETURN(int64_t n, c.attr<int64_t>("num_variables"));
  c.AddOutput(DType::kBool, TensorShape({n}));
  return absl::OkStatus();
}

absl::Status ReportUninitializedKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  auto variables = node.graph().GetCollection(kVariablesCollection);
  const int64_t n = node.attr<int64_t>("num_variables");
  Tensor report(DType::kBool, TensorShape({n}));
  auto flags = report.mutable_flat<bool>();
  for (int64_t i = 0; i < n; ++i) {
    flags[i] = !ctx.resources().IsInitialized(*variables[i]);
  }
  ctx.set_output(0, std::move(report));
  return absl::OkStatus();
}

// Assign*: input 0 is the new value (or the delta); attr "variable" is the id
// of the Variable node, which the op updates without reading it as an input
// (so initialising a variable never requires its value).
absl::Status AssignShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_ASSIGN_OR_RETURN(int64_t id, c.attr<int64_t>("variable"));
  if (id < 0 || id >= c.graph().num_nodes() ||
      c.graph().node(static_cast<int>(id))->type() != "Variable") {
    return absl::InvalidArgumentError("the target is not a Variable");
  }
  const Node& variable = *c.graph().node(static_cast<int>(id));
  if (variable.output_dtype(0) != c.input_dtype(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", variable.name(), "' has dtype ",
        DTypeName(variable.output_dtype(0)), " but the value '",
        c.input(0).name(), "' has dtype ", DTypeName(c.input_dtype(0))));
  }
  if (!variable.output_shape(0).IsCompatibleWith(c.input_shape(0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", variable.name(), "' has shape ",
        variable.output_shape(0).DebugString(), " but the value '",
        c.input(0).name(), "' has shape ", c.input_shape(0).DebugString()));
  }
  c.AddOutput(variable.output_dtype(0), variable.output_shape(0));
  return absl::OkStatus();
}

const Node& TargetVariable(const KernelContext& ctx) {
  return *ctx.node().graph().node(
      static_cast<int>(ctx.node().attr<int64_t>("variable")));
}

absl::Status CheckAssignedShape(const Node& variable, const Tensor& current,
                                const Tensor& value) {
  if (current.shape() != value.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cannot update variable '", variable.name(), "' of shape ",
                     current.shape().DebugString(), " with a value of shape ",
                     value.shape().DebugString()));
  }
  return absl::OkStatus();
}

absl::Status AssignKernel(KernelContext& ctx) {
  const Node& variable = TargetVariable(ctx);
  const Tensor& value = ctx.input(0);
  if (!variable.output_shape(0).IsCompatibleWith(value.shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Cannot assign a value of shape ", value.shape().DebugString(),
        " to variable '", variable.name(), "' of shape ",
        variable.output_shape(0).DebugString()));
  }
  COSESSION_ASSIGN_OR_RETURN(
      Tensor updated,
      ctx.resources().UpdateVariable(
          variable,
          [&](const Tensor*) -> absl::StatusOr<Tensor> { return value; }));
  ctx.set_output(0, std::move(updated));
  return absl::OkStatus();
}

// Adds (or subtracts) in place: the variable's buffer when no one else holds
// it (ResourceManager::UpdateVariableInPlace), so that a step counter's
// increment allocates nothing. Everything is checked before the first write,
// which leaves the variable unchanged on error.
template <int kSign>
absl::Status AssignUpdateKernel(KernelContext& ctx) {
  const Node& variable = TargetVariable(ctx);
  const Tensor& delta = ctx.input(0);
  Tensor updated;
  COSESSION_RETURN_IF_ERROR(ctx.resources().UpdateVariableInPlace(
      variable, [&](Tensor& value) -> absl::Status {
        COSESSION_RETURN_IF_ERROR(CheckAssignedShape(variable, value, delta));
        absl::Status status = absl::OkStatus();
        VisitDType(value.dtype(), [&]<typename T>() {
          if constexpr (std::is_same_v<T, bool>) {
            status = absl::InvalidArgumentError(
                "AssignAdd/AssignSub on a bool variable");
          } else {
            auto out = value.mutable_flat<T>();
            auto b = delta.flat<T>();
            for (size_t i = 0; i < out.size(); ++i) {
              out[i] = kSign > 0 ? static_cast<T>(out[i] + b[i])
                                 : static_cast<T>(out[i] - b[i]);
            }
          }
        });
        COSESSION_RETURN_IF_ERROR(status);
        updated = value;
        return absl::OkStatus();
      }));
  ctx.set_output(0, std::move(updated));
  return absl::OkStatus();
}

Output AddAssign(Graph& g, const char* op, Output variable, Output value,
                 std::string name) {
  if (!variable.valid() || variable.node()->type() != "Variable") {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "Cannot add op '", name.empty() ? op : name, "' (", op, "): '",
        variable.valid() ? variable.name() : std::string("<empty>"),
        "' is not a Variable")));
  }
  NodeSpec spec{op, std::move(name), {value}, {}, {}};
  spec.attrs["variable"] = static_cast<int64_t>(variable.node()->id());
  return Output(g.AddNode(std::move(spec)), 0);
}

}  // namespace

void RegisterCoreOps(OpRegistry& r) {
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };
  must(r.Register({.name = "Const",
                   .shape_fn = ConstShape,
                   .kernel =
                       [](KernelContext& ctx) {
                         ctx.set_output(0, ctx.node().attr<Tensor>("value"));
                         return absl::OkStatus();
                       },
                   .cost = ZeroCost}));
  must(r.Register({.name = "Placeholder",
                   .shape_fn = DTypeAndShapeAttrs,
                   .kernel =
                       [](KernelContext& ctx) {
                         return absl::InvalidArgumentError(absl::StrCat(
                             "You must feed a value for placeholder tensor '",
                             ctx.node().name(), ":0'"));
                       },
                   .cost = ZeroCost}));
  must(r.Register({.name = "Identity",
                   .shape_fn = IdentityShape,
                   .kernel =
                       [](KernelContext& ctx) {
                         ctx.set_output(0, ctx.input(0));
                         return absl::OkStatus();
                       },
                   .cost = ZeroCost}));
  must(r.Register({.name = "NoOp",
                   .shape_fn = NoOutputs,
                   .kernel = [](KernelContext&) { return absl::OkStatus(); },
                   .cost = ZeroCost}));
  must(r.Register({.name = "Variable",
                   .shape_fn = DTypeAndShapeAttrs,
                   .kernel = [](KernelContext& ctx) -> absl::Status {
                     COSESSION_ASSIGN_OR_RETURN(
                         Tensor value,
                         ctx.resources().ReadVariable(ctx.node()));
                     ctx.set_output(0, std::move(value));
                     return absl::OkStatus();
                   },
                   .cost = ZeroCost,
                   .stateful = true}));
  must(r.Register({.name = "ReportUninitializedVariables",
                   .shape_fn = ReportUninitializedShape,
                   .kernel = ReportUninitializedKernel,
                   .cost = ZeroCost,
                   .stateful = true}));
  must(r.Register({.name = "Assign",
                   .shape_fn = AssignShape,
                   .kernel = AssignKernel,
                   .stateful = true,
                   .node_id_attrs = {"variable"}}));
  must(r.Register({.name = "AssignAdd",
                   .shape_fn = AssignShape,
                   .kernel = AssignUpdateKernel<+1>,
                   .stateful = true,
                   .node_id_attrs = {"variable"}}));
  must(r.Register({.name = "AssignSub",
                   .shape_fn = AssignShape,
                   .kernel = AssignUpdateKernel<-1>,
                   .stateful = true,
                   .node_id_attrs = {"variable"}}));
}

namespace ops {

Output Const(Graph& g, Tensor value, std::string name) {
  NodeSpec spec{"Const", std::move(name), {}, {}, {}};
  spec.attrs["value"] = std::move(value);
  return Output(g.AddNode(std::move(spec)), 0);
}

Output Placeholder(Graph& g, DType dtype, TensorShape shape, std::string name) {
  NodeSpec spec{"Placeholder", std::move(name), {}, {}, {}};
  spec.attrs["dtype"] = dtype;
  spec.attrs["shape"] = std::move(shape);
  return Output(g.AddNode(std::move(spec)), 0);
}

Output Identity(Graph& g, Output input, std::string name) {
  return Output(g.AddNode({"Identity", std::move(name), {input}, {}, {}}), 0);
}

Output WithControlDependencies(Graph& g, std::vector<Operation> dependencies,
                               Output input, std::string name) {
  return Output(
      g.AddNode(
          {"Identity", std::move(name), {input}, std::move(dependencies), {}}),
      0);
}

Operation NoOp(Graph& g, std::vector<Operation> control_inputs,
               std::string name) {
  return Operation(
      g.AddNode({"NoOp", std::move(name), {}, std::move(control_inputs), {}}));
}

Operation Group(Graph& g, std::vector<Operation> ops, std::string name) {
  return NoOp(g, std::move(ops), name.empty() ? "group_deps" : std::move(name));
}

Output Variable(Graph& g, Output initial_value, std::string name,
                bool trainable) {
  NodeSpec spec{
      "Variable", name.empty() ? "Variable" : std::move(name), {}, {}, {}};
  spec.attrs["dtype"] = initial_value.dtype();
  spec.attrs["shape"] = initial_value.shape();
  Node* variable = g.AddNode(std::move(spec));
  Output out(variable, 0);
  Output init = AddAssign(g, "Assign", out, initial_value,
                          absl::StrCat(variable->name(), "/Assign"));
  g.AddToCollection(kVariablesCollection, variable);
  g.AddToCollection(kVariableInitializersCollection, init.node());
  if (trainable && IsFloating(out.dtype())) {
    g.AddToCollection(kTrainableVariablesCollection, variable);
  }
  return out;
}

Output Variable(Graph& g, Tensor initial_value, std::string name,
                bool trainable) {
  const std::string base = name.empty() ? "Variable" : name;
  Output init = Const(g, std::move(initial_value), base + "/initial_value");
  return Variable(g, init, std::move(name), trainable);
}

Operation VariableInitializer(Output variable) {
  Graph& g = variable.node()->graph();
  for (Node* init : g.GetCollection(kVariableInitializersCollection)) {
    if (init->attr<int64_t>("variable") == variable.node()->id()) {
      return Operation(init);
    }
  }
  throw StatusError(absl::NotFoundError(
      absl::StrCat("'", variable.name(), "' has no initializer")));
}

Output Assign(Graph& g, Output variable, Output value, std::string name) {
  return AddAssign(g, "Assign", variable, value, std::move(name));
}
Output AssignAdd(Graph& g, Output variable, Output value, std::string name) {
  return AddAssign(g, "AssignAdd", variable, value, std::move(name));
}
Output AssignSub(Graph& g, Output variable, Output value, std::string name) {
  return AddAssign(g, "AssignSub", variable, value, std::move(name));
}

}  // namespace ops

Output GetOrCreateGlobalStep(Graph& g) {
  if (Node* existing = g.FindNode("global_step")) {
    if (existing->type() != "Variable" ||
        existing->output_dtype(0) != DType::kInt64) {
      throw StatusError(absl::InvalidArgumentError(
          "'global_step' exists but is not an int64 Variable"));
    }
    return Output(existing, 0);
  }
  return ops::Variable(g, Tensor::Scalar<int64_t>(0), "global_step");
}

absl::StatusOr<Output> GetGlobalStep(Graph& g) {
  Node* existing = g.FindNode("global_step");
  if (existing == nullptr) {
    return absl::NotFoundError(
        "the graph has no 'global_step' (call GetOrCreateGlobalStep when "
        "building it)");
  }
  if (existing->type() != "Variable" ||
      existing->output_dtype(0) != DType::kInt64) {
    return absl::InvalidArgumentError(
        "'global_step' exists but is not an int64 Variable");
  }
  return Output(existing, 0);
}

Output ReportUninitializedVariables(Graph& g, std::string name) {
  NodeSpec spec{
      "ReportUninitializedVariables",
      name.empty() ? "report_uninitialized_variables" : std::move(name),
      {},
      {},
      {}};
  spec.attrs["num_variables"] =
      static_cast<int64_t>(g.GetCollection(kVariablesCollection).size());
  return Output(g.AddNode(std::move(spec)), 0);
}

std::vector<std::string> UninitializedVariableNames(const Graph& g,
                                                    const Tensor& report) {
  std::vector<std::string> names;
  auto variables = g.GetCollection(kVariablesCollection);
  auto flags = report.flat<bool>();
  for (size_t i = 0; i < flags.size() && i < variables.size(); ++i) {
    if (flags[i]) names.push_back(variables[i]->name());
  }
  return names;
}

Operation GlobalVariablesInitializer(Graph& g) {
  std::vector<Operation> inits;
  for (Node* init : g.GetCollection(kVariableInitializersCollection)) {
    inits.emplace_back(init);
  }
  return ops::Group(g, std::move(inits), "init");
}

}  // namespace cosession
