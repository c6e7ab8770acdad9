// Tests of Gradients() (graph/gradients.h), the gradient functions of the
// core ops, the gradient helper ops and SparseSoftmaxCrossEntropyWithLogits.
//
// Every gradient function is checked against central finite differences in
// double precision: the symbolic gradient of sum(y * w) (w fixed weights fed
// as grad_ys) is compared with (f(x + eps) - f(x - eps)) / (2 eps) for every
// input element. The graph tests check what Gradients() builds (pruning, no
// needless reductions), the error tests what it refuses.
#include "cosession/graph/gradients.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/resource_manager.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor.h"
#include "tests/test_util.h"

namespace cosession::gradients_test {
namespace {

using testing::CostOf;

using ::cosession::testing::StatusThrownBy;
using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

Tensor D(std::vector<double> values, TensorShape shape) {
  return Tensor::FromVector<double>(values, std::move(shape));
}

// Distinct values spread over [lo, hi], in a scrambled order (so that a
// max or a relu kink is never at a tie and rows differ).
Tensor Spread(TensorShape shape, double lo = -1.5, double hi = 1.5) {
  Tensor t = Tensor::Allocate(DType::kDouble, shape);
  auto values = t.mutable_flat<double>();
  const size_t n = values.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t slot = (k * 7 + 3) % n;  // a permutation when gcd(7, n) = 1
    values[k] = n == 1 ? (lo + hi) / 2 : lo + (hi - lo) * slot / (n - 1);
  }
  if (n % 7 == 0) {
    for (size_t k = 0; k < n; ++k) values[k] = lo + (hi - lo) * k / (n - 1);
  }
  return t;
}

AssertionResult MessageContains(const absl::Status& status,
                                std::string_view part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return AssertionSuccess();
  }
  return AssertionFailure()
         << "'" << status.message() << "' lacks '" << part << "'";
}

// `t` holds `want` (doubles, within `tolerance` relative to max(1, |want|)).
AssertionResult Near(const Tensor& t, const std::vector<double>& want,
                     double tolerance = 1e-12) {
  if (t.dtype() != DType::kDouble) {
    return AssertionFailure() << "dtype " << DTypeName(t.dtype());
  }
  auto got = t.flat<double>();
  if (got.size() != want.size()) {
    return AssertionFailure() << got.size() << " values, want " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(got[i] - want[i]) >
        tolerance * std::max(1.0, std::abs(want[i]))) {
      return AssertionFailure()
             << "value " << i << " is " << got[i] << ", want " << want[i]
             << " in " << t.DebugString(32);
    }
  }
  return AssertionSuccess();
}

// ------------------------------------------------- finite-difference checks

// One input of a gradient check, fed through a placeholder.
struct GradInput {
  Tensor value;
  // The placeholder's declared shape (partial shapes test the run-time
  // paths); unset = the value's shape.
  std::optional<TensorShape> declared = std::nullopt;
  // Checked when it is floating; integer inputs (labels) are only fed.
  bool wrt = true;
};

using BuildFn = std::function<Output(Graph&, const std::vector<Output>&)>;

// Fixed weights for grad_ys: none zero, both signs, not all equal (a
// softmax's gradient against uniform weights would be zero).
Tensor Weights(const TensorShape& shape) {
  Tensor w = Tensor::Allocate(DType::kDouble, shape);
  auto values = w.mutable_flat<double>();
  for (size_t k = 0; k < values.size(); ++k) {
    values[k] = (k % 2 == 0 ? 1.0 : -1.0) * (0.5 + 0.25 * (k % 5));
  }
  return w;
}

