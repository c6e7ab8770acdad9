#include "cosession/async/coordinator.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel_error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <condition_variable>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/pool_executor.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/async/timer_executor.h"

namespace cosession {
namespace detail {

namespace asio = boost::asio;
using DoneCallback = absl::AnyInvocable<void(absl::Status)>;

struct CoordinatorState
    : public std::enable_shared_from_this<CoordinatorState> {
  CoordinatorState(asio::any_io_executor ex, CoordinatorOptions opts)
      : executor(std::move(ex)),
        strand(asio::make_strand(executor)),
        options(std::move(opts)) {}

  const asio::any_io_executor executor;
  const Coordinator::Strand strand;
  const CoordinatorOptions options;

  // Mirrors `stopped` for lock-free ShouldStop.
  std::atomic<bool> stop_flag{false};

  // Guards the fields below up to the strand-only section.
  mutable std::mutex mu;
  // Signalled when a stop is requested and when a stop callback returned.
  std::condition_variable cv;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::string reason ABSL_GUARDED_BY(mu);
  bool joined ABSL_GUARDED_BY(mu) = false;
  absl::Status join_result ABSL_GUARDED_BY(mu);
  // Incremented by ClearStop: a stop only runs callbacks registered before.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  // Names of running tasks and threads; ids grow, so this is start order.
  std::map<uint64_t, std::string> running ABSL_GUARDED_BY(mu);
  struct StopCallback {
    absl::AnyInvocable<void()> fn;
    uint64_t generation;
  };
  std::map<uint64_t, StopCallback> callbacks ABSL_GUARDED_BY(mu);
  uint64_t running_callback ABSL_GUARDED_BY(mu) = 0;  // 0: none
  std::thread::id running_callback_thread ABSL_GUARDED_BY(mu);

  // Strand-only from here on.
  struct Task {
    std::unique_ptr<asio::cancellation_signal> signal;
    bool started = false;
  };
  std::map<uint64_t, Task> tasks;
  std::map<uint64_t, DoneCallback> waiters;
  struct JoinOp {
    uint64_t id;
    std::chrono::nanoseconds grace;
    DoneCallback done;
    std::unique_ptr<asio::steady_timer> timer;  // set once the grace started
  };
  std::optional<JoinOp> join;

  uint64_t NewId() {
    std::lock_guard<std::mutex> lock(mu);
    return next_id++;
  }

  template <typename F>
  void Post(F&& f) {
    asio::post(strand, std::forward<F>(f));
  }

  bool IsClean(absl::StatusCode code, bool already_stopped) const {
    if (code == absl::StatusCode::kCancelled && already_stopped) return true;
    return std::find(options.clean_stop_codes.begin(),
                     options.clean_stop_codes.end(),
                     code) != options.clean_stop_codes.end();
  }

  absl::Status RequestStop(absl::Status s, std::string why) {
    absl::Status result;
    bool first;
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = !stopped;
      if (joined) {
        result = s;
      } else {
        if (!s.ok() && status.ok() && !IsClean(s.code(), stopped)) status = s;
        if (first) {
          if (!why.empty()) {
            reason = std::move(why);
          } else {
            reason = s.ok() ? "stop requested" : s.ToString();
          }
        }
        result = status;
      }
      stopped = true;
      stop_flag.store(true, std::memory_order_release);
      gen = generation;
    }
    if (first) {
      cv.notify_all();
      Post([self = shared_from_this(), gen] { self->OnStop(gen); });
    }
    return result;
  }

  void ClearStop() {
    std::lock_guard<std::mutex> lock(mu);
    stopped = false;
    stop_flag.store(false, std::memory_order_release);
    status = absl::OkStatus();
    reason.clear();
    ++generation;
  }

