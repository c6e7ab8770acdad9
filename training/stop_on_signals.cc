#include "cosession/training/stop_on_signals.h"

#include <csignal>
#include <cstdlib>
#include <utility>

namespace cosession {

StopOnSignals::StopOnSignals(boost::asio::any_io_executor executor,
                             std::function<void(int)> stop,
                             std::function<void(int)> on_second)
    : signals_(std::move(executor), SIGINT, SIGTERM),
      stop_(std::move(stop)),
      on_second_(on_second ? std::move(on_second)
                           : [](int signal) { std::_Exit(128 + signal); }) {
  Wait();
}

StopOnSignals::~StopOnSignals() { Cancel(); }

void StopOnSignals::Cancel() {
  boost::system::error_code ignored;
  signals_.cancel(ignored);
}

void StopOnSignals::Wait() {
  signals_.async_wait([this](boost::system::error_code ec, int signal) {
    if (ec) return;  // cancelled: the object is going away
    if (first_.load(std::memory_order_acquire) != 0) {
      on_second_(signal);
      return;
    }
    first_.store(signal, std::memory_order_release);
    if (stop_) stop_(signal);
    Wait();
  });
}

}  // namespace cosession