// Builds y = build(placeholders) on double inputs, takes the symbolic
// gradients of sum(y * w) w.r.t. the checked inputs, and compares each
// element with a central difference (step `eps`), relative to
// max(1, |difference|).
AssertionResult GradientsMatchFiniteDifferences(std::vector<GradInput> inputs,
                                                const BuildFn& build,
                                                double tolerance = 1e-6,
                                                double eps = 1e-6) {
  Graph g;
  std::vector<Output> placeholders;
  std::vector<Output> xs;
  std::vector<size_t> x_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& value = inputs[i].value;
    placeholders.push_back(ops::Placeholder(
        g, value.dtype(), inputs[i].declared.value_or(value.shape()),
        absl::StrCat("input", i)));
    if (inputs[i].wrt && IsFloating(value.dtype())) {
      xs.push_back(placeholders.back());
      x_inputs.push_back(i);
    }
  }
  const Output y = build(g, placeholders);
  const Output w = ops::Placeholder(g, y.dtype(), y.shape(), "w");
  absl::StatusOr<std::vector<Output>> grads = Gradients(g, {y}, xs, {w});
  if (!grads.ok()) return AssertionFailure() << grads.status();
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!(*grads)[k].valid()) {
      return AssertionFailure() << "no gradient for input " << x_inputs[k];
    }
  }
  g.Finalize();

  Session session(g, testing::TestRuntime());
  std::vector<std::pair<Output, Tensor>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    feeds.emplace_back(placeholders[i], inputs[i].value);
  }
  absl::StatusOr<std::vector<Tensor>> y0 =
      session.RunBlocking({.fetches = {y}, .feeds = feeds});
  if (!y0.ok()) return AssertionFailure() << "running y: " << y0.status();
  const Tensor weights = Weights((*y0)[0].shape());
  auto weighted_sum =
      [&](std::vector<std::pair<Output, Tensor>> f) -> absl::StatusOr<double> {
    absl::StatusOr<std::vector<Tensor>> out =
        session.RunBlocking({.fetches = {y}, .feeds = std::move(f)});
    if (!out.ok()) return out.status();
    auto values = (*out)[0].flat<double>();
    auto ws = weights.flat<double>();
    double sum = 0;
    for (size_t k = 0; k < values.size(); ++k) sum += values[k] * ws[k];
    return sum;
  };

  std::vector<std::pair<Output, Tensor>> grad_feeds = feeds;
  grad_feeds.emplace_back(w, weights);
  absl::StatusOr<std::vector<Tensor>> symbolic =
      session.RunBlocking({.fetches = *grads, .feeds = grad_feeds});
  if (!symbolic.ok()) {
    return AssertionFailure() << "running the gradients: " << symbolic.status();
  }
  for (size_t k = 0; k < xs.size(); ++k) {
    const size_t i = x_inputs[k];
    const Tensor& value = inputs[i].value;
    const Tensor& grad = (*symbolic)[k];
    if (grad.shape() != value.shape() || grad.dtype() != DType::kDouble) {
      return AssertionFailure()
             << "the gradient of input " << i << " is " << grad.DebugString()
             << ", want shape " << value.shape().DebugString();
    }
    for (int64_t e = 0; e < value.NumElements(); ++e) {
      double f[2];
      for (int side = 0; side < 2; ++side) {
        Tensor moved = value.Clone();
        moved.mutable_flat<double>()[e] += side == 0 ? eps : -eps;
        std::vector<std::pair<Output, Tensor>> f_feeds = feeds;
        f_feeds[i].second = std::move(moved);
        absl::StatusOr<double> sum = weighted_sum(std::move(f_feeds));
        if (!sum.ok()) return AssertionFailure() << sum.status();
        f[side] = *sum;
      }
      const double numeric = (f[0] - f[1]) / (2 * eps);
      const double got = grad.flat<double>()[e];
      if (std::abs(numeric - got) >
          tolerance * std::max({1.0, std::abs(numeric)})) {
        return AssertionFailure()
               << "d/d input" << i << "[" << e << "]: symbolic " << got
               << ", finite difference " << numeric << " (gradient "
               << grad.DebugString(32) << ")";
      }
    }
  }
  return AssertionSuccess();
}

// Shorthands for one- and two-input checks.
AssertionResult UnaryMatches(Tensor x,
                             std::function<Output(Graph&, Output)> op) {
  return GradientsMatchFiniteDifferences(
      {{x}},
      [&](Graph& g, const std::vector<Output>& in) { return op(g, in[0]); });
}
AssertionResult BinaryMatches(Tensor x, Tensor y,
                              std::function<Output(Graph&, Output, Output)> op,
                              std::optional<TensorShape> x_declared = {},
                              std::optional<TensorShape> y_declared = {}) {
  return GradientsMatchFiniteDifferences(
      {{x, x_declared}, {y, y_declared}},
      [&](Graph& g, const std::vector<Output>& in) {
        return op(g, in[0], in[1]);
      });
}

// ---------------------------------------------------- binary ops, broadcast

TEST(Gradients, AddOfSameShapesMatchesFiniteDifferences) {
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), Spread({2, 3}, 0.1, 2),
      [](Graph& g, Output a, Output b) { return ops::Add(g, a, b); }));
}

TEST(Gradients, AddOfMatrixAndRowVectorReducesToEachShape) {
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), Spread({3}),
      [](Graph& g, Output a, Output b) { return ops::Add(g, a, b); }));
}

TEST(Gradients, MulOfColumnAndRowReducesToEachShape) {
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 1}), Spread({1, 3}, 0.5, 2),
      [](Graph& g, Output a, Output b) { return ops::Mul(g, a, b); }));
}

TEST(Gradients, SubOfScalarAndMatrixReducesToTheScalar) {
  EXPECT_TRUE(BinaryMatches(
      D({0.7}, {}), Spread({2, 3}),
      [](Graph& g, Output a, Output b) { return ops::Sub(g, a, b); }));
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), D({0.7}, {}),
      [](Graph& g, Output a, Output b) { return ops::Sub(g, a, b); }));
}

TEST(Gradients, MulOfScalarAndMatrixMatchesFiniteDifferences) {
  EXPECT_TRUE(BinaryMatches(
      D({-1.3}, {}), Spread({2, 3}),
      [](Graph& g, Output a, Output b) { return ops::Mul(g, a, b); }));
}

TEST(Gradients, DivWithBroadcastDivisorMatchesFiniteDifferences) {
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), Spread({3}, 0.5, 2),
      [](Graph& g, Output a, Output b) { return ops::Div(g, a, b); }));
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 1}, 0.5, 2), Spread({2, 3}, -2, -0.5),
      [](Graph& g, Output a, Output b) { return ops::Div(g, a, b); }));
}

TEST(Gradients, MaximumWithBroadcastMatchesFiniteDifferences) {
  // No element of x equals its partner in y: Maximum is smooth there.
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), D({-0.33, 0.05, 0.41}, {3}),
      [](Graph& g, Output a, Output b) { return ops::Maximum(g, a, b); }));
}

