// Session: runs a Graph, step by step, with its own variable state.
//
//   cosession::Session session(graph);                 // Runtime::Default()
//   RunArgs initialize{.targets = {init}};
//   RunArgs step{.fetches = {loss}, .feeds = {{x, batch}}};
//   absl::StatusOr<std::vector<Tensor>> values =
//       co_await session.Run(initialize, asio::use_awaitable);
//   values = co_await session.Run(step, asio::use_awaitable);
//
// The RunArgs are named before the co_await: g++ 12 rejects a braced list
// inside a co_await's operand ("array used as initializer";
// docs/async_pitfalls.md).
//
// Run is an Asio initiating function: the same call works with
// asio::use_awaitable, asio::use_future, a callback, asio::deferred, and the
// awaitable operators (`co_await (session.Run(args, use_awaitable) ||
// timer.async_wait(use_awaitable))` cancels the run when the timer wins).
//
// Guarantees of Run:
//   * It completes exactly once, with the fetched values (in the order of
//     RunArgs::fetches then fetch_names) or an error, through the completion
//     handler's associated executor -- never inline inside the call.
//   * Bad input never crashes: a feed of the wrong dtype or an incompatible
//     shape, an unknown tensor name, a fetch that needs an unfed placeholder
//     are InvalidArgument naming the tensor; reading an uninitialised
//     variable is FailedPrecondition.
//   * Per-operation cancellation (the handler's cancellation slot; any type)
//     stops the run: no new op starts, async kernels are cancelled, and the
//     run completes promptly with Cancelled. A cancellation emitted before
//     the run started or after it completed has no effect. An op already
//     running when the cancellation arrives finishes first (synchronous
//     kernels are not interrupted).
//   * RunOptions::timeout: DeadlineExceeded when exceeded.
//   * Cheap ops run on the calling thread; expensive ops and async kernels on
//     the Runtime's pool (see async/executor.h).
//
// Thread safety: thread-safe. Several runs may be in flight at once; each
// variable update is atomic. The Graph must not change while runs are in
// flight (finalize it) and must outlive the Session and its runs; the
// Runtime must outlive them too. Runs in flight keep the session's state
// alive, so destroying the Session object does not cut them short.
#ifndef COSESSION_ASYNC_SESSION_H_
#define COSESSION_ASYNC_SESSION_H_

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cosession/async/completion.h"
#include "cosession/async/executor.h"
#include "cosession/async/run_args.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/resource_manager.h"
#include "cosession/graph/tensor.h"

namespace cosession {

namespace detail {
struct SessionState;
}  // namespace detail

class Session {
 public:
  using RunResult = absl::StatusOr<std::vector<Tensor>>;
  using RunWithMetadataResult = absl::StatusOr<RunOutputs>;

  explicit Session(const Graph& graph, Runtime& runtime = Runtime::Default());
  // A session over variables shared with other sessions (as sessions of one
  // TensorFlow server share them): every session built over the same
  // ResourceManager sees the others' assignments. Null = a fresh one.
  Session(const Graph& graph, Runtime& runtime,
          std::shared_ptr<ResourceManager> shared_resources);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  // Completion signature: void(absl::StatusOr<std::vector<Tensor>>).
  // Everything the run needs is taken from `args` before Run returns (its
  // plan found, its fed values shared), so that a loop running the same
  // args copies none of their vectors; an error in them (an unknown name, a
  // feed of the wrong shape) still completes the operation, through the
  // handler.
  template <typename CompletionToken>
  auto Run(const RunArgs& args, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(RunResult)>(
        [](auto handler, std::shared_ptr<detail::SessionState> state,
           PreparedRun run) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartPrepared(std::move(state), std::move(run), slot,
                        PostToHandler<RunWithMetadataResult>(
                            std::move(handler),
                            [](RunWithMetadataResult&& result) -> RunResult {
                              if (!result.ok()) {
                                return std::move(result).status();
                              }
                              return std::move(result->values);
                            }));
        },
        token, state_, Prepare(*state_, args, {}));
  }

  // Like Run, and also returns the run's metadata (step stats when
  // RunOptions::kFullTrace was asked for). Completion signature:
  // void(absl::StatusOr<RunOutputs>).
  template <typename CompletionToken>
  auto RunWithMetadata(const RunArgs& args, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(RunWithMetadataResult)>(
        [](auto handler, std::shared_ptr<detail::SessionState> state,
           PreparedRun run) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartPrepared(
              std::move(state), std::move(run), slot,
              PostToHandler<RunWithMetadataResult>(
                  std::move(handler), [](RunWithMetadataResult&& result) {
                    return std::move(result);
                  }));
        },
        token, state_, Prepare(*state_, args, {}));
  }

  // Blocks the calling thread until the run completes. For plain threads:
  // called on a pool thread of this session's Runtime it would wait for work
  // queued behind itself, so it refuses with FailedPrecondition instead.
  RunResult RunBlocking(RunArgs args);

  const Graph& graph() const;
  Runtime& runtime() const;
  // The session's variable values and random generators.
  ResourceManager& resources() const;
  const std::shared_ptr<ResourceManager>& shared_resources() const;

 private:
  // The monitored step runs hooks' merged args without copying them.
  friend class StepRunner;

  // RunWithMetadata over args it only borrows: they must stay alive until
  // the operation is initiated (for use_awaitable, until the co_await
  // expression is evaluated); the run itself keeps nothing of them.
  template <typename CompletionToken>
  auto RunBorrowed(const RunArgs& args, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(RunWithMetadataResult)>(
        [](auto handler, std::shared_ptr<detail::SessionState> state,
           const RunArgs* args) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          StartRun(std::move(state), *args, slot,
                   PostToHandler<RunWithMetadataResult>(
                       std::move(handler), [](RunWithMetadataResult&& result) {
                         return std::move(result);
                       }));
        },
        token, state_, &args);
  }

  // What a run takes from its RunArgs: the plan of its feeds, fetches and
  // targets, and the values fed; or why it cannot run.
  struct PreparedRun {
    absl::Status status;  // not OK: the run completes with it, running nothing
    std::shared_ptr<const ExecutionPlan> plan;
    std::vector<Tensor> feed_values;  // in the plan's feed order
    RunOptions options;
  };
  // `extra_fetches` are fetched after those of `args` (after its
  // fetch_names, once resolved): how the monitored step adds its hooks'
  // fetches without copying the caller's arguments.
  static PreparedRun Prepare(detail::SessionState& state, const RunArgs& args,
                             absl::Span<const Output> extra_fetches);
  static void StartPrepared(std::shared_ptr<detail::SessionState> state,
                            PreparedRun run,
                            boost::asio::cancellation_slot slot,
                            RunDoneCallback done);

  // Prepare and StartPrepared: takes what it needs from `args` before it
  // returns.
  static void StartRun(std::shared_ptr<detail::SessionState> state,
                       const RunArgs& args, boost::asio::cancellation_slot slot,
                       RunDoneCallback done);
  // The same, with `extra_fetches` (see Prepare).
  static void StartRun(std::shared_ptr<detail::SessionState> state,
                       const RunArgs& args,
                       absl::Span<const Output> extra_fetches,
                       boost::asio::cancellation_slot slot,
                       RunDoneCallback done);

  std::shared_ptr<detail::SessionState> state_;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_SESSION_H_
