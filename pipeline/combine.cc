// The stages that combine streams (tf.data's semantics):
//   Concatenate  the first input's elements, then the second's; the second
//                input's iterator is made when the first ends.
//   Zip          one element per step from every input, its components the
//                inputs' components in order; ends with the shortest input.
//   Enumerate    an int64 scalar counter (from `start`) before each
//                element's components.
//   FlatMap      fn(element) is a dataset; its elements, in turn, for each
//                input element (tf.data's flat_map: a list of file names
//                into their lines). fn runs in the iterator's coroutine; a
//                failed dataset it returns, or an exception it throws, is
//                the stream's error, naming the stage and the element's
//                origin, and the stream goes on with the next element.
// Errors pass through (and the stage goes on, as tf.data's do); an input
// that fails to make its iterator fails the stage's iteration with its
// status. Skip forwards to the inputs, so that resuming a chain of these
// stages skips as its inputs do.
#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

bool IsElement(const Result& r) { return r.ok() && r->has_value(); }

class ConcatenateIterator : public ElementIterator {
 public:
  ConcatenateIterator(std::unique_ptr<ElementIterator> first, Node second,
                      IteratorContext context)
      : current_(std::move(first)),
        second_(std::move(second)),
        context_(std::move(context)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      std::optional<Result> r = current_->TryNext();
      if (!r.has_value() || !AtFirstEnd(*r)) return r;
      if (absl::Status s = OpenSecond(); !s.ok()) return Result(s);
    }
  }
  asio::awaitable<Result> Next() override {
    while (true) {
      Result r = co_await NextOf(*current_);
      if (!AtFirstEnd(r)) co_return r;
      if (absl::Status s = OpenSecond(); !s.ok()) co_return s;
    }
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    int64_t skipped = 0;
    while (true) {
      absl::StatusOr<int64_t> some = co_await current_->Skip(n - skipped);
      if (!some.ok()) co_return some.status();
      skipped += *some;
      if (skipped == n || second_ == nullptr) co_return skipped;
      if (absl::Status s = OpenSecond(); !s.ok()) co_return s;
    }
  }

 private:
  // True when `r` is the end of the first input (the second still to come).
  bool AtFirstEnd(const Result& r) const {
    return second_ != nullptr && r.ok() && !r->has_value();
  }
  absl::Status OpenSecond() {
    absl::StatusOr<std::unique_ptr<ElementIterator>> it =
        second_->MakeIterator(context_);
    if (!it.ok()) return it.status();
    current_ = *std::move(it);
    second_ = nullptr;
    return absl::OkStatus();
  }

  std::unique_ptr<ElementIterator> current_;
  Node second_;  // null once it is current_
  IteratorContext context_;
};

class ConcatenateDataset : public DatasetNode {
 public:
  ConcatenateDataset(Node first, Node second, std::optional<ElementSpec> spec)
      : first_(std::move(first)),
        second_(std::move(second)),
        spec_(std::move(spec)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto first = first_->MakeIterator(context);
    if (!first.ok()) return first.status();
    return std::make_unique<ConcatenateIterator>(*std::move(first), second_,
                                                 context);
  }
  std::optional<ElementSpec> spec() const override { return spec_; }
  bool deterministic() const override {
    return first_->deterministic() && second_->deterministic();
  }
  std::string DebugString() const override {
    return absl::StrCat(first_->DebugString(), ".Concatenate(",
                        second_->DebugString(), ")");
  }
  // tf.data's: infinite when either is, else unknown when either is.
  int64_t cardinality() const override {
    const int64_t a = first_->cardinality(), b = second_->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) {
      return kInfiniteCardinality;
    }
    if (a < 0 || b < 0) return kUnknownCardinality;
    int64_t total;
    if (__builtin_add_overflow(a, b, &total)) return kUnknownCardinality;
    return total;
  }

 private:
  Node first_;
  Node second_;
  std::optional<ElementSpec> spec_;
};