TEST(Gradients, MaximumSendsTiesToTheFirstInput) {
  Graph g;
  Output x = ops::Const(g, D({1, 2, 3}, {3}));
  Output y = ops::Const(g, D({1, 5, 0}, {3}));
  auto grads = Gradients(g, {ops::Maximum(g, x, y)}, {x, y});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto values = testing::Eval(g, *grads);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(Near((*values)[0], {1, 0, 1}));
  EXPECT_TRUE(Near((*values)[1], {0, 1, 0}));
}

TEST(Gradients, UnknownBatchDimensionIsReducedByShapeAtBuildTime) {
  // x [?,3] + b [3]: b lacks the batch dimension, so a Sum over axis 0
  // decides it at build time; x's gradient passes through.
  EXPECT_TRUE(BinaryMatches(
      Spread({4, 3}), Spread({3}),
      [](Graph& g, Output a, Output b) { return ops::Mul(g, a, b); },
      TensorShape{kUnknownDim, 3}, std::nullopt));
}

TEST(Gradients, UnknownDimensionsBroadcastAtRunTimeAreSummedAtRunTime) {
  // a [?,3] * b [?,1] fed as [2,3] and [1,1]: whether b's first dimension
  // is stretched is known only at run time (SumToShapeOf).
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), D({0.8}, {1, 1}),
      [](Graph& g, Output a, Output b) { return ops::Mul(g, a, b); },
      TensorShape{kUnknownDim, 3}, TensorShape{kUnknownDim, 1}));
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), D({0.8, -0.4}, {2, 1}),
      [](Graph& g, Output a, Output b) { return ops::Sub(g, a, b); },
      TensorShape{kUnknownDim, 3}, TensorShape{kUnknownDim, 1}));
  EXPECT_TRUE(BinaryMatches(
      Spread({2, 3}), Spread({3}),
      [](Graph& g, Output a, Output b) { return ops::Add(g, a, b); },
      TensorShape::Unknown(), TensorShape::Unknown()));
}

// ---------------------------------------------------------------- unary ops

TEST(Gradients, ElementwiseUnaryOpsMatchFiniteDifferences) {
  using Unary = Output (*)(Graph&, Output, std::string);
  const std::pair<const char*, Unary> on_any_sign[] = {
      {"Neg", ops::Neg},          {"Square", ops::Square}, {"Exp", ops::Exp},
      {"Sigmoid", ops::Sigmoid},  {"Tanh", ops::Tanh},     {"Relu", ops::Relu},
      {"Identity", ops::Identity}};
  for (const auto& [name, op] : on_any_sign) {
    SCOPED_TRACE(name);
    // Spread never hits 0, where Relu has its kink.
    EXPECT_TRUE(UnaryMatches(Spread({2, 4}), [op = op](Graph& g, Output x) {
      return op(g, x, "");
    }));
  }
  const std::pair<const char*, Unary> on_positive[] = {{"Sqrt", ops::Sqrt},
                                                       {"Log", ops::Log}};
  for (const auto& [name, op] : on_positive) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(
        UnaryMatches(Spread({2, 4}, 0.3, 3),
                     [op = op](Graph& g, Output x) { return op(g, x, ""); }));
  }
}

TEST(Gradients, WithControlDependenciesPassesTheGradientThrough) {
  EXPECT_TRUE(UnaryMatches(Spread({3}), [](Graph& g, Output x) {
    Operation dep = ops::NoOp(g);
    return ops::Square(g, ops::WithControlDependencies(g, {dep}, x));
  }));
}

TEST(Gradients, SoftmaxMatchesFiniteDifferences) {
  EXPECT_TRUE(UnaryMatches(Spread({2, 4}, -2, 2), [](Graph& g, Output x) {
    return ops::Softmax(g, x);
  }));
  EXPECT_TRUE(UnaryMatches(Spread({2, 2, 3}, -2, 2), [](Graph& g, Output x) {
    return ops::Softmax(g, x);
  }));
}

TEST(Gradients, CastBetweenDoubleAndFloatPassesTheGradientBack) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {3});
  Output y = ops::Cast(g, ops::Square(g, ops::Cast(g, x, DType::kFloat)),
                       DType::kDouble);
  auto grads = Gradients(g, {y}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ((*grads)[0].dtype(), DType::kDouble);
  auto values = testing::Eval(g, *grads, {{x, D({0.5, -1, 2}, {3})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(Near((*values)[0], {1, -2, 4}, 1e-6));
}

TEST(Gradients, AddNMatchesFiniteDifferencesWithARepeatedInput) {
  EXPECT_TRUE(GradientsMatchFiniteDifferences(
      {{Spread({2, 2})}, {Spread({2, 2}, 0, 1)}},
      [](Graph& g, const std::vector<Output>& in) {
        return ops::AddN(g, {in[0], in[1], in[0]});
      }));
}

// ------------------------------------------------------------------- MatMul

TEST(Gradients, MatMulMatchesFiniteDifferencesForEveryTransposeCombination) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrCat("transpose_a=", ta, " transpose_b=", tb));
      const TensorShape a = ta ? TensorShape{3, 2} : TensorShape{2, 3};
      const TensorShape b = tb ? TensorShape{4, 3} : TensorShape{3, 4};
      EXPECT_TRUE(BinaryMatches(Spread(a), Spread(b, -1, 2),
                                [&](Graph& g, Output x, Output y) {
                                  return ops::MatMul(g, x, y, ta, tb);
                                }));
    }
  }
}

