// Cache: tf.data's cache() in memory. The first iterator that reads its
// input to the end fills the cache; every iterator made after that (the
// next pass of a Repeat, the next epoch's iterator) replays the cached
// elements without touching the input: the same elements, in the same
// order, each pass. Shuffle after Cache to draw another order per pass.
//
// Filling. Each iterator made while the cache is not complete reads the
// input and keeps a copy of what it passes on (tensors share their
// buffers, as elements do between stages; strings are copied). The first
// to reach the input's end publishes its copy; another that ends later
// drops its own. An iterator destroyed before the end drops its partial
// copy (tf.data: "the partially cached contents of the dataset will be
// discarded"), so a Take or a stopped run never truncates the dataset. An
// error of the input is passed on and ends the filling: that iterator's
// copy is dropped.
//
// The bound: max_bytes (tensor bytes and string bytes of the elements
// kept) per filling iterator. Past it, that iterator's Next() is
// ResourceExhausted "Cache(<name>): ... max_bytes", after the elements
// before it, and stays so: a cache never grows without bound, and a
// stream that cannot be cached is not silently read uncached.
//
// Replaying never waits (TryNext answers, Skip is O(1)), and is
// deterministic; filling is as deterministic as the input.
//
// Thread safety: the node is shared by every iterator of the dataset, on
// any thread: the published cache is behind a mutex, and immutable once
// published. An iterator is single-consumer.
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;
using Elements = std::vector<Element>;

// What the dataset's iterators share: the cached elements, once complete.
class MemoryCache {
 public:
  std::shared_ptr<const Elements> Complete() const {
    std::lock_guard lock(mu_);
    return elements_;
  }
  // The first complete copy wins.
  void Publish(Elements elements) {
    std::lock_guard lock(mu_);
    if (elements_ == nullptr) {
      elements_ = std::make_shared<const Elements>(std::move(elements));
    }
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Elements> elements_ ABSL_GUARDED_BY(mu_);
};

int64_t BytesOf(const Element& element) {
  int64_t bytes = 0;
  for (const Component& c : element.components) {
    if (const Tensor* t = std::get_if<Tensor>(&c)) {
      bytes += static_cast<int64_t>(t->TotalBytes());
    } else {
      bytes += static_cast<int64_t>(std::get<std::string>(c).size());
    }
  }
  return bytes;
}

class ReplayIterator : public ElementIterator {
 public:
  explicit ReplayIterator(std::shared_ptr<const Elements> elements)
      : elements_(std::move(elements)) {}

  std::optional<Result> TryNext() override {
    if (next_ == elements_->size()) return Result(std::optional<Element>());
    return Result(std::optional<Element>((*elements_)[next_++]));
  }
  asio::awaitable<Result> Next() override { co_return *TryNext(); }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    const size_t skipped =
        std::min(static_cast<size_t>(n), elements_->size() - next_);
    next_ += skipped;
    co_return static_cast<int64_t>(skipped);
  }

 private:
  std::shared_ptr<const Elements> elements_;
  size_t next_ = 0;
};

class FillingIterator : public ElementIterator {
 public:
  FillingIterator(std::unique_ptr<ElementIterator> input,
                  std::shared_ptr<MemoryCache> cache, int64_t max_bytes,
                  std::string name)
      : input_(std::move(input)),
        cache_(std::move(cache)),
        max_bytes_(max_bytes),
        name_(std::move(name)) {}

  std::optional<Result> TryNext() override {
    if (!overflow_.ok()) return Result(overflow_);
    if (!filling_) return input_->TryNext();
    std::optional<Result> next = input_->TryNext();
    if (!next.has_value()) return std::nullopt;
    return Keep(*std::move(next));
  }
  asio::awaitable<Result> Next() override {
    if (!overflow_.ok()) co_return overflow_;
    if (!filling_) co_return co_await NextOf(*input_);
    co_return Keep(co_await NextOf(*input_));
  }

 private:
  // Copies an element into the cache, publishes the cache at the end, and
  // stops filling on an error or past max_bytes.
  Result Keep(Result next) {
    if (!next.ok()) {
      StopFilling();
      return next;
    }
    if (!next->has_value()) {
      cache_->Publish(std::move(kept_));
      StopFilling();
      return next;
    }
    bytes_ += BytesOf(**next);
    if (bytes_ > max_bytes_) {
      StopFilling();
      overflow_ = absl::ResourceExhaustedError(absl::StrCat(
          name_, ": ", (*next)->origin.Describe("the cached elements"),
          " exceed max_bytes (", max_bytes_,
          "); cache a smaller dataset, or raise max_bytes"));
      return overflow_;
    }
    kept_.push_back(**next);
    return next;
  }
  void StopFilling() {
    filling_ = false;
    Elements().swap(kept_);
  }

  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<MemoryCache> cache_;
  int64_t max_bytes_;
  std::string name_;
  bool filling_ = true;
  absl::Status overflow_;  // set past max_bytes, returned from then on
  Elements kept_;
  int64_t bytes_ = 0;
};

class CacheDataset : public DatasetNode {
 public:
  CacheDataset(Node input, CacheOptions options)
      : input_(std::move(input)),
        options_(std::move(options)),
        cache_(std::make_shared<MemoryCache>()) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    if (std::shared_ptr<const Elements> cached = cache_->Complete()) {
      return std::make_unique<ReplayIterator>(std::move(cached));
    }
    absl::StatusOr<std::unique_ptr<ElementIterator>> input =
        input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<FillingIterator>(*std::move(input), cache_,
                                             options_.max_bytes, Name());
  }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", Name());
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  std::string Name() const {
    return absl::StrCat("Cache(", options_.name, ")");
  }

  Node input_;
  CacheOptions options_;
  std::shared_ptr<MemoryCache> cache_;
};

}  // namespace

Node CacheNode(Node input, CacheOptions options) {
  return std::make_shared<CacheDataset>(std::move(input), std::move(options));
}

}  // namespace cosession::detail
