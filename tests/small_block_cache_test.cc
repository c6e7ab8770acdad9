// Tests of SmallBlockCache: a freed block is reused by its thread's next
// allocation of the same size class, sizes round up to the granule, each
// thread keeps at most its bound and only the blocks it freed, kept blocks
// are poisoned under ASan, and small tensors use it.
#include "cosession/graph/small_block_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "cosession/graph/tensor.h"

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
#include <sanitizer/asan_interface.h>
#endif

namespace cosession::small_block_cache_test {
namespace {

using detail::SmallBlockCache;

TEST(SmallBlockCache, AFreedBlockIsReusedForItsSizeClass) {
  // On a thread of its own: its cache starts empty, whatever ran before.
  std::thread([] {
    void* block = SmallBlockCache::Allocate(100);
    const int64_t kept = SmallBlockCache::ThisThreadsCachedBytes();
    SmallBlockCache::Deallocate(block, 100);
    // Kept by this thread's list (not handed to malloc), rounded to 128.
    EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(), kept + 128);
    // 100 and 120 bytes share the 128-byte class; 200 does not.
    void* again = SmallBlockCache::Allocate(120);
    EXPECT_EQ(again, block);
    EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(), kept);
    SmallBlockCache::Deallocate(again, 120);
    void* other = SmallBlockCache::Allocate(200);
    EXPECT_NE(other, block);
    SmallBlockCache::Deallocate(other, 200);
  }).join();
}

TEST(SmallBlockCache, BlocksAreLastInFirstOut) {
  // On a thread of its own: its cache starts empty, whatever ran before.
  std::thread([] {
    void* a = SmallBlockCache::Allocate(64);
    void* b = SmallBlockCache::Allocate(64);
    EXPECT_NE(a, b);
    const int64_t kept = SmallBlockCache::ThisThreadsCachedBytes();
    SmallBlockCache::Deallocate(a, 64);
    SmallBlockCache::Deallocate(b, 64);
    EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(), kept + 128);
    EXPECT_EQ(SmallBlockCache::Allocate(64), b);
    EXPECT_EQ(SmallBlockCache::Allocate(64), a);
    SmallBlockCache::Deallocate(a, 64);
    SmallBlockCache::Deallocate(b, 64);
  }).join();
}

TEST(SmallBlockCache, AThreadKeepsAtMostItsBound) {
  constexpr size_t kBytes = SmallBlockCache::kMaxBytes;
  const int64_t blocks = 2 * SmallBlockCache::kMaxCachedBytesPerThread /
                         static_cast<int64_t>(kBytes);
  std::thread([&] {
    std::vector<void*> held;
    for (int64_t i = 0; i < blocks; ++i) {
      held.push_back(SmallBlockCache::Allocate(kBytes));
    }
    for (void* block : held) SmallBlockCache::Deallocate(block, kBytes);
    EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(),
              SmallBlockCache::kMaxCachedBytesPerThread);
  }).join();
}

TEST(SmallBlockCache, ABlockJoinsTheCacheOfTheThreadThatFreesIt) {
  void* block = SmallBlockCache::Allocate(256);
  int64_t kept_before = -1;
  int64_t kept_after = -1;
  void* reused = nullptr;
  std::thread([&] {
    kept_before = SmallBlockCache::ThisThreadsCachedBytes();
    SmallBlockCache::Deallocate(block, 256);
    kept_after = SmallBlockCache::ThisThreadsCachedBytes();
    reused = SmallBlockCache::Allocate(256);
    SmallBlockCache::Deallocate(reused, 256);
  }).join();
  EXPECT_EQ(kept_before, 0);
  EXPECT_EQ(kept_after, 256);
  EXPECT_EQ(reused, block);
}

#ifdef ABSL_HAVE_ADDRESS_SANITIZER
TEST(SmallBlockCache, AKeptBlockIsPoisonedPastItsLink) {
  // On a thread of its own: its cache has room, whatever ran before.
  std::thread([] {
    char* block = static_cast<char*>(SmallBlockCache::Allocate(512));
    SmallBlockCache::Deallocate(block, 512);
    EXPECT_FALSE(__asan_address_is_poisoned(block));  // the link
    EXPECT_TRUE(__asan_address_is_poisoned(block + 64));
    EXPECT_TRUE(__asan_address_is_poisoned(block + 511));
    char* again = static_cast<char*>(SmallBlockCache::Allocate(512));
    EXPECT_EQ(again, block);
    EXPECT_FALSE(__asan_address_is_poisoned(block + 511));
    SmallBlockCache::Deallocate(again, 512);
  }).join();
}
#endif

TEST(SmallBlockCache, ScalarTensorsReuseTheirBlocks) {
  std::thread([] {
    {
      Tensor t = Tensor::Scalar(1.0f);
      EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(), 0);
    }
    const int64_t kept = SmallBlockCache::ThisThreadsCachedBytes();
    EXPECT_GT(kept, 0);
    Tensor u = Tensor::Scalar(2.0f);
    EXPECT_EQ(SmallBlockCache::ThisThreadsCachedBytes(), 0);
    EXPECT_EQ(u.scalar<float>(), 2.0f);
  }).join();
}

}  // namespace
}  // namespace cosession::small_block_cache_test
