// PostToHandler (async/completion.h) and GroupedCompletion
// (async/grouped_completion.h): the completion reaches the handler once, on
// its executor, and the posting thread never outlives the handler's context
// with a copy of its executor in hand; grouped, the handlers of one
// executor run in order from one posted function.
#include "cosession/async/completion.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cosession/async/grouped_completion.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
namespace execution = boost::asio::execution;
using std::chrono::seconds;

// What the executors below share: how many tracked copies are alive (the
// context's outstanding work that they account for), whether an untracked
// copy died on a foreign thread while none was (the context could then be
// gone: for a strand, the copy's destructor would touch freed memory), and
// a one-shot signal that a posted function has been destroyed.
struct Probe {
  std::atomic<int> live_tracked{0};
  std::atomic<bool> outlived_context{false};
  std::atomic<std::thread::id> context_thread{};

  std::mutex mu;
  std::condition_variable cv;
  bool posted_function_destroyed = false;

  void MarkPostedFunctionDestroyed() {
    std::lock_guard lock(mu);
    posted_function_destroyed = true;
    cv.notify_all();
  }
  bool WaitPostedFunctionDestroyed() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, seconds(10),
                       [this] { return posted_function_destroyed; });
  }
};

// An io_context executor that reports its copies to a Probe. Its execute,
// called off the context's thread, returns only once the posted function
// has run on the context and been destroyed: the worst interleaving (the
// poster preempted right after queueing) happens every time.
class ProbeExecutor {
 public:
  ProbeExecutor(asio::io_context& context, std::shared_ptr<Probe> probe,
                bool tracked)
      : context_(&context), probe_(std::move(probe)), tracked_(tracked) {
    Born();
  }
  ProbeExecutor(const ProbeExecutor& other) noexcept
      : context_(other.context_),
        probe_(other.probe_),
        tracked_(other.tracked_) {
    Born();
  }
  // A move takes the work along, as Asio's executors' moves do.
  ProbeExecutor(ProbeExecutor&& other) noexcept
      : context_(other.context_),
        probe_(std::move(other.probe_)),
        tracked_(std::exchange(other.tracked_, false)) {}
  ProbeExecutor& operator=(const ProbeExecutor&) = delete;
  ~ProbeExecutor() {
    if (probe_ == nullptr) return;  // moved from
    if (tracked_) {
      probe_->live_tracked.fetch_sub(1);
      context_->get_executor().on_work_finished();
    } else if (std::this_thread::get_id() != probe_->context_thread.load() &&
               probe_->live_tracked.load() == 0) {
      probe_->outlived_context = true;
    }
  }

  ProbeExecutor require(execution::outstanding_work_t::tracked_t) const {
    return ProbeExecutor(*context_, probe_, true);
  }
  ProbeExecutor require(execution::outstanding_work_t::untracked_t) const {
    return ProbeExecutor(*context_, probe_, false);
  }
  // It never runs a function inline (it may wait after queueing one: see
  // above).
  ProbeExecutor require(execution::blocking_t::never_t) const { return *this; }
  // Without this query, Asio takes every executor to be untracked and
  // makes prefer(outstanding_work.untracked) a copy.
  execution::outstanding_work_t query(execution::outstanding_work_t) const {
    if (tracked_) return execution::outstanding_work.tracked;
    return execution::outstanding_work.untracked;
  }
  asio::io_context& query(execution::context_t) const noexcept {
    return *context_;
  }

  template <typename Function>
  void execute(Function f) const {
    struct Posted {
      Posted(std::shared_ptr<Probe> p, std::optional<Function> function)
          : probe(std::move(p)), f(std::move(function)) {}
      // Moved, not copied: a type-erased executor's functions are move-only.
      Posted(Posted&&) = default;
      ~Posted() {
        f.reset();  // with the handler's tracked work, before the mark
        if (ran) probe->MarkPostedFunctionDestroyed();
      }
      std::shared_ptr<Probe> probe;
      std::optional<Function> f;
      bool ran = false;
      void operator()() {
        ran = true;
        (*f)();
      }
    };
    asio::post(context_->get_executor(),
               Posted{probe_, std::optional<Function>(std::move(f))});
    if (std::this_thread::get_id() != probe_->context_thread.load()) {
      EXPECT_TRUE(probe_->WaitPostedFunctionDestroyed())
          << "the posted function never ran";
    }
  }

  friend bool operator==(const ProbeExecutor& a,
                         const ProbeExecutor& b) noexcept {
    return a.context_ == b.context_ && a.tracked_ == b.tracked_;
  }
  friend bool operator!=(const ProbeExecutor& a,
                         const ProbeExecutor& b) noexcept {
    return !(a == b);
  }

 private:
  void Born() {
    if (tracked_) {
      probe_->live_tracked.fetch_add(1);
      context_->get_executor().on_work_started();
    }
  }

  asio::io_context* context_;
  std::shared_ptr<Probe> probe_;
  bool tracked_;
};

