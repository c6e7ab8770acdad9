// The stages that pass their input's elements through unchanged: Filter,
// TakeWhile, Take, Skip, Shard, Repeat (tf.data's semantics).
//   Filter   the elements for which pred is true; pred's error is passed
//            on (the next call goes on with the next element), an
//            exception becomes Internal, an OutOfRange InvalidArgument
//            (it must not pass for the end of the input).
//   TakeWhile  the elements up to the first for which pred is false, which
//            ends the stream without reading further; pred's errors as
//            Filter's.
//   Take     the first count (-1: all); Skip the rest after count (-1: all).
//   Shard    the elements at positions index, index + num_shards, ...: one
//            worker's share of the input (an error at another worker's
//            position is passed on too, not skipped silently); skips the
//            others with the input's Skip.
//   Repeat   count passes, each over a new input iterator whose
//            IteratorContext::iteration is this pass's (so a reshuffling
//            Shuffle differs per pass); -1 forever, 0 nothing. An input that
//            is empty ends a forever-Repeat instead of spinning. Skip over
//            a deterministic input skips whole passes by counting once one
//            pass has been seen to its end (every pass of a deterministic
//            input has the same length; only a reshuffle's order differs),
//            so resuming at element n costs at most two passes, not n.
// All forward TryNext, so a chain of them runs without coroutine frames
// when their input is ready.
#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

// A stage over one input with the input's spec and determinism.
class PassThroughDataset : public DatasetNode {
 public:
  explicit PassThroughDataset(Node input) : input_(std::move(input)) {}
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }

 protected:
  // The input's cardinality, or nullopt when it is infinite or unknown,
  // which the stages here pass through as they are (tf.data's rules).
  std::optional<int64_t> KnownInputCardinality() const {
    const int64_t n = input_->cardinality();
    return n >= 0 ? std::optional<int64_t>(n) : std::nullopt;
  }
  Node input_;
};

// pred(element); a throw becomes Internal naming `stage`, an OutOfRange
// InvalidArgument (UserFunctionError).
absl::StatusOr<bool> CallPredicate(const Predicate& pred,
                                   const Element& element, const char* stage) {
  absl::StatusOr<bool> keep = absl::UnknownError("");
  try {
    keep = pred(element);
  } catch (...) {
    return StatusFromException(std::current_exception(), stage);
  }
  if (!keep.ok())
    return UserFunctionError(std::move(keep).status(), "predicate");
  return keep;
}

class FilterIterator : public DroppingIterator<FilterIterator> {
 public:
  FilterIterator(std::unique_ptr<ElementIterator> input,
                 std::shared_ptr<const Predicate> pred)
      : DroppingIterator(std::move(input)), pred_(std::move(pred)) {}

 private:
  friend class DroppingIterator<FilterIterator>;
  // The result to return, or nullopt for an element filtered out.
  std::optional<Result> Keep(Result in) {
    if (!in.ok() || !in->has_value()) return in;
    absl::StatusOr<bool> keep = CallPredicate(*pred_, **in, "Filter");
    if (!keep.ok()) return Result(keep.status());
    if (!*keep) return std::nullopt;
    return in;
  }
  std::shared_ptr<const Predicate> pred_;
};

class TakeWhileIterator : public ElementIterator {
 public:
  TakeWhileIterator(std::unique_ptr<ElementIterator> input,
                    std::shared_ptr<const Predicate> pred)
      : input_(std::move(input)), pred_(std::move(pred)) {}

  std::optional<Result> TryNext() override {
    if (ended_) return Result(std::optional<Element>());
    std::optional<Result> in = input_->TryNext();
    if (!in.has_value()) return std::nullopt;
    return Check(*std::move(in));
  }
  asio::awaitable<Result> Next() override {
    if (ended_) co_return std::optional<Element>();
    co_return Check(co_await NextOf(*input_));
  }

 private:
  Result Check(Result in) {
    if (!in.ok() || !in->has_value()) return in;
    absl::StatusOr<bool> keep = CallPredicate(*pred_, **in, "TakeWhile");
    if (!keep.ok()) return Result(keep.status());
    if (*keep) return in;
    ended_ = true;
    return Result(std::optional<Element>());
  }
  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const Predicate> pred_;
  bool ended_ = false;
};

