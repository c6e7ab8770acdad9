#include "cosession/hooks/global_step_waiter_hook.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "cosession/async/timer_executor.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

}  // namespace

absl::StatusOr<std::shared_ptr<GlobalStepWaiterHook>>
GlobalStepWaiterHook::Create(GlobalStepWaiterHookOptions options) {
  if (options.poll_interval <= std::chrono::nanoseconds::zero()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GlobalStepWaiterHook: poll_interval must be positive, got ",
        options.poll_interval.count(), "ns"));
  }
  options.sink = SinkOrStderr(std::move(options.sink));
  return std::shared_ptr<GlobalStepWaiterHook>(
      new GlobalStepWaiterHook(std::move(options)));
}

absl::Status GlobalStepWaiterHook::Begin(Graph& graph) {
  started_ = false;
  return step_.Find(graph, "GlobalStepWaiterHook");
}

asio::awaitable<absl::StatusOr<SessionRunArgs>> GlobalStepWaiterHook::BeforeRun(
    SessionRunContext& context) {
  if (started_) co_return SessionRunArgs{};
  const int64_t target = options_.wait_until_step;
  if (target <= 0) {
    started_ = true;
    co_return SessionRunArgs{};
  }
  // The cancellation state is checked before every co_await: awaiting
  // anything after a cancellation throws (docs/async_pitfalls.md, 2), while a
  // this_coro query does not.
  auto state = co_await asio::this_coro::cancellation_state;
  int64_t current = -1;
  auto cancelled = [&] {
    return absl::CancelledError(absl::StrCat(
        "GlobalStepWaiterHook: cancelled while waiting for global step ",
        target, " (at ", current, ")"));
  };
  int64_t last_logged_step = 0;
  bool logged = false;
  asio::steady_timer timer(
      TimerExecutorFor(co_await asio::this_coro::executor));
  while (true) {
    if (state.cancelled() != asio::cancellation_type::none)
      co_return cancelled();
    absl::StatusOr<int64_t> step = co_await step_.Read(context.session());
    if (!step.ok()) co_return step.status();
    current = *step;
    if (*step >= target) {
      started_ = true;
      co_return SessionRunArgs{};
    }
    if (!logged) {
      options_.sink(absl::StrCat("Waiting for global step ", target,
                                 " before starting training."));
      logged = true;
      last_logged_step = *step;
    } else if (*step - last_logged_step > 1000) {
      options_.sink(absl::StrCat("Waiting for global step ", target,
                                 " before starting training. Current step is ",
                                 *step, "."));
      last_logged_step = *step;
    }
    if (state.cancelled() != asio::cancellation_type::none)
      co_return cancelled();
    timer.expires_after(options_.poll_interval);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return cancelled();
  }
}

}  // namespace cosession