TEST(PostToHandler, ThePosterDropsItsExecutorCopiesBeforeTheContextCanEnd) {
  asio::io_context context;
  auto probe = std::make_shared<Probe>();
  probe->context_thread = std::this_thread::get_id();
  int calls = 0;
  int value = 0;
  std::thread::id ran_on;
  absl::AnyInvocable<void(int)> complete = PostToHandler<int>(
      asio::bind_executor(ProbeExecutor(context, probe, false),
                          [&](int v) {
                            ++calls;
                            value = v;
                            ran_on = std::this_thread::get_id();
                          }),
      [](int v) { return v * 2; });
  // The handler's tracked work keeps run() going until it completes.
  std::thread poster([&] {
    std::move(complete)(21);
    complete = nullptr;  // the callable's own copies die here too
  });
  context.run_for(seconds(10));
  poster.join();

  EXPECT_EQ(calls, 1);
  EXPECT_EQ(value, 42);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(probe->live_tracked.load(), 0);
  EXPECT_FALSE(probe->outlived_context.load())
      << "the posting thread destroyed a copy of the handler's executor "
         "after the context had no work left (it could have been "
         "destroyed)";
}

// A coroutine's handler: an io_context's executor behind any_io_executor
// (posted through the io_context's own executor). Completed from another
// thread, it runs once on the context, whose run() the pending completion
// keeps from returning until then.
TEST(PostToHandler, AnIoContextHandlerBehindAnyIoExecutorRunsOnceOnItsContext) {
  asio::io_context context;
  int calls = 0;
  int value = 0;
  std::thread::id ran_on;
  absl::AnyInvocable<void(int)> complete = PostToHandler<int>(
      asio::bind_executor(asio::any_io_executor(context.get_executor()),
                          [&](int v) {
                            ++calls;
                            value = v;
                            ran_on = std::this_thread::get_id();
                          }),
      [](int v) { return v + 1; });
  std::thread poster([&] {
    std::move(complete)(41);
    complete = nullptr;
  });
  // Returns once the completion ran: nothing else is queued.
  context.run_for(seconds(10));
  poster.join();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(value, 42);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// ---- GroupedCompletion

using Grouped = GroupedCompletion<int>;
using Items = std::vector<std::pair<Grouped, int>>;

// Completions on `context` of the given values, each handler appending its
// value to `got`; the one given `throwing` throws after appending.
Items Recording(asio::io_context& context, std::vector<int>& got,
                const std::vector<int>& values,
                std::optional<int> throwing = std::nullopt) {
  Items items;
  for (int value : values) {
    items.emplace_back(
        Grouped::Of(asio::bind_executor(context,
                                        [&got, throwing](int v) {
                                          got.push_back(v);
                                          if (v == throwing) {
                                            throw std::runtime_error("thrown");
                                          }
                                        })),
        value);
  }
  return items;
}

// The same executor copies rule as PostToHandler's, through a group of two.
TEST(GroupedCompletion, ThePosterDropsItsExecutorCopiesBeforeTheContextCanEnd) {
  static_assert(std::is_constructible_v<asio::any_io_executor, ProbeExecutor>,
                "the probe must take the grouped path");
  asio::io_context context;
  auto probe = std::make_shared<Probe>();
  probe->context_thread = std::this_thread::get_id();
  std::vector<int> got;
  Items items;
  for (int i = 0; i < 2; ++i) {
    items.emplace_back(
        Grouped::Of(asio::bind_executor(ProbeExecutor(context, probe, false),
                                        [&](int v) { got.push_back(v); })),
        i);
  }
  std::thread poster([&] { Grouped::PostAll(items); });
  context.run_for(seconds(10));
  poster.join();

  EXPECT_EQ(got, (std::vector<int>{0, 1}));
  EXPECT_TRUE(items.empty());
  EXPECT_EQ(probe->live_tracked.load(), 0);
  EXPECT_FALSE(probe->outlived_context.load());
}

// Posted, never run inline; from one function, in order, once each; the
// context keeps work from Of until the post.
TEST(GroupedCompletion, HandlersOfOneExecutorRunInOrderFromOnePostedFunction) {
  asio::io_context context;
  std::vector<int> got;
  Items items = Recording(context, got, {0, 10, 20, 30, 40});
  EXPECT_EQ(context.poll(), 0u);
  EXPECT_FALSE(context.stopped()) << "the handlers' work is not counted";
  Grouped::PostAll(items);
  EXPECT_TRUE(got.empty()) << "a handler ran inline in PostAll";
  EXPECT_EQ(context.run_one(), 1u);
  EXPECT_EQ(got, (std::vector<int>{0, 10, 20, 30, 40}));
  EXPECT_EQ(context.poll(), 0u);
  EXPECT_TRUE(context.stopped()) << "work left after every handler ran";
}

// Only consecutive handlers of equal executors share a function.
TEST(GroupedCompletion, EachRunOfEqualExecutorsIsOneFunctionOnItsOwnContext) {
  asio::io_context a;
  asio::io_context b;
  std::vector<std::pair<char, int>> got;
  auto on = [&](asio::io_context& context, char name) {
    return Grouped::Of(asio::bind_executor(
        context, [&got, name](int v) { got.emplace_back(name, v); }));
  };
  Items items;
  items.emplace_back(on(a, 'a'), 1);
  items.emplace_back(on(a, 'a'), 2);
  items.emplace_back(on(b, 'b'), 3);
  items.emplace_back(on(a, 'a'), 4);
  Grouped::PostAll(items);
  EXPECT_EQ(a.run_one(), 1u);
  EXPECT_EQ(got, (std::vector<std::pair<char, int>>{{'a', 1}, {'a', 2}}));
  EXPECT_EQ(b.run_one(), 1u);
  EXPECT_EQ(a.run_one(), 1u);
  EXPECT_EQ(got, (std::vector<std::pair<char, int>>{
                     {'a', 1}, {'a', 2}, {'b', 3}, {'a', 4}}));
  EXPECT_EQ(a.poll() + b.poll(), 0u);
}

// Of(handler, convert): the handler gets convert(result), converted when
// the handler runs, on its executor's thread -- not by the poster.
TEST(GroupedCompletion, AConversionRunsOnTheHandlersThreadWhenItRuns) {
  asio::io_context context;
  std::vector<std::string> got;
  std::vector<std::thread::id> converted_on;
  auto convert = [&converted_on](int v) {
    converted_on.push_back(std::this_thread::get_id());
    return std::to_string(v);
  };
  std::vector<std::pair<Grouped, int>> items;
  for (int value : {7, 8}) {
    items.emplace_back(
        Grouped::Of(asio::bind_executor(
                        context, [&got](std::string v) { got.push_back(v); }),
                    convert),
        value);
  }
  std::thread poster([&] { Grouped::PostAll(items); });
  poster.join();
  EXPECT_TRUE(converted_on.empty()) << "converted before the handler ran";
  EXPECT_EQ(context.run_one(), 1u);
  EXPECT_EQ(got, (std::vector<std::string>{"7", "8"}));
  EXPECT_EQ(converted_on,
            (std::vector<std::thread::id>(2, std::this_thread::get_id())));
}

// A handler that throws: the exception leaves run_one as any handler's
// would, and the handlers after it still run, once each.
TEST(GroupedCompletion, AThrowingHandlerLeavesTheRestToRunOnceEach) {
  asio::io_context context;
  std::vector<int> got;
  Items items = Recording(context, got, {0, 1, 2, 3}, /*throwing=*/1);
  Grouped::PostAll(items);
  EXPECT_THROW(context.run_one(), std::runtime_error);
  EXPECT_EQ(got, (std::vector<int>{0, 1}));
  context.restart();
  EXPECT_EQ(context.run(), 1u);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3}));
}

