// Shuffle, as tf.data's shuffle: a buffer of up to buffer_size elements,
// filled from the input before each draw; each output is drawn uniformly
// from the buffer (and the last buffered element moved into its place).
// So output k is uniform over the input elements [0, buffer_size + k) not
// yet drawn; buffer_size >= the input's length is a uniform permutation,
// buffer_size 1 the identity. The draws come from SeededEngine(seed, salt),
// the salt mixing in IteratorContext::iteration when
// reshuffle_each_iteration: each Repeat pass shuffles differently, and every
// run the same. An input error is returned at once (the buffer kept).
// TryTakeInto makes the same draws, refilling the buffer from the input in
// bulk, so that a Batch over a Shuffle takes its elements in one call.
#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

constexpr uint64_t kShuffleSalt = 0x5bff1e'0000'0001ULL;
constexpr size_t kMaxReserve = 4096;

class ShuffleIterator : public ElementIterator {
 public:
  ShuffleIterator(std::unique_ptr<ElementIterator> input, int64_t buffer_size,
                  std::mt19937_64 engine)
      : input_(std::move(input)),
        buffer_size_(static_cast<size_t>(buffer_size)),
        engine_(std::move(engine)) {}

  std::optional<Result> TryNext() override {
    while (!input_done_ && buffer_.size() < buffer_size_) {
      std::optional<Result> in = input_->TryNext();
      if (!in.has_value()) return std::nullopt;
      if (!in->ok()) return in;
      Take(**std::move(in));
    }
    return Draw();
  }
  asio::awaitable<Result> Next() override {
    while (!input_done_ && buffer_.size() < buffer_size_) {
      Result in = co_await NextOf(*input_);
      if (!in.ok()) co_return in;
      Take(*std::move(in));
    }
    co_return Draw();
  }
  // The same draws as TryNext's, the buffer refilled from the input in
  // bulk before each.
  absl::StatusOr<Taken> TryTakeInto(std::vector<Element>& out,
                                    size_t size) override {
    while (out.size() < size) {
      if (!input_done_ && buffer_.size() < buffer_size_) {
        ReserveBuffer();
        absl::StatusOr<Taken> in = input_->TryTakeInto(buffer_, buffer_size_);
        if (!in.ok()) return in.status();
        if (*in == Taken::kMustAwait) return Taken::kMustAwait;
        if (*in == Taken::kEnd) input_done_ = true;
      }
      Result drawn = Draw();
      if (!drawn->has_value()) return Taken::kEnd;
      out.push_back(**std::move(drawn));
    }
    return Taken::kFull;
  }

 private:
  void Take(std::optional<Element> element) {
    if (!element.has_value()) {
      input_done_ = true;
      return;
    }
    ReserveBuffer();
    buffer_.push_back(*std::move(element));
  }
  // Reserved up to a bound: a buffer_size meaning "the whole input" (as
  // CsvBatches passes) grows with the input instead.
  void ReserveBuffer() {
    if (buffer_.capacity() == 0) {
      buffer_.reserve(std::min(buffer_size_, kMaxReserve));
    }
  }
  Result Draw() {
    if (buffer_.empty()) return std::optional<Element>();
    const size_t at =
        static_cast<size_t>(UniformBelow(engine_, buffer_.size()));
    std::optional<Element> out(std::move(buffer_[at]));
    if (at + 1 != buffer_.size()) buffer_[at] = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

  std::unique_ptr<ElementIterator> input_;
  size_t buffer_size_;
  std::mt19937_64 engine_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
};

class ShuffleDataset : public DatasetNode {
 public:
  ShuffleDataset(Node input, int64_t buffer_size, uint64_t seed,
                 bool reshuffle_each_iteration)
      : input_(std::move(input)),
        buffer_size_(buffer_size),
        seed_(seed),
        reshuffle_each_iteration_(reshuffle_each_iteration) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    const uint64_t salt = reshuffle_each_iteration_
                              ? MixSeed(kShuffleSalt, context.iteration)
                              : kShuffleSalt;
    return std::make_unique<ShuffleIterator>(*std::move(input), buffer_size_,
                                             SeededEngine(seed_, salt));
  }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Shuffle(", buffer_size_, ", ",
                        seed_, ")");
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_each_iteration_;
};

}  // namespace

Node ShuffleNode(Node input, int64_t buffer_size, uint64_t seed,
                 bool reshuffle_each_iteration) {
  return std::make_shared<ShuffleDataset>(std::move(input), buffer_size, seed,
                                          reshuffle_each_iteration);
}

}  // namespace cosession::detail
