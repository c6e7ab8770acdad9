#include "async/runtime.h"

#include <algorithm>
#include <thread>

namespace cosession {
namespace {
int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

Runtime::Runtime(RuntimeOptions options)
    : options_(options),
      num_threads_(ResolveThreads(options.num_threads)),
      pool_(static_cast<size_t>(num_threads_)) {}

Runtime::~Runtime() { pool_.join(); }

Runtime& Runtime::Default() {
  static Runtime runtime;
  return runtime;
}

}  // namespace cosession
