// Coordinator: a stop flag, the first error, coordinated tasks and threads,
// and a join with a grace period -- TensorFlow's tf.train.Coordinator for
// coroutines on Boost.Asio.
//
//   Coordinator coord(io.get_executor());
//   coord.Spawn("loader", LoadBatches(queue));         // awaitable<Status>
//   coord.Loop("summaries", 10s, [&] { return WriteSummary(); });
//   ...
//   coord.RequestStop().IgnoreError();                  // from anywhere
//   absl::Status s = co_await coord.Join(120s, asio::use_awaitable);
//
// Contract:
//   * Stop requests. RequestStop(status) sets the stop flag. A non-OK status
//     whose code is not clean (CoordinatorOptions::clean_stop_codes, default
//     OutOfRange) is recorded if no error is recorded yet: the first error
//     wins, also when it comes after a clean stop request. Cancelled counts as
//     clean once a stop was requested before (the Cancelled of a task that
//     the stop itself cancelled is not an error); as the first stop it is an
//     error like any other -- to stop because a caller was cancelled, pass OK
//     with the reason "cancelled". After Join completed, RequestStop still
//     sets the flag but records no error and no reason.
//   * ClearStop() clears the flag, the recorded error and the reason; later
//     WaitForStop calls wait for the next stop. It does not un-cancel tasks
//     that the earlier stop cancelled.
//   * Tasks. Spawn runs an awaitable<absl::Status> on the coordinator's
//     strand. A non-OK result requests stop with it (so a clean code stops
//     cleanly); an exception becomes Internal, except the system_error of an
//     operation that was cancelled (operation_aborted, channel_cancelled),
//     which becomes Cancelled -- clean when the stop caused it.
//     Every task whose Spawn returned before a stop was requested runs, as
//     TensorFlow's threads started before a stop do, and Join waits for it:
//     a stop emits terminal cancellation, on the strand, to every started
//     task, and a task whose queued start comes after the stop request gets
//     the same cancellation as soon as it first suspends (that wait and the
//     next one it awaits are cancelled; Asio's throw_if_cancelled rules
//     apply). A task spawned while the flag is set does not run and counts
//     as Cancelled.
//     Loop is a task that calls a plain function every `interval`.
//   * Threads. RegisterThread returns a handle; the thread is "running" until
//     handle.Done() or the handle's destruction.
//   * Stop callbacks run on the strand, once each, when a stop is requested
//     (at once if it already was): a callback is one-shot. After
//     RemoveStopCallback(id) returns, the callback is not running and will not
//     run -- unless it is called from inside that callback itself, which
//     returns at once.
//   * Join waits until every task and registered thread has finished or a
//     stop was requested, then up to `grace_period` for the rest (a steady
//     timer on the strand). It completes with the recorded error if any; else
//     DeadlineExceeded naming the tasks and threads still running ("Coordinator
//     stopped with threads still running: loader, writer"); else OK. Join does
//     not request stop itself. A Join after a completed Join completes at once
//     with the same status; a Join while another is pending completes with
//     FailedPrecondition.
//
// Asynchronous operations (WaitForStop, Join): signature void(absl::Status);
// each completes exactly once, through the completion handler's associated
// executor (never inline inside the initiating call), with outstanding work
// counted on it meanwhile. Per-operation cancellation (any type) through the
// handler's cancellation slot completes the operation with Cancelled. A
// cancellation emitted before the operation was initiated or after it
// completed has no effect. Cancelling a Join does not mark the coordinator as
// joined.
//
// Thread safety: every method is thread-safe. Flag, error and reason sit
// behind a mutex (ShouldStop is a single atomic load); waiters, tasks and the
// join live on a strand made from the executor. Stop callbacks and task
// bodies run on that strand, one at a time.
//
// Lifetime: the executor's execution context must outlive the Coordinator
// and keep being run until the work it posted finished. The internal state is
// shared with posted work, running tasks and thread handles, so it outlives
// the Coordinator object as long as they need it. The destructor removes every
// stop callback (waiting for one that is running on another thread), then
// requests stop (completing every WaitForStop with OK and cancelling every
// task). It waits for nothing else: tasks and threads finish on their own, and
// a pending Join still completes (after its grace period at most).
//
// JoinBlocking / WaitForStopBlocking are for plain threads. JoinBlocking
// needs another thread to run the executor; called on the executor's own
// thread (detectable for io_context, thread_pool, a Runtime's pool and strands
// of them) it refuses with FailedPrecondition instead of deadlocking.
#ifndef COSESSION_ASYNC_COORDINATOR_H_
#define COSESSION_ASYNC_COORDINATOR_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "cosession/async/completion.h"

namespace cosession {

namespace detail {
struct CoordinatorState;
}  // namespace detail

struct CoordinatorOptions {
  // Codes that stop without being an error (TF's clean_stop_exception_types).
  std::vector<absl::StatusCode> clean_stop_codes = {
      absl::StatusCode::kOutOfRange};
};

class Coordinator {
 public:
  using Strand = boost::asio::strand<boost::asio::any_io_executor>;

