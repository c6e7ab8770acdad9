// TimerExecutor(): the executor of the one io_context on which the
// library's timers wait (a run's deadline, a Coordinator's join grace and
// loop interval, the session creators' and hooks' polling, the serving
// batcher's timeouts), run by a thread of its own.
//
//   asio::steady_timer timer(TimerExecutor(), timeout);
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
// The io_context and its thread start on the first call and live until the
// process exits; the thread sleeps in the reactor when no timer is due.
//
// Thread safety: TimerExecutor() may be called from any thread. A timer
// object itself is used, as any Asio I/O object, from one thread or strand
// at a time.
#ifndef COSESSION_ASYNC_TIMER_EXECUTOR_H_
#define COSESSION_ASYNC_TIMER_EXECUTOR_H_

#include <boost/asio/io_context.hpp>

namespace cosession {

boost::asio::io_context::executor_type TimerExecutor();

}  // namespace cosession

#endif  // COSESSION_ASYNC_TIMER_EXECUTOR_H_