// Filter's and TakeWhile's stage: an iterator of `Iterator` (made from the
// input's and the predicate) per MakeIterator, named `name` in the chain.
template <typename Iterator>
class PredicateDataset : public PassThroughDataset {
 public:
  PredicateDataset(Node input, Predicate pred, const char* name)
      : PassThroughDataset(std::move(input)),
        pred_(std::make_shared<const Predicate>(std::move(pred))),
        name_(name) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<Iterator>(*std::move(input), pred_);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", name_, "()");
  }
  // What the predicate keeps is known only by reading.
  int64_t cardinality() const override { return kUnknownCardinality; }

 private:
  std::shared_ptr<const Predicate> pred_;
  const char* name_;
};

class TakeIterator : public ElementIterator {
 public:
  TakeIterator(std::unique_ptr<ElementIterator> input, int64_t count)
      : input_(std::move(input)), left_(count) {}
  std::optional<Result> TryNext() override {
    if (left_ == 0) return Result(std::optional<Element>());
    std::optional<Result> in = input_->TryNext();
    if (in.has_value()) Count(*in);
    return in;
  }
  asio::awaitable<Result> Next() override {
    if (left_ == 0) co_return std::optional<Element>();
    Result in = co_await input_->Next();
    Count(in);
    co_return in;
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    const int64_t want = left_ < 0 ? n : std::min(n, left_);
    absl::StatusOr<int64_t> skipped = co_await input_->Skip(want);
    if (skipped.ok() && left_ > 0) left_ -= *skipped;
    co_return skipped;
  }

 private:
  void Count(const Result& in) {
    if (in.ok() && in->has_value() && left_ > 0) --left_;
  }
  std::unique_ptr<ElementIterator> input_;
  int64_t left_;  // -1: no limit
};

class TakeDataset : public PassThroughDataset {
 public:
  TakeDataset(Node input, int64_t count)
      : PassThroughDataset(std::move(input)), count_(count) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<TakeIterator>(*std::move(input), count_);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Take(", count_, ")");
  }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n == kUnknownCardinality) return n;
    if (n == kInfiniteCardinality) return count_;  // -1: all of them
    return count_ < 0 ? n : std::min(n, count_);
  }

 private:
  int64_t count_;
};

class SkipIterator : public ElementIterator {
 public:
  SkipIterator(std::unique_ptr<ElementIterator> input, int64_t count)
      : input_(std::move(input)), to_skip_(count) {}
  std::optional<Result> TryNext() override {
    if (to_skip_ != 0) return std::nullopt;  // skipping may wait
    return input_->TryNext();
  }
  asio::awaitable<Result> Next() override {
    if (absl::Status skipped = co_await SkipLeading(); !skipped.ok()) {
      co_return skipped;
    }
    if (done_) co_return std::optional<Element>();
    co_return co_await NextOf(*input_);
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (absl::Status skipped = co_await SkipLeading(); !skipped.ok()) {
      co_return skipped;
    }
    if (done_) co_return 0;
    co_return co_await input_->Skip(n);
  }

 private:
  asio::awaitable<absl::Status> SkipLeading() {
    if (to_skip_ == 0) co_return absl::OkStatus();
    if (to_skip_ < 0) {
      done_ = true;  // Skip(-1): nothing is left
      to_skip_ = 0;
      co_return absl::OkStatus();
    }
    absl::StatusOr<int64_t> skipped = co_await input_->Skip(to_skip_);
    if (!skipped.ok()) co_return skipped.status();
    to_skip_ = 0;
    co_return absl::OkStatus();
  }
  std::unique_ptr<ElementIterator> input_;
  int64_t to_skip_;
  bool done_ = false;
};

class SkipDataset : public PassThroughDataset {
 public:
  SkipDataset(Node input, int64_t count)
      : PassThroughDataset(std::move(input)), count_(count) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<SkipIterator>(*std::move(input), count_);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Skip(", count_, ")");
  }
  int64_t cardinality() const override {
    std::optional<int64_t> n = KnownInputCardinality();
    if (!n.has_value()) return input_->cardinality();
    return count_ < 0 ? 0 : std::max<int64_t>(0, *n - count_);
  }

 private:
  int64_t count_;
};

