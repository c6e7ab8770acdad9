#include "cosession/async/timer_executor.h"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/query.hpp>
#include <thread>

#include "cosession/async/runtime.h"

namespace cosession {
namespace {

// Never destroyed: timers owned by objects with static storage may still
// be waiting while the process exits, and their io_context must outlive
// them. The thread is detached for the same reason; it holds no state of
// its own that exit could lose.
struct TimerContext {
  TimerContext() : work(boost::asio::make_work_guard(context)) {
    std::thread([this] { context.run(); }).detach();
  }
  boost::asio::io_context context{1};  // one thread runs it
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
};

}  // namespace

boost::asio::io_context::executor_type TimerExecutor() {
  static TimerContext* const timers = new TimerContext;
  return timers->context.get_executor();
}

boost::asio::any_io_executor TimerExecutorFor(
    const boost::asio::any_io_executor& handler_executor) {
  if (Runtime::IsPoolContext(boost::asio::query(
          handler_executor, boost::asio::execution::context))) {
    return TimerExecutor();
  }
  return handler_executor;
}

}  // namespace cosession