class ZipIterator : public ElementIterator {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<ElementIterator>> inputs)
      : inputs_(std::move(inputs)), taken_(inputs_.size()) {}

  std::optional<Result> TryNext() override {
    if (ended_) return Result(std::optional<Element>());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (taken_[i].has_value()) continue;
      std::optional<Result> r = inputs_[i]->TryNext();
      if (!r.has_value()) return std::nullopt;
      if (!IsElement(*r)) return Stop(*std::move(r));
      taken_[i] = **std::move(*r);
    }
    return Combine();
  }
  asio::awaitable<Result> Next() override {
    if (ended_) co_return std::optional<Element>();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (taken_[i].has_value()) continue;
      Result r = co_await NextOf(*inputs_[i]);
      if (!IsElement(r)) co_return Stop(std::move(r));
      taken_[i] = **std::move(r);
    }
    co_return Combine();
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (ended_ || n == 0) co_return 0;
    int64_t fewest = n;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      // An element taken ahead for the next step is the first one skipped.
      const int64_t ahead = taken_[i].has_value() ? 1 : 0;
      taken_[i].reset();
      absl::StatusOr<int64_t> skipped = co_await inputs_[i]->Skip(n - ahead);
      if (!skipped.ok()) co_return skipped.status();
      fewest = std::min(fewest, ahead + *skipped);
    }
    if (fewest < n) ended_ = true;
    co_return fewest;
  }

 private:
  // An input's end ends the zip; its error is returned, and the next call
  // goes on (the elements taken from the other inputs wait for it).
  Result Stop(Result r) {
    if (r.ok()) ended_ = true;
    return r;
  }
  Result Combine() {
    Element out;
    out.origin = taken_[0]->origin;
    for (std::optional<Element>& element : taken_) {
      for (Component& c : element->components) {
        out.components.push_back(std::move(c));
      }
      element.reset();
    }
    return Result(std::move(out));
  }

  std::vector<std::unique_ptr<ElementIterator>> inputs_;
  std::vector<std::optional<Element>> taken_;
  bool ended_ = false;
};

class ZipDataset : public DatasetNode {
 public:
  explicit ZipDataset(std::vector<Node> inputs) : inputs_(std::move(inputs)) {
    ElementSpec spec;
    for (const Node& input : inputs_) {
      std::optional<ElementSpec> s = input->spec();
      if (!s.has_value()) return;
      spec.insert(spec.end(), s->begin(), s->end());
    }
    spec_ = std::move(spec);
  }
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto its = IteratorsOf(inputs_, context);
    if (!its.ok()) return its.status();
    return std::make_unique<ZipIterator>(*std::move(its));
  }
  std::optional<ElementSpec> spec() const override { return spec_; }
  bool deterministic() const override { return AllDeterministic(inputs_); }
  std::string DebugString() const override {
    return absl::StrCat("Zip(", DebugStringOf(inputs_), ")");
  }
  // The shortest input's (tf.data's: unknown when any input is).
  int64_t cardinality() const override {
    int64_t shortest = kInfiniteCardinality;
    for (const Node& input : inputs_) {
      const int64_t n = input->cardinality();
      if (n == kUnknownCardinality) return n;
      if (n >= 0 && (shortest < 0 || n < shortest)) shortest = n;
    }
    return shortest;
  }

 private:
  std::vector<Node> inputs_;
  std::optional<ElementSpec> spec_;
};

class EnumerateIterator : public ElementIterator {
 public:
  EnumerateIterator(std::unique_ptr<ElementIterator> input, int64_t start)
      : input_(std::move(input)), next_index_(start) {}
  std::optional<Result> TryNext() override {
    std::optional<Result> r = input_->TryNext();
    if (r.has_value()) Number(*r);
    return r;
  }
  asio::awaitable<Result> Next() override {
    Result r = co_await NextOf(*input_);
    Number(r);
    co_return r;
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    absl::StatusOr<int64_t> skipped = co_await input_->Skip(n);
    if (skipped.ok()) next_index_ += *skipped;
    co_return skipped;
  }

 private:
  void Number(Result& r) {
    if (!IsElement(r)) return;
    Components& c = (*r)->components;
    c.insert(c.begin(), Component(Tensor::Scalar<int64_t>(next_index_++)));
  }
  std::unique_ptr<ElementIterator> input_;
  int64_t next_index_;
};

class EnumerateDataset : public DatasetNode {
 public:
  EnumerateDataset(Node input, int64_t start)
      : input_(std::move(input)), start_(start) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<EnumerateIterator>(*std::move(input), start_);
  }
  std::optional<ElementSpec> spec() const override {
    std::optional<ElementSpec> input = input_->spec();
    if (!input.has_value()) return std::nullopt;
    ElementSpec spec{ComponentSpec::Scalar(DType::kInt64)};
    spec.insert(spec.end(), input->begin(), input->end());
    return spec;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Enumerate(", start_, ")");
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  int64_t start_;
};

