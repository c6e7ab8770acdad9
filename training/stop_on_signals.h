// StopOnSignals: what a training program does on Ctrl-C (SIGINT) or SIGTERM.
// The first signal asks for a clean stop: `stop(signal)` runs on the
// program's own event loop -- typically
// `session.coordinator().RequestStop()` -- so the program leaves its step
// loop, Close runs every hook's End (a final checkpoint) and the program
// exits with exit_code(): 128 + the signal, 130 for SIGINT and 143 for
// SIGTERM, as shells expect. A second signal means the clean stop is not
// wanted (or hangs): `on_second(signal)` runs, by default std::_Exit(128 +
// signal) at once.
//
//   asio::io_context io;
//   StopOnSignals signals(io.get_executor(), [&](int) {
//     session->coordinator().RequestStop(absl::OkStatus(), "interrupted")
//         .IgnoreError();
//   });
//   ... run the loop ...; return signals.exit_code();
//
// The handlers are asio::signal_set's: installed for as long as the object
// lives (the process's default actions come back when it goes), run on
// `executor` like any completion. A signal that arrives before `stop` can
// act (the session does not exist yet) is kept: signal() tells it.
//
// Thread safety: construct and destroy on the executor's thread; signal()
// and exit_code() may be read from any thread.
#ifndef COSESSION_TRAINING_STOP_ON_SIGNALS_H_
#define COSESSION_TRAINING_STOP_ON_SIGNALS_H_

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>

namespace cosession {

class StopOnSignals {
 public:
  StopOnSignals(boost::asio::any_io_executor executor,
                std::function<void(int signal)> stop,
                std::function<void(int signal)> on_second = nullptr);
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;
  ~StopOnSignals();

  // The first signal received; 0 while none.
  int signal() const { return first_.load(std::memory_order_acquire); }
  // 128 + signal(), or 0.
  int exit_code() const { return signal() == 0 ? 0 : 128 + signal(); }
  // Stops waiting for signals (the program is done), so that its event
  // loop can run out of work; the handlers stay installed until the object
  // goes.
  void Cancel();

 private:
  void Wait();

  boost::asio::signal_set signals_;
  std::function<void(int)> stop_;
  std::function<void(int)> on_second_;
  std::atomic<int> first_{0};
};

}  // namespace cosession

#endif  // COSESSION_TRAINING_STOP_ON_SIGNALS_H_
