// FeedFnHook: TensorFlow's FeedFnHookTest (feeding a placeholder) and the
// error paths, under a MonitoredSession.
#include "cosession/hooks/feed_fn_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <stdexcept>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::feed_fn_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

struct PlusOneGraph : StepGraph {
  PlusOneGraph() {
    x = ops::Placeholder(g, DType::kFloat, TensorShape{}, "x");
    y = ops::Add(g, x, ops::Const(g, 1.0f), "y");
  }
  Output x, y;
};

std::shared_ptr<FeedFnHook> MakeHook(FeedFnHookOptions options) {
  auto hook = FeedFnHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

TEST(FeedFnHook, CreateRejectsAnEmptyFeedFn) {
  auto hook = FeedFnHook::Create({});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("feed_fn"), std::string::npos);
}

// TF: test_feeding_placeholder.
CO_TEST(FeedFnHook, FeedsWhatTheFunctionReturnsInEveryStep) {
  PlusOneGraph graph;
  float next = 1.0f;
  int calls = 0;
  auto hook = MakeHook({.feed_fn = [&]() -> absl::StatusOr<FeedFnHook::Feeds> {
    ++calls;
    return FeedFnHook::Feeds{{graph.x, Tensor::Scalar(next++)}};
  }});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs fetch_y{.fetches = {graph.y}};
  for (float expected : {2.0f, 3.0f, 4.0f}) {
    auto values = co_await ms->Run(fetch_y, asio::use_awaitable);
    CO_ASSERT_OK(values.status());
    EXPECT_EQ(values->at(0).scalar<float>(), expected);
  }
  EXPECT_EQ(calls, 3);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(FeedFnHook, FeedingWhatTheCallerFeedsIsInvalidArgumentAndNothingRuns) {
  PlusOneGraph graph;
  auto hook = MakeHook({.feed_fn = [&]() -> absl::StatusOr<FeedFnHook::Feeds> {
    return FeedFnHook::Feeds{{graph.x, Tensor::Scalar(1.0f)}};
  }});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args = graph.Train();
  args.fetches = {graph.y};
  args.feeds = {{graph.x, Tensor::Scalar(5.0f)}};
  auto values = co_await ms->Run(args, asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("x:0"), std::string::npos);
  auto step = co_await testing::RawRun(ms->raw_session(), graph.ReadStep());
  CO_ASSERT_TRUE(step.size() == 1);
  EXPECT_EQ(step[0].scalar<int64_t>(), 0) << "the train op did not run";
}

CO_TEST(FeedFnHook, OutOfRangeFromTheFunctionStopsTheSessionCleanly) {
  PlusOneGraph graph;
  int left = 2;
  auto hook = MakeHook({.feed_fn = [&]() -> absl::StatusOr<FeedFnHook::Feeds> {
    if (left-- == 0) return absl::OutOfRangeError("input exhausted");
    return FeedFnHook::Feeds{{graph.x, Tensor::Scalar(1.0f)}};
  }});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  int steps = 0;
  absl::Status last;
  while (!ms->ShouldStop() && steps < 10) {
    last = (co_await ms->Run(graph.Train(), asio::use_awaitable)).status();
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(last.code(), absl::StatusCode::kOutOfRange);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(FeedFnHook, AThrowingFunctionFailsTheStepWithInternal) {
  PlusOneGraph graph;
  auto hook = MakeHook({.feed_fn = []() -> absl::StatusOr<FeedFnHook::Feeds> {
    throw std::runtime_error("reader broke");
  }});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Train(), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(values.status().message().find("reader broke"), std::string::npos);
}

}  // namespace
}  // namespace cosession::feed_fn_hook_test
