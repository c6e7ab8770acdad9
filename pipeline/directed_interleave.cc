// SampleFromDatasets and ChooseFromDatasets: tf.data's sample_from_datasets
// and choose_from_datasets, both TensorFlow's directed interleave -- each
// element comes from the input a selector picks:
//   * sampled: a seeded random pick, input i with probability weights[i]
//     over the weights of the inputs still going;
//   * chosen: the next int64 scalar of a choice dataset (an index into the
//     inputs).
//
// An input that ends: with stop_on_empty_dataset the stream ends there (the
// default of choose_from_datasets); without it (the default of
// sample_from_datasets) the input is dropped and the pick is made again --
// a sample draws only among the inputs still going, a choice of an ended
// input is passed over, as TensorFlow's. The stream ends when every input
// ended, when the choices end, or when the inputs still going all weigh 0
// (TensorFlow would draw forever). An input's error is returned (the pick
// is used); a choice that is not an int64 scalar, or out of range, is
// InvalidArgument naming its origin ("Selector index out of range: 5 >= 3"
// in TensorFlow's words).
//
// Sampling draws from std::mt19937_64 keyed by the seed (and the pass of a
// Repeat when rerandomize_each_iteration), so a seeded sample is the same
// stream in every run; an unseeded one is not deterministic().
//
// Thread safety: nodes are immutable; an iterator is single-consumer.
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;
// The next pick: an input's index, nullopt at the end of the picks, or an
// error.
using Pick = absl::StatusOr<std::optional<size_t>>;

constexpr uint64_t kSampleSalt = 0x5a3b1e'0000'0001ULL;

// Where the picks come from. `Ended(i)` tells it input i ended (and the
// stream goes on).
class Selector {
 public:
  virtual ~Selector() = default;
  // The next pick when it is ready without waiting; nullopt when the caller
  // must await Next().
  virtual std::optional<Pick> TryNext() = 0;
  virtual asio::awaitable<Pick> Next() = 0;
  virtual void Ended(size_t input) = 0;
};

class RandomSelector : public Selector {
 public:
  RandomSelector(std::vector<double> weights, uint64_t seed, uint64_t salt)
      : weights_(std::move(weights)), engine_(SeededEngine(seed, salt)) {}

  std::optional<Pick> TryNext() override {
    double total = 0;
    for (double w : weights_) total += w;
    if (total <= 0) return Pick(std::nullopt);  // only weightless inputs
    // 53 random bits as a double in [0, 1): the same on every platform.
    const double draw =
        static_cast<double>(engine_() >> 11) * 0x1.0p-53 * total;
    double below = 0;
    size_t last = 0;
    for (size_t i = 0; i < weights_.size(); ++i) {
      if (weights_[i] <= 0) continue;
      below += weights_[i];
      last = i;
      if (draw < below) return Pick(i);
    }
    return Pick(last);  // rounding at the top end
  }
  asio::awaitable<Pick> Next() override { co_return *TryNext(); }
  void Ended(size_t input) override { weights_[input] = 0; }

 private:
  std::vector<double> weights_;  // an ended input weighs 0
  std::mt19937_64 engine_;
};

class ChoiceSelector : public Selector {
 public:
  ChoiceSelector(std::unique_ptr<ElementIterator> choices, size_t inputs)
      : choices_(std::move(choices)), inputs_(inputs) {}

  std::optional<Pick> TryNext() override {
    std::optional<Result> next = choices_->TryNext();
    if (!next.has_value()) return std::nullopt;
    return IndexOf(*std::move(next));
  }
  asio::awaitable<Pick> Next() override {
    co_return IndexOf(co_await NextOf(*choices_));
  }
  void Ended(size_t) override {}

 private:
  Pick IndexOf(Result next) const {
    if (!next.ok()) return next.status();
    if (!next->has_value()) return Pick(std::nullopt);
    const Element& e = **next;
    const Tensor* t =
        e.size() == 1 ? std::get_if<Tensor>(&e.components[0]) : nullptr;
    if (t == nullptr || t->dtype() != DType::kInt64 || t->shape().dims() != 0) {
      return absl::InvalidArgumentError(e.origin.Describe(absl::StrCat(
          "ChooseFromDatasets: a choice must be an int64 scalar, got ",
          ElementSpecString(SpecOf(e)))));
    }
    const int64_t index = t->scalar<int64_t>();
    if (index < 0 || static_cast<size_t>(index) >= inputs_) {
      return absl::InvalidArgumentError(e.origin.Describe(absl::StrCat(
          "ChooseFromDatasets: Selector index out of range: ", index,
          " >= ", inputs_)));
    }
    return Pick(static_cast<size_t>(index));
  }

  std::unique_ptr<ElementIterator> choices_;
  size_t inputs_;
};

class DirectedInterleaveIterator : public ElementIterator {
 public:
  DirectedInterleaveIterator(std::unique_ptr<Selector> selector,
                             std::vector<std::unique_ptr<ElementIterator>> in,
                             bool stop_on_empty_dataset)
      : selector_(std::move(selector)),
        inputs_(std::move(in)),
        going_(inputs_.size()),
        stop_on_empty_dataset_(stop_on_empty_dataset) {}

