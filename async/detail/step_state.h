// StepState: the cancellation of one asynchronous operation of a
// MonitoredSession (a step, a Close, a Create) that runs as a coroutine on
// an executor -- and SpawnWithCancellation, which starts such a coroutine.
//
// A cancellation_signal is not thread-safe, so the operation's own signal is
// emitted only on the operation's executor (CancelFromAnywhere posts
// there); callers' slots, a coordinator's stop and other threads reach it
// that way. Internal to async/.
#ifndef COSESSION_ASYNC_DETAIL_STEP_STATE_H_
#define COSESSION_ASYNC_DETAIL_STEP_STATE_H_

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "cosession/async/status_from_exception.h"

namespace cosession::detail {

struct StepState {
  explicit StepState(boost::asio::any_io_executor ex)
      : executor(std::move(ex)) {}
  boost::asio::any_io_executor executor{};
  boost::asio::cancellation_signal signal{};  // emitted only on `executor`
  // Written on `executor`; read from cancellation handlers anywhere.
  std::atomic<bool> finished{false};

  // From any thread: cancel the operation's waits, on its own executor.
  static void CancelFromAnywhere(const std::shared_ptr<StepState>& step,
                                 boost::asio::cancellation_type type =
                                     boost::asio::cancellation_type::terminal) {
    boost::asio::post(step->executor, [step, type] {
      if (!step->finished) step->signal.emit(type);
    });
  }
};

// Runs `body` as the operation `step` on step->executor (a strand or a
// single-threaded executor); register `step` wherever a stop must find it
// before calling this. A cancellation emitted on `caller` (from any thread)
// first calls on_caller_cancel() on the emitting thread, then cancels the
// body's waits with the same cancellation type. When the body finished,
// on_finish() runs, then `done` gets the result -- exactly once; an
// exception escaping the body becomes StatusFromException(e, what).
template <typename Result>
void SpawnWithCancellation(std::shared_ptr<StepState> step,
                           boost::asio::awaitable<Result> body,
                           boost::asio::cancellation_slot caller,
                           absl::AnyInvocable<void(Result)> done,
                           std::string what,
                           std::function<void()> on_caller_cancel,
                           std::function<void()> on_finish) {
  if (caller.is_connected()) {
    caller.assign([step, on_caller_cancel = std::move(on_caller_cancel)](
                      boost::asio::cancellation_type type) {
      if (step->finished) return;
      if (on_caller_cancel) on_caller_cancel();
      StepState::CancelFromAnywhere(step, type);
    });
  }
  auto executor = step->executor;
  boost::asio::cancellation_slot slot = step->signal.slot();
  boost::asio::co_spawn(
      executor, std::move(body),
      boost::asio::bind_cancellation_slot(
          slot, [step = std::move(step), what = std::move(what),
                 done = std::move(done), on_finish = std::move(on_finish)](
                    std::exception_ptr e, Result result) mutable {
            step->finished = true;
            if (on_finish) on_finish();
            if (e) result = StatusFromException(e, what);
            done(std::move(result));
          }));
}

}  // namespace cosession::detail

#endif  // COSESSION_ASYNC_DETAIL_STEP_STATE_H_
