// NanTensorHook: TensorFlow's NanTensorHookTest cases (fail, stop, no NaN)
// under a MonitoredSession.
#include "cosession/hooks/nan_tensor_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <limits>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::nan_tensor_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CapturedLog;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

// loss = the fed value (a placeholder), so each step chooses its loss.
struct LossGraph : testing::FedValueGraph {
  LossGraph() : FedValueGraph("loss") {}
};

std::shared_ptr<NanTensorHook> MakeHook(NanTensorHookOptions options) {
  auto hook = NanTensorHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(NanTensorHook, CreateRejectsAnEmptyLoss) {
  auto hook = NanTensorHook::Create({});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("loss"), std::string::npos);
}

TEST(NanTensorHook, CreateRejectsAnIntegerLossNamingIt) {
  Graph g;
  Output count = ops::Const(g, int64_t{3}, "count");
  auto hook = NanTensorHook::Create({.loss = count});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("count:0"), std::string::npos);
}

// TF: test_fatal_error.
CO_TEST(NanTensorHook, ANaNLossFailsTheStepWithTensorFlowsMessage) {
  LossGraph graph;
  CapturedLog log;
  auto hook = MakeHook({.loss = graph.value, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  auto result = co_await ms->Run(graph.TrainWith(kNaN), asio::use_awaitable);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("NaN loss during training."),
            std::string::npos)
      << result.status();
  EXPECT_FALSE(ms->ShouldStop());
  CO_ASSERT_TRUE(log.lines->size() == 1);
  EXPECT_EQ(log.lines->at(0), "Model diverged with loss = NaN.");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// TF: test_non_fatal_error.
CO_TEST(NanTensorHook, WithoutFailOnNanLossANaNLossRequestsAStop) {
  LossGraph graph;
  CapturedLog log;
  auto hook = MakeHook(
      {.loss = graph.value, .fail_on_nan_loss = false, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  auto result = co_await ms->Run(graph.TrainWith(kNaN), asio::use_awaitable);
  CO_ASSERT_OK(result.status());
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(),
            "hook 'NanTensorHook' requested stop: loss is NaN");
  EXPECT_EQ(log.lines->size(), 1u);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(NanTensorHook, AFiniteOrInfiniteLossNeitherFailsNorStops) {
  LossGraph graph;
  CapturedLog log;
  auto hook = MakeHook({.loss = graph.value, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  for (float loss : {1.0f, 0.0f, std::numeric_limits<float>::infinity()}) {
    CO_ASSERT_OK((co_await ms->Run(graph.TrainWith(loss), asio::use_awaitable))
                     .status());
  }
  EXPECT_FALSE(ms->ShouldStop());
  EXPECT_TRUE(log.lines->empty());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(NanTensorHook, ANaNInAnyElementOfAVectorLossCounts) {
  StepGraph graph;
  Output in = ops::Placeholder(graph.g, DType::kDouble, TensorShape{3}, "in");
  auto hook = MakeHook({.loss = in, .sink = CapturedLog().Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args = graph.Train();
  args.feeds.emplace_back(in,
                          Tensor::FromVector<double>({1.0, std::nan(""), 2.0}));
  auto result = co_await ms->Run(args, asio::use_awaitable);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

CO_TEST(NanTensorHook, AfterANaNFailureCloseSkipsEnd) {
  LossGraph graph;
  // A FinalOps-like probe: a hook that records whether End ran.
  struct EndProbe : SessionRunHook {
    bool ended = false;
    asio::awaitable<absl::Status> End(Session&) override {
      ended = true;
      co_return absl::OkStatus();
    }
  };
  auto probe = std::make_shared<EndProbe>();
  auto hook = MakeHook({.loss = graph.value, .sink = CapturedLog().Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook, probe));
  CO_ASSERT_TRUE(ms != nullptr);
  auto result = co_await ms->Run(graph.TrainWith(kNaN), asio::use_awaitable);
  EXPECT_FALSE(result.ok());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_FALSE(probe->ended);
}

}  // namespace
}  // namespace cosession::nan_tensor_hook_test
