// SmallBlockCache: per-thread free lists for the small blocks that tensor
// buffers below TensorAllocator::kMinCachedBytes live in (a scalar's block
// is ~130 bytes).
//
// Why: a run keeps every small intermediate tensor until it ends (only big
// ones are dropped early, see async/executor.h), so a graph of a thousand
// scalar ops allocates a thousand blocks and frees them together. glibc's
// per-thread cache holds 7 blocks of a size; the rest go through its
// arenas' bins, ~4 times the instructions of a cache hit. Measured with
// callgrind on BM_Executor_Chain/1000: malloc and free were ~580 of the
// ~2,100 instructions an op cost.
//
// Contract:
//   * Allocate(bytes) (0 < bytes <= kMaxBytes) returns a block of at least
//     `bytes` bytes, aligned as malloc aligns; it throws std::bad_alloc when
//     memory is exhausted. Deallocate(block, bytes) takes it back, `bytes`
//     as allocated, from any thread.
//   * Sizes are rounded up to a multiple of kGranule. A freed block joins
//     the free list of the thread that frees it, for that thread's next
//     allocations of its size, while that thread keeps at most
//     kMaxCachedBytesPerThread; past that, and after the thread's cache was
//     destroyed (the thread is exiting), it goes to free().
//   * A thread's kept blocks are freed when the thread exits.
//   * Under AddressSanitizer a kept block is poisoned past its link, so a
//     use after free is still reported.
//
// Thread safety: every function may be called from any thread; each thread
// touches only its own lists. A block freed by one thread after another
// wrote it is handed over by the caller's own synchronisation (the last
// Unref of a tensor buffer is acq_rel).
#ifndef COSESSION_GRAPH_SMALL_BLOCK_CACHE_H_
#define COSESSION_GRAPH_SMALL_BLOCK_CACHE_H_

#include <cstddef>
#include <cstdint>

namespace cosession::detail {

class SmallBlockCache {
 public:
  static constexpr size_t kGranule = 64;
  static constexpr size_t kMaxBytes = 4096;
  static constexpr int64_t kMaxCachedBytesPerThread = int64_t{1} << 20;

  static void* Allocate(size_t bytes);
  static void Deallocate(void* block, size_t bytes);

  // Bytes the calling thread keeps now. Exposed for tests.
  static int64_t ThisThreadsCachedBytes();
};

}  // namespace cosession::detail

#endif  // COSESSION_GRAPH_SMALL_BLOCK_CACHE_H_
