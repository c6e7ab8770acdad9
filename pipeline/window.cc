// Window: tf.data's window(size, shift, stride, drop_remainder) with each
// window batched (see Dataset::Window). The iterator keeps the elements
// from the current window's start to its last element -- (size - 1) *
// stride + 1 at most -- in a deque; a window is emitted once that span is
// read (or the input ended), then the front moves on by shift elements
// (skipping, with the input's Skip, those past the span when shift is the
// larger). At the end of the input, the windows that start inside what is
// left are emitted shorter, until nothing is left (or, drop_remainder,
// none is). An input error is returned at once; the elements held are
// dropped (the windows it cuts would be wrong), and the next call goes on
// after it, as Batch does.
// Thread safety: an iterator is used by one caller at a time.
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

class WindowIterator : public ElementIterator {
 public:
  WindowIterator(std::unique_ptr<ElementIterator> input, WindowOptions options,
                 std::string stage)
      : input_(std::move(input)),
        size_(static_cast<size_t>(options.size)),
        shift_(*options.shift),
        stride_(static_cast<size_t>(options.stride)),
        span_((size_ - 1) * stride_ + 1),
        drop_remainder_(options.drop_remainder),
        stage_(std::move(stage)) {}

  std::optional<Result> TryNext() override {
    if (to_skip_ > 0) return std::nullopt;  // skipping may wait
    while (!input_done_ && held_.size() < span_) {
      std::optional<Result> in = input_->TryNext();
      if (!in.has_value()) return std::nullopt;
      if (std::optional<Result> failed = Take(*std::move(in))) return failed;
    }
    return Emit();
  }
  asio::awaitable<Result> Next() override {
    if (to_skip_ > 0) {
      absl::StatusOr<int64_t> skipped = co_await input_->Skip(to_skip_);
      to_skip_ = 0;
      if (!skipped.ok()) co_return skipped.status();
    }
    while (!input_done_ && held_.size() < span_) {
      if (std::optional<Result> failed = Take(co_await NextOf(*input_))) {
        co_return *std::move(failed);
      }
    }
    co_return Emit();
  }

 private:
  // Records an input result; a result to return at once (an error).
  std::optional<Result> Take(Result in) {
    if (!in.ok()) {
      held_.clear();
      return in;
    }
    if (!in->has_value()) {
      input_done_ = true;
    } else {
      held_.push_back(**std::move(in));
    }
    return std::nullopt;
  }
  // The window at the front of what is held, or the end.
  Result Emit() {
    if (held_.empty() || (drop_remainder_ && held_.size() < span_)) {
      held_.clear();
      return std::optional<Element>();
    }
    std::vector<Element> window;
    window.reserve(size_);
    for (size_t i = 0; i < held_.size() && window.size() < size_;
         i += stride_) {
      window.push_back(held_[i]);
    }
    Result stacked = StackElements(window, stage_);
    // The next window starts shift elements on; those not read yet are
    // skipped before it is filled.
    const size_t drop = std::min(held_.size(), static_cast<size_t>(shift_));
    held_.erase(held_.begin(), held_.begin() + static_cast<ptrdiff_t>(drop));
    if (!input_done_) to_skip_ = shift_ - static_cast<int64_t>(drop);
    return stacked;
  }

  std::unique_ptr<ElementIterator> input_;
  const size_t size_;
  const int64_t shift_;
  const size_t stride_;
  const size_t span_;  // the input elements one window covers
  const bool drop_remainder_;
  const std::string stage_;
  std::deque<Element> held_;  // from the current window's start
  int64_t to_skip_ = 0;       // input elements before the next window starts
  bool input_done_ = false;
};

class WindowDataset : public DatasetNode {
 public:
  WindowDataset(Node input, WindowOptions options)
      : input_(std::move(input)), options_(options) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<WindowIterator>(*std::move(input), options_,
                                            Name());
  }
  std::optional<ElementSpec> spec() const override {
    return StackedSpec(input_->spec(),
                       options_.drop_remainder ? options_.size : kUnknownDim);
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", Name());
  }
  // tf.data's: the windows that start inside the input (and, with
  // drop_remainder, end inside it).
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n < 0) return n;
    const int64_t shift = *options_.shift;
    if (!options_.drop_remainder) return n / shift + (n % shift != 0 ? 1 : 0);
    const int64_t after_first = n - ((options_.size - 1) * options_.stride + 1);
    return after_first < 0 ? 0 : after_first / shift + 1;
  }

 private:
  std::string Name() const {
    return absl::StrCat("Window(", options_.size, ", shift ", *options_.shift,
                        ", stride ", options_.stride,
                        options_.drop_remainder ? ", drop_remainder" : "", ")");
  }
  Node input_;
  WindowOptions options_;
};

}  // namespace

Node WindowNode(Node input, WindowOptions options) {
  return std::make_shared<WindowDataset>(std::move(input), options);
}

}  // namespace cosession::detail
