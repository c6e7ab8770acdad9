// Buffer forwarding (KernelContext::ForwardInputOrAllocateOutput,
// graph/kernel.h): an elementwise op writes its output into an input's buffer
// only when nothing else can see that input -- never into a fetched value, a
// value another op reads, a feed the caller still holds, or a variable's value.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "cosession/async/session.h"
#include "cosession/graph/kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/resource_manager.h"
#include "cosession/graph/status.h"
#include "tests/test_util.h"

namespace cosession {
namespace {

Tensor Floats(std::vector<float> values) {
  Tensor t = Tensor::Allocate(DType::kFloat,
                              TensorShape{static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    t.mutable_flat<float>()[i] = values[i];
  }
  return t;
}

std::vector<float> ValuesOf(const Tensor& t) {
  auto flat = t.flat<float>();
  return std::vector<float>(flat.begin(), flat.end());
}

// A context over `inputs` (non-const tensors, as the executor's slots are)
// whose exclusive inputs are `exclusive`.
struct ContextFor {
  ContextFor(std::vector<Tensor>& inputs, uint32_t exclusive) {
    for (Tensor& t : inputs) pointers.push_back(&t);
    Output x = ops::Const(g, 1.0f);
    node = x.node();
    ctx.emplace(*node, pointers, &output, resources, nullptr, nullptr,
                exclusive);
  }
  Graph g;
  const Node* node = nullptr;
  std::vector<const Tensor*> pointers;
  Tensor output;
  ResourceManager resources;
  std::optional<KernelContext> ctx;
};

TEST(ForwardInputOrAllocateOutput, TakesAnExclusiveUnsharedInputOfTheSameKind) {
  std::vector<Tensor> inputs = {Floats({1, 2}), Floats({3, 4})};
  const void* second = inputs[1].raw_data();
  ContextFor c(inputs, /*exclusive=*/0b10);
  const Tensor& out =
      c.ctx->ForwardInputOrAllocateOutput({0, 1}, 0, DType::kFloat, inputs[0]);
  EXPECT_EQ(out.raw_data(), second);  // input 1: input 0 is not exclusive
  EXPECT_EQ(ValuesOf(out), (std::vector<float>{3, 4}));
  EXPECT_FALSE(inputs[1].IsInitialized());  // taken, left empty
  EXPECT_EQ(ValuesOf(inputs[0]), (std::vector<float>{1, 2}));
}

TEST(ForwardInputOrAllocateOutput, AllocatesWhenNoInputMayBeTaken) {
  std::vector<Tensor> inputs = {Floats({1, 2}), Floats({1, 2, 3}),
                                Tensor::Allocate(DType::kInt32, {2})};
  const Tensor held = inputs[0];  // a second holder of input 0's buffer
  ContextFor c(inputs, /*exclusive=*/0b111);
  const Tensor& out = c.ctx->ForwardInputOrAllocateOutput(
      {0, 1, 2}, 0, DType::kFloat, inputs[0]);
  // 0 is shared, 1 has another shape, 2 another dtype.
  EXPECT_FALSE(out.SharesBufferWith(inputs[0]));
  EXPECT_FALSE(out.SharesBufferWith(inputs[1]));
  EXPECT_FALSE(out.SharesBufferWith(inputs[2]));
  EXPECT_EQ(out.shape(), (TensorShape{2}));
  EXPECT_EQ(out.dtype(), DType::kFloat);
  EXPECT_EQ(ValuesOf(held), (std::vector<float>{1, 2}));
  EXPECT_TRUE(inputs[0].SharesBufferWith(held));
}

TEST(ForwardInputOrAllocateOutput, NeverTakesAnInputThatIsNotExclusive) {
  std::vector<Tensor> inputs = {Floats({5})};
  const void* data = inputs[0].raw_data();
  ContextFor c(inputs, /*exclusive=*/0);
  const Tensor& out =
      c.ctx->ForwardInputOrAllocateOutput({0}, 0, DType::kFloat, inputs[0]);
  EXPECT_NE(out.raw_data(), data);
  EXPECT_EQ(ValuesOf(inputs[0]), (std::vector<float>{5}));
}

// "TestForwardProbe": copies its input to its output through
// ForwardInputOrAllocateOutput and counts the runs in which it got the input's
// buffer.
std::atomic<int> probe_forwards{0};

Output ForwardProbe(Graph& g, Output x) {
  static const bool registered = [] {
    ThrowIfError(OpRegistry::Global().Register(
        {.name = "TestForwardProbe",
         .shape_fn =
             [](InferenceContext& c) {
               c.AddOutput(c.input_dtype(0), c.input_shape(0));
               return absl::OkStatus();
             },
         .kernel =
             [](KernelContext& ctx) {
               const Tensor& in = ctx.input(0);
               const void* data = in.raw_data();
               const size_t bytes = in.TotalBytes();
               Tensor& out =
                   ctx.ForwardInputOrAllocateOutput({0}, 0, in.dtype(), in);
               if (out.raw_data() == data) {
                 ++probe_forwards;
               } else {
                 std::memcpy(out.raw_data(), data, bytes);
               }
               return absl::OkStatus();
             }}));
    return true;
  }();
  (void)registered;
  return Output(g.AddNode({"TestForwardProbe", "", {std::move(x)}, {}, {}}), 0);
}

// In a run: an op that is the only reader of a value of the run's own
// gets its buffer; one whose input is also read elsewhere or fetched
// does not. And the arithmetic of a forwarding chain stays right.
TEST(BufferForwarding, AnOpGetsTheBufferOfAValueOnlyItReads) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output negated = ops::Neg(g, x);  // a buffer of the run's own
  Output alone = ForwardProbe(g, negated);
  Output twice = ops::Neg(g, x);
  Output shared = ForwardProbe(g, twice);
  Output also_reads = ops::Relu(g, twice);
  Output fetched = ops::Neg(g, x);
  Output of_fetched = ForwardProbe(g, fetched);

  probe_forwards = 0;
  auto first = testing::Eval(g, {alone}, {{x, Floats({1, 2})}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(ValuesOf((*first)[0]), (std::vector<float>{-1, -2}));
  EXPECT_EQ(probe_forwards, 1);

  probe_forwards = 0;
  auto second = testing::Eval(g, {shared, also_reads, of_fetched, fetched},
                              {{x, Floats({1, -2})}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(probe_forwards, 0);
  EXPECT_EQ(ValuesOf((*second)[0]), (std::vector<float>{-1, 2}));
  EXPECT_EQ(ValuesOf((*second)[1]), (std::vector<float>{0, 2}));
  EXPECT_EQ(ValuesOf((*second)[2]), (std::vector<float>{-1, 2}));
  EXPECT_EQ(ValuesOf((*second)[3]), (std::vector<float>{-1, 2}));
}

TEST(BufferForwarding, AChainOfElementwiseOpsComputesTheSameValues) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output bias = ops::Const(g, Floats({10, 20, 30}));
  Output y = ops::Relu(g, ops::Add(g, ops::Neg(g, x), ops::Const(g, 10.0f)));
  Output z = ops::Mul(g, ops::Add(g, bias, ops::Neg(g, x)), y);
  auto values = testing::Eval(g, {y, z}, {{x, Floats({1, 2, 30})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(ValuesOf((*values)[0]), (std::vector<float>{9, 8, 0}));
  EXPECT_EQ(ValuesOf((*values)[1]), (std::vector<float>{81, 144, 0}));
}

TEST(BufferForwarding, AFeedTheCallerStillHoldsIsNotWritten) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output y = ops::Neg(g, x);
  const Tensor feed = Floats({1, 2});
  auto values = testing::Eval(g, {y}, {{x, feed}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(ValuesOf((*values)[0]), (std::vector<float>{-1, -2}));
  EXPECT_EQ(ValuesOf(feed), (std::vector<float>{1, 2}));
}

TEST(BufferForwarding, AFetchedValueIsNotOverwrittenByItsReader) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output doubled = ops::Mul(g, x, ops::Const(g, 2.0f));
  Output y = ops::Neg(g, doubled);
  auto values = testing::Eval(g, {doubled, y}, {{x, Floats({1, 2})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(ValuesOf((*values)[0]), (std::vector<float>{2, 4}));
  EXPECT_EQ(ValuesOf((*values)[1]), (std::vector<float>{-2, -4}));
}

TEST(BufferForwarding, AValueWithTwoReadersIsWrittenByNeither) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output shared = ops::Neg(g, x);
  Output a = ops::Add(g, shared, ops::Const(g, 1.0f));
  Output b = ops::Relu(g, shared);
  Output sum = ops::Add(g, shared, shared);  // one op reading it twice
  auto values = testing::Eval(g, {a, b, sum}, {{x, Floats({1, -2})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(ValuesOf((*values)[0]), (std::vector<float>{0, 3}));
  EXPECT_EQ(ValuesOf((*values)[1]), (std::vector<float>{0, 2}));
  EXPECT_EQ(ValuesOf((*values)[2]), (std::vector<float>{-2, 4}));
}

// The variable's own read (its output) is Relu's alone in the plan, but
// the variable holds the buffer too: Relu must not write into it.
TEST(BufferForwarding, AVariablesValueIsNotWritten) {
  Graph g;
  Output v = ops::Variable(g, Floats({1, -2}), "v");
  Output y = ops::Neg(g, ops::Relu(g, v));
  Session session(g, testing::TestRuntime());
  ASSERT_TRUE(
      session.RunBlocking({.targets = {GlobalVariablesInitializer(g)}}).ok());
  auto first = session.RunBlocking({.fetches = {y}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(ValuesOf((*first)[0]), (std::vector<float>{-1, 0}));
  auto value = session.RunBlocking({.fetches = {v}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(ValuesOf((*value)[0]), (std::vector<float>{1, -2}));
}

}  // namespace
}  // namespace cosession
