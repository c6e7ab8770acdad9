// Seeded random streams for the pipeline (shuffles, row splits) that are
// the same on every platform and standard library: std::mt19937_64 is
// specified exactly, std::uniform_int_distribution is not, so draws go
// through UniformBelow.
// Thread safety: plain functions; an engine is thread-compatible.
#ifndef COSESSION_PIPELINE_SEEDED_RANDOM_H_
#define COSESSION_PIPELINE_SEEDED_RANDOM_H_

#include <cstdint>
#include <random>
#include <vector>

namespace cosession {

// An engine for the stream keyed by (seed, salt): different salts give
// unrelated streams from one seed.
std::mt19937_64 SeededEngine(uint64_t seed, uint64_t salt);

// Uniform in [0, bound), unbiased; bound >= 1.
uint64_t UniformBelow(std::mt19937_64& engine, uint64_t bound);

// A Fisher-Yates permutation of 0..n-1 (n >= 0) drawn from the stream
// keyed by (seed, salt).
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed, uint64_t salt);

// Mixes two words into one (a salt from an epoch and a stage's own).
uint64_t MixSeed(uint64_t a, uint64_t b);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_SEEDED_RANDOM_H_
