// Helpers shared by the benchmark files.
#ifndef COSESSION_BENCH_BENCH_UTIL_H_
#define COSESSION_BENCH_BENCH_UTIL_H_

#include <stdlib.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
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

// A fresh directory under the system's temp directory, removed with its
// contents at the end of the benchmark.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX"))
            .string();
    const char* made = ::mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cosession::bench

#endif  // COSESSION_BENCH_BENCH_UTIL_H_
