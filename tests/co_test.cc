#include "tests/co_test.h"

#include "tests/test_util.h"

namespace cosession::co_test {
namespace {
boost::asio::io_context* current_io = nullptr;
}  // namespace

boost::asio::io_context& Io() { return *current_io; }

void Run(std::function<boost::asio::awaitable<void>()> make_body,
         std::chrono::milliseconds limit) {
  boost::asio::io_context& io = testing::TestIo();
  io.restart();
  current_io = &io;
  bool finished = false;
  std::exception_ptr failure;
  boost::asio::co_spawn(io, make_body(), [&](std::exception_ptr e) {
    finished = true;
    failure = e;
  });
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!finished && std::chrono::steady_clock::now() < deadline) {
    io.run_one_until(deadline);
    // run_one_until returns 0 when the context ran out of work; restart it
    // so that work posted from other threads later is still picked up.
    if (io.stopped()) io.restart();
  }
  // Drain: threads that completed work for this context may still hold
  // work on it (co_spawn's guard is released after its handler was queued),
  // so the context must live until its work count drops to zero.
  if (finished) {
    io.restart();
    io.run_for(deadline - std::chrono::steady_clock::now());
    if (!io.stopped()) {
      std::fprintf(stderr,
                   "CO_TEST body finished but left work pending on its "
                   "io_context: a leak\n");
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
  current_io = nullptr;
  if (!finished) {
    std::fprintf(stderr, "CO_TEST body did not finish within %lld ms: hang\n",
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "CO_TEST body threw: " << e.what();
    }
  }
}

}  // namespace cosession::co_test