  // On the strand, once per stop request that found the flag clear.
  void OnStop(uint64_t gen) {
    std::map<uint64_t, DoneCallback> woken = std::move(waiters);
    waiters.clear();
    for (auto& [id, done] : woken) done(absl::OkStatus());
    // Emitting may resume a task inline; collect first, erase happens only in
    // posted OnTaskDone, so the signals stay valid meanwhile.
    std::vector<asio::cancellation_signal*> signals;
    for (auto& [id, task] : tasks) {
      if (task.started) signals.push_back(task.signal.get());
    }
    for (asio::cancellation_signal* signal : signals) {
      signal->emit(asio::cancellation_type::terminal);
    }
    RunStopCallbacks(gen);
    AdvanceJoin();
  }

  // On the strand: runs, once each, the callbacks registered up to `gen`.
  void RunStopCallbacks(uint64_t gen) {
    for (;;) {
      absl::AnyInvocable<void()> fn;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = std::find_if(callbacks.begin(), callbacks.end(),
                               [gen](const auto& entry) {
                                 return entry.second.generation <= gen;
                               });
        if (it == callbacks.end()) return;
        fn = std::move(it->second.fn);
        running_callback = it->first;
        running_callback_thread = std::this_thread::get_id();
        callbacks.erase(it);
      }
      struct Finish {
        CoordinatorState* self;
        absl::AnyInvocable<void()>* fn;
        ~Finish() {
          *fn = nullptr;  // destroy the callable before RemoveStopCallback
                          // returns
          {
            std::lock_guard<std::mutex> lock(self->mu);
            self->running_callback = 0;
          }
          self->cv.notify_all();
        }
      } finish{this, &fn};
      fn();
    }
  }

  uint64_t AddStopCallback(absl::AnyInvocable<void()> fn) {
    uint64_t id;
    bool run_now;
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(mu);
      id = next_id++;
      gen = generation;
      callbacks.emplace(id, StopCallback{std::move(fn), gen});
      run_now = stopped;
    }
    if (run_now) {
      Post([self = shared_from_this(), gen] { self->RunStopCallbacks(gen); });
    }
    return id;
  }

  void RemoveStopCallback(uint64_t id) {
    absl::AnyInvocable<void()> doomed;  // destroyed after unlocking
    std::unique_lock<std::mutex> lock(mu);
    if (auto it = callbacks.find(id); it != callbacks.end()) {
      doomed = std::move(it->second.fn);
      callbacks.erase(it);
      return;
    }
    cv.wait(lock, [&] {
      return running_callback != id ||
             running_callback_thread == std::this_thread::get_id();
    });
  }

  void RemoveAllStopCallbacks() {
    std::map<uint64_t, StopCallback> doomed;
    std::unique_lock<std::mutex> lock(mu);
    doomed.swap(callbacks);
    cv.wait(lock, [&] {
      return running_callback == 0 ||
             running_callback_thread == std::this_thread::get_id();
    });
    lock.unlock();
  }

  // On the strand: a registered WaitForStop.
  void AddWaiter(uint64_t id, DoneCallback done) {
    if (stop_flag.load(std::memory_order_acquire)) {
      done(absl::OkStatus());
      return;
    }
    waiters.emplace(id, std::move(done));
  }

  void CancelWaiter(uint64_t id) {
    auto it = waiters.find(id);
    if (it == waiters.end()) return;  // completed already
    DoneCallback done = std::move(it->second);
    waiters.erase(it);
    done(absl::CancelledError("Coordinator::WaitForStop was cancelled"));
  }

  void OnWorkerDone(uint64_t id, absl::Status s) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = running.find(id);
      if (it != running.end()) {
        name = std::move(it->second);
        running.erase(it);
      }
    }
    if (!s.ok()) {
      std::string why = absl::StrCat("'", name, "' stopped: ", s.ToString());
      RequestStop(std::move(s), std::move(why)).IgnoreError();
    }
  }

  // On the strand: a task's coroutine finished (after its frame is gone).
  void OnTaskDone(uint64_t id, absl::Status s) {
    tasks.erase(id);
    OnWorkerDone(id, std::move(s));
    AdvanceJoin();
  }

  void OnThreadDone(uint64_t id) {
    OnWorkerDone(id, absl::OkStatus());
    Post([self = shared_from_this()] { self->AdvanceJoin(); });
  }

  // On the strand.
  void AddJoin(uint64_t id, std::chrono::nanoseconds grace, DoneCallback done) {
    std::optional<absl::Status> earlier;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (joined) earlier = join_result;
    }
    if (earlier) {
      done(*std::move(earlier));
      return;
    }
    if (join) {
      done(absl::FailedPreconditionError(
          "Coordinator::Join is already in progress"));
      return;
    }
    join.emplace(JoinOp{id, grace, std::move(done), nullptr});
    AdvanceJoin();
  }

  // On the strand: moves a pending Join on after anything it waits for
  // changed (a stop, a task or thread finished).
  void AdvanceJoin() {
    if (!join) return;
    bool any_running, is_stopped;
    {
      std::lock_guard<std::mutex> lock(mu);
      any_running = !running.empty();
      is_stopped = stopped;
    }
    if (!any_running) {
      FinishJoin();
      return;
    }
    if (is_stopped && !join->timer) {
      join->timer = std::make_unique<asio::steady_timer>(
          TimerExecutorFor(strand),
          std::chrono::duration_cast<asio::steady_timer::duration>(
              join->grace));
      join->timer->async_wait(asio::bind_executor(
          strand, [self = shared_from_this(),
                   id = join->id](boost::system::error_code ec) {
            if (ec) return;
            if (self->join && self->join->id == id) self->FinishJoin();
          }));
    }
  }

  void FinishJoin() {
    absl::Status result;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!status.ok()) {
        result = status;
      } else if (!running.empty()) {
        std::vector<std::string> names;
        for (const auto& [id, name] : running) names.push_back(name);
        result = absl::DeadlineExceededError(
            absl::StrCat("Coordinator stopped with threads still running: ",
                         absl::StrJoin(names, ", ")));
      }
      joined = true;
      join_result = result;
    }
    JoinOp op = std::move(*join);
    join.reset();
    if (op.timer) op.timer->cancel();
    op.done(std::move(result));
  }

  void CancelJoin(uint64_t id) {
    if (!join || join->id != id) return;
    JoinOp op = std::move(*join);
    join.reset();
    if (op.timer) op.timer->cancel();
    op.done(absl::CancelledError("Coordinator::Join was cancelled"));
  }
};

