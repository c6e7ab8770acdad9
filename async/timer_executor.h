// TimerExecutor(): the executor of the one io_context on which the
// library's timers wait when their handlers run on a Runtime's pool (a
// run's deadline, the serving batcher's timeouts, and a Coordinator's join
// grace and loop interval, the session creators' and hooks' polling when
// those run on the pool), run by a thread of its own.
//
//   asio::steady_timer timer(TimerExecutorFor(strand), timeout);
//   timer.async_wait(asio::bind_executor(strand, handler));  // or co_await
//
// Why not the Runtime's pool: the first timer (or socket) an io_context
// ever serves puts Asio's reactor into that context's queue for the rest of
// its life. From then on, the pool's threads poll the reactor between
// handlers (an epoll_wait system call) and a sleeping pool thread is woken
// through the reactor instead of its condition variable: measured on the
// project's 2-core VMs, BM_Pipeline_CsvFile/2 took 0.97-1.05 ms instead of
// 0.73-0.78 ms in any process where a batcher had run before it, with about
// four epoll_wait calls a pass where there had been none. Timers that wait
// here leave the pool as they found it.
//
// A timer made on this executor completes on its handler's associated
// executor (a coroutine resumes on its own; a callback must be bound, as
// above), and while it waits that executor counts the wait as outstanding
// work, so an io_context that runs the handler does not run out of work
// early. Cancellation (timer.cancel(), per-operation cancellation) works as
// for any Asio timer.
//
// TimerExecutorFor(e) is TimerExecutor() when `e` runs on a Runtime's pool
// (a pool executor or a strand of one) and `e` itself otherwise. A wait
// whose timer and handler live on different contexts must not outlive the
// handler's: a caller that destroys its own io_context with a wait pending
// (after stop(), say) would have it complete into freed memory later. A
// Runtime cannot be destroyed so: its destructor waits for all of its
// outstanding work, pending waits included. So a timer leaves its
// handler's context only for a pool.
//
// The io_context and its thread start on the first call and live until the
// process exits; the thread sleeps in the reactor when no timer is due.
//
// Thread safety: both functions may be called from any thread. A timer
// object itself is used, as any Asio I/O object, from one thread or strand
// at a time.
#ifndef COSESSION_ASYNC_TIMER_EXECUTOR_H_
#define COSESSION_ASYNC_TIMER_EXECUTOR_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

namespace cosession {

boost::asio::io_context::executor_type TimerExecutor();

boost::asio::any_io_executor TimerExecutorFor(
    const boost::asio::any_io_executor& handler_executor);

}  // namespace cosession

#endif  // COSESSION_ASYNC_TIMER_EXECUTOR_H_