TEST(Gradients, MatMulGradientsAreMatMulsWithoutTranspose) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Graph g;
      Output a = ops::Placeholder(g, DType::kDouble, {3, 3});
      Output b = ops::Placeholder(g, DType::kDouble, {3, 3});
      Output y = ops::MatMul(g, a, b, ta, tb);
      const int before = g.num_nodes();
      ASSERT_TRUE(Gradients(g, {y}, {a, b}).ok());
      for (int id = before; id < g.num_nodes(); ++id) {
        EXPECT_NE(g.node(id)->type(), "Transpose");
      }
    }
  }
}

// --------------------------------------------------------------- reductions

TEST(Gradients, ReductionsMatchFiniteDifferencesForAxesAndKeepDims) {
  using Reduction =
      Output (*)(Graph&, Output, std::vector<int64_t>, bool, std::string);
  const std::pair<const char*, Reduction> reductions[] = {
      {"Sum", ops::Sum}, {"Mean", ops::Mean}, {"Max", ops::Max}};
  const std::pair<std::vector<int64_t>, bool> cases[] = {
      {{}, false},   {{}, true},      {{0}, false},   {{1}, true},
      {{-1}, false}, {{0, 2}, false}, {{0, 2}, true}, {{2, 1, 0}, false}};
  for (const auto& [name, reduction] : reductions) {
    for (const auto& [some_axes, some_keep_dims] : cases) {
      // Copies: lambdas capture these, not structured bindings.
      const Reduction reduce = reduction;
      const std::vector<int64_t> axes = some_axes;
      const bool keep_dims = some_keep_dims;
      SCOPED_TRACE(absl::StrCat(name, " axes [", absl::StrJoin(axes, ","),
                                "] keep_dims=", keep_dims));
      EXPECT_TRUE(UnaryMatches(Spread({2, 3, 2}), [&](Graph& g, Output x) {
        return reduce(g, x, axes, keep_dims, "");
      }));
    }
  }
}

TEST(Gradients, ReductionsOfAnUnknownBatchMatchFiniteDifferences) {
  for (bool keep_dims : {false, true}) {
    SCOPED_TRACE(absl::StrCat("keep_dims=", keep_dims));
    EXPECT_TRUE(GradientsMatchFiniteDifferences(
        {{Spread({3, 2}), TensorShape{kUnknownDim, 2}}},
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::Mul(g, ops::Mean(g, in[0], {0}, keep_dims),
                          ops::Max(g, in[0], {-1}, true));
        }));
  }
}

TEST(Gradients, MaxSplitsTheGradientEvenlyBetweenTies) {
  Graph g;
  Output x = ops::Const(g, D({3, 1, 3, 2, 2, 2}, {2, 3}));
  auto grads = Gradients(g, {ops::Max(g, x, {1})}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto value = testing::EvalOne(g, (*grads)[0]);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(Near(*value, {0.5, 0, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}));
}

// ----------------------------------------------------------- shape ops, nn

TEST(Gradients, ReshapeMatchesFiniteDifferences) {
  EXPECT_TRUE(UnaryMatches(Spread({2, 3}), [](Graph& g, Output x) {
    return ops::Square(g, ops::Reshape(g, x, {3, -1}));
  }));
  // Two unknown dimensions: reshaped back at run time.
  EXPECT_TRUE(GradientsMatchFiniteDifferences(
      {{Spread({2, 3}), TensorShape{kUnknownDim, kUnknownDim}}},
      [](Graph& g, const std::vector<Output>& in) {
        return ops::Square(g, ops::Reshape(g, in[0], {-1}));
      }));
}

TEST(Gradients, TransposeMatchesFiniteDifferences) {
  EXPECT_TRUE(UnaryMatches(Spread({2, 3, 2}), [](Graph& g, Output x) {
    return ops::Mul(g, ops::Transpose(g, x, {1, 2, 0}),
                    ops::Const(g, Spread({3, 2, 2})));
  }));
  EXPECT_TRUE(UnaryMatches(Spread({2, 3}), [](Graph& g, Output x) {
    return ops::Square(g, ops::Transpose(g, x));
  }));
}

TEST(Gradients, SparseSoftmaxCrossEntropyMatchesFiniteDifferences) {
  EXPECT_TRUE(GradientsMatchFiniteDifferences(
      {{Spread({3, 4}, -2, 2)}, {Tensor::FromVector<int32_t>({2, 0, 3}, {3})}},
      [](Graph& g, const std::vector<Output>& in) {
        return ops::SparseSoftmaxCrossEntropyWithLogits(g, in[0], in[1])[0];
      }));
  EXPECT_TRUE(GradientsMatchFiniteDifferences(
      {{Spread({2, 3}, -2, 2), TensorShape{kUnknownDim, 3}},
       {Tensor::FromVector<int64_t>({1, 1}, {2}), TensorShape{kUnknownDim}}},
      [](Graph& g, const std::vector<Output>& in) {
        return ops::SparseSoftmaxCrossEntropyWithLogits(g, in[0], in[1])[0];
      }));
}

// ------------------------------------------------------ chains, summing

// loss = mean(sparse_softmax_xent(tanh(x W1 + b1) W2 + b2, labels)).
struct Mlp {
  Output x, labels, w1, b1, w2, b2, loss;
};
Mlp BuildMlp(Graph& g, const std::vector<Output>& in) {
  Mlp m{in[0], in[1], in[2], in[3], in[4], in[5], Output()};
  Output hidden = ops::Tanh(g, ops::Add(g, ops::MatMul(g, m.x, m.w1), m.b1));
  Output logits = ops::Add(g, ops::MatMul(g, hidden, m.w2), m.b2);
  m.loss = ops::Mean(
      g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, m.labels)[0]);
  return m;
}

