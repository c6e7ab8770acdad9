// Optimizers: each update rule against a reference computed here in double
// precision over several steps (fed gradients), slots as checkpointed
// variables with TensorFlow's names, the global-step increment, Minimize on
// a quadratic whose minimum is known, and the errors.
#include "cosession/graph/optimizers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/tensor.h"
#include "cosession/io/saver.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::optimizers_test {
namespace {

namespace asio = boost::asio;
using testing::TestRuntime;

const std::vector<double> kInitial = {0.5, -1.0, 2.0};
// The gradient fed at step t (1-based): varied in sign and size so that a
// wrong moment or bias correction shows.
std::vector<double> GradientAt(int t) {
  return {0.1 * t, -0.3 + 0.05 * t, 1.0 / t};
}

// A double variable of kInitial updated by a fed gradient.
struct FedModel {
  explicit FedModel(Optimizer& optimizer) {
    step = GetOrCreateGlobalStep(g);
    w = ops::Variable(g, Tensor::FromVector<double>(kInitial), "w");
    gradient = ops::Placeholder(g, DType::kDouble, TensorShape{3}, "gradient");
    const GradientAndVariable pairs[] = {{gradient, w}};
    auto op = optimizer.ApplyGradients(g, pairs, step);
    EXPECT_TRUE(op.ok()) << op.status();
    if (op.ok()) train = *op;
  }
  Graph g;
  Output step, w, gradient;
  Operation train;
};

asio::awaitable<std::unique_ptr<Session>> InitializedSession(Graph& g) {
  auto session = std::make_unique<Session>(g, TestRuntime());
  // A finalized graph already has its initializer ("init").
  auto existing = g.FindOperation("init");
  RunArgs init{
      .targets = {existing.ok() ? *existing : GlobalVariablesInitializer(g)}};
  auto ran = co_await session->Run(std::move(init), asio::use_awaitable);
  EXPECT_TRUE(ran.ok()) << ran.status();
  co_return session;
}

// Runs `steps` train steps with GradientAt(1..steps) and returns w.
asio::awaitable<std::vector<double>> Train(Session& session, FedModel& m,
                                           int steps) {
  for (int t = 1; t <= steps; ++t) {
    RunArgs args{
        .targets = {m.train},
        .feeds = {{m.gradient, Tensor::FromVector<double>(GradientAt(t))}}};
    auto ran = co_await session.Run(std::move(args), asio::use_awaitable);
    EXPECT_TRUE(ran.ok()) << ran.status();
  }
  RunArgs read{.fetches = {m.w}};
  auto values = co_await session.Run(std::move(read), asio::use_awaitable);
  EXPECT_TRUE(values.ok()) << values.status();
  if (!values.ok()) co_return std::vector<double>{};
  auto flat = (*values)[0].flat<double>();
  co_return std::vector<double>(flat.begin(), flat.end());
}

void ExpectNear(const std::vector<double>& actual,
                const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-12 * (1 + std::abs(expected[i])))
        << "element " << i;
  }
}

constexpr int kSteps = 5;

CO_TEST(Optimizers, GradientDescentFollowsItsRule) {
  GradientDescentOptimizer sgd({.learning_rate = 0.25});
  FedModel m(sgd);
  auto session = co_await InitializedSession(m.g);
  std::vector<double> w = kInitial;
  for (int t = 1; t <= kSteps; ++t) {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.25 * GradientAt(t)[i];
  }
  ExpectNear(co_await Train(*session, m, kSteps), w);
}

CO_TEST(Optimizers, MomentumFollowsItsRule) {
  for (bool nesterov : {false, true}) {
    MomentumOptimizer momentum(
        {.learning_rate = 0.1, .momentum = 0.8, .use_nesterov = nesterov});
    FedModel m(momentum);
    auto session = co_await InitializedSession(m.g);
    std::vector<double> w = kInitial, accum(3, 0.0);
    for (int t = 1; t <= kSteps; ++t) {
      const std::vector<double> g = GradientAt(t);
      for (size_t i = 0; i < w.size(); ++i) {
        accum[i] = 0.8 * accum[i] + g[i];
        w[i] -= nesterov ? 0.1 * (g[i] + 0.8 * accum[i]) : 0.1 * accum[i];
      }
    }
    SCOPED_TRACE(nesterov ? "nesterov" : "classic");
    ExpectNear(co_await Train(*session, m, kSteps), w);
  }
}

