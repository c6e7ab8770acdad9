// Tests of Graph building: naming, lookup by name, finalization, build-time
// checks, shape inference, control edges, variables and their collections,
// the global step, node attrs, the op registry, and the graph seed.
#include "cosession/graph/graph.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor.h"
#include "tests/test_util.h"

namespace cosession::graph_test {
namespace {

using ::cosession::testing::StatusThrownBy;

std::vector<Node*> Nodes(absl::Span<Node* const> span) {
  return std::vector<Node*>(span.begin(), span.end());
}

absl::Status OkShape(InferenceContext&) { return absl::OkStatus(); }
absl::Status OkKernel(KernelContext&) { return absl::OkStatus(); }

// ---------------------------------------------------------------------- names

TEST(Graph, TakenNamesGetNumberedSuffixes) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "add");
  Output b = ops::Const(g, 2.0f, "add");
  Output c = ops::Const(g, 3.0f, "add");
  EXPECT_EQ(a.node()->name(), "add");
  EXPECT_EQ(b.node()->name(), "add_1");
  EXPECT_EQ(c.node()->name(), "add_2");
}

TEST(Graph, AnEmptyNameDefaultsToTheOpType) {
  Graph g;
  Output a = ops::Const(g, 1.0f);
  Output b = ops::Const(g, 2.0f);
  EXPECT_EQ(a.node()->name(), "Const");
  EXPECT_EQ(b.node()->name(), "Const_1");
  EXPECT_EQ(a.node()->type(), "Const");
}

TEST(Graph, SuffixesSkipNamesTakenExplicitly) {
  Graph g;
  Output explicit_one = ops::Const(g, 1.0f, "x_1");
  Output x = ops::Const(g, 2.0f, "x");
  Output x_again = ops::Const(g, 3.0f, "x");
  EXPECT_EQ(explicit_one.node()->name(), "x_1");
  EXPECT_EQ(x.node()->name(), "x");
  EXPECT_EQ(x_again.node()->name(), "x_2");
}

TEST(Graph, AnExplicitNameEqualToAGeneratedOneIsSuffixedAgain) {
  Graph g;
  ops::Const(g, 1.0f, "y");
  Output generated = ops::Const(g, 2.0f, "y");
  Output explicit_dup = ops::Const(g, 3.0f, "y_1");
  EXPECT_EQ(generated.node()->name(), "y_1");
  EXPECT_EQ(explicit_dup.node()->name(), "y_1_1");
  EXPECT_EQ(g.FindNode("y_1"), generated.node());
  EXPECT_EQ(g.FindNode("y_1_1"), explicit_dup.node());
}

TEST(Graph, NodeIdsAreSequentialAndIndexTheGraph) {
  Graph g;
  Output a = ops::Const(g, 1.0f);
  Output b = ops::Identity(g, a);
  EXPECT_EQ(g.num_nodes(), 2);
  EXPECT_EQ(a.node()->id(), 0);
  EXPECT_EQ(b.node()->id(), 1);
  EXPECT_EQ(g.node(1), b.node());
  EXPECT_EQ(&b.node()->graph(), &g);
}

TEST(Graph, OutputNameIsOpColonIndex) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "a");
  EXPECT_EQ(a.name(), "a:0");
  EXPECT_EQ(Operation(a.node()).name(), "a");
}

// --------------------------------------------------------------------- lookup

TEST(Graph, FindOutputByOpNameIsOutputZero) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "op");
  auto found = g.FindOutput("op");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, a);
  EXPECT_EQ(found->index(), 0);
}

TEST(Graph, FindOutputByOpColonIndex) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "op");
  auto found = g.FindOutput("op:0");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, a);
}

TEST(Graph, FindOutputWithAnIndexOutOfRangeIsNotFoundNamingTheTensor) {
  Graph g;
  ops::Const(g, 1.0f, "op");
  auto found = g.FindOutput("op:1");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(found.status().message(), "'op:1'"))
      << found.status();
}

TEST(Graph, FindOutputWithANegativeIndexIsNotFound) {
  Graph g;
  ops::Const(g, 1.0f, "op");
  EXPECT_EQ(g.FindOutput("op:-1").status().code(), absl::StatusCode::kNotFound);
}