TEST(Gradients, TwoLayerMlpLossMatchesFiniteDifferencesForItsWeights) {
  EXPECT_TRUE(GradientsMatchFiniteDifferences(
      {{Spread({4, 3}), TensorShape{kUnknownDim, 3}, /*wrt=*/false},
       {Tensor::FromVector<int64_t>({0, 1, 1, 0}, {4}),
        TensorShape{kUnknownDim}},
       {Spread({3, 5}, -1, 1)},
       {Spread({5}, -0.2, 0.2)},
       {Spread({5, 2}, -1, 1)},
       {Spread({2}, -0.1, 0.1)}},
      [](Graph& g, const std::vector<Output>& in) {
        return BuildMlp(g, in).loss;
      }));
}

TEST(Gradients, FloatMlpGradientsAgreeWithDouble) {
  std::vector<Tensor> grads_of[2];
  for (DType dtype : {DType::kDouble, DType::kFloat}) {
    Graph g;
    auto input = [&](const Tensor& value) {
      return ops::Cast(g, ops::Const(g, value), dtype);
    };
    Mlp m = BuildMlp(
        g, {input(Spread({4, 3})),
            ops::Const(g, Tensor::FromVector<int32_t>({2, 1, 0, 2}, {4})),
            input(Spread({3, 5}, -1, 1)), input(Spread({5})),
            input(Spread({5, 3}, -1, 1)), input(Spread({3}))});
    Output relu = ops::Relu(g, ops::Sigmoid(g, m.loss));
    auto grads = Gradients(g, {relu}, {m.w1, m.b1, m.w2, m.b2});
    ASSERT_TRUE(grads.ok()) << grads.status();
    std::vector<Output> as_double;
    for (Output grad : *grads) {
      as_double.push_back(ops::Cast(g, grad, DType::kDouble));
    }
    auto values = testing::Eval(g, as_double);
    ASSERT_TRUE(values.ok()) << values.status();
    grads_of[dtype == DType::kFloat] = *values;
  }
  for (size_t k = 0; k < grads_of[0].size(); ++k) {
    auto d = grads_of[0][k].flat<double>();
    EXPECT_TRUE(
        Near(grads_of[1][k], std::vector<double>(d.begin(), d.end()), 1e-5));
  }
}

TEST(Gradients, GradientsOfATensorWithTwoConsumersAreSummedWithAddN) {
  EXPECT_TRUE(UnaryMatches(Spread({3}), [](Graph& g, Output x) {
    Output e = ops::Exp(g, x);
    return ops::Add(g, ops::Mul(g, e, x), ops::Square(g, e));
  }));
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {3});
  Output e = ops::Exp(g, x);
  Output y = ops::Add(g, ops::Mul(g, e, x), ops::Square(g, e));
  const int before = g.num_nodes();
  ASSERT_TRUE(Gradients(g, {y}, {x}).ok());
  int addn = 0;
  for (int id = before; id < g.num_nodes(); ++id) {
    if (g.node(id)->type() == "AddN") {
      ++addn;
      // e's two consumers and x's two (Mul and Exp).
      EXPECT_EQ(g.node(id)->num_inputs(), 2);
    }
  }
  EXPECT_EQ(addn, 2);
}

// ------------------------------------------------------- what gets built

// The types of the nodes added since `first`.
std::vector<std::string> TypesSince(const Graph& g, int first) {
  std::vector<std::string> types;
  for (int id = first; id < g.num_nodes(); ++id) {
    types.push_back(g.node(id)->type());
  }
  return types;
}

int CountOf(const std::vector<std::string>& types, std::string_view type) {
  return static_cast<int>(std::count(types.begin(), types.end(), type));
}

TEST(GradientsGraph, FirstLayerWeightsGradientBuildsNoGradientForTheInput) {
  Graph g;
  std::vector<Output> in = {
      ops::Placeholder(g, DType::kDouble, {kUnknownDim, 3}),
      ops::Placeholder(g, DType::kInt64, {kUnknownDim}),
      ops::Placeholder(g, DType::kDouble, {3, 5}),
      ops::Placeholder(g, DType::kDouble, {5}),
      ops::Placeholder(g, DType::kDouble, {5, 2}),
      ops::Placeholder(g, DType::kDouble, {2})};
  Mlp m = BuildMlp(g, in);
  const int before = g.num_nodes();
  auto grads = Gradients(g, {m.loss}, {m.w1});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const std::vector<std::string> types = TypesSince(g, before);
  // d hidden = d logits W2^T and d W1 = x^T d pre; neither d W2 nor d x.
  EXPECT_EQ(CountOf(types, "MatMul"), 2);
  for (int id = before; id < g.num_nodes(); ++id) {
    for (const Output& input : g.node(id)->inputs()) {
      // Only the gradient w.r.t. x (d pre W1^T) would read W1.
      EXPECT_NE(input, m.w1) << g.node(id)->name() << " reads W1";
    }
  }
  // No gradient of b1 or b2 either: nothing reduces over the batch.
  EXPECT_EQ(CountOf(types, "Sum"), 0);

  const int before_both = g.num_nodes();
  ASSERT_TRUE(Gradients(g, {m.loss}, {m.w1, m.w2}).ok());
  EXPECT_EQ(CountOf(TypesSince(g, before_both), "MatMul"), 3);
}