namespace {

// How errors name a task: "task 'loader'".
std::string TaskLabel(const std::string& name) {
  return absl::StrCat("task '", name, "'");
}

// Wraps a coordinated task: parameters by value, the frame owns them.
asio::awaitable<absl::Status> RunTask(std::string name,
                                      asio::awaitable<absl::Status> task) {
  absl::Status status;
  try {
    status = co_await std::move(task);
  } catch (...) {
    status = StatusFromException(std::current_exception(), TaskLabel(name));
  }
  // A task that finishes without suspending after a stop reached it (see
  // Spawn) would otherwise make co_spawn's final hop throw, and its
  // completion -- the task's bookkeeping -- would never run.
  co_await asio::this_coro::reset_cancellation_state();
  co_return status;
}

absl::Status CallLoopFn(const std::function<absl::Status()>& fn,
                        const std::string& name) {
  try {
    return fn();
  } catch (...) {
    return StatusFromException(std::current_exception(), TaskLabel(name));
  }
}

asio::awaitable<absl::Status> LoopTask(std::shared_ptr<CoordinatorState> state,
                                       std::string name,
                                       std::chrono::nanoseconds interval,
                                       std::function<absl::Status()> fn) {
  asio::steady_timer timer(
      TimerExecutorFor(co_await asio::this_coro::executor));
  const auto period =
      std::chrono::duration_cast<asio::steady_timer::duration>(interval);
  while (!state->stop_flag.load(std::memory_order_acquire)) {
    if (absl::Status s = CallLoopFn(fn, name); !s.ok()) co_return s;
    if (state->stop_flag.load(std::memory_order_acquire)) break;
    timer.expires_after(period);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) break;  // cancelled by a stop
  }
  co_return absl::OkStatus();
}

template <typename Executor>
bool RunningIn(const asio::any_io_executor& ex) {
  const Executor* target = ex.target<Executor>();
  return target != nullptr && target->running_in_this_thread();
}

