// Every hook method runs on the executor of the MonitoredSession operation
// that calls it: awaited from one io_context, all of them run on its thread,
// Begin and AfterCreateSession included.
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "tests/co_test.h"
#include "tests/test_util.h"

namespace cosession::hook_executor_test {
namespace {

namespace asio = boost::asio;

// Records, per method, the threads it ran on; `suspend` makes BeforeRun
// wait once (so the step runs as a coroutine of its own).
class ThreadRecordingHook : public SessionRunHook {
 public:
  explicit ThreadRecordingHook(bool suspend) : suspend_(suspend) {}
  absl::Status Begin(Graph&) override {
    Record("Begin");
    return absl::OkStatus();
  }
  asio::awaitable<absl::Status> AfterCreateSession(Session&,
                                                   Coordinator&) override {
    Record("AfterCreateSession");
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    Record("BeforeRun");
    if (suspend_) {
      co_await asio::post(co_await asio::this_coro::executor,
                          asio::use_awaitable);
    }
    co_return SessionRunArgs{};
  }
  asio::awaitable<absl::Status> AfterRun(SessionRunContext&,
                                         const SessionRunValues&) override {
    Record("AfterRun");
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::Status> End(Session&) override {
    Record("End");
    co_return absl::OkStatus();
  }
  bool MaySuspend() const override { return suspend_; }

  std::vector<std::pair<std::string, std::thread::id>> calls;

 private:
  void Record(const std::string& method) {
    calls.emplace_back(method, std::this_thread::get_id());
  }
  bool suspend_;
};

void ExpectAllOnThisThread(const ThreadRecordingHook& hook) {
  std::set<std::string> methods;
  for (const auto& [method, thread] : hook.calls) {
    methods.insert(method);
    EXPECT_EQ(thread, std::this_thread::get_id()) << method;
  }
  EXPECT_EQ(methods, (std::set<std::string>{"Begin", "AfterCreateSession",
                                            "BeforeRun", "AfterRun", "End"}));
}

asio::awaitable<void> CreateRunClose(
    std::shared_ptr<ThreadRecordingHook> hook) {
  Graph graph;
  Output x = ops::Placeholder(graph, DType::kFloat, TensorShape{}, "x");
  Output y = ops::Mul(graph, x, ops::Const(graph, 2.0f), "y");
  MonitoredSession::Hooks hooks{hook};
  MonitoredSessionOptions options;
  options.runtime = &testing::TestRuntime();
  auto created = co_await MonitoredSession::Create(
      graph, hooks, nullptr, options, asio::use_awaitable);
  CO_ASSERT_OK(created.status());
  RunArgs args;
  args.fetches.push_back(y);
  args.feeds.emplace_back(x, Tensor::Scalar(1.0f));
  for (int i = 0; i < 2; ++i) {
    CO_ASSERT_OK(
        (co_await (*created)->Run(args, asio::use_awaitable)).status());
  }
  CO_ASSERT_OK(co_await (*created)->Close(asio::use_awaitable));
}

CO_TEST(HookExecutor, EveryMethodOfAHookThatSuspendsRunsOnTheCallersLoop) {
  auto hook = std::make_shared<ThreadRecordingHook>(/*suspend=*/true);
  co_await CreateRunClose(hook);
  ExpectAllOnThisThread(*hook);
}

CO_TEST(HookExecutor, EveryMethodOfAHookThatNeverSuspendsRunsOnTheCallersLoop) {
  auto hook = std::make_shared<ThreadRecordingHook>(/*suspend=*/false);
  co_await CreateRunClose(hook);
  ExpectAllOnThisThread(*hook);
}

}  // namespace
}  // namespace cosession::hook_executor_test
