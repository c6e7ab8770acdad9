// Interleave: TensorFlow's interleave over the given inputs (many files,
// many sockets). A cycle of up to cycle_length open inputs (0 = all) is
// visited round-robin, block_length elements from each in turn; an input
// that ends is replaced in its place by the next unopened input (or leaves
// the cycle when there is none), and the visit goes on with it. The stream
// ends when every input ended. Inputs are opened (their iterators made)
// only when they enter the cycle, so that a thousand files hold at most
// cycle_length open.
//
// The order is fixed by the inputs' own orders, so the stream is
// deterministic when they are. A waiting input (a quiet socket) holds the
// cycle up: the visit is strictly in turn.
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

class InterleaveIterator : public ElementIterator {
 public:
  InterleaveIterator(std::vector<Node> inputs, size_t cycle_length,
                     int64_t block_length, IteratorContext context)
      : inputs_(std::move(inputs)),
        cycle_length_(cycle_length),
        block_length_(block_length),
        context_(context) {}

  std::optional<Result> TryNext() override {
    while (true) {
      if (absl::Status opened = FillCycle(); !opened.ok()) return opened;
      if (cycle_.empty()) return Result(std::optional<Element>());
      std::optional<Result> next = cycle_[position_]->TryNext();
      if (!next.has_value()) return std::nullopt;  // Next() continues here
      if (std::optional<Result> taken = Take(*std::move(next))) return taken;
    }
  }

  boost::asio::awaitable<Result> Next() override {
    while (true) {
      if (absl::Status opened = FillCycle(); !opened.ok()) co_return opened;
      if (cycle_.empty()) co_return std::optional<Element>();
      Result next = co_await NextOf(*cycle_[position_]);
      if (std::optional<Result> taken = Take(std::move(next))) {
        co_return *std::move(taken);
      }
    }
  }

 private:
  // Opens inputs until the cycle is full or none is left.
  absl::Status FillCycle() {
    while (cycle_.size() < cycle_length_ && next_input_ < inputs_.size()) {
      absl::StatusOr<std::unique_ptr<ElementIterator>> it =
          inputs_[next_input_]->MakeIterator(context_);
      if (!it.ok()) return it.status();
      ++next_input_;
      cycle_.push_back(*std::move(it));
    }
    return absl::OkStatus();
  }

  // What the current input gave: an element or an error to return, or
  // nullopt after its end (it was replaced; the caller goes on).
  std::optional<Result> Take(Result next) {
    if (!next.ok()) return next;
    if (!next->has_value()) {
      taken_in_block_ = 0;
      if (next_input_ < inputs_.size()) {
        absl::StatusOr<std::unique_ptr<ElementIterator>> it =
            inputs_[next_input_]->MakeIterator(context_);
        if (!it.ok()) return Result(it.status());
        ++next_input_;
        cycle_[position_] = *std::move(it);
      } else {
        cycle_.erase(cycle_.begin() + static_cast<ptrdiff_t>(position_));
        if (position_ >= cycle_.size()) position_ = 0;
      }
      return std::nullopt;
    }
    if (++taken_in_block_ == block_length_) {
      taken_in_block_ = 0;
      position_ = (position_ + 1) % cycle_.size();
    }
    return next;
  }

  std::vector<Node> inputs_;
  size_t cycle_length_;
  int64_t block_length_;
  IteratorContext context_;
  size_t next_input_ = 0;
  std::vector<std::unique_ptr<ElementIterator>> cycle_;
  size_t position_ = 0;
  int64_t taken_in_block_ = 0;
};

class InterleaveDataset : public DatasetNode {
 public:
  InterleaveDataset(std::vector<Node> inputs, int64_t cycle_length,
                    int64_t block_length)
      : inputs_(std::move(inputs)),
        cycle_length_(cycle_length),
        block_length_(block_length) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    const size_t cycle = cycle_length_ == 0
                             ? inputs_.size()
                             : static_cast<size_t>(cycle_length_);
    return std::make_unique<InterleaveIterator>(inputs_, cycle, block_length_,
                                                context);
  }
  std::optional<ElementSpec> spec() const override {
    std::optional<ElementSpec> spec = inputs_.front()->spec();
    for (const Node& input : inputs_) {
      std::optional<ElementSpec> other = input->spec();
      if (!spec.has_value() || !other.has_value()) return std::nullopt;
      absl::StatusOr<ElementSpec> common =
          MostSpecificCommonSpec(*spec, *other);
      if (!common.ok()) return std::nullopt;
      spec = *std::move(common);
    }
    return spec;
  }
  bool deterministic() const override {
    for (const Node& input : inputs_) {
      if (!input->deterministic()) return false;
    }
    return true;
  }
  std::string DebugString() const override {
    return absl::StrCat("Interleave(",
                        absl::StrJoin(inputs_, ", ",
                                      [](std::string* out, const Node& input) {
                                        out->append(input->DebugString());
                                      }),
                        ")");
  }

 private:
  std::vector<Node> inputs_;
  int64_t cycle_length_;
  int64_t block_length_;
};

}  // namespace

Node InterleaveNode(std::vector<Node> inputs, int64_t cycle_length,
                    int64_t block_length) {
  return std::make_shared<InterleaveDataset>(std::move(inputs), cycle_length,
                                             block_length);
}

}  // namespace cosession::detail