// True when `ex` (as far as we can tell) is being run by this thread.
bool RunningInThisThread(const asio::any_io_executor& ex) {
  using IoEx = asio::io_context::executor_type;
  using IoExTracked = std::decay_t<decltype(asio::prefer(
      std::declval<IoEx>(), asio::execution::outstanding_work.tracked))>;
  using PoolEx = asio::thread_pool::executor_type;
  using PoolExTracked = std::decay_t<decltype(asio::prefer(
      std::declval<PoolEx>(), asio::execution::outstanding_work.tracked))>;
  // A Runtime's pool.
  using RuntimeEx = PoolExecutor;
  using RuntimeExTracked = std::decay_t<decltype(asio::prefer(
      std::declval<RuntimeEx>(), asio::execution::outstanding_work.tracked))>;
  return RunningIn<IoEx>(ex) || RunningIn<IoExTracked>(ex) ||
         RunningIn<PoolEx>(ex) || RunningIn<PoolExTracked>(ex) ||
         RunningIn<RuntimeEx>(ex) || RunningIn<RuntimeExTracked>(ex) ||
         RunningIn<asio::strand<IoEx>>(ex) ||
         RunningIn<asio::strand<PoolEx>>(ex) ||
         RunningIn<asio::strand<RuntimeEx>>(ex) ||
         RunningIn<asio::strand<asio::any_io_executor>>(ex);
}

}  // namespace
}  // namespace detail

namespace asio = boost::asio;

Coordinator::Coordinator(asio::any_io_executor executor,
                         CoordinatorOptions options)
    : state_(std::make_shared<detail::CoordinatorState>(std::move(executor),
                                                        std::move(options))) {}

Coordinator::Coordinator(asio::any_io_executor executor)
    : Coordinator(std::move(executor), CoordinatorOptions()) {}

Coordinator::~Coordinator() {
  state_->RemoveAllStopCallbacks();
  state_->RequestStop(absl::OkStatus(), "Coordinator destroyed").IgnoreError();
}

absl::Status Coordinator::RequestStop(absl::Status status) {
  return state_->RequestStop(std::move(status), std::string());
}

absl::Status Coordinator::RequestStop(absl::Status status, std::string reason) {
  return state_->RequestStop(std::move(status), std::move(reason));
}

bool Coordinator::ShouldStop() const {
  return state_->stop_flag.load(std::memory_order_acquire);
}

std::string Coordinator::stop_reason() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reason;
}

absl::Status Coordinator::status() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->status;
}

void Coordinator::ClearStop() { state_->ClearStop(); }

uint64_t Coordinator::AddStopCallback(absl::AnyInvocable<void()> callback) {
  return state_->AddStopCallback(std::move(callback));
}

void Coordinator::RemoveStopCallback(uint64_t id) {
  state_->RemoveStopCallback(id);
}

void Coordinator::Spawn(std::string name, asio::awaitable<absl::Status> task) {
  uint64_t id;
  // Decided together with the stop flag (under mu): a task spawned before
  // any stop request is owed a run, as TensorFlow's threads started before
  // a stop run; one spawned while stopped is not.
  bool owed_a_run;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    id = state_->next_id++;
    state_->running.emplace(id, name);
    owed_a_run = !state_->stopped;
  }
  state_->Post([state = state_, id, owed_a_run, name = std::move(name),
                task = std::move(task)]() mutable {
    auto done = [state, id, name](std::exception_ptr e, absl::Status s) {
      if (e) s = StatusFromException(e, detail::TaskLabel(name));
      // Posted: the coroutine's frame (which uses the signal) is gone by
      // the time OnTaskDone erases it.
      state->Post([state, id, s = std::move(s)]() mutable {
        state->OnTaskDone(id, std::move(s));
      });
    };
    if (!owed_a_run && state->stop_flag.load(std::memory_order_acquire)) {
      done(nullptr, absl::CancelledError(absl::StrCat(
                        "task '", name, "' was spawned after a stop request")));
      return;
    }
    auto& entry = state->tasks[id];
    entry.signal = std::make_unique<asio::cancellation_signal>();
    entry.started = true;
    asio::cancellation_signal* signal = entry.signal.get();
    // Runs inline, on this strand, up to the task's first suspension.
    asio::co_spawn(state->strand,
                   detail::RunTask(std::move(name), std::move(task)),
                   asio::bind_cancellation_slot(signal->slot(), done));
    // A stop requested between Spawn and this start found no started task
    // to cancel: it reaches the task now, as a cancellation of its first
    // wait (and of every later one). OnStop may emit too; terminal
    // cancellation twice is the same as once.
    if (state->stop_flag.load(std::memory_order_acquire)) {
      signal->emit(asio::cancellation_type::terminal);
    }
  });
}

