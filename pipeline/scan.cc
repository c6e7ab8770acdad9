// Scan: tf.data's scan -- a running state carried through the stream.
// Each iterator starts from the initial state; for every input element,
// fn(state, element) returns the next state and the element to yield.
//   * The next state must keep the initial state's structure: as many
//     components, each the same kind (tensor or string) and dtype; shapes
//     may change (tf.data relaxes them). A state that does not is
//     InvalidArgument naming the component and the element's origin.
//   * fn's error ends the stream with it (every later call returns it): the
//     state after a failed element is not known, so nothing after it could
//     be trusted. An OutOfRange from fn becomes InvalidArgument
//     (UserFunctionError); an exception becomes Internal
//     "Scan(<name>) threw ...".
//   * Skip runs fn over the skipped elements, so that the state at a
//     resumed position is the state the stream had there.
// The stream is deterministic when the input is; the output spec is
// ScanOptions::output_spec (unknown when unset, as Map's).
// Thread safety: an iterator is used by one caller at a time.
#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

std::string ScanStageName(const ScanOptions& options) {
  return absl::StrCat("Scan(", options.name, ")");
}

// "int64 tensor", "string": a component's kind and dtype, which a state
// keeps from step to step.
std::string KindOf(const Component& component) {
  if (const Tensor* t = std::get_if<Tensor>(&component)) {
    return absl::StrCat(DTypeName(t->dtype()), " tensor");
  }
  return "string";
}

// OK when `next` has the structure of `initial` (see the top comment).
absl::Status CheckStateStructure(const Element& initial, const Element& next,
                                 const ElementOrigin& origin,
                                 const std::string& stage) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(stage, ": ", origin.Describe(what)));
  };
  if (next.size() != initial.size()) {
    return fail(absl::StrCat("the new state has ", next.size(),
                             " components, the initial state ",
                             initial.size()));
  }
  for (size_t i = 0; i < initial.size(); ++i) {
    const std::string want = KindOf(initial.components[i]);
    const std::string got = KindOf(next.components[i]);
    if (want != got) {
      return fail(absl::StrCat("the new state's component ", i, " is a ", got,
                               ", the initial state's a ", want));
    }
  }
  return absl::OkStatus();
}

class ScanIterator : public ElementIterator {
 public:
  ScanIterator(std::unique_ptr<ElementIterator> input,
               std::shared_ptr<const Element> initial_state,
               std::shared_ptr<const ScanFunction> fn, std::string stage)
      : input_(std::move(input)),
        initial_state_(std::move(initial_state)),
        state_(*initial_state_),
        fn_(std::move(fn)),
        stage_(std::move(stage)) {}

  std::optional<Result> TryNext() override {
    if (!failure_.ok()) return Result(failure_);
    std::optional<Result> in = input_->TryNext();
    if (!in.has_value()) return std::nullopt;
    return Step(*std::move(in));
  }
  asio::awaitable<Result> Next() override {
    if (!failure_.ok()) co_return failure_;
    co_return Step(co_await input_->Next());
  }

 private:
  Result Step(Result in) {
    if (!in.ok() || !in->has_value()) return in;
    const ElementOrigin origin = (*in)->origin;
    absl::StatusOr<ScanStep> step = absl::UnknownError("");
    try {
      step = (*fn_)(state_, **std::move(in));
    } catch (...) {
      step = StatusFromException(std::current_exception(), stage_);
    }
    if (!step.ok()) {
      return Fail(UserFunctionError(std::move(step).status(), "scan function"));
    }
    if (absl::Status bad =
            CheckStateStructure(*initial_state_, step->state, origin, stage_);
        !bad.ok()) {
      return Fail(std::move(bad));
    }
    state_ = std::move(step->state);
    return std::optional<Element>(std::move(step->output));
  }
  Result Fail(absl::Status status) {
    failure_ = std::move(status);
    return failure_;
  }

  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const Element> initial_state_;
  Element state_;
  std::shared_ptr<const ScanFunction> fn_;
  std::string stage_;
  absl::Status failure_;  // ends the stream
};

class ScanDataset : public DatasetNode {
 public:
  ScanDataset(Node input, Element initial_state, ScanFunction fn,
              ScanOptions options)
      : input_(std::move(input)),
        initial_state_(
            std::make_shared<const Element>(std::move(initial_state))),
        fn_(std::make_shared<const ScanFunction>(std::move(fn))),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<ScanIterator>(*std::move(input), initial_state_,
                                          fn_, ScanStageName(options_));
  }
  std::optional<ElementSpec> spec() const override {
    return options_.output_spec;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", ScanStageName(options_));
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  std::shared_ptr<const Element> initial_state_;
  std::shared_ptr<const ScanFunction> fn_;
  ScanOptions options_;
};

}  // namespace

Node ScanNode(Node input, Element initial_state, ScanFunction fn,
              ScanOptions options) {
  return std::make_shared<ScanDataset>(std::move(input),
                                       std::move(initial_state), std::move(fn),
                                       std::move(options));
}

}  // namespace cosession::detail
