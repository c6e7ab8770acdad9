// FinalOpsHook: TensorFlow's FinalOpsHookTest cases (scalar, tensor, with
// feeds, OutOfRange) under a MonitoredSession.
#include "cosession/hooks/final_ops_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::final_ops_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

std::shared_ptr<FinalOpsHook> MakeHook(FinalOpsHookOptions options) {
  auto hook = FinalOpsHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

TEST(FinalOpsHook, CreateRejectsNothingToRun) {
  auto hook = FinalOpsHook::Create({});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("final_ops"), std::string::npos);
}

TEST(FinalOpsHook, CreateRejectsAnEmptyOutput) {
  auto hook = FinalOpsHook::Create({.final_ops = {Output()}});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("final_ops"), std::string::npos);
}

// TF: test_final_ops_is_scalar_tensor / test_final_ops_is_tensor.
CO_TEST(FinalOpsHook, EndRunsTheFinalOpsAndKeepsTheirValues) {
  StepGraph graph;
  Output four = ops::Const(graph.g, 4, "four");
  Output list = ops::Const(
      graph.g, Tensor::FromVector<int32_t>({1, 6, 3, 5, 2, 4}), "list");
  auto hook = MakeHook({.final_ops = {four, list, graph.global_step}});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  for (int i = 0; i < 3; ++i) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  }
  EXPECT_FALSE(hook->final_ops_values().has_value());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  CO_ASSERT_TRUE(hook->final_ops_values().has_value());
  const auto& values = *hook->final_ops_values();
  CO_ASSERT_TRUE(values.size() == 3);
  EXPECT_EQ(values[0].scalar<int32_t>(), 4);
  auto flat = values[1].flat<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(flat.begin(), flat.end()),
            (std::vector<int32_t>{1, 6, 3, 5, 2, 4}));
  EXPECT_EQ(values[2].scalar<int64_t>(), 3) << "the state at the end";
}

// TF: test_final_ops_with_dictionary (a fed placeholder).
CO_TEST(FinalOpsHook, EndFeedsTheGivenFeeds) {
  StepGraph graph;
  Output in = ops::Placeholder(graph.g, DType::kFloat, TensorShape{2}, "in");
  Output doubled = ops::Mul(graph.g, in, ops::Const(graph.g, 2.0f), "doubled");
  auto hook =
      MakeHook({.final_ops = {doubled},
                .feeds = {{in, Tensor::FromVector<float>({4.0f, -3.0f})}}});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  CO_ASSERT_TRUE(hook->final_ops_values().has_value());
  auto flat = hook->final_ops_values()->at(0).flat<float>();
  EXPECT_EQ(std::vector<float>(flat.begin(), flat.end()),
            (std::vector<float>{8.0f, -6.0f}));
}

CO_TEST(FinalOpsHook, AFailingFinalRunIsEndsErrorAndLeavesNoValues) {
  StepGraph graph;
  Output in = ops::Placeholder(graph.g, DType::kFloat, TensorShape{}, "unfed");
  auto hook = MakeHook({.final_ops = {in}});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInvalidArgument) << closed;
  EXPECT_NE(closed.message().find("unfed"), std::string::npos) << closed;
  EXPECT_FALSE(hook->final_ops_values().has_value());
}

}  // namespace
}  // namespace cosession::final_ops_hook_test