void Coordinator::Loop(std::string name, std::chrono::nanoseconds interval,
                       std::function<absl::Status()> fn) {
  Spawn(name, detail::LoopTask(state_, name, interval, std::move(fn)));
}

Coordinator::ThreadRegistration::ThreadRegistration(
    std::shared_ptr<detail::CoordinatorState> state, uint64_t id)
    : state_(std::move(state)), id_(id) {}

Coordinator::ThreadRegistration::ThreadRegistration(
    ThreadRegistration&& other) noexcept
    : state_(std::move(other.state_)), id_(other.id_) {}

Coordinator::ThreadRegistration& Coordinator::ThreadRegistration::operator=(
    ThreadRegistration&& other) noexcept {
  if (this != &other) {
    Done();
    state_ = std::move(other.state_);
    id_ = other.id_;
  }
  return *this;
}

Coordinator::ThreadRegistration::~ThreadRegistration() { Done(); }

void Coordinator::ThreadRegistration::Done() {
  if (!state_) return;
  std::shared_ptr<detail::CoordinatorState> state = std::move(state_);
  state_.reset();
  state->OnThreadDone(id_);
}

Coordinator::ThreadRegistration Coordinator::RegisterThread(std::string name) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    id = state_->next_id++;
    state_->running.emplace(id, std::move(name));
  }
  return ThreadRegistration(state_, id);
}

bool Coordinator::WaitForStopBlocking(std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->stopped; });
}

absl::Status Coordinator::JoinBlocking(std::chrono::nanoseconds grace_period) {
  if (state_->strand.running_in_this_thread() ||
      detail::RunningInThisThread(state_->executor)) {
    return absl::FailedPreconditionError(
        "Coordinator::JoinBlocking was called on the coordinator's executor "
        "thread, where it would wait for work queued behind itself; co_await "
        "Coordinator::Join instead");
  }
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  StartJoin(state_, grace_period, asio::cancellation_slot(),
            [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return result.get();
}

bool Coordinator::joined() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->joined;
}

Coordinator::Strand Coordinator::strand() const { return state_->strand; }

void Coordinator::StartWaitForStop(
    std::shared_ptr<detail::CoordinatorState> state,
    asio::cancellation_slot slot, DoneCallback done) {
  if (state->stop_flag.load(std::memory_order_acquire)) {
    done(absl::OkStatus());
    return;
  }
  const uint64_t id = state->NewId();
  // Register before installing the cancellation handler: a cancellation
  // then always finds the waiter (the strand runs posts in order).
  state->Post([state, id, done = std::move(done)]() mutable {
    state->AddWaiter(id, std::move(done));
  });
  if (slot.is_connected()) {
    slot.assign([state, id](asio::cancellation_type_t) {
      state->Post([state, id] { state->CancelWaiter(id); });
    });
  }
}

void Coordinator::StartJoin(std::shared_ptr<detail::CoordinatorState> state,
                            std::chrono::nanoseconds grace_period,
                            asio::cancellation_slot slot, DoneCallback done) {
  const uint64_t id = state->NewId();
  state->Post([state, id, grace_period, done = std::move(done)]() mutable {
    state->AddJoin(id, grace_period, std::move(done));
  });
  if (slot.is_connected()) {
    slot.assign([state, id](asio::cancellation_type_t) {
      state->Post([state, id] { state->CancelJoin(id); });
    });
  }
}

}  // namespace cosession
