// TensorAllocator: where tensor buffers come from. It keeps the blocks of
// freed large buffers and hands them out again, so that a step which
// allocates the same tensors every run does not pay for fresh memory every
// run.
//
// Why: glibc returns the freed top of a thread's heap to the kernel as soon
// as it exceeds 128 KiB (madvise, which also flushes the other cores' TLBs),
// so a run that makes a megabyte of intermediate tensors and frees them at
// its end page-faults that megabyte back in on the next run. Measured on
// BM_Executor_FanOut/64 (64 MatMul products of 16 KiB): a quarter of the run
// went to page faults, TLB flushes and sysmalloc. TensorFlow's BFC allocator
// keeps its memory for the same reason.
//
// Contract:
//   * Allocate(bytes) returns a block of at least `bytes` bytes, aligned as
//     malloc aligns, or nullptr when memory is exhausted. Its contents are
//     unspecified (a reused block holds an earlier tensor's bytes).
//   * Deallocate(block, bytes) takes a block back; `bytes` must be the size
//     it was allocated with.
//   * Blocks under kMinCachedBytes go straight to malloc/free (tensor
//     buffers that small come from graph/small_block_cache.h, without the
//     locks a block shared between threads needs here). Larger sizes are
//     rounded up to one of four size classes per power of two (at most 25%
//     more), and a freed block is kept in its class's free list while the
//     cache holds at most `cache_limit_bytes`; past that it is freed.
//   * A freed block goes back to the heap of the thread that first
//     allocated it, whichever thread frees it, and a thread reuses blocks
//     of its own heap (as mimalloc's heaps do). Why: a kernel's output is
//     typically freed by its consumer on another thread; handed to a third
//     thread, every cache line of it would have to travel before the new
//     owner could write it. Measured on the graph of BM_Executor_FanOut/64,
//     where one thread's AddN frees the MatMul products of both: 4-5% less
//     time per run than with one list shared by all threads (3000 runs,
//     alternating).
//   * ReleaseCachedMemory() frees every kept block.
//   * Under AddressSanitizer a kept block is poisoned, so a use after free
//     is still reported, and unpoisoned when handed out again.
//
// Thread safety: every member function may be called concurrently. A block
// freed on one thread and reused on another is handed over under a mutex,
// so the new owner's writes happen after the old owner's accesses.
//
// Lifetime: Default() is never destroyed, so tensors that outlive main()
// (statics) can still give their buffers back. An allocator constructed by
// hand must outlive every block it handed out.
#ifndef COSESSION_GRAPH_TENSOR_ALLOCATOR_H_
#define COSESSION_GRAPH_TENSOR_ALLOCATOR_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace cosession {

struct TensorAllocatorOptions {
  // The most bytes kept in free lists; 0 keeps nothing.
  int64_t cache_limit_bytes = int64_t{256} << 20;
};

struct TensorAllocatorStats {
  int64_t cached_bytes = 0;  // kept in free lists now
  int64_t reused = 0;        // cached-size allocations served from the cache
  int64_t fresh = 0;         // cached-size allocations that went to malloc
};

class TensorAllocator {
 public:
  // Sizes from here up to kMaxCachedBytes are cached.
  static constexpr size_t kMinCachedBytes = size_t{4} << 10;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;
  // False for sizes that Allocate and Deallocate pass to malloc and free;
  // callers on a hot path may do the same without calling Default().
  static constexpr bool IsCached(size_t bytes) {
    return bytes >= kMinCachedBytes && bytes <= kMaxCachedBytes;
  }

  explicit TensorAllocator(TensorAllocatorOptions options = {});
  ~TensorAllocator();  // frees the kept blocks
  TensorAllocator(const TensorAllocator&) = delete;
  TensorAllocator& operator=(const TensorAllocator&) = delete;

  // The allocator behind every Tensor.
  static TensorAllocator& Default();

  void* Allocate(size_t bytes);
  void Deallocate(void* block, size_t bytes);

  // Frees every kept block; returns how many bytes that gave back.
  int64_t ReleaseCachedMemory();
  // A new limit applies to later frees; lowering it releases nothing now.
  void SetCacheLimit(int64_t bytes);
  TensorAllocatorStats Stats() const;

  // The size class of `bytes` (kMinCachedBytes <= bytes <= kMaxCachedBytes)
  // and the block size it stands for. Exposed for tests.
  static int SizeClass(size_t bytes);
  static size_t ClassBytes(int size_class);
  // The heap the calling thread allocates from. Exposed for tests.
  static int ThisThreadsHeap();

 private:
  // 4 classes for every power of two from 2^12 to 2^30, and 2^30 itself.
  static constexpr int kNumClasses = 4 * (30 - 12) + 1;
  // Threads share this many heaps (thread i uses heap i % kNumHeaps).
  static constexpr int kNumHeaps = 8;

  // Sits in front of every cached block: which heap it returns to, and its
  // link while it is kept. 16 bytes keep the block as aligned as malloc's.
  struct BlockHeader {
    BlockHeader* next{};
    int32_t heap{};
  };
  struct alignas(64) FreeList {  // a cache line each: no false sharing
    std::mutex mu;
    BlockHeader* head ABSL_GUARDED_BY(mu) = nullptr;
  };

  // Frees the list's blocks; returns their bytes.
  int64_t FreeAll(FreeList& list, int size_class);

  std::array<std::array<FreeList, kNumClasses>, kNumHeaps> heaps_;
  std::atomic<int64_t> cache_limit_bytes_;
  std::atomic<int64_t> cached_bytes_{0};
  std::atomic<int64_t> reused_{0};
  std::atomic<int64_t> fresh_{0};
};

}  // namespace cosession

#endif  // COSESSION_GRAPH_TENSOR_ALLOCATOR_H_