class FlatMapIterator : public ElementIterator {
 public:
  FlatMapIterator(std::unique_ptr<ElementIterator> input,
                  std::shared_ptr<const FlatMapFunction> fn, std::string name,
                  IteratorContext context)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        name_(std::move(name)),
        context_(std::move(context)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      if (inner_ != nullptr) {
        std::optional<Result> r = inner_->TryNext();
        if (!r.has_value()) return std::nullopt;
        if (!AtInnerEnd(*r)) return r;
        continue;
      }
      std::optional<Result> in = input_->TryNext();
      if (!in.has_value()) return std::nullopt;
      if (!IsElement(*in)) return in;
      if (absl::Status s = Open(***in); !s.ok()) return Result(s);
    }
  }
  asio::awaitable<Result> Next() override {
    while (true) {
      if (inner_ != nullptr) {
        Result r = co_await NextOf(*inner_);
        if (!AtInnerEnd(r)) co_return r;
        continue;
      }
      Result in = co_await NextOf(*input_);
      if (!IsElement(in)) co_return in;
      if (absl::Status s = Open(**in); !s.ok()) co_return s;
    }
  }

 private:
  bool AtInnerEnd(const Result& r) {
    if (!r.ok() || r->has_value()) return false;
    inner_.reset();
    return true;
  }
  // The iterator of fn(element)'s dataset.
  absl::Status Open(const Element& element) {
    absl::StatusOr<std::unique_ptr<ElementIterator>> it =
        OpenDatasetOf(*fn_, element, name_, context_);
    if (!it.ok()) return it.status();
    inner_ = *std::move(it);
    return absl::OkStatus();
  }

  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const FlatMapFunction> fn_;
  std::string name_;
  IteratorContext context_;
  std::unique_ptr<ElementIterator> inner_;  // null between input elements
};

class FlatMapDataset : public DatasetNode {
 public:
  FlatMapDataset(Node input, FlatMapFunction fn, FlatMapOptions options)
      : input_(std::move(input)),
        fn_(std::make_shared<const FlatMapFunction>(std::move(fn))),
        options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<FlatMapIterator>(*std::move(input), fn_, Name(),
                                             context);
  }
  std::optional<ElementSpec> spec() const override {
    return options_.output_spec;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", Name());
  }

 private:
  std::string Name() const {
    return options_.name.empty() ? "FlatMap()"
                                 : absl::StrCat("FlatMap(", options_.name, ")");
  }
  Node input_;
  std::shared_ptr<const FlatMapFunction> fn_;
  FlatMapOptions options_;
};

}  // namespace

std::optional<ElementSpec> CommonSpecOf(const std::vector<Node>& inputs) {
  std::optional<ElementSpec> spec = inputs.front()->spec();
  for (const Node& input : inputs) {
    std::optional<ElementSpec> other = input->spec();
    if (!spec.has_value() || !other.has_value()) return std::nullopt;
    absl::StatusOr<ElementSpec> common = MostSpecificCommonSpec(*spec, *other);
    if (!common.ok()) return std::nullopt;
    spec = *std::move(common);
  }
  return spec;
}

bool AllDeterministic(const std::vector<Node>& inputs) {
  for (const Node& input : inputs) {
    if (!input->deterministic()) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::unique_ptr<ElementIterator>>> IteratorsOf(
    const std::vector<Node>& inputs, const IteratorContext& context) {
  std::vector<std::unique_ptr<ElementIterator>> iterators;
  iterators.reserve(inputs.size());
  for (const Node& input : inputs) {
    absl::StatusOr<std::unique_ptr<ElementIterator>> it =
        input->MakeIterator(context);
    if (!it.ok()) return it.status();
    iterators.push_back(*std::move(it));
  }
  return iterators;
}

std::string DebugStringOf(const std::vector<Node>& inputs) {
  return absl::StrJoin(inputs, ", ", [](std::string* out, const Node& input) {
    out->append(input->DebugString());
  });
}

absl::StatusOr<std::unique_ptr<ElementIterator>> OpenDatasetOf(
    const FlatMapFunction& fn, const Element& element, absl::string_view stage,
    const IteratorContext& context, int64_t read_ahead) {
  Dataset made;
  try {
    made = fn(element);
  } catch (...) {
    return StatusFromException(std::current_exception(), stage);
  }
  if (read_ahead > 0) made = made.Prefetch(read_ahead);
  absl::StatusOr<std::unique_ptr<ElementIterator>> it =
      made.MakeIterator(context);
  if (!it.ok()) {
    return absl::Status(it.status().code(),
                        element.origin.Describe(
                            absl::StrCat(stage, ": ", it.status().message())));
  }
  return it;
}

Node FlatMapNode(Node input, FlatMapFunction fn, FlatMapOptions options) {
  return std::make_shared<FlatMapDataset>(std::move(input), std::move(fn),
                                          std::move(options));
}

Node ConcatenateNode(Node first, Node second, std::optional<ElementSpec> spec) {
  return std::make_shared<ConcatenateDataset>(
      std::move(first), std::move(second), std::move(spec));
}
Node ZipNode(std::vector<Node> inputs) {
  return std::make_shared<ZipDataset>(std::move(inputs));
}
Node EnumerateNode(Node input, int64_t start) {
  return std::make_shared<EnumerateDataset>(std::move(input), start);
}

}  // namespace cosession::detail