  // All asynchronous state lives on a strand made from `executor`.
  explicit Coordinator(boost::asio::any_io_executor executor,
                       CoordinatorOptions options);
  // The default options. An overload, not a default argument, so that
  // `Coordinator c(co_await this_coro::executor);` compiles, and runs
  // correctly, with g++ 12 (docs/async_pitfalls.md, 9).
  explicit Coordinator(boost::asio::any_io_executor executor);
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  // Removes the stop callbacks and requests stop; see the file comment.
  ~Coordinator();

  // Requests a stop, from any thread. Returns the error the coordinator holds
  // after the call (OK if none); after Join completed, returns `status`.
  // absl::Status is [[nodiscard]]: callers that only want the stop write
  // `coord.RequestStop().IgnoreError();`.
  absl::Status RequestStop(absl::Status status = absl::OkStatus());
  // Same, with a human-readable reason kept for stop_reason() when this is
  // the first stop request ("hook X asked", "input exhausted", "cancelled").
  absl::Status RequestStop(absl::Status status, std::string reason);
  bool ShouldStop() const;
  // Why the first stop was requested ("" if no stop is requested). Without
  // an explicit reason: the status' text, or "stop requested".
  std::string stop_reason() const;
  // The recorded error (OK if none).
  absl::Status status() const;
  // Clears the flag, the recorded error and the reason (TF's clear_stop).
  void ClearStop();

  // Completes with OK when a stop is (or already was) requested, Cancelled
  // when cancelled. Signature void(absl::Status).
  template <typename CompletionToken>
  auto WaitForStop(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [](auto handler, std::shared_ptr<detail::CoordinatorState> state) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartWaitForStop(
              std::move(state), slot,
              PostToHandler<absl::Status>(std::move(handler),
                                          [](absl::Status s) { return s; }));
        },
        token, state_);
  }

  // Registers a one-shot callback run on the strand when a stop is requested
  // (soon, if it already was). Returns an id for RemoveStopCallback.
  uint64_t AddStopCallback(absl::AnyInvocable<void()> callback);
  // After this returns, the callback is not running (unless this is called
  // from inside it) and will not run. Unknown or spent ids are ignored.
  void RemoveStopCallback(uint64_t id);

  // Runs `task` on the strand as a coordinated task named `name`.
  void Spawn(std::string name, boost::asio::awaitable<absl::Status> task);
  // TF's LooperThread: calls `fn` on the strand at once, then every
  // `interval`, until a stop; an error (or exception) from `fn` requests stop.
  void Loop(std::string name, std::chrono::nanoseconds interval,
            std::function<absl::Status()> fn);
  // The same for a `fn` that returns nothing (as LooperThread's target):
  // only an exception from it requests stop.
  template <typename Fn>
  requires std::is_void_v<std::invoke_result_t<Fn&>>
  void Loop(std::string name, std::chrono::nanoseconds interval, Fn fn) {
    Loop(std::move(name), interval,
         std::function<absl::Status()>([fn = std::move(fn)]() mutable {
           fn();
           return absl::OkStatus();
         }));
  }
  // Either, unnamed (the public contract's Loop(interval, fn)): its task is
  // named "Loop" in errors and reports.
  template <typename Fn>
  void Loop(std::chrono::nanoseconds interval, Fn&& fn) {
    Loop("Loop", interval, std::forward<Fn>(fn));
  }

  // A registered plain thread; "running" until Done() or destruction.
  class ThreadRegistration {
   public:
    ThreadRegistration() = default;
    ThreadRegistration(ThreadRegistration&& other) noexcept;
    ThreadRegistration& operator=(ThreadRegistration&& other) noexcept;
    ~ThreadRegistration();
    // Marks the thread finished. Idempotent.
    void Done();

   private:
    friend class Coordinator;
    ThreadRegistration(std::shared_ptr<detail::CoordinatorState> state,
                       uint64_t id);
    std::shared_ptr<detail::CoordinatorState> state_;
    uint64_t id_ = 0;
  };
  ThreadRegistration RegisterThread(std::string name);
  // Blocks until a stop is requested or `timeout` passed; true if stopped.
  bool WaitForStopBlocking(std::chrono::nanoseconds timeout);

  // See the file comment. Signature void(absl::Status).
  template <typename CompletionToken>
  auto Join(std::chrono::nanoseconds grace_period, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [](auto handler, std::shared_ptr<detail::CoordinatorState> state,
           std::chrono::nanoseconds grace_period) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartJoin(std::move(state), grace_period, slot,
                    PostToHandler<absl::Status>(
                        std::move(handler), [](absl::Status s) { return s; }));
        },
        token, state_, grace_period);
  }
  // Blocks the calling thread until Join completes; FailedPrecondition when
  // called on the coordinator's executor thread.
  absl::Status JoinBlocking(std::chrono::nanoseconds grace_period);
  // True once a Join completed (not when it was cancelled).
  bool joined() const;

  // The strand on which tasks, stop callbacks and waits run.
  Strand strand() const;

 private:
  using DoneCallback = absl::AnyInvocable<void(absl::Status)>;
  static void StartWaitForStop(std::shared_ptr<detail::CoordinatorState> state,
                               boost::asio::cancellation_slot slot,
                               DoneCallback done);
  static void StartJoin(std::shared_ptr<detail::CoordinatorState> state,
                        std::chrono::nanoseconds grace_period,
                        boost::asio::cancellation_slot slot, DoneCallback done);

  std::shared_ptr<detail::CoordinatorState> state_;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_COORDINATOR_H_
