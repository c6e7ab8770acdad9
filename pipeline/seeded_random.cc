#include "cosession/pipeline/seeded_random.h"

#include <limits>
#include <utility>

namespace cosession {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::mt19937_64 SeededEngine(uint64_t seed, uint64_t salt) {
  uint64_t state = seed;
  const uint64_t a = SplitMix64(state);
  state ^= salt * 0xd1b54a32d192ed03ULL;
  const uint64_t b = SplitMix64(state);
  std::seed_seq seq{static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                    static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
  return std::mt19937_64(seq);
}

uint64_t UniformBelow(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const uint64_t limit = max - max % bound;
  uint64_t r;
  do {
    r = engine();
  } while (r >= limit);
  return r % bound;
}

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed,
                                       uint64_t salt) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 engine = SeededEngine(seed, salt);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(
        UniformBelow(engine, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t state = a ^ (b * 0x9e3779b97f4a7c15ULL);
  return SplitMix64(state);
}

}  // namespace cosession