// Salt that gives each Repeat pass its own iteration number.
constexpr uint64_t kRepeatSalt = 0x7e9ea7'0000'0001ULL;

class ShardIterator : public ElementIterator {
 public:
  ShardIterator(std::unique_ptr<ElementIterator> input, int64_t num_shards,
                int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {}

  asio::awaitable<Result> Next() override {
    if (ended_) co_return std::optional<Element>();
    if (const int64_t gap = Gap(); gap > 0) {
      absl::StatusOr<int64_t> skipped = co_await input_->Skip(gap);
      if (!skipped.ok()) co_return skipped.status();
      position_ += *skipped;
      if (*skipped < gap) {
        ended_ = true;
        co_return std::optional<Element>();
      }
    }
    Result r = co_await NextOf(*input_);
    if (r.ok() && !r->has_value()) ended_ = true;
    if (r.ok() && r->has_value()) ++position_;
    co_return r;
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (ended_ || n == 0) co_return 0;
    // The n-th of this shard's elements from here, and everything before.
    const int64_t gap = Gap();
    const int64_t limit = std::numeric_limits<int64_t>::max();
    const int64_t want = n - 1 > (limit - 1 - gap) / num_shards_
                             ? limit
                             : gap + (n - 1) * num_shards_ + 1;
    absl::StatusOr<int64_t> skipped = co_await input_->Skip(want);
    if (!skipped.ok()) co_return skipped.status();
    const int64_t from = position_;
    position_ += *skipped;
    if (*skipped < want) ended_ = true;
    co_return Mine(position_) - Mine(from);
  }

 private:
  // Input elements before the next of this shard's positions.
  int64_t Gap() const {
    return ((index_ - position_) % num_shards_ + num_shards_) % num_shards_;
  }
  // How many of this shard's positions lie below `end`.
  int64_t Mine(int64_t end) const {
    return end <= index_ ? 0 : (end - index_ - 1) / num_shards_ + 1;
  }
  std::unique_ptr<ElementIterator> input_;
  int64_t num_shards_;
  int64_t index_;
  int64_t position_ = 0;  // input elements taken or skipped
  bool ended_ = false;
};

class ShardDataset : public PassThroughDataset {
 public:
  ShardDataset(Node input, int64_t num_shards, int64_t index)
      : PassThroughDataset(std::move(input)),
        num_shards_(num_shards),
        index_(index) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<ShardIterator>(*std::move(input), num_shards_,
                                           index_);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Shard(", num_shards_, ", ",
                        index_, ")");
  }
  int64_t cardinality() const override {
    std::optional<int64_t> n = KnownInputCardinality();
    if (!n.has_value()) return input_->cardinality();
    return *n / num_shards_ + (index_ < *n % num_shards_ ? 1 : 0);
  }

 private:
  int64_t num_shards_;
  int64_t index_;
};

class RepeatIterator : public ElementIterator {
 public:
  RepeatIterator(Node input, IteratorContext context, int64_t count)
      : input_(std::move(input)), context_(context), count_(count) {}