TEST(Graph, FindOutputWithAMalformedIndexIsInvalidArgument) {
  Graph g;
  ops::Const(g, 1.0f, "op");
  for (const char* name : {"op:x", "op:", "op:1x", "op: 1"}) {
    auto found = g.FindOutput(name);
    EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_TRUE(absl::StrContains(found.status().message(), name))
        << found.status();
  }
}

TEST(Graph, FindOutputOfAnUnknownOpIsNotFound) {
  Graph g;
  ops::Const(g, 1.0f, "op");
  auto found = g.FindOutput("nope:0");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(found.status().message(), "nope"))
      << found.status();
}

TEST(Graph, FindOperationReturnsTheNamedOp) {
  Graph g;
  Operation noop = ops::NoOp(g, {}, "step");
  auto found = g.FindOperation("step");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, noop);
  EXPECT_EQ(found->name(), "step");
}

TEST(Graph, FindOperationOfAnUnknownOpIsNotFound) {
  Graph g;
  auto found = g.FindOperation("missing");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(found.status().message(), "missing"))
      << found.status();
}

TEST(Graph, FindNodeOfAnUnknownNameIsNull) {
  Graph g;
  ops::Const(g, 1.0f, "a");
  EXPECT_EQ(g.FindNode("b"), nullptr);
  EXPECT_NE(g.FindNode("a"), nullptr);
}

// ------------------------------------------------------------- build failures

TEST(Graph, AddingAfterFinalizeThrowsNamingTheOp) {
  Graph g;
  ops::Const(g, 1.0f, "before");
  g.Finalize();
  EXPECT_TRUE(g.finalized());
  absl::Status status = StatusThrownBy([&] { ops::Const(g, 2.0f, "late"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), "'late'")) << status;
  EXPECT_EQ(g.num_nodes(), 1);
}

TEST(Graph, AddingToACollectionAfterFinalizeThrows) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "a");
  g.Finalize();
  absl::Status status =
      StatusThrownBy([&] { g.AddToCollection("mine", a.node()); });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(g.GetCollection("mine").empty());
}

TEST(Graph, AssigningAnInt32ValueToAFloatVariableThrowsNamingTheOp) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<float>(1.0f), "v");
  Output one = ops::Const(g, int32_t{1}, "one");
  const int nodes = g.num_nodes();
  absl::Status status =
      StatusThrownBy([&] { ops::Assign(g, v, one, "bad_assign"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "'bad_assign'")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "int32")) << status;
  EXPECT_EQ(g.num_nodes(), nodes);
}

