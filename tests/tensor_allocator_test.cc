// Tests of TensorAllocator: size classes, reuse of freed blocks, the cache
// limit, release, poisoning under ASan, concurrent use, and that tensors
// draw their buffers from the default allocator.
#include "cosession/graph/tensor_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "cosession/graph/tensor.h"

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
#include <sanitizer/asan_interface.h>
#endif

namespace cosession::tensor_allocator_test {
namespace {

constexpr size_t k64KiB = size_t{64} << 10;

TEST(TensorAllocator, SizeClassesRoundUpByAtMostAQuarter) {
  using A = TensorAllocator;
  EXPECT_EQ(A::ClassBytes(A::SizeClass(4096)), 4096u);
  EXPECT_EQ(A::ClassBytes(A::SizeClass(4097)), 5120u);
  EXPECT_EQ(A::ClassBytes(A::SizeClass(5120)), 5120u);
  EXPECT_EQ(A::ClassBytes(A::SizeClass(7169)), 8192u);
  EXPECT_EQ(A::SizeClass(7169), A::SizeClass(8192));
  EXPECT_EQ(A::ClassBytes(A::SizeClass(A::kMaxCachedBytes)),
            A::kMaxCachedBytes);
  for (size_t bytes = A::kMinCachedBytes; bytes <= A::kMaxCachedBytes;
       bytes = bytes * 9 / 8 + 1) {
    const size_t rounded = A::ClassBytes(A::SizeClass(bytes));
    EXPECT_GE(rounded, bytes);
    EXPECT_LE(rounded, bytes + bytes / 4) << bytes;
  }
}

TEST(TensorAllocator, AFreedBlockIsHandedOutAgainForTheSameClass) {
  TensorAllocator allocator;
  void* first = allocator.Allocate(k64KiB);
  ASSERT_NE(first, nullptr);
  allocator.Deallocate(first, k64KiB);
  EXPECT_EQ(allocator.Stats().cached_bytes, static_cast<int64_t>(k64KiB));
  // 60 KiB falls in the same class as 64 KiB.
  void* second = allocator.Allocate(k64KiB - 4096);
  EXPECT_EQ(second, first);
  const TensorAllocatorStats stats = allocator.Stats();
  EXPECT_EQ(stats.cached_bytes, 0);
  EXPECT_EQ(stats.reused, 1);
  EXPECT_EQ(stats.fresh, 1);
  allocator.Deallocate(second, k64KiB - 4096);
}

TEST(TensorAllocator, AReusedBlockIsWholeAndWritable) {
  TensorAllocator allocator;
  void* block = allocator.Allocate(k64KiB);
  std::memset(block, 0xab, k64KiB);
  allocator.Deallocate(block, k64KiB);
  auto* bytes = static_cast<unsigned char*>(allocator.Allocate(k64KiB));
  ASSERT_EQ(static_cast<void*>(bytes), block);
  // Every byte but the free-list link is what the last owner wrote.
  EXPECT_EQ(bytes[k64KiB - 1], 0xab);
  std::memset(bytes, 0, k64KiB);
  allocator.Deallocate(bytes, k64KiB);
}

TEST(TensorAllocator, SmallBlocksAreNotCached) {
  TensorAllocator allocator;
  void* block = allocator.Allocate(TensorAllocator::kMinCachedBytes - 1);
  ASSERT_NE(block, nullptr);
  allocator.Deallocate(block, TensorAllocator::kMinCachedBytes - 1);
  const TensorAllocatorStats stats = allocator.Stats();
  EXPECT_EQ(stats.cached_bytes, 0);
  EXPECT_EQ(stats.fresh, 0);
}

TEST(TensorAllocator, TheCacheKeepsNoMoreThanItsLimit) {
  TensorAllocator allocator({.cache_limit_bytes = 2 * k64KiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(allocator.Allocate(k64KiB));
  for (void* block : blocks) allocator.Deallocate(block, k64KiB);
  EXPECT_EQ(allocator.Stats().cached_bytes, static_cast<int64_t>(2 * k64KiB));

  allocator.SetCacheLimit(0);
  void* block = allocator.Allocate(k64KiB);  // from the cache
  allocator.Deallocate(block, k64KiB);       // over the new limit: freed
  EXPECT_EQ(allocator.Stats().cached_bytes, static_cast<int64_t>(k64KiB));
}

TEST(TensorAllocator, ReleaseCachedMemoryFreesEveryKeptBlock) {
  TensorAllocator allocator;
  void* a = allocator.Allocate(k64KiB);
  void* b = allocator.Allocate(3 * k64KiB);
  allocator.Deallocate(a, k64KiB);
  allocator.Deallocate(b, 3 * k64KiB);
  EXPECT_EQ(allocator.ReleaseCachedMemory(),
            static_cast<int64_t>(k64KiB +
                                 TensorAllocator::ClassBytes(
                                     TensorAllocator::SizeClass(3 * k64KiB))));
  EXPECT_EQ(allocator.Stats().cached_bytes, 0);
  void* c = allocator.Allocate(k64KiB);
  EXPECT_EQ(allocator.Stats().fresh, 3);
  allocator.Deallocate(c, k64KiB);
}

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
TEST(TensorAllocator, AKeptBlockIsPoisonedUntilHandedOutAgain) {
  TensorAllocator allocator;
  auto* block = static_cast<char*>(allocator.Allocate(k64KiB));
  allocator.Deallocate(block, k64KiB);
  EXPECT_TRUE(__asan_address_is_poisoned(block));
  EXPECT_TRUE(__asan_address_is_poisoned(block + k64KiB / 2));
  EXPECT_TRUE(__asan_address_is_poisoned(block + k64KiB - 1));
  ASSERT_EQ(allocator.Allocate(k64KiB), block);
  EXPECT_FALSE(__asan_address_is_poisoned(block));
  EXPECT_FALSE(__asan_address_is_poisoned(block + k64KiB - 1));
  allocator.Deallocate(block, k64KiB);
}
#endif

// Runs `fn` on a new thread whose heap is not this thread's.
template <typename Fn>
void OnAThreadOfAnotherHeap(Fn fn) {
  const int mine = TensorAllocator::ThisThreadsHeap();
  for (;;) {
    bool ran = false;
    std::thread([&] {
      if (TensorAllocator::ThisThreadsHeap() == mine) return;
      fn();
      ran = true;
    }).join();
    if (ran) return;
  }
}

TEST(TensorAllocator, ABlockFreedOnAnotherThreadReturnsToItsAllocatorsHeap) {
  TensorAllocator allocator;
  void* mine = allocator.Allocate(k64KiB);
  void* theirs_after_free = nullptr;
  OnAThreadOfAnotherHeap([&] {
    allocator.Deallocate(mine, k64KiB);
    // Not handed to the thread that freed it: that one gets a new block.
    theirs_after_free = allocator.Allocate(k64KiB);
  });
  EXPECT_NE(theirs_after_free, mine);
  EXPECT_EQ(allocator.Allocate(k64KiB), mine);  // back on its own thread
  allocator.Deallocate(mine, k64KiB);
  allocator.Deallocate(theirs_after_free, k64KiB);
}

// Each thread fills blocks with its own pattern and passes them to the next
// thread, which checks and frees them: frees cross threads while the heaps
// they return to are allocating. A block handed to two owners at once shows
// up as a wrong byte (and under TSan as a race).
TEST(TensorAllocator, BlocksPassedBetweenThreadsAreNeverShared) {
  TensorAllocator allocator({.cache_limit_bytes = 16 * k64KiB});
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  struct Passed {
    unsigned char* block;
    size_t bytes;
    unsigned char pattern;
  };
  struct Mailbox {
    std::mutex mu;
    std::deque<Passed> blocks;
  };
  std::vector<Mailbox> mailboxes(kThreads);
  std::vector<int> wrong(kThreads, 0);
  auto check_and_free = [&](const Passed& p, int t) {
    for (size_t i = 0; i < p.bytes; i += 512) {
      if (p.block[i] != p.pattern) ++wrong[t];
    }
    allocator.Deallocate(p.block, p.bytes);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t bytes = (round % 3 + 1) * size_t{8192};
        auto* block = static_cast<unsigned char*>(allocator.Allocate(bytes));
        const auto pattern = static_cast<unsigned char>(t * 31 + round);
        std::memset(block, pattern, bytes);
        {
          Mailbox& next = mailboxes[(t + 1) % kThreads];
          std::lock_guard lock(next.mu);
          next.blocks.push_back({block, bytes, pattern});
        }
        std::deque<Passed> received;
        {
          std::lock_guard lock(mailboxes[t].mu);
          received.swap(mailboxes[t].blocks);
        }
        for (const Passed& p : received) check_and_free(p, t);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (const Passed& p : mailboxes[t].blocks) check_and_free(p, t);
    EXPECT_EQ(wrong[t], 0) << "thread " << t;
  }
  const TensorAllocatorStats stats = allocator.Stats();
  EXPECT_EQ(stats.reused + stats.fresh, int64_t{kThreads} * kRounds);
  EXPECT_GT(stats.reused, 0);
  EXPECT_LE(stats.cached_bytes, static_cast<int64_t>(16 * k64KiB));
}

TEST(TensorAllocator, ATensorsBufferComesBackForTheNextTensorOfItsSize) {
  TensorAllocator& allocator = TensorAllocator::Default();
  allocator.ReleaseCachedMemory();  // so that the cache has room
  const TensorShape shape{64, 64};  // 16 KiB of floats: a cached size
  const void* first_data;
  {
    Tensor first = Tensor::Allocate(DType::kFloat, shape);
    first_data = first.raw_data();
  }
  const int64_t reused_before = allocator.Stats().reused;
  Tensor second = Tensor::Allocate(DType::kFloat, shape);
  EXPECT_EQ(second.raw_data(), first_data);
  EXPECT_EQ(allocator.Stats().reused, reused_before + 1);
  // A zero-filled tensor is zero even in a reused block.
  second.mutable_flat<float>()[7] = 3.0f;
  second = Tensor();
  Tensor zeros(DType::kFloat, shape);
  for (float v : zeros.flat<float>()) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace cosession::tensor_allocator_test