  std::optional<Result> TryNext() override {
    while (true) {
      if (!failure_.ok()) return Result(failure_);
      if (current_ == nullptr) {
        if (!StartPass()) return Result(std::optional<Element>());
        if (!failure_.ok()) continue;
      }
      std::optional<Result> in = current_->TryNext();
      if (!in.has_value()) return std::nullopt;
      if (std::optional<Result> out = Pass(*std::move(in))) return out;
    }
  }
  asio::awaitable<Result> Next() override {
    while (true) {
      if (!failure_.ok()) co_return failure_;
      if (current_ == nullptr) {
        if (!StartPass()) co_return std::optional<Element>();
        if (!failure_.ok()) continue;
      }
      if (std::optional<Result> out = Pass(co_await NextOf(*current_))) {
        co_return *std::move(out);
      }
    }
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n) {
      if (!failure_.ok()) co_return failure_;
      if (current_ == nullptr) {
        skipped += SkipWholePasses(n - skipped);
        if (skipped == n) break;
        if (!StartPass()) break;
        if (!failure_.ok()) continue;
      }
      absl::StatusOr<int64_t> some = co_await current_->Skip(n - skipped);
      if (!some.ok()) co_return some.status();
      skipped += *some;
      elements_in_pass_ += *some;
      if (skipped < n) EndPass();
    }
    co_return skipped;
  }

 private:
  // Begins the next pass; false when there is none. A failed MakeIterator
  // is recorded in failure_.
  bool StartPass() {
    if (count_ >= 0 && pass_ >= count_) return false;
    // A pass that yielded nothing: the input is empty, and forever would
    // spin without producing anything.
    if (pass_ > 0 && elements_in_pass_ == 0) return false;
    IteratorContext context = context_;
    context.iteration =
        MixSeed(context_.iteration ^ kRepeatSalt, static_cast<uint64_t>(pass_));
    auto iterator = input_->MakeIterator(context);
    ++pass_;
    elements_in_pass_ = 0;
    if (!iterator.ok()) {
      failure_ = iterator.status();
      return true;
    }
    current_ = *std::move(iterator);
    return true;
  }
  // At the end of a pass the input yielded to its end: its length.
  void EndPass() {
    current_ = nullptr;
    if (input_deterministic_) pass_length_ = elements_in_pass_;
  }
  // Between passes: skips as many whole passes of up to `n` elements as
  // fit, without iterating them, once a pass length is known; returns the
  // elements skipped.
  int64_t SkipWholePasses(int64_t n) {
    if (pass_length_ <= 0) return 0;
    int64_t passes = n / pass_length_;
    if (count_ >= 0) passes = std::min(passes, count_ - pass_);
    pass_ += passes;
    elements_in_pass_ = pass_length_;  // the last pass skipped was not empty
    return passes * pass_length_;
  }
  // The result to return, or nullopt at the end of a pass.
  std::optional<Result> Pass(Result in) {
    if (!in.ok()) {
      failure_ = in.status();
      return in;
    }
    if (!in->has_value()) {
      EndPass();
      return std::nullopt;
    }
    ++elements_in_pass_;
    return in;
  }

  Node input_;
  IteratorContext context_;
  int64_t count_;
  bool input_deterministic_ = input_->deterministic();
  int64_t pass_ = 0;
  int64_t elements_in_pass_ = 0;
  int64_t pass_length_ = -1;  // unknown
  std::unique_ptr<ElementIterator> current_;
  absl::Status failure_;
};

class RepeatDataset : public PassThroughDataset {
 public:
  RepeatDataset(Node input, int64_t count)
      : PassThroughDataset(std::move(input)), count_(count) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<RepeatIterator>(input_, context, count_);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Repeat(", count_, ")");
  }
  // tf.data's: forever is infinite unless the input is known to be empty
  // (an unknown one counts as not empty).
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n == 0 || count_ == 0) return 0;
    if (count_ < 0) return kInfiniteCardinality;
    if (n < 0) return n;
    int64_t total;
    if (__builtin_mul_overflow(n, count_, &total)) return kUnknownCardinality;
    return total;
  }

 private:
  int64_t count_;
};

}  // namespace

Node FilterNode(Node input, Predicate pred) {
  return std::make_shared<PredicateDataset<FilterIterator>>(
      std::move(input), std::move(pred), "Filter");
}
Node TakeWhileNode(Node input, Predicate pred) {
  return std::make_shared<PredicateDataset<TakeWhileIterator>>(
      std::move(input), std::move(pred), "TakeWhile");
}
Node TakeNode(Node input, int64_t count) {
  return std::make_shared<TakeDataset>(std::move(input), count);
}
Node SkipNode(Node input, int64_t count) {
  return std::make_shared<SkipDataset>(std::move(input), count);
}
Node ShardNode(Node input, int64_t num_shards, int64_t index) {
  return std::make_shared<ShardDataset>(std::move(input), num_shards, index);
}
Node RepeatNode(Node input, int64_t count) {
  return std::make_shared<RepeatDataset>(std::move(input), count);
}

}  // namespace cosession::detail