TEST(GradientsGraph, OpsOffThePathFromXToYGetNoGradientOps) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {3});
  Output w = ops::Placeholder(g, DType::kDouble, {3});
  Output u = ops::Placeholder(g, DType::kDouble, {3});
  Output y = ops::Add(g, ops::Mul(g, x, w), ops::Exp(g, ops::Square(g, u)));
  const int before = g.num_nodes();
  auto grads = Gradients(g, {y}, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  // OnesLike for y and dy * x; nothing for Exp or Square.
  EXPECT_EQ(TypesSince(g, before),
            (std::vector<std::string>{"OnesLike", "Mul"}));
}

TEST(GradientsGraph, EqualKnownShapesAddNoReduction) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kDouble, {2, 3});
  Output b = ops::Placeholder(g, DType::kDouble, {2, 3});
  const int before = g.num_nodes();
  auto grads = Gradients(g, {ops::Add(g, a, b)}, {a, b});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(TypesSince(g, before),
            (std::vector<std::string>{"Add", "OnesLike"}));
}

TEST(GradientsGraph, BroadcastDecidedByShapesUsesASumNotARunTimeReduction) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kDouble, {kUnknownDim, 3});
  Output b = ops::Placeholder(g, DType::kDouble, {3});
  Output c = ops::Placeholder(g, DType::kDouble, {1, 3});
  Output y = ops::Add(g, ops::Mul(g, a, b), c);
  const int before = g.num_nodes();
  ASSERT_TRUE(Gradients(g, {y}, {a, b, c}).ok());
  const std::vector<std::string> types = TypesSince(g, before);
  EXPECT_EQ(CountOf(types, "SumToShapeOf"), 0);
  EXPECT_EQ(CountOf(types, "Sum"), 2);  // b over the batch, c over the batch
}

TEST(GradientsGraph, UnknownDimensionFacingAnotherUsesARunTimeReduction) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kDouble, {kUnknownDim, 3});
  Output b = ops::Placeholder(g, DType::kDouble, {kUnknownDim, 1});
  const int before = g.num_nodes();
  ASSERT_TRUE(Gradients(g, {ops::Mul(g, a, b)}, {b}).ok());
  EXPECT_EQ(CountOf(TypesSince(g, before), "SumToShapeOf"), 1);
}

TEST(GradientsGraph, AnXTheYsDoNotDependOnGetsAnInvalidGradient) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output unrelated = ops::Placeholder(g, DType::kDouble, {2});
  auto grads = Gradients(g, {ops::Square(g, x)}, {x, unrelated});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE((*grads)[0].valid());
  EXPECT_FALSE((*grads)[1].valid());
}

