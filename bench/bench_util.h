// Helpers shared by the benchmark files.
#ifndef COSESSION_BENCH_BENCH_UTIL_H_
#define COSESSION_BENCH_BENCH_UTIL_H_

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <utility>

namespace cosession::bench {

// Runs `body` to completion on a fresh io_context on this thread; run()
// returns only once all work on the context finished, so the context is
// never torn down under a pool thread still posting to it.
inline void RunCoroutine(boost::asio::awaitable<void> body) {
  boost::asio::io_context io;
  std::exception_ptr failure;
  boost::asio::co_spawn(io, std::move(body),
                        [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cosession::bench

#endif  // COSESSION_BENCH_BENCH_UTIL_H_
