// PostToHandler (async/completion.h): the completion reaches the handler
// once, on its executor, and the posting thread never outlives the
// handler's context with a copy of its executor in hand.
#include "cosession/async/completion.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

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

}  // namespace
}  // namespace cosession
