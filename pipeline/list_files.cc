// ListFiles: tf.data's Dataset.list_files -- one string element per path
// matching any of the glob patterns (POSIX glob(3): '*', '?' and '[...]'
// in any component of the path; a directory that cannot be read is passed
// over), all the patterns' matches together sorted by name, as
// TensorFlow's MatchingFiles sorts them. No match at all is
// InvalidArgument "ListFiles: No files matched pattern: <patterns>"
// (TensorFlow's words).
//
// Matching is blocking I/O (directory listings), so it runs on the pool,
// when an iterator is first asked for an element: each iterator -- each
// pass of a Repeat -- lists the files as they are then, as each of
// TensorFlow's iterator initialisations does. TryNext() answers only once
// they are listed. A cancelled listing leaves the iterator unlisted: the
// next Next() lists again.
//
// Shuffling (tf.data's default): the sorted names are permuted by a
// seeded stream (pipeline/seeded_random.h) mixed with the pass
// (IteratorContext::iteration), so every pass draws another order, the
// same in every run for the same seed. Without a seed, the seed is drawn
// from std::random_device once per dataset: each run differs and the
// dataset is not deterministic() (no exact resume), as tf.data's unseeded
// list_files.
//
// Thread safety: the node is immutable; an iterator is single-consumer.
#include <glob.h>

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/pipeline/detail/on_pool.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Listed = absl::StatusOr<std::vector<std::string>>;

constexpr uint64_t kListFilesSalt = 0x115'7f11e5'0001ULL;

// The paths matching any of `patterns`, sorted; InvalidArgument when none
// does.
Listed MatchingFiles(const std::vector<std::string>& patterns) {
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    glob_t matches{};
    const int result = glob(pattern.c_str(), 0, nullptr, &matches);
    if (result == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        paths.emplace_back(matches.gl_pathv[i]);
      }
    }
    globfree(&matches);
    if (result == GLOB_NOSPACE) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ListFiles: out of memory matching pattern '", pattern, "'"));
    }
  }
  if (paths.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ListFiles: No files matched pattern: ",
                     absl::StrJoin(patterns, ", ")));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

class ListFilesIterator : public ElementIterator {
 public:
  ListFilesIterator(std::shared_ptr<const std::vector<std::string>> patterns,
                    std::optional<uint64_t> shuffle_seed, uint64_t iteration,
                    Runtime::executor_type pool)
      : patterns_(std::move(patterns)),
        shuffle_seed_(shuffle_seed),
        iteration_(iteration),
        pool_(std::move(pool)) {}

  std::optional<Result> TryNext() override {
    if (!paths_.has_value()) return std::nullopt;  // Next() lists them
    return Take();
  }

  asio::awaitable<Result> Next() override {
    if (!paths_.has_value()) {
      // Named first: a capturing lambda temporary inside co_await is freed
      // too early by g++ 12 (docs/async_pitfalls.md, item 4).
      auto match = [patterns = patterns_] { return MatchingFiles(*patterns); };
      std::string what = "ListFiles was cancelled";
      Listed listed = co_await AsyncOnPool<Listed>(
          pool_, std::move(match), std::move(what), asio::use_awaitable);
      if (!listed.ok()) co_return listed.status();
      paths_ = *std::move(listed);
      if (shuffle_seed_.has_value()) {
        std::vector<int64_t> order = SeededPermutation(
            static_cast<int64_t>(paths_->size()), *shuffle_seed_,
            MixSeed(kListFilesSalt, iteration_));
        std::vector<std::string> shuffled;
        shuffled.reserve(order.size());
        for (int64_t i : order) shuffled.push_back(std::move((*paths_)[i]));
        paths_ = std::move(shuffled);
      }
    }
    co_return Take();
  }

 private:
  Result Take() {
    if (next_ == paths_->size()) return std::optional<Element>();
    Element element;
    element.components.emplace_back(std::move((*paths_)[next_++]));
    return std::optional<Element>(std::move(element));
  }

  std::shared_ptr<const std::vector<std::string>> patterns_;
  std::optional<uint64_t> shuffle_seed_;
  uint64_t iteration_;
  Runtime::executor_type pool_;
  std::optional<std::vector<std::string>> paths_;  // set once listed
  size_t next_ = 0;
};

class ListFilesDataset : public DatasetNode {
 public:
  ListFilesDataset(std::vector<std::string> patterns,
                   std::optional<uint64_t> shuffle_seed, bool seeded)
      : patterns_(std::make_shared<const std::vector<std::string>>(
            std::move(patterns))),
        shuffle_seed_(shuffle_seed),
        seeded_(seeded) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<ListFilesIterator>(patterns_, shuffle_seed_,
                                               context.iteration, context.pool);
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::String()};
  }
  bool deterministic() const override { return seeded_; }
  std::string DebugString() const override {
    return absl::StrCat("ListFiles(", absl::StrJoin(*patterns_, ", "), ")");
  }

 private:
  std::shared_ptr<const std::vector<std::string>> patterns_;
  std::optional<uint64_t> shuffle_seed_;  // unset: sorted order
  bool seeded_;  // not shuffled, or shuffled with the user's seed
};

}  // namespace

Node ListFilesNode(std::vector<std::string> patterns,
                   std::optional<uint64_t> shuffle_seed, bool seeded) {
  return std::make_shared<ListFilesDataset>(std::move(patterns), shuffle_seed,
                                            seeded);
}

}  // namespace cosession::detail
