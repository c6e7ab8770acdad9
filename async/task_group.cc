#include "cosession/async/task_group.h"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cosession/async/status_from_exception.h"

namespace cosession {
namespace asio = boost::asio;

TaskGroup::TaskGroup(asio::any_io_executor executor, std::string what)
    : executor_(std::move(executor)), what_(std::move(what)) {}

TaskGroup::~TaskGroup() {
  if (running_ != 0 || (!signals_.empty() && !joined_)) {
    // A task still refers to its owner's frame: carrying on would be a
    // use-after-free later, somewhere else.
    std::fprintf(stderr,
                 "TaskGroup (%s) destroyed with %zu tasks running and Join "
                 "%s\n",
                 what_.c_str(), running_,
                 joined_ ? "completed" : "not completed");
    std::abort();
  }
}

void TaskGroup::Spawn(asio::awaitable<absl::Status> task) {
  if (cancelled_) return;
  const size_t i = signals_.size();
  signals_.emplace_back();
  finished_.push_back(false);
  ++running_;
  asio::co_spawn(
      executor_, std::move(task),
      asio::bind_cancellation_slot(
          signals_[i].slot(), [this, i](std::exception_ptr e, absl::Status s) {
            finished_[i] = true;
            OnTaskDone(e ? StatusFromException(e, what_) : std::move(s));
          }));
}

void TaskGroup::CancelAll() {
  if (cancelled_) return;
  cancelled_ = true;
  for (size_t i = 0; i < signals_.size(); ++i) {
    if (!finished_[i]) signals_[i].emit(asio::cancellation_type::terminal);
  }
}

void TaskGroup::StartJoin(asio::cancellation_slot slot,
                          absl::AnyInvocable<void(absl::Status)> done) {
  join_ = std::move(done);
  if (slot.is_connected()) {
    slot.assign([this](asio::cancellation_type) { CancelAll(); });
  }
  CompleteJoinIfDone();
}

void TaskGroup::OnTaskDone(absl::Status status) {
  --running_;
  if (!status.ok()) {
    if (first_failure_.ok() ||
        (absl::IsCancelled(first_failure_) && !absl::IsCancelled(status))) {
      first_failure_ = status;
    }
    CancelAll();
  }
  CompleteJoinIfDone();
}

void TaskGroup::CompleteJoinIfDone() {
  if (running_ != 0 || !join_ || joined_) return;
  joined_ = true;
  // Posted to the handler's executor (PostToHandler), which clears the
  // slot before the handler runs.
  std::move(join_)(first_failure_);
}

}  // namespace cosession
