// SmallBlockAllocator<T>: a standard allocator whose blocks up to
// SmallBlockCache::kMaxBytes come from the per-thread free lists of
// graph/small_block_cache.h; larger ones from operator new.
//
// Why: containers that are allocated and freed in runs of many at once on
// one thread -- the component vectors of a batch's elements, made by a
// source and freed together when the batch is stacked -- overflow glibc's
// 7-block per-thread cache, and each malloc/free pair then costs ~200
// instructions instead of ~50 (callgrind, BM_Pipeline_Stages).
//
// Thread safety: as SmallBlockCache: any thread may allocate, and any
// thread may deallocate a block another allocated. Stateless: all
// instances compare equal.
#ifndef COSESSION_GRAPH_SMALL_BLOCK_ALLOCATOR_H_
#define COSESSION_GRAPH_SMALL_BLOCK_ALLOCATOR_H_

#include <cstddef>
#include <new>

#include "cosession/graph/small_block_cache.h"

namespace cosession {

template <typename T>
class SmallBlockAllocator {
 public:
  using value_type = T;

  SmallBlockAllocator() = default;
  template <typename U>
  SmallBlockAllocator(const SmallBlockAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (FromCache(bytes)) {
      return static_cast<T*>(detail::SmallBlockCache::Allocate(bytes));
    }
    return static_cast<T*>(
        ::operator new (bytes, std::align_val_t{alignof(T)}));
  }
  void deallocate(T* block, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (FromCache(bytes)) {
      detail::SmallBlockCache::Deallocate(block, bytes);
      return;
    }
    ::operator delete (block, bytes, std::align_val_t{alignof(T)});
  }

  template <typename U>
  bool operator==(const SmallBlockAllocator<U>&) const {
    return true;
  }

 private:
  // The cache's blocks are aligned as malloc aligns (16 bytes).
  static constexpr bool FromCache(size_t bytes) {
    return bytes <= detail::SmallBlockCache::kMaxBytes && alignof(T) <= 16;
  }
};

}  // namespace cosession

#endif  // COSESSION_GRAPH_SMALL_BLOCK_ALLOCATOR_H_
