// StopOnSignals: the first SIGINT/SIGTERM asks for a clean stop on the
// program's event loop and sets the exit code; a second one takes the quick
// way out (injected here: the default would end the test process).
#include "cosession/training/stop_on_signals.h"

#include <gtest/gtest.h>

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <thread>

#include "tests/co_test.h"

namespace cosession::stop_on_signals_test {
namespace {

namespace asio = boost::asio;
using Event = asio::experimental::concurrent_channel<void(
    boost::system::error_code, int)>;

CO_TEST(StopOnSignals, TheFirstSignalStopsCleanlyAndTheSecondExitsAtOnce) {
  auto executor = co_await asio::this_coro::executor;
  Event stopped(executor, 1), second(executor, 1);
  std::thread::id stop_thread;
  StopOnSignals signals(
      executor,
      [&](int signal) {
        stop_thread = std::this_thread::get_id();
        stopped.try_send(boost::system::error_code(), signal);
      },
      [&](int signal) {
        second.try_send(boost::system::error_code(), signal);
      });
  EXPECT_EQ(signals.exit_code(), 0);
  std::raise(SIGTERM);
  const int first = co_await stopped.async_receive(asio::use_awaitable);
  EXPECT_EQ(first, SIGTERM);
  EXPECT_EQ(stop_thread, std::this_thread::get_id());  // on the event loop
  EXPECT_EQ(signals.signal(), SIGTERM);
  EXPECT_EQ(signals.exit_code(), 143);
  std::raise(SIGINT);
  const int again = co_await second.async_receive(asio::use_awaitable);
  EXPECT_EQ(again, SIGINT);
  EXPECT_EQ(signals.exit_code(), 143);  // the first signal decides
}

CO_TEST(StopOnSignals, SigintExitsWith130) {
  auto executor = co_await asio::this_coro::executor;
  Event stopped(executor, 1);
  StopOnSignals signals(executor, [&](int signal) {
    stopped.try_send(boost::system::error_code(), signal);
  });
  std::raise(SIGINT);
  co_await stopped.async_receive(asio::use_awaitable);
  EXPECT_EQ(signals.exit_code(), 130);
  signals.Cancel();
}

}  // namespace
}  // namespace cosession::stop_on_signals_test