CO_TEST(Optimizers, AdamFollowsItsRuleWithBiasCorrection) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  AdamOptimizer adam(
      {.learning_rate = lr, .beta1 = b1, .beta2 = b2, .epsilon = eps});
  FedModel m(adam);
  auto session = co_await InitializedSession(m.g);
  std::vector<double> w = kInitial, mom(3, 0.0), vel(3, 0.0);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<double> g = GradientAt(t);
    const double lr_t =
        lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < w.size(); ++i) {
      mom[i] = b1 * mom[i] + (1 - b1) * g[i];
      vel[i] = b2 * vel[i] + (1 - b2) * g[i] * g[i];
      w[i] -= lr_t * mom[i] / (std::sqrt(vel[i]) + eps);
    }
  }
  ExpectNear(co_await Train(*session, m, kSteps), w);

  // The slots and powers hold the same state, under TensorFlow's names.
  auto m_slot = adam.GetSlot(m.w, "m");
  auto v_slot = adam.GetSlot(m.w, "v");
  CO_ASSERT_OK(m_slot.status());
  CO_ASSERT_OK(v_slot.status());
  EXPECT_EQ(m_slot->node()->name(), "w/Adam");
  EXPECT_EQ(v_slot->node()->name(), "w/Adam_1");
  auto beta1_power = m.g.FindOutput("beta1_power");
  CO_ASSERT_OK(beta1_power.status());
  RunArgs read{.fetches = {*m_slot, *v_slot, *beta1_power, m.step}};
  auto values = co_await session->Run(std::move(read), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  ExpectNear(
      {(*values)[0].flat<double>().begin(), (*values)[0].flat<double>().end()},
      mom);
  ExpectNear(
      {(*values)[1].flat<double>().begin(), (*values)[1].flat<double>().end()},
      vel);
  EXPECT_NEAR((*values)[2].scalar<double>(), std::pow(b1, kSteps + 1), 1e-15);
  EXPECT_EQ((*values)[3].scalar<int64_t>(), kSteps);
}

CO_TEST(Optimizers, SlotsAreNonTrainableVariablesTheSaverRestores) {
  AdamOptimizer adam({.learning_rate = 0.05});
  FedModel m(adam);
  auto trainable = m.g.GetCollection(kTrainableVariablesCollection);
  EXPECT_EQ(trainable.size(), 1u);
  CO_ASSERT_TRUE((trainable.size()) ==
                 (1u));  // w; not the slots, powers or step
  EXPECT_EQ(trainable[0], m.w.node());
  GlobalVariablesInitializer(m.g);  // before Finalize: "init"
  auto saver = Saver::Create(m.g);
  CO_ASSERT_OK(saver.status());
  m.g.Finalize();

  testing::ScratchDir dir("optimizers");
  auto trained = co_await InitializedSession(m.g);
  co_await Train(*trained, m, 3);
  auto saved = co_await (*saver)->Save(*trained, dir.path(), 3);
  CO_ASSERT_OK(saved.status());

  // A fresh session restored from the checkpoint continues exactly like the
  // one that kept going: the moments and powers came back too.
  auto restored = std::make_unique<Session>(m.g, TestRuntime());
  auto restore = co_await (*saver)->RestoreLatest(*restored, dir.path());
  CO_ASSERT_OK(restore.status());
  RunArgs more{
      .targets = {m.train},
      .feeds = {{m.gradient, Tensor::FromVector<double>(GradientAt(4))}}};
  RunArgs more_copy = more;
  CO_ASSERT_TRUE(
      (co_await trained->Run(std::move(more), asio::use_awaitable)).ok());
  CO_ASSERT_TRUE(
      (co_await restored->Run(std::move(more_copy), asio::use_awaitable)).ok());
  RunArgs read{.fetches = {m.w, *adam.GetSlot(m.w, "v"), m.step}};
  RunArgs read_copy = read;
  auto a = co_await trained->Run(std::move(read), asio::use_awaitable);
  auto b = co_await restored->Run(std::move(read_copy), asio::use_awaitable);
  CO_ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*a)[i].IsSameAs((*b)[i])) << i << ": " << (*a)[i].DebugString()
                                           << " vs " << (*b)[i].DebugString();
  }
}

