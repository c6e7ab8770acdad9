// Interleave: TensorFlow's interleave over the given inputs (many files,
// many sockets), in TensorFlow's order (its interleave_dataset_op). A cycle
// of cycle_length slots (0 = one per input) is visited round-robin,
// block_length elements from each in turn. An empty slot that the visit
// reaches takes the next unopened input, which gives the slot's elements at
// once; an input that ends leaves its slot empty and the visit moves on to
// the next slot (a block there starts afresh). Once every input was
// opened, empty slots are passed over. The stream ends when every input
// ended. Inputs are opened (their iterators made) only when they enter the
// cycle, so that a thousand files hold at most cycle_length open. An error
// from an input is returned and the visit stays on that input.
//
// The order is fixed by the inputs' own orders, so the stream is
// deterministic when they are. A waiting input (a quiet socket) holds the
// cycle up: the visit is strictly in turn.
#include <algorithm>
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
        block_length_(block_length),
        context_(context),
        cycle_(std::min(cycle_length, inputs_.size())) {}

  std::optional<Result> TryNext() override {
    while (true) {
      absl::StatusOr<ElementIterator*> input = CurrentInput();
      if (!input.ok()) return Result(input.status());
      if (*input == nullptr) {
        if (Ended()) return Result(std::optional<Element>());
        continue;
      }
      std::optional<Result> next = (*input)->TryNext();
      if (!next.has_value()) return std::nullopt;  // Next() continues here
      if (std::optional<Result> taken = Take(*std::move(next))) return taken;
    }
  }

  boost::asio::awaitable<Result> Next() override {
    while (true) {
      absl::StatusOr<ElementIterator*> input = CurrentInput();
      if (!input.ok()) co_return input.status();
      if (*input == nullptr) {
        if (Ended()) co_return std::optional<Element>();
        continue;
      }
      Result next = co_await NextOf(**input);
      if (std::optional<Result> taken = Take(std::move(next))) {
        co_return *std::move(taken);
      }
    }
  }

 private:
  bool Ended() const { return next_input_ == inputs_.size() && open_ == 0; }

  void Advance() {
    taken_in_block_ = 0;
    position_ = (position_ + 1) % cycle_.size();
  }

  // The input in the visited slot, opening the next one into an empty slot;
  // null when the slot stays empty (the visit moved on) or the stream ended.
  absl::StatusOr<ElementIterator*> CurrentInput() {
    if (Ended() || cycle_.empty()) return nullptr;
    std::unique_ptr<ElementIterator>& slot = cycle_[position_];
    if (slot == nullptr) {
      if (next_input_ == inputs_.size()) {
        Advance();
        return nullptr;
      }
      absl::StatusOr<std::unique_ptr<ElementIterator>> it =
          inputs_[next_input_]->MakeIterator(context_);
      if (!it.ok()) return it.status();
      ++next_input_;
      ++open_;
      slot = *std::move(it);
    }
    return slot.get();
  }

  // What the visited input gave: an element or an error to return, or
  // nullopt after its end (its slot emptied; the caller goes on).
  std::optional<Result> Take(Result next) {
    if (!next.ok()) return next;
    if (!next->has_value()) {
      cycle_[position_].reset();
      --open_;
      Advance();
      return std::nullopt;
    }
    if (++taken_in_block_ == block_length_) Advance();
    return next;
  }

  std::vector<Node> inputs_;
  int64_t block_length_;
  IteratorContext context_;
  size_t next_input_ = 0;  // inputs_[next_input_] is the next to open
  size_t open_ = 0;        // slots holding an input
  std::vector<std::unique_ptr<ElementIterator>> cycle_;  // null: empty slot
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
