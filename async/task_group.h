// TaskGroup: coroutines started together on one executor and always joined
// -- how a step awaits the BeforeRun (or AfterRun) of hooks that suspend.
//
//   TaskGroup group(executor);
//   for (auto& hook : hooks) group.Spawn(CallBeforeRun(hook, ...));
//   absl::Status first_failure = co_await group.Join(asio::use_awaitable);
//
// Contract:
//   * Spawn starts an awaitable<absl::Status> at once, as a coroutine of
//     its own on the group's executor (it runs up to its first suspension
//     inside the call), in the order of the calls. An exception escaping
//     it becomes its status (async/status_from_exception.h, naming `what`).
//   * The first task that fails (a non-OK status) makes the group cancel
//     every other task (terminal cancellation), and a Spawn after that
//     starts nothing. CancelAll does the same on request.
//   * Join completes once every spawned task has finished -- always: its
//     cancellation (per-operation, any type) cancels the tasks, and Join
//     still waits for them to finish, so nothing a task refers to can go
//     away under it. It completes with the first failure, where a failure
//     other than Cancelled wins over the Cancelled of the tasks it cancelled;
//     OK when every task succeeded. It completes through the handler's
//     executor, never inside the call. A cancellation that reached the
//     awaiting coroutine before Join was initiated is not seen by Join:
//     check for it and call CancelAll first.
//   * Join is called once, and the destructor requires it to have completed
//     when anything was spawned (the owner always waits for its tasks).
//     Nothing here uses asio::detached.
//
// Thread safety: not thread-safe. Spawn, Join, CancelAll, the tasks and
// the cancellation of Join must all run on the group's executor, which must
// not run two handlers at once (a strand or a single-threaded context).
#ifndef COSESSION_ASYNC_TASK_GROUP_H_
#define COSESSION_ASYNC_TASK_GROUP_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <cstddef>
#include <deque>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "cosession/async/completion.h"

namespace cosession {

class TaskGroup {
 public:
  // `what` names the tasks in the status of an exception ("BeforeRun").
  TaskGroup(boost::asio::any_io_executor executor, std::string what);
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;
  ~TaskGroup();

  void Spawn(boost::asio::awaitable<absl::Status> task);
  void CancelAll();

  // Signature void(absl::Status); see the file comment.
  template <typename CompletionToken>
  auto Join(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartJoin(slot,
                    PostToHandler<absl::Status>(
                        std::move(handler), [](absl::Status s) { return s; }));
        },
        token);
  }

 private:
  void StartJoin(boost::asio::cancellation_slot slot,
                 absl::AnyInvocable<void(absl::Status)> done);
  void OnTaskDone(absl::Status status);
  void CompleteJoinIfDone();

  const boost::asio::any_io_executor executor_;
  const std::string what_;
  // One per spawned task; a deque, so that the signals never move.
  std::deque<boost::asio::cancellation_signal> signals_;
  std::deque<bool> finished_;
  size_t running_ = 0;
  bool cancelled_ = false;
  absl::Status first_failure_;
  absl::AnyInvocable<void(absl::Status)> join_;
  bool joined_ = false;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_TASK_GROUP_H_