TEST(GroupedCompletion, TheCancellationSlotIsClearedBeforeTheHandlerRuns) {
  asio::io_context context;
  asio::cancellation_signal signal;
  bool ran = false;
  bool slot_had_handler = true;
  auto handler = asio::bind_cancellation_slot(
      signal.slot(), asio::bind_executor(context, [&](int) {
        ran = true;
        slot_had_handler = signal.slot().has_handler();
      }));
  signal.slot().assign([](asio::cancellation_type) {});
  Grouped completion = Grouped::Of(std::move(handler));
  ASSERT_TRUE(completion);
  std::move(completion).Post(7);
  context.run();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(slot_had_handler);
}

// An executor that boost::asio::any_io_executor cannot hold (it answers no
// context query): it posts to an io_context and counts what it was given.
class BareExecutor {
 public:
  BareExecutor(asio::io_context& context, int& executed)
      : context_(&context), executed_(&executed) {}
  // It never runs a function inline.
  BareExecutor require(execution::blocking_t::never_t) const { return *this; }
  template <typename Function>
  void execute(Function f) const {
    ++*executed_;
    asio::post(context_->get_executor(), std::move(f));
  }
  friend bool operator==(const BareExecutor& a,
                         const BareExecutor& b) noexcept {
    return a.context_ == b.context_;
  }
  friend bool operator!=(const BareExecutor& a,
                         const BareExecutor& b) noexcept {
    return !(a == b);
  }

 private:
  asio::io_context* context_;
  int* executed_;
};

// Such a handler takes PostToHandler's path: posted alone, through its own
// executor, once -- even between two handlers it could otherwise have
// been grouped with.
TEST(GroupedCompletion, AHandlerWhoseExecutorCannotBeHeldIsPostedAlone) {
  static_assert(!std::is_constructible_v<asio::any_io_executor, BareExecutor>,
                "the bare executor must take the path posted alone");
  asio::io_context context;
  int executed = 0;
  std::vector<int> got;
  Items items = Recording(context, got, {1});
  items.emplace_back(
      Grouped::Of(asio::bind_executor(BareExecutor(context, executed),
                                      [&](int v) { got.push_back(v); })),
      2);
  Items after = Recording(context, got, {3});
  items.push_back(std::move(after.front()));
  Grouped::PostAll(items);
  EXPECT_EQ(executed, 1);
  EXPECT_TRUE(got.empty()) << "a handler ran inline in PostAll";
  EXPECT_EQ(context.run(), 3u);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
}

}  // namespace
}  // namespace cosession