TEST(Graph, AssigningToSomethingOtherThanAVariableThrows) {
  Graph g;
  Output c = ops::Const(g, 1.0f, "c");
  absl::Status status = StatusThrownBy([&] { ops::Assign(g, c, c, "set"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "'set'")) << status;
}

TEST(Graph, AssigningAValueOfAnIncompatibleShapeThrows) {
  Graph g;
  Output v = ops::Variable(g, Tensor::FromVector<float>({1, 2}), "v");
  Output three = ops::Const(g, Tensor::FromVector<float>({1, 2, 3}));
  absl::Status status = StatusThrownBy([&] { ops::Assign(g, v, three); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[3]")) << status;
}

TEST(Graph, AnInputFromAnotherGraphThrows) {
  Graph a;
  Graph b;
  Output x = ops::Const(a, 1.0f, "x");
  absl::Status status = StatusThrownBy([&] { ops::Identity(b, x, "id"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "another graph")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "'id'")) << status;
  EXPECT_EQ(b.num_nodes(), 0);
}

TEST(Graph, AControlInputFromAnotherGraphThrows) {
  Graph a;
  Graph b;
  Operation step = ops::NoOp(a, {}, "step");
  absl::Status status = StatusThrownBy([&] { ops::NoOp(b, {step}, "after"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.num_nodes(), 0);
}

TEST(Graph, AnEmptyInputThrows) {
  Graph g;
  absl::Status status = StatusThrownBy([&] { ops::Identity(g, Output()); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(Graph, AnInputIndexBeyondTheOpsOutputsThrows) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "a");
  absl::Status status =
      StatusThrownBy([&] { ops::Identity(g, Output(a.node(), 1)); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.num_nodes(), 1);
}

TEST(Graph, AnUnknownOpTypeThrowsNotFound) {
  Graph g;
  absl::Status status =
      StatusThrownBy([&] { g.AddNode({.op = "NoSuchOp", .name = "mystery"}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "NoSuchOp")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "'mystery'")) << status;
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(Graph, AWrongInputCountThrows) {
  Graph g;
  absl::Status status =
      StatusThrownBy([&] { g.AddNode({.op = "Identity", .name = "lonely"}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "'lonely'")) << status;
}

TEST(Graph, AnInferredShapeWithADimBelowMinusOneThrows) {
  Graph g;
  absl::Status status = StatusThrownBy([&] {
    ops::Placeholder(g, DType::kFloat, TensorShape{-2, 3}, "p");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(Graph, AFailedAddDoesNotTakeTheName) {
  Graph g;
  EXPECT_THROW(g.AddNode({.op = "NoSuchOp", .name = "n"}), StatusError);
  Output n = ops::Const(g, 1.0f, "n");
  EXPECT_EQ(n.node()->name(), "n");
}

// ------------------------------------------------------------ shape inference

TEST(Graph, ShapeInferenceKeepsUnknownDims) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{kUnknownDim, 3});
  Output y = ops::Identity(g, x);
  EXPECT_EQ(y.dtype(), DType::kFloat);
  EXPECT_EQ(y.shape(), TensorShape({kUnknownDim, 3}));
  EXPECT_EQ(y.shape().DebugString(), "[?,3]");
}

TEST(Graph, ShapeInferenceKeepsUnknownRank) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kInt64);
  Output y = ops::Identity(g, x);
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_TRUE(x.shape().unknown_rank());
  EXPECT_TRUE(y.shape().unknown_rank());
}

TEST(Graph, ConstOutputHasTheValuesDTypeAndShape) {
  Graph g;
  Output c = ops::Const(
      g, Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, TensorShape{2, 3}));
  EXPECT_EQ(c.dtype(), DType::kInt32);
  EXPECT_EQ(c.shape(), TensorShape({2, 3}));
  EXPECT_EQ(c.node()->num_outputs(), 1);
  EXPECT_EQ(c.node()->num_inputs(), 0);
}

TEST(Graph, IdentityRecordsItsDataInput) {
  Graph g;
  Output x = ops::Const(g, 1.0f);
  Output y = ops::Identity(g, x);
  ASSERT_EQ(y.node()->num_inputs(), 1);
  EXPECT_EQ(y.node()->input(0), x);
  EXPECT_TRUE(y.node()->control_inputs().empty());
}

// --------------------------------------------------------------- control edges

TEST(Graph, NoOpRecordsItsControlInputsInOrder) {
  Graph g;
  Operation a = ops::NoOp(g, {}, "a");
  Operation b = ops::NoOp(g, {}, "b");
  Operation after = ops::NoOp(g, {b, a}, "after");
  EXPECT_EQ(Nodes(after.node()->control_inputs()),
            (std::vector<Node*>{b.node(), a.node()}));
  EXPECT_EQ(after.node()->num_outputs(), 0);
  EXPECT_EQ(after.node()->num_inputs(), 0);
  EXPECT_EQ(after.node()->type(), "NoOp");
}

TEST(Graph, GroupIsANoOpWithTheOpsAsControlInputs) {
  Graph g;
  Output c = ops::Const(g, 1.0f, "c");
  Operation n = ops::NoOp(g, {}, "n");
  Operation group = ops::Group(g, {Operation(c.node()), n});
  EXPECT_EQ(group.node()->type(), "NoOp");
  EXPECT_EQ(group.name(), "group_deps");
  EXPECT_EQ(Nodes(group.node()->control_inputs()),
            (std::vector<Node*>{c.node(), n.node()}));
}

TEST(Graph, WithControlDependenciesReturnsAnIdentityWithThoseControlInputs) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, TensorShape{2}, "x");
  Operation first = ops::NoOp(g, {}, "first");
  Operation second = ops::NoOp(g, {}, "second");
  Output y = ops::WithControlDependencies(g, {first, second}, x, "y");
  EXPECT_EQ(y.node()->type(), "Identity");
  EXPECT_EQ(y.node()->name(), "y");
  ASSERT_EQ(y.node()->num_inputs(), 1);
  EXPECT_EQ(y.node()->input(0), x);
  EXPECT_EQ(Nodes(y.node()->control_inputs()),
            (std::vector<Node*>{first.node(), second.node()}));
  EXPECT_EQ(y.dtype(), DType::kDouble);
  EXPECT_EQ(y.shape(), TensorShape({2}));
}

// ------------------------------------------------------------------ variables

TEST(Graph, VariableHasTheInitialValuesDTypeAndShape) {
  Graph g;
  Output v = ops::Variable(g, Tensor::FromVector<double>({1, 2, 3}), "w");
  EXPECT_EQ(v.node()->type(), "Variable");
  EXPECT_EQ(v.node()->name(), "w");
  EXPECT_EQ(v.dtype(), DType::kDouble);
  EXPECT_EQ(v.shape(), TensorShape({3}));
  EXPECT_TRUE(v.node()->op_def().stateful);
}

TEST(Graph, VariableInitializerIsAnAssignOfTheInitialValue) {
  Graph g;
  Output initial = ops::Const(g, 5.0f, "five");
  Output v = ops::Variable(g, initial, "v");
  Operation init = ops::VariableInitializer(v);
  EXPECT_EQ(init.node()->type(), "Assign");
  EXPECT_EQ(init.name(), "v/Assign");
  ASSERT_EQ(init.node()->num_inputs(), 1);
  EXPECT_EQ(init.node()->input(0), initial);
  EXPECT_EQ(init.node()->attr<int64_t>("variable"), v.node()->id());
}

TEST(Graph, VariableInitializerOfANonVariableThrowsNotFound) {
  Graph g;
  Output c = ops::Const(g, 1.0f, "c");
  absl::Status status = StatusThrownBy([&] { ops::VariableInitializer(c); });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST(Graph, VariablesAreCollectedInCreationOrder) {
  Graph g;
  Output a = ops::Variable(g, Tensor::Scalar<float>(1.0f), "a");
  ops::Const(g, 2.0f, "not_a_variable");
  Output b = ops::Variable(g, Tensor::Scalar<int32_t>(2), "b");
  EXPECT_EQ(Nodes(g.GetCollection(kVariablesCollection)),
            (std::vector<Node*>{a.node(), b.node()}));
  EXPECT_EQ(Nodes(g.GetCollection(kVariableInitializersCollection)),
            (std::vector<Node*>{ops::VariableInitializer(a).node(),
                                ops::VariableInitializer(b).node()}));
}

TEST(Graph, AnUnknownCollectionIsEmpty) {
  Graph g;
  EXPECT_TRUE(g.GetCollection("nothing here").empty());
  EXPECT_TRUE(g.GetCollection(kVariablesCollection).empty());
}

TEST(Graph, AddToCollectionAppendsUnderTheKey) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "a");
  Output b = ops::Const(g, 2.0f, "b");
  g.AddToCollection("mine", b.node());
  g.AddToCollection("mine", a.node());
  EXPECT_EQ(Nodes(g.GetCollection("mine")),
            (std::vector<Node*>{b.node(), a.node()}));
}

TEST(Graph, GlobalVariablesInitializerControlInputsAreExactlyTheInitializers) {
  Graph g;
  Output a = ops::Variable(g, Tensor::Scalar<float>(1.0f), "a");
  Output b = ops::Variable(g, Tensor::FromVector<int64_t>({1, 2}), "b");
  ops::Const(g, 3.0f, "unrelated");
  Operation init = GlobalVariablesInitializer(g);
  EXPECT_EQ(init.node()->type(), "NoOp");
  EXPECT_EQ(Nodes(init.node()->control_inputs()),
            (std::vector<Node*>{ops::VariableInitializer(a).node(),
                                ops::VariableInitializer(b).node()}));
}

TEST(Graph, GlobalVariablesInitializerInitializesTheVariables) {
  Graph g;
  Output v = ops::Variable(g, Tensor::FromVector<int32_t>({4, 5}), "v");
  auto value = testing::EvalOne(g, v);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->IsSameAs(Tensor::FromVector<int32_t>({4, 5})))
      << value->DebugString();
}

TEST(Graph, GetOrCreateGlobalStepCreatesAnInt64ScalarVariable) {
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  EXPECT_EQ(step.node()->name(), "global_step");
  EXPECT_EQ(step.node()->type(), "Variable");
  EXPECT_EQ(step.dtype(), DType::kInt64);
  EXPECT_EQ(step.shape(), TensorShape());
  EXPECT_EQ(Nodes(g.GetCollection(kVariablesCollection)),
            (std::vector<Node*>{step.node()}));
}

TEST(Graph, GetOrCreateGlobalStepStartsAtZero) {
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  auto value = testing::EvalOne(g, step);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->scalar<int64_t>(), 0);
}

TEST(Graph, GetOrCreateGlobalStepReturnsTheSameVariableTwice) {
  Graph g;
  Output first = GetOrCreateGlobalStep(g);
  const int nodes = g.num_nodes();
  Output second = GetOrCreateGlobalStep(g);
  EXPECT_EQ(second, first);
  EXPECT_EQ(g.num_nodes(), nodes);
  EXPECT_EQ(g.GetCollection(kVariablesCollection).size(), 1u);
}

TEST(Graph, GetOrCreateGlobalStepOnAFinalizedGraphWithoutOneThrows) {
  Graph g;
  g.Finalize();
  absl::Status status = StatusThrownBy([&] { GetOrCreateGlobalStep(g); });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(Graph, GetOrCreateGlobalStepOnAFinalizedGraphWithOneReturnsIt) {
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  g.Finalize();
  EXPECT_EQ(GetOrCreateGlobalStep(g), step);
}

TEST(Graph, GetOrCreateGlobalStepRejectsANonVariableNamedGlobalStep) {
  Graph g;
  ops::Const(g, int64_t{0}, "global_step");
  absl::Status status = StatusThrownBy([&] { GetOrCreateGlobalStep(g); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------- attrs

TEST(Graph, NodeAttrReturnsAStoredAttr) {
  Graph g;
  Output p = ops::Placeholder(g, DType::kInt32, TensorShape{4}, "p");
  EXPECT_EQ(p.node()->attr<DType>("dtype"), DType::kInt32);
  EXPECT_EQ(p.node()->attr<TensorShape>("shape"), TensorShape({4}));
}

TEST(Graph, NodeAttrOfAMissingAttrThrowsNamingIt) {
  Graph g;
  Output c = ops::Const(g, 1.0f, "c");
  absl::Status status =
      StatusThrownBy([&] { (void)c.node()->attr<int64_t>("no_such_attr"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "no_such_attr")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "'c'")) << status;
}

TEST(Graph, NodeAttrOfTheWrongTypeThrows) {
  Graph g;
  Output c = ops::Const(g, 1.0f, "c");
  EXPECT_NE(c.node()->FindAttr<Tensor>("value"), nullptr);
  EXPECT_EQ(c.node()->FindAttr<int64_t>("value"), nullptr);
  EXPECT_THROW((void)c.node()->attr<int64_t>("value"), StatusError);
}

// ------------------------------------------------------------------- registry

TEST(GraphOpRegistry, RegisteringADuplicateNameIsAlreadyExists) {
  absl::Status status = OpRegistry::Global().Register(
      {.name = "Identity", .shape_fn = OkShape, .kernel = OkKernel});
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(status.message(), "Identity")) << status;
}

TEST(GraphOpRegistry, RegisteringADefWithoutAKernelIsInvalidArgument) {
  absl::Status status = OpRegistry::Global().Register(
      {.name = "GraphTestNoKernel", .shape_fn = OkShape});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpRegistry::Global().Find("GraphTestNoKernel"), nullptr);
}

TEST(GraphOpRegistry, RegisteringADefWithBothKernelsIsInvalidArgument) {
  absl::Status status = OpRegistry::Global().Register(
      {.name = "GraphTestBothKernels",
       .shape_fn = OkShape,
       .kernel = OkKernel,
       .async_kernel = std::make_shared<const AsyncKernel>()});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpRegistry::Global().Find("GraphTestBothKernels"), nullptr);
}

TEST(GraphOpRegistry, RegisteringADefWithoutANameOrShapeFnIsInvalidArgument) {
  EXPECT_EQ(OpRegistry::Global()
                .Register({.shape_fn = OkShape, .kernel = OkKernel})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpRegistry::Global()
                .Register({.name = "GraphTestNoShapeFn", .kernel = OkKernel})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpRegistry::Global().Find("GraphTestNoShapeFn"), nullptr);
}

TEST(GraphOpRegistry, FindReturnsCoreOpsAndNullForUnknownOnes) {
  const OpDef* identity = OpRegistry::Global().Find("Identity");
  ASSERT_NE(identity, nullptr);
  EXPECT_EQ(identity->name, "Identity");
  EXPECT_EQ(OpRegistry::Global().Find("NoSuchOp"), nullptr);
}

// "GraphTestDouble": y = 2 * x for float x. Registered once per process (the
// registry is global), so the tests also pass with --gtest_repeat.
absl::Status RegisterDoubleOp() {
  static const absl::Status status = OpRegistry::Global().Register(
      {.name = "GraphTestDouble",
       .shape_fn = [](InferenceContext& c) -> absl::Status {
         COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
         if (c.input_dtype(0) != DType::kFloat) {
           return absl::InvalidArgumentError("expects a float input");
         }
         c.AddOutput(DType::kFloat, c.input_shape(0));
         return absl::OkStatus();
       },
       .kernel = [](KernelContext& ctx) -> absl::Status {
         const Tensor& x = ctx.input(0);
         Tensor y = Tensor::Allocate(DType::kFloat, x.shape());
         auto in = x.flat<float>();
         auto out = y.mutable_flat<float>();
         for (size_t i = 0; i < in.size(); ++i) out[i] = 2 * in[i];
         ctx.set_output(0, std::move(y));
         return absl::OkStatus();
       }});
  return status;
}

TEST(GraphOpRegistry, ACustomOpRunsThroughASession) {
  ASSERT_TRUE(RegisterDoubleOp().ok()) << RegisterDoubleOp();
  Graph g;
  Output x = ops::Const(g, Tensor::FromVector<float>({1, 2.5f, -3}));
  Output y(
      g.AddNode({.op = "GraphTestDouble", .name = "double", .inputs = {x}}), 0);
  EXPECT_EQ(y.node()->type(), "GraphTestDouble");
  EXPECT_EQ(y.shape(), TensorShape({3}));
  auto value = testing::EvalOne(g, y);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->IsSameAs(Tensor::FromVector<float>({2, 5, -6})))
      << value->DebugString();
}

TEST(GraphOpRegistry, ACustomOpsShapeFunctionErrorThrowsNamingTheOp) {
  ASSERT_TRUE(RegisterDoubleOp().ok()) << RegisterDoubleOp();
  Graph g;
  Output x = ops::Const(g, int32_t{1});
  absl::Status status = StatusThrownBy([&] {
    g.AddNode({.op = "GraphTestDouble", .name = "twice", .inputs = {x}});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "'twice'")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "expects a float input"))
      << status;
}

// ----------------------------------------------------------------------- seed

TEST(Graph, SeedIsUnsetByDefault) {
  Graph g;
  EXPECT_FALSE(g.seed().has_value());
}

TEST(Graph, SetSeedIsReturnedBySeed) {
  Graph g;
  g.set_seed(1234);
  ASSERT_TRUE(g.seed().has_value());
  EXPECT_EQ(*g.seed(), 1234);
  g.set_seed(-5);
  EXPECT_EQ(g.seed(), -5);
}

}  // namespace
}  // namespace cosession::graph_test
