// Delivering a result to an Asio completion handler the way every public
// async operation of cosession must: exactly once, through the handler's
// associated executor (never inline in the initiating call, never on a
// foreign thread), with outstanding work counted on that executor meanwhile,
// and with the handler's cancellation slot cleared before the handler runs.
#ifndef COSESSION_ASYNC_COMPLETION_H_
#define COSESSION_ASYNC_COMPLETION_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/defer.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/functional/any_invocable.h"

namespace cosession {
namespace detail {

// What an io_context's executor becomes once it counts outstanding work.
using TrackedIoContextExecutor = decltype(boost::asio::prefer(
    std::declval<boost::asio::io_context::executor_type>(),
    boost::asio::execution::outstanding_work.tracked));

// Queues `function` through the untracked form of `tracked` (the queued
// function is outstanding work of its context by itself), never running it
// inline. As a continuation (asio::defer, not post): a completion is the
// continuation of whatever completed the operation, and when that ran on a
// thread of the handler's io_context -- a run that finished inline, on the
// coroutine's own thread -- the io_context queues it on that thread without
// taking its lock or touching its shared work count; the thread's queue
// joins the context's when the current handler returns. From any other
// thread defer queues as post does. (An io_context promises no order
// between separately queued functions either way; a strand keeps its
// order for defer as for post.)
//
// The common handler -- a coroutine's on an io_context, reached through
// any_io_executor -- is queued through the io_context's own executor: the
// type-erased executor would copy itself for each property it is asked for
// and reach the context through function pointers (about a third of the
// cost of completing a trivial run).
template <typename Executor, typename Function>
void PostUntracked(const Executor& tracked, Function function) {
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    if (const auto* io = tracked.template target<TrackedIoContextExecutor>()) {
      boost::asio::defer(
          boost::asio::prefer(
              *io, boost::asio::execution::outstanding_work.untracked),
          std::move(function));
      return;
    }
  }
  boost::asio::defer(
      boost::asio::prefer(tracked,
                          boost::asio::execution::outstanding_work.untracked),
      std::move(function));
}

}  // namespace detail

// Returns a callable that may be invoked once, from any thread, with a
// `From`; it posts handler(convert(from)) to the handler's executor.
template <typename From, typename Handler, typename Convert>
absl::AnyInvocable<void(From)> PostToHandler(Handler handler, Convert convert) {
  auto work =
      boost::asio::prefer(boost::asio::get_associated_executor(handler),
                          boost::asio::execution::outstanding_work.tracked);
  return [handler = std::optional<Handler>(std::move(handler)),
          work = std::optional<decltype(work)>(std::move(work)),
          convert = std::move(convert)](From&& from) mutable {
    // Once the handler is queued, its thread may run it and, its context
    // out of work, tear the context down -- while this thread still holds
    // copies of the executor: the one it posts through, asio::post's own
    // temporaries, and what a moved-from handler keeps (an
    // executor_binder's move copies its executor). Destroying the last
    // copy of a strand touches the context's strand service. So the
    // tracked `work` stays on this thread until every other copy here is
    // gone -- the context keeps work, hence lives, until then -- and is
    // released last, as an executor_work_guard is, from any thread. The
    // queued handler is itself outstanding work of its context.
    auto keep_context = *std::move(work);
    work.reset();
    // Convert before posting: the handler's own result is usually smaller.
    detail::PostUntracked(
        keep_context, [handler = *std::move(handler),
                       result = convert(std::move(from))]() mutable {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected()) slot.clear();
          std::move(handler)(std::move(result));
        });
    handler.reset();
  };
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_COMPLETION_H_