  std::optional<Result> TryNext() override {
    while (!ended_) {
      if (!picked_.has_value()) {
        std::optional<Pick> pick = selector_->TryNext();
        if (!pick.has_value()) return std::nullopt;  // Next() awaits it
        if (std::optional<Result> stop = Picked(*std::move(pick))) {
          return stop;
        }
        continue;
      }
      std::optional<Result> next = inputs_[*picked_]->TryNext();
      if (!next.has_value()) return std::nullopt;  // Next() awaits it
      if (std::optional<Result> taken = Take(*std::move(next))) return taken;
    }
    return Result(std::optional<Element>());
  }

  asio::awaitable<Result> Next() override {
    while (!ended_) {
      if (!picked_.has_value()) {
        if (std::optional<Result> stop = Picked(co_await selector_->Next())) {
          co_return *std::move(stop);
        }
        continue;
      }
      Result next = co_await NextOf(*inputs_[*picked_]);
      if (std::optional<Result> taken = Take(std::move(next))) {
        co_return *std::move(taken);
      }
    }
    co_return std::optional<Element>();
  }

 private:
  // Records a pick; returns what ends the call (an error, the end), or
  // nullopt to go on. A pick of an ended input is passed over.
  std::optional<Result> Picked(Pick pick) {
    if (!pick.ok()) return Result(pick.status());
    if (!pick->has_value()) {
      ended_ = true;
      return Result(std::optional<Element>());
    }
    if (inputs_[**pick] != nullptr) picked_ = **pick;
    return std::nullopt;
  }

  // What the picked input gave: an element or an error to return (the pick
  // used), or nullopt after its end when the stream goes on.
  std::optional<Result> Take(Result next) {
    const size_t input = *picked_;
    picked_.reset();
    if (!next.ok() || next->has_value()) return next;
    if (stop_on_empty_dataset_) {
      ended_ = true;
      return next;
    }
    inputs_[input].reset();
    selector_->Ended(input);
    if (--going_ == 0) {
      ended_ = true;
      return next;
    }
    return std::nullopt;
  }

  std::unique_ptr<Selector> selector_;
  std::vector<std::unique_ptr<ElementIterator>> inputs_;  // null: ended
  size_t going_;                                          // inputs not ended
  std::optional<size_t> picked_;  // picked, its element not yet taken
  bool stop_on_empty_dataset_;
  bool ended_ = false;
};

class SampleDataset : public DatasetNode {
 public:
  // options.weights holds one weight per input.
  SampleDataset(std::vector<Node> inputs, uint64_t seed, bool seeded,
                SampleOptions options)
      : inputs_(std::move(inputs)),
        seed_(seed),
        seeded_(seeded),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto iterators = IteratorsOf(inputs_, context);
    if (!iterators.ok()) return iterators.status();
    const uint64_t salt = options_.rerandomize_each_iteration
                              ? MixSeed(kSampleSalt, context.iteration)
                              : kSampleSalt;
    return std::make_unique<DirectedInterleaveIterator>(
        std::make_unique<RandomSelector>(options_.weights, seed_, salt),
        *std::move(iterators), options_.stop_on_empty_dataset);
  }
  std::optional<ElementSpec> spec() const override {
    return CommonSpecOf(inputs_);
  }
  bool deterministic() const override {
    return seeded_ && AllDeterministic(inputs_);
  }
  std::string DebugString() const override {
    return absl::StrCat("SampleFromDatasets(", DebugStringOf(inputs_), ")");
  }

 private:
  std::vector<Node> inputs_;
  uint64_t seed_;
  bool seeded_;
  SampleOptions options_;
};

class ChooseDataset : public DatasetNode {
 public:
  ChooseDataset(std::vector<Node> inputs, Node choices,
                bool stop_on_empty_dataset)
      : inputs_(std::move(inputs)),
        choices_(std::move(choices)),
        stop_on_empty_dataset_(stop_on_empty_dataset) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto choices = choices_->MakeIterator(context);
    if (!choices.ok()) return choices.status();
    auto iterators = IteratorsOf(inputs_, context);
    if (!iterators.ok()) return iterators.status();
    return std::make_unique<DirectedInterleaveIterator>(
        std::make_unique<ChoiceSelector>(*std::move(choices), inputs_.size()),
        *std::move(iterators), stop_on_empty_dataset_);
  }
  std::optional<ElementSpec> spec() const override {
    return CommonSpecOf(inputs_);
  }
  bool deterministic() const override {
    return choices_->deterministic() && AllDeterministic(inputs_);
  }
  std::string DebugString() const override {
    return absl::StrCat("ChooseFromDatasets(", DebugStringOf(inputs_),
                        "; choices ", choices_->DebugString(), ")");
  }

 private:
  std::vector<Node> inputs_;
  Node choices_;
  bool stop_on_empty_dataset_;
};

}  // namespace

Node SampleNode(std::vector<Node> inputs, uint64_t seed, bool seeded,
                SampleOptions options) {
  return std::make_shared<SampleDataset>(std::move(inputs), seed, seeded,
                                         std::move(options));
}

Node ChooseNode(std::vector<Node> inputs, Node choices,
                bool stop_on_empty_dataset) {
  return std::make_shared<ChooseDataset>(std::move(inputs), std::move(choices),
                                         stop_on_empty_dataset);
}

}  // namespace cosession::detail