TEST(GradientsGraph, IntegerTensorsStopTheGradient) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  // floor(x) * x through a Cast to int32: only the direct path counts.
  Output floor = ops::Cast(g, ops::Cast(g, x, DType::kInt32), DType::kDouble);
  Output through_argmax = ops::Cast(g, ops::ArgMax(g, x, 0), DType::kDouble);
  Output y = ops::Add(g, ops::Mul(g, floor, x), through_argmax);
  auto grads = Gradients(g, {y}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto value = testing::EvalOne(g, (*grads)[0], {{x, D({1.5, 2.5}, {2})}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(Near(*value, {1, 2}));

  auto none = Gradients(g, {through_argmax}, {x});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE((*none)[0].valid());
}

TEST(GradientsGraph, AnIntermediateXIsALeafAndOpsBeforeItGetNothing) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output h = ops::Square(g, x);
  Output y = ops::Exp(g, h);
  const int before = g.num_nodes();
  auto grads = Gradients(g, {y}, {h});
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (int id = before; id < g.num_nodes(); ++id) {
    for (const Output& input : g.node(id)->inputs()) EXPECT_NE(input, x);
  }
  auto value = testing::EvalOne(g, (*grads)[0], {{x, D({0.5, 1}, {2})}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(Near(*value, {std::exp(0.25), std::exp(1.0)}));
}

TEST(GradientsGraph, XUpstreamOfAnotherXGetsItsTotalDerivative) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {});
  Output h = ops::Mul(g, x, ops::Const(g, 3.0));
  Output y = ops::Mul(g, h, x);  // 3 x^2
  auto grads = Gradients(g, {y}, {x, h});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto values = testing::Eval(g, *grads, {{x, D({2}, {})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(Near((*values)[0], {12}));  // 6 x
  EXPECT_TRUE(Near((*values)[1], {2}));   // x
}

TEST(GradientsGraph, GradYsWeightEachYAndDefaultToOnes) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output y1 = ops::Square(g, x);
  Output y2 = ops::Mul(g, x, ops::Const(g, 10.0));
  Output w1 = ops::Const(g, D({1, -1}, {2}));
  Output w2 = ops::Const(g, D({0.5, 2}, {2}));
  auto weighted = Gradients(g, {y1, y2}, {x}, {w1, w2});
  auto unweighted = Gradients(g, {y1, y2}, {x});
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  ASSERT_TRUE(unweighted.ok()) << unweighted.status();
  auto values = testing::Eval(g, {(*weighted)[0], (*unweighted)[0]},
                              {{x, D({3, 4}, {2})}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(Near((*values)[0], {2 * 3 * 1 + 10 * 0.5, 2 * 4 * -1 + 10 * 2}));
  EXPECT_TRUE(Near((*values)[1], {2 * 3 + 10, 2 * 4 + 10}));
}

TEST(GradientsGraph, TheGradientOfAYWithRespectToItselfIsItsGradY) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  auto grads = Gradients(g, {x}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto value = testing::EvalOne(g, (*grads)[0], {{x, D({3, 4}, {2})}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(Near(*value, {1, 1}));
}

TEST(GradientsGraph, AVariableReadIsALeaf) {
  Graph g;
  Output w = ops::Variable(g, D({1, -2}, {2}), "w");
  Output loss = ops::Sum(g, ops::Square(g, w));
  auto grads = Gradients(g, {loss}, {w});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto value = testing::EvalOne(g, (*grads)[0]);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(Near(*value, {2, -4}));
}

// ------------------------------------------------------------------- errors

TEST(GradientsErrors, AnOpWithoutAGradientIsNamedWithItsType) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output checked = ops::CheckNumerics(g, x, "x", "check_x");
  auto grads = Gradients(g, {ops::Square(g, checked)}, {x});
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(grads.status(), "'check_x' (CheckNumerics)"));
}

TEST(GradientsErrors, AnOpWithoutAGradientOffThePathIsNoError) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output w = ops::Placeholder(g, DType::kDouble, {2});
  Output y = ops::Mul(g, ops::CheckNumerics(g, x, "x"), w);
  auto grads = Gradients(g, {y}, {w});
  EXPECT_TRUE(grads.ok()) << grads.status();
}

TEST(GradientsErrors, IntegerYsAndXsAreInvalidArguments) {
  Graph g;
  Output i = ops::Placeholder(g, DType::kInt32, {2});
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  auto integer_y = Gradients(g, {i}, {x});
  EXPECT_EQ(integer_y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(integer_y.status(), "int32"));
  auto integer_x = Gradients(g, {x}, {i});
  EXPECT_EQ(integer_x.status().code(), absl::StatusCode::kInvalidArgument);
  auto empty_x = Gradients(g, {x}, {Output()});
  EXPECT_EQ(empty_x.status().code(), absl::StatusCode::kInvalidArgument);
  Graph other;
  Output foreign = ops::Placeholder(other, DType::kDouble, {2});
  auto foreign_y = Gradients(g, {foreign}, {x});
  EXPECT_EQ(foreign_y.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GradientsErrors, GradYsOfTheWrongCountDTypeOrShapeAreInvalidArguments) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output y = ops::Square(g, x);
  Output ok = ops::Const(g, D({1, 1}, {2}));
  EXPECT_EQ(Gradients(g, {y}, {x}, {ok, ok}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Output as_float = ops::Const(g, Tensor::FromVector<float>({1, 1}, {2}));
  auto wrong_dtype = Gradients(g, {y}, {x}, {as_float});
  EXPECT_EQ(wrong_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(wrong_dtype.status(), "float"));
  Output wrong_shape = ops::Const(g, D({1, 1, 1}, {3}));
  EXPECT_EQ(Gradients(g, {y}, {x}, {wrong_shape}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GradientsErrors, AFinalizedGraphIsAStatusNotAnException) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output y = ops::Square(g, x);
  g.Finalize();
  auto grads = Gradients(g, {y}, {x});
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GradientsErrors, DifferentiatingTheSoftmaxCrossEntropyBackpropIsAnError) {
  Graph g;
  Output logits = ops::Placeholder(g, DType::kDouble, {2, 3});
  Output labels = ops::Placeholder(g, DType::kInt32, {2});
  auto outputs =
      ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels, "xent");
  auto grads = Gradients(g, {ops::Sum(g, outputs[1])}, {logits});
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(grads.status(), "'xent'"));
  EXPECT_TRUE(MessageContains(grads.status(), "output 1"));
}

// Registers (once per name) an identity op with the gradient `gradient`,
// for tests of what Gradients() does with a gradient function's result.
void RegisterIdentityWithGradient(const std::string& name,
                                  GradientFn gradient) {
  if (OpRegistry::Global().Find(name) != nullptr) return;
  OpDef def;
  def.name = name;
  def.shape_fn = [](InferenceContext& c) {
    c.AddOutput(c.input_dtype(0), c.input_shape(0));
    return absl::OkStatus();
  };
  def.kernel = [](KernelContext& ctx) {
    ctx.set_output(0, ctx.input(0));
    return absl::OkStatus();
  };
  ThrowIfError(OpRegistry::Global().Register(std::move(def)));
  ThrowIfError(OpRegistry::Global().SetGradient(name, std::move(gradient)));
}

TEST(GradientsErrors, AGradientFunctionReturningAWrongShapeIsReported) {
  RegisterIdentityWithGradient(
      "GradientsTestWrongShape",
      [](Graph& g, const Node&, absl::Span<const Output>, const WantedInputs&) {
        return absl::StatusOr<std::vector<Output>>(
            std::vector<Output>{ops::Const(g, D({1, 2, 3}, {3}))});
      });
  Graph g;
  Output x = ops::Placeholder(g, DType::kDouble, {2});
  Output y(g.AddNode({"GradientsTestWrongShape", "bad", {x}, {}, {}}), 0);
  auto grads = Gradients(g, {y}, {x});
  EXPECT_FALSE(grads.ok());
  EXPECT_TRUE(
      MessageContains(grads.status(), "'bad' (GradientsTestWrongShape)"));
}

TEST(GradientsErrors, TheFiniteDifferenceCheckCatchesAWrongGradient) {
  // An identity whose gradient is twice what it should be: the check the
  // other tests rely on must fail on it.
  RegisterIdentityWithGradient(
      "GradientsTestDoubledGrad",
      [](Graph& g, const Node&, absl::Span<const Output> dz,
         const WantedInputs&) {
        return absl::StatusOr<std::vector<Output>>(
            std::vector<Output>{ops::Add(g, dz[0], dz[0])});
      });
  EXPECT_FALSE(UnaryMatches(Spread({3}), [](Graph& g, Output x) {
    return Output(g.AddNode({"GradientsTestDoubledGrad", "", {x}, {}, {}}), 0);
  }));
}

// ----------------------------------------- SparseSoftmaxCrossEntropy op

TEST(SparseSoftmaxCrossEntropy, ComputesTheLossAndTheBackprop) {
  Graph g;
  Output logits = ops::Const(g, D({1, 2, 3, 0, 0, std::log(2.0)}, {2, 3}));
  Output labels = ops::Const(g, Tensor::FromVector<int64_t>({2, 0}, {2}));
  auto out = ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels);
  EXPECT_EQ(out[0].shape(), TensorShape({2}));
  EXPECT_EQ(out[1].shape(), TensorShape({2, 3}));
  auto values = testing::Eval(g, out);
  ASSERT_TRUE(values.ok()) << values.status();
  const double z0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_TRUE(Near((*values)[0], {std::log(z0) - 3, std::log(4.0)}));
  EXPECT_TRUE(
      Near((*values)[1], {std::exp(1.0) / z0, std::exp(2.0) / z0,
                          std::exp(3.0) / z0 - 1, 0.25 - 1, 0.25, 0.5}));
}

TEST(SparseSoftmaxCrossEntropy, LargeLogitsDoNotOverflow) {
  Graph g;
  Output logits =
      ops::Const(g, Tensor::FromVector<float>({1000, 0, -1000, 10}, {2, 2}));
  Output labels = ops::Const(g, Tensor::FromVector<int32_t>({1, 1}, {2}));
  auto loss = testing::EvalOne(
      g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels)[0]);
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto values = loss->flat<float>();
  EXPECT_FLOAT_EQ(values[0], 1000);
  EXPECT_NEAR(values[1], 0, 1e-6);
}

TEST(SparseSoftmaxCrossEntropy, ALabelOutOfRangeNamesTheOpExampleAndLabel) {
  for (int64_t bad : {3, -1}) {
    Graph g;
    Output logits = ops::Const(g, D({1, 2, 3, 4, 5, 6}, {2, 3}));
    Output labels = ops::Const(g, Tensor::FromVector<int64_t>({0, bad}, {2}));
    Output loss =
        ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels, "xent")[0];
    auto result = testing::EvalOne(g, loss);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageContains(result.status(), "'xent'"));
    EXPECT_TRUE(MessageContains(result.status(), "example 1"));
    EXPECT_TRUE(
        MessageContains(result.status(), absl::StrCat("label value of ", bad)));
  }
}

TEST(SparseSoftmaxCrossEntropy, BuildTimeChecksNameTheOp) {
  Graph g;
  Output logits = ops::Placeholder(g, DType::kFloat, {2, 3});
  Output labels3 = ops::Placeholder(g, DType::kInt32, {3});
  Output float_labels = ops::Placeholder(g, DType::kFloat, {2});
  Output vector_logits = ops::Placeholder(g, DType::kFloat, {6});
  const std::pair<Output, Output> bad_inputs[] = {
      {logits, labels3}, {logits, float_labels}, {vector_logits, labels3}};
  for (const std::pair<Output, Output>& inputs : bad_inputs) {
    absl::Status status = StatusThrownBy([&] {
      ops::SparseSoftmaxCrossEntropyWithLogits(g, inputs.first, inputs.second,
                                               "xent");
    });
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageContains(status, "xent"));
  }
}

