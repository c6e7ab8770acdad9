// GroupedCompletion: a caller's completion handler, held until its result
// is known, then delivered as async/completion.h requires -- exactly once,
// through the handler's associated executor, with outstanding work counted
// on that executor meanwhile and the handler's cancellation slot cleared
// before it runs -- either alone (Post) or together with other handlers
// bound for the same executor (PostAll).
//
// Why together: one operation that answers many callers at once (a batch of
// requests run as one graph run) would otherwise post one function per
// caller. When the callers share an event loop, its thread runs each in
// turn and, faster than the poster, sleeps between two posts and is woken
// for the next -- a futex call, a contended scheduler lock and a cross-CPU
// wake-up per caller. PostAll posts one function per run of consecutive
// handlers whose executors compare equal, which runs their handlers in
// order.
//
//   std::vector<std::pair<GroupedCompletion<R>, R>> answers = ...;
//   GroupedCompletion<R>::PostAll(answers);
//
// Of(handler, convert) hands the handler convert(result), converted just
// before the handler runs, on its thread: what the conversion allocates
// (one caller's share of a batch's outputs) is then allocated on the thread
// that frees it.
//
// A handler whose executor cannot be held as a boost::asio::any_io_executor
// is posted alone, as PostToHandler does. If a handler of a group throws,
// the group's remaining handlers are posted again as their own group before
// the exception leaves, so each still runs exactly once.
//
// Thread safety: a GroupedCompletion is a value owned by one thread at a
// time; Post and PostAll may be called from any thread.
#ifndef COSESSION_ASYNC_GROUPED_COMPLETION_H_
#define COSESSION_ASYNC_GROUPED_COMPLETION_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "cosession/async/completion.h"

namespace cosession {

template <typename Result>
class GroupedCompletion {
 public:
  GroupedCompletion() = default;

  template <typename Handler>
  static GroupedCompletion Of(Handler handler) {
    return Of(std::move(handler), [](Result r) { return r; });
  }

  // The handler is called with convert(result), converted on the handler's
  // executor: what the conversion allocates is allocated on the thread that
  // will likely free it (glibc's and cosession's per-thread caches serve
  // only the thread that frees).
  template <typename Handler, typename Convert>
  static GroupedCompletion Of(Handler handler, Convert convert) {
    GroupedCompletion c;
    using Executor = boost::asio::associated_executor_t<Handler>;
    if constexpr (std::is_constructible_v<boost::asio::any_io_executor,
                                          Executor>) {
      c.executor_ = boost::asio::prefer(
          boost::asio::any_io_executor(
              boost::asio::get_associated_executor(handler)),
          boost::asio::execution::outstanding_work.tracked);
      c.run_here_ = [handler = std::move(handler),
                     convert = std::move(convert)](Result r) mutable {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected()) slot.clear();
        std::move(handler)(convert(std::move(r)));
      };
    } else {
      // Converted on the poster's thread, before the post (see
      // PostToHandler).
      c.post_alone_ =
          PostToHandler<Result>(std::move(handler), std::move(convert));
    }
    return c;
  }

  // False for a default-constructed or moved-from completion.
  explicit operator bool() const {
    return static_cast<bool>(run_here_) || static_cast<bool>(post_alone_);
  }

  // Posts the handler with `result` to its executor.
  void Post(Result result) && {
    std::vector<std::pair<GroupedCompletion, Result>> one;
    one.emplace_back(std::move(*this), std::move(result));
    PostAll(one);
  }

  // Posts every handler with its result; `items` is left empty. Consecutive
  // handlers whose executors compare equal are posted as one function.
  static void PostAll(
      std::vector<std::pair<GroupedCompletion, Result>>& items) {
    size_t begin = 0;
    while (begin < items.size()) {
      GroupedCompletion& first = items[begin].first;
      if (!first.executor_.has_value()) {
        if (first.post_alone_) {
          std::move(first.post_alone_)(std::move(items[begin].second));
        }
        ++begin;
        continue;
      }
      size_t end = begin + 1;
      while (end < items.size() && items[end].first.executor_.has_value() &&
             *items[end].first.executor_ == *first.executor_) {
        ++end;
      }
      PostGroup(items, begin, end);
      begin = end;
    }
    items.clear();
  }

 private:
  using Call = absl::AnyInvocable<void(Result)>;

  // The handlers of one executor, run in order by one posted function.
  struct Group {
    boost::asio::any_io_executor executor;  // untracked: the post counts
    std::vector<std::pair<Call, Result>> calls;
    size_t next = 0;
    void operator()();
  };

  static void PostGroup(
      std::vector<std::pair<GroupedCompletion, Result>>& items, size_t begin,
      size_t end) {
    // The tracked executors stay on this thread until every other copy made
    // here is gone, and are released last (see PostToHandler: the group's
    // thread may tear its context down as soon as the group ran).
    std::vector<boost::asio::any_io_executor> keep_context;
    keep_context.reserve(end - begin);
    Group group;
    group.executor =
        boost::asio::prefer(*items[begin].first.executor_,
                            boost::asio::execution::outstanding_work.untracked);
    group.calls.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
      keep_context.push_back(*std::move(items[i].first.executor_));
      items[i].first.executor_.reset();
      group.calls.emplace_back(std::move(items[i].first.run_here_),
                               std::move(items[i].second));
    }
    {
      boost::asio::any_io_executor executor = group.executor;
      boost::asio::post(executor, std::move(group));
    }
  }

  std::optional<boost::asio::any_io_executor> executor_;
  Call run_here_;    // with executor_
  Call post_alone_;  // without
};

template <typename Result>
void GroupedCompletion<Result>::Group::operator()() {
  while (next < calls.size()) {
    auto& [call, result] = calls[next++];
    try {
      std::move(call)(std::move(result));
    } catch (...) {
      // The rest still run, once each: as a group of their own, posted to
      // the executor running this one, before the exception leaves.
      if (next < calls.size()) {
        Group rest;
        rest.executor = executor;
        rest.calls.reserve(calls.size() - next);
        for (; next < calls.size(); ++next) {
          rest.calls.push_back(std::move(calls[next]));
        }
        boost::asio::post(executor, std::move(rest));
      }
      throw;
    }
  }
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_GROUPED_COMPLETION_H_
