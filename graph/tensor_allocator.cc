#include "cosession/graph/tensor_allocator.h"

#include <bit>
#include <cstdlib>

#include "absl/base/config.h"

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
#include <sanitizer/asan_interface.h>
#endif

namespace cosession {
namespace {

void Poison(void* block, size_t bytes) {
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
  ASAN_POISON_MEMORY_REGION(block, bytes);
#else
  (void)block;
  (void)bytes;
#endif
}

void Unpoison(void* block, size_t bytes) {
#ifdef ABSL_HAVE_ADDRESS_SANITIZER
  ASAN_UNPOISON_MEMORY_REGION(block, bytes);
#else
  (void)block;
  (void)bytes;
#endif
}

}  // namespace

TensorAllocator::TensorAllocator(TensorAllocatorOptions options)
    : cache_limit_bytes_(options.cache_limit_bytes) {}

TensorAllocator::~TensorAllocator() { ReleaseCachedMemory(); }

TensorAllocator& TensorAllocator::Default() {
  // Leaked on purpose: see the header's "Lifetime".
  static TensorAllocator* const allocator = new TensorAllocator();
  return *allocator;
}

int TensorAllocator::SizeClass(size_t bytes) {
  const int log2 = std::bit_width(bytes) - 1;  // 2^log2 <= bytes
  const size_t base = size_t{1} << log2;
  const size_t step = base / 4;
  return 4 * (log2 - 12) + static_cast<int>((bytes - base + step - 1) / step);
}

size_t TensorAllocator::ClassBytes(int size_class) {
  const size_t base = size_t{1} << (12 + size_class / 4);
  return base + (size_class % 4) * (base / 4);
}

int TensorAllocator::ThisThreadsHeap() {
  static std::atomic<int> next_thread{0};
  thread_local const int heap =
      next_thread.fetch_add(1, std::memory_order_relaxed) % kNumHeaps;
  return heap;
}

// A cached block is a BlockHeader followed by the caller's bytes. The header
// is never poisoned: it holds the free list's link, and LeakSanitizer does
// not follow pointers stored in poisoned memory.
void* TensorAllocator::Allocate(size_t bytes) {
  if (!IsCached(bytes)) {
    return std::malloc(bytes);
  }
  static_assert(sizeof(BlockHeader) == 16);
  const int size_class = SizeClass(bytes);
  const size_t class_bytes = ClassBytes(size_class);
  const int heap = ThisThreadsHeap();
  FreeList& list = heaps_[heap][size_class];
  BlockHeader* header = nullptr;
  {
    std::lock_guard lock(list.mu);
    if (list.head != nullptr) {
      header = list.head;
      list.head = header->next;
    }
  }
  if (header == nullptr) {
    header = static_cast<BlockHeader*>(
        std::malloc(sizeof(BlockHeader) + class_bytes));
    if (header == nullptr) return nullptr;
    header->heap = heap;
    fresh_.fetch_add(1, std::memory_order_relaxed);
  } else {
    cached_bytes_.fetch_sub(static_cast<int64_t>(class_bytes),
                            std::memory_order_relaxed);
    reused_.fetch_add(1, std::memory_order_relaxed);
    Unpoison(header + 1, class_bytes);
  }
  return header + 1;
}

void TensorAllocator::Deallocate(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (!IsCached(bytes)) {
    std::free(block);
    return;
  }
  BlockHeader* header = static_cast<BlockHeader*>(block) - 1;
  const int size_class = SizeClass(bytes);
  const int64_t class_bytes = static_cast<int64_t>(ClassBytes(size_class));
  // Reserve room in the cache first; give it back if the block is too many.
  const int64_t cached =
      cached_bytes_.fetch_add(class_bytes, std::memory_order_relaxed) +
      class_bytes;
  if (cached > cache_limit_bytes_.load(std::memory_order_relaxed)) {
    cached_bytes_.fetch_sub(class_bytes, std::memory_order_relaxed);
    std::free(header);
    return;
  }
  Poison(block, static_cast<size_t>(class_bytes));
  FreeList& list = heaps_[header->heap][size_class];
  std::lock_guard lock(list.mu);
  header->next = list.head;
  list.head = header;
}

int64_t TensorAllocator::FreeAll(FreeList& list, int size_class) {
  BlockHeader* head;
  {
    std::lock_guard lock(list.mu);
    head = list.head;
    list.head = nullptr;
  }
  const size_t class_bytes = ClassBytes(size_class);
  int64_t freed = 0;
  while (head != nullptr) {
    BlockHeader* next = head->next;
    Unpoison(head + 1, class_bytes);
    std::free(head);
    freed += static_cast<int64_t>(class_bytes);
    head = next;
  }
  cached_bytes_.fetch_sub(freed, std::memory_order_relaxed);
  return freed;
}

int64_t TensorAllocator::ReleaseCachedMemory() {
  int64_t freed = 0;
  for (auto& heap : heaps_) {
    for (int c = 0; c < kNumClasses; ++c) freed += FreeAll(heap[c], c);
  }
  return freed;
}

void TensorAllocator::SetCacheLimit(int64_t bytes) {
  cache_limit_bytes_.store(bytes, std::memory_order_relaxed);
}

TensorAllocatorStats TensorAllocator::Stats() const {
  return TensorAllocatorStats{
      .cached_bytes = cached_bytes_.load(std::memory_order_relaxed),
      .reused = reused_.load(std::memory_order_relaxed),
      .fresh = fresh_.load(std::memory_order_relaxed),
  };
}

}  // namespace cosession