CO_TEST(Optimizers, MinimizeFindsTheMinimumOfAQuadratic) {
  // loss = sum((w - target)^2), minimum at w = target.
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  Output w = ops::Variable(g, Tensor::FromVector<float>({0, 0, 0}), "w");
  Output target = ops::Const(g, Tensor::FromVector<float>({1, -2, 3}));
  Output loss = ops::Sum(g, ops::Square(g, ops::Sub(g, w, target)));
  AdamOptimizer adam({.learning_rate = 0.1});
  auto train = adam.Minimize(g, loss, step);
  CO_ASSERT_OK(train.status());
  auto session = co_await InitializedSession(g);
  for (int i = 0; i < 300; ++i) {
    RunArgs args{.targets = {*train}};
    CO_ASSERT_TRUE(
        (co_await session->Run(std::move(args), asio::use_awaitable)).ok());
  }
  RunArgs read{.fetches = {w, loss, step}};
  auto values = co_await session->Run(std::move(read), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  auto got = (*values)[0].flat<float>();
  EXPECT_NEAR(got[0], 1, 0.02);
  EXPECT_NEAR(got[1], -2, 0.02);
  EXPECT_NEAR(got[2], 3, 0.02);
  EXPECT_LT((*values)[1].scalar<float>(), 1e-3);
  EXPECT_EQ((*values)[2].scalar<int64_t>(), 300);
}

TEST(Optimizers, BadHyperparametersAreNamed) {
  struct Case {
    std::unique_ptr<Optimizer> optimizer;
    std::string expected;
  };
  std::vector<Case> cases;
  cases.push_back({std::make_unique<GradientDescentOptimizer>(
                       GradientDescentOptions{.learning_rate = -1}),
                   "GradientDescentOptimizer: learning_rate"});
  cases.push_back({std::make_unique<GradientDescentOptimizer>(
                       GradientDescentOptions{.learning_rate = NAN}),
                   "GradientDescentOptimizer: learning_rate"});
  cases.push_back(
      {std::make_unique<MomentumOptimizer>(MomentumOptions{.momentum = -0.5}),
       "MomentumOptimizer: momentum"});
  cases.push_back({std::make_unique<AdamOptimizer>(AdamOptions{.beta1 = 1.0}),
                   "AdamOptimizer: beta1"});
  cases.push_back({std::make_unique<AdamOptimizer>(AdamOptions{.beta2 = -0.1}),
                   "AdamOptimizer: beta2"});
  cases.push_back({std::make_unique<AdamOptimizer>(AdamOptions{.epsilon = 0}),
                   "AdamOptimizer: epsilon"});
  for (Case& c : cases) {
    Graph g;
    Output w = ops::Variable(g, Tensor::FromVector<float>({1, 2}), "w");
    Output loss = ops::Sum(g, ops::Square(g, w));
    auto train = c.optimizer->Minimize(g, loss);
    EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(train.status().message().find(c.expected), std::string::npos)
        << train.status();
  }
}

TEST(Optimizers, BadVariablesAndMissingGradientsAreNamed) {
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  Output w = ops::Variable(g, Tensor::FromVector<float>({1, 2}), "w");
  Output unused = ops::Variable(g, Tensor::FromVector<float>({3}), "unused");
  Output loss = ops::Sum(g, ops::Square(g, w));
  GradientDescentOptimizer sgd({.learning_rate = 0.1});

  // Not a variable, and not a float variable.
  const std::vector<Output> not_variable = {loss};
  auto a = sgd.Minimize(g, loss, step, not_variable);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("is not a Variable"), std::string::npos)
      << a.status();
  const std::vector<Output> integer = {step};
  auto b = sgd.Minimize(g, loss, step, integer);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("global_step"), std::string::npos)
      << b.status();

  // No gradient at all: the variables are named.
  const std::vector<Output> only_unused = {unused};
  auto c = sgd.Minimize(g, loss, step, only_unused);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("unused"), std::string::npos)
      << c.status();

  // A gradient for some variables is enough; the others are left alone.
  auto d = sgd.Minimize(g, loss, step);
  EXPECT_TRUE(d.ok()) << d.status();

  // A global step that is not an int64 variable.
  auto e = sgd.Minimize(g, loss, w);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("global_step 'w"), std::string::npos)
      << e.status();
}

TEST(Optimizers, ApplyOpsCheckShapesAndDTypesWhenBuilt) {
  Graph g;
  Output w = ops::Variable(g, Tensor::FromVector<float>({1, 2}), "w");
  Output lr = ops::Const(g, 0.1f);
  Output wrong_shape = ops::Const(g, Tensor::FromVector<float>({1, 2, 3}));
  Output wrong_dtype = ops::Const(g, Tensor::FromVector<double>({1, 2}));
  EXPECT_EQ(testing::StatusThrownBy([&] {
              ops::ApplyGradientDescent(g, w, lr, wrong_shape);
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::StatusThrownBy([&] {
              ops::ApplyGradientDescent(g, w, lr, wrong_dtype);
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::StatusThrownBy([&] {
              ops::ApplyGradientDescent(g, lr, lr, lr);
            }).code(),
            absl::StatusCode::kInvalidArgument);
}

CO_TEST(Optimizers, UpdatingAnUninitializedVariableNamesIt) {
  Graph g;
  Output w = ops::Variable(g, Tensor::FromVector<float>({1, 2}), "w");
  Operation update = ops::ApplyGradientDescent(
      g, w, ops::Const(g, 0.1f),
      ops::Const(g, Tensor::FromVector<float>({1, 1})));
  Session session(g, TestRuntime());
  RunArgs args{.targets = {update}};
  auto ran = co_await session.Run(std::move(args), asio::use_awaitable);
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ran.status().message().find("uninitialized value w"),
            std::string::npos)
      << ran.status();
}

}  // namespace
}  // namespace cosession::optimizers_test
