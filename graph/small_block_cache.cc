#include "cosession/graph/small_block_cache.h"

#include <array>
#include <cstdlib>
#include <new>

#include "absl/base/config.h"

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
#include <sanitizer/asan_interface.h>
#endif

namespace cosession::detail {
namespace {

constexpr int kNumClasses =
    static_cast<int>(SmallBlockCache::kMaxBytes / SmallBlockCache::kGranule);

// A kept block starts with its link; the rest may be poisoned.
struct FreeBlock {
  FreeBlock* next;
};

int ClassOf(size_t bytes) {
  return static_cast<int>((bytes + SmallBlockCache::kGranule - 1) /
                          SmallBlockCache::kGranule) -
         1;
}

size_t ClassBytes(int size_class) {
  return static_cast<size_t>(size_class + 1) * SmallBlockCache::kGranule;
}

class ThreadCache {
 public:
  ThreadCache() = default;
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  ~ThreadCache();

  void* Pop(int size_class) {
    FreeBlock* block = heads_[size_class];
    if (block == nullptr) return nullptr;
    heads_[size_class] = block->next;
    cached_bytes_ -= static_cast<int64_t>(ClassBytes(size_class));
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
    ASAN_UNPOISON_MEMORY_REGION(block, ClassBytes(size_class));
#endif
    return block;
  }

  bool Push(void* memory, int size_class) {
    const int64_t bytes = static_cast<int64_t>(ClassBytes(size_class));
    if (cached_bytes_ + bytes > SmallBlockCache::kMaxCachedBytesPerThread) {
      return false;
    }
    cached_bytes_ += bytes;
    auto* block = static_cast<FreeBlock*>(memory);
    block->next = heads_[size_class];
    heads_[size_class] = block;
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
    // The link stays readable: LeakSanitizer does not follow pointers kept
    // in poisoned memory.
    ASAN_POISON_MEMORY_REGION(block + 1,
                              ClassBytes(size_class) - sizeof(FreeBlock));
#endif
    return true;
  }

  int64_t cached_bytes() const { return cached_bytes_; }

 private:
  std::array<FreeBlock*, kNumClasses> heads_{};
  int64_t cached_bytes_ = 0;
};

// Trivially destructible, so it can still be read while (and after) the
// thread's destructors run: blocks freed then go to free().
thread_local bool cache_destroyed = false;

ThreadCache::~ThreadCache() {
  cache_destroyed = true;
  for (int c = 0; c < kNumClasses; ++c) {
    while (void* block = Pop(c)) std::free(block);
  }
}

ThreadCache& ThisThreadsCache() {
  thread_local ThreadCache cache;
  return cache;
}

}  // namespace

void* SmallBlockCache::Allocate(size_t bytes) {
  const int size_class = ClassOf(bytes);
  if (!cache_destroyed) {
    if (void* block = ThisThreadsCache().Pop(size_class)) return block;
  }
  void* block = std::malloc(ClassBytes(size_class));
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

void SmallBlockCache::Deallocate(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (cache_destroyed || !ThisThreadsCache().Push(block, ClassOf(bytes))) {
    std::free(block);
  }
}

int64_t SmallBlockCache::ThisThreadsCachedBytes() {
  return cache_destroyed ? 0 : ThisThreadsCache().cached_bytes();
}

}  // namespace cosession::detail