// ------------------------------------------------------ gradient helper ops

TEST(GradientOps, SumToShapeOfRejectsShapesThatDoNotBroadcastAtRunTime) {
  Graph g;
  Output grad = ops::Placeholder(g, DType::kDouble, {kUnknownDim, 3});
  Output like = ops::Placeholder(g, DType::kDouble, {kUnknownDim, 3});
  Output sum = ops::SumToShapeOf(g, grad, like, "reduce");
  auto ok = testing::EvalOne(
      g, sum, {{grad, Spread({2, 3})}, {like, D({1, 2, 3}, {1, 3})}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto bad = testing::EvalOne(g, sum,
                              {{grad, Spread({2, 3})}, {like, Spread({4, 3})}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(bad.status(), "'reduce'"));
}

TEST(GradientOps, ReductionGradientsCostTheElementsTheyWrite) {
  Graph g;
  Output grad = ops::Placeholder(g, DType::kDouble, {4});
  Output x = ops::Placeholder(g, DType::kDouble, {4, 100});
  Output y = ops::SumGrad(g, grad, x, {1}, false);
  EXPECT_EQ(CostOf(y, {Tensor(DType::kDouble, {4}),
                       Tensor(DType::kDouble, {4, 100})}),
            400);
  Output relu_grad = ops::ReluGrad(g, x, x);
  EXPECT_EQ(CostOf(relu_grad, {Tensor(DType::kDouble, {4, 100}),
                               Tensor(DType::kDouble, {4, 100})}),
            400);
}

}  // namespace
}  // namespace cosession::gradients_test
