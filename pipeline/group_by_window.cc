// GroupByWindow: tf.data's group_by_window. Each input element joins the
// group its key picks; a group that holds window_size(key) elements is
// reduced -- reduce(key, its elements as a dataset) -- and the reduced
// dataset's elements are yielded before the input is read on. At the end
// of the input the groups left are reduced in ascending key order (as
// tf.data's, whose groups are an ordered map).
//   * The elements held, over all groups, are at most max_held_elements:
//     one more is ResourceExhausted naming the stage (an input of ever new
//     keys must not grow without bound).
//   * An input error, an error of key or window_size (or a window size
//     below 1), or a reduce that fails (a failed dataset, a throw) is
//     returned at once (a function's OutOfRange as InvalidArgument:
//     UserFunctionError), naming the stage and the key or the element's
//     origin; the next call goes on (the groups are kept: they are whole
//     elements, not cut by it). An error inside a reduced dataset is
//     returned and that dataset dropped.
// Thread safety: an iterator is used by one caller at a time.
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

std::string GroupStageName(const GroupByWindowOptions& options) {
  return absl::StrCat("GroupByWindow(", options.name, ")");
}

class GroupByWindowIterator : public ElementIterator {
 public:
  GroupByWindowIterator(std::unique_ptr<ElementIterator> input,
                        std::shared_ptr<const GroupByWindowOptions> options,
                        IteratorContext context)
      : input_(std::move(input)),
        options_(std::move(options)),
        context_(std::move(context)),
        stage_(GroupStageName(*options_)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      std::optional<Result> out;
      if (reduced_ != nullptr) {
        std::optional<Result> r = reduced_->TryNext();
        if (!r.has_value()) return std::nullopt;
        out = FromReduced(*std::move(r));
      } else if (!input_done_) {
        std::optional<Result> r = input_->TryNext();
        if (!r.has_value()) return std::nullopt;
        out = FromInput(*std::move(r));
      } else {
        out = ReduceNextGroupLeft();
      }
      if (out.has_value()) return out;
    }
  }
  asio::awaitable<Result> Next() override {
    while (true) {
      std::optional<Result> out;
      if (reduced_ != nullptr) {
        out = FromReduced(co_await NextOf(*reduced_));
      } else if (!input_done_) {
        out = FromInput(co_await NextOf(*input_));
      } else {
        out = ReduceNextGroupLeft();
      }
      if (out.has_value()) co_return *std::move(out);
    }
  }

 private:
  // A result of the reduced dataset being read: one to give, or nullopt
  // (it ended) to go on.
  std::optional<Result> FromReduced(Result r) {
    if (r.ok() && r->has_value()) return r;
    reduced_ = nullptr;
    if (!r.ok()) return r;
    return std::nullopt;
  }
  // An input result: an error to give, or nullopt to go on (the element
  // joined its group, which may have been reduced).
  std::optional<Result> FromInput(Result r) {
    if (!r.ok()) return r;
    if (!r->has_value()) {
      input_done_ = true;
      return std::nullopt;
    }
    Element element = **std::move(r);
    absl::StatusOr<int64_t> key =
        Guarded([&] { return options_->key(element); }, "the key function");
    if (!key.ok()) return Failed(element.origin, key.status());
    absl::StatusOr<int64_t> size =
        Guarded([&] { return options_->window_size(*key); }, "the window size");
    if (!size.ok()) return Failed(element.origin, size.status());
    if (*size < 1) {
      return Failed(element.origin, absl::InvalidArgumentError(absl::StrCat(
                                        "the window size of key ", *key, " is ",
                                        *size, "; it must be >= 1")));
    }
    if (held_ >= options_->max_held_elements) {
      return Failed(element.origin,
                    absl::ResourceExhaustedError(absl::StrCat(
                        "the groups hold max_held_elements = ",
                        options_->max_held_elements, " elements in ",
                        groups_.size(), " keys")));
    }
    std::vector<Element>& group = groups_[*key];
    group.push_back(std::move(element));
    ++held_;
    if (static_cast<int64_t>(group.size()) < *size) return std::nullopt;
    return Reduce(groups_.find(*key));
  }
  // At the end of the input: the next group left reduced, or the end.
  std::optional<Result> ReduceNextGroupLeft() {
    if (groups_.empty()) return Result(std::optional<Element>());
    return Reduce(groups_.begin());
  }
  // Takes the group out and starts reading its reduced dataset; an error to
  // give, or nullopt.
  std::optional<Result> Reduce(
      std::map<int64_t, std::vector<Element>>::iterator group) {
    const int64_t key = group->first;
    std::vector<Element> elements = std::move(group->second);
    groups_.erase(group);
    held_ -= static_cast<int64_t>(elements.size());
    Dataset reduced;
    try {
      reduced =
          options_->reduce(key, Dataset::FromElements(std::move(elements)));
    } catch (...) {
      return Result(StatusFromException(std::current_exception(),
                                        absl::StrCat(stage_, " reduce")));
    }
    absl::StatusOr<std::unique_ptr<ElementIterator>> it =
        reduced.ok() ? reduced.MakeIterator(context_)
                     : absl::StatusOr<std::unique_ptr<ElementIterator>>(
                           UserFunctionError(reduced.status(), "reduce"));
    if (!it.ok()) {
      return Result(
          absl::Status(it.status().code(),
                       absl::StrCat(stage_, ": the reduced dataset of key ",
                                    key, ": ", it.status().message())));
    }
    reduced_ = *std::move(it);
    return std::nullopt;
  }
  template <typename Fn>
  absl::StatusOr<int64_t> Guarded(Fn fn, absl::string_view what) {
    absl::StatusOr<int64_t> value = absl::UnknownError("");
    try {
      value = fn();
    } catch (...) {
      return StatusFromException(std::current_exception(),
                                 absl::StrCat(stage_, " ", what));
    }
    if (!value.ok()) return UserFunctionError(std::move(value).status(), what);
    return value;
  }
  Result Failed(const ElementOrigin& origin, const absl::Status& status) {
    return absl::Status(
        status.code(),
        absl::StrCat(stage_, ": ", origin.Describe(status.message())));
  }

  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const GroupByWindowOptions> options_;
  IteratorContext context_;
  std::string stage_;
  std::map<int64_t, std::vector<Element>> groups_;
  int64_t held_ = 0;                          // elements in groups_
  std::unique_ptr<ElementIterator> reduced_;  // being read
  bool input_done_ = false;
};

class GroupByWindowDataset : public DatasetNode {
 public:
  GroupByWindowDataset(Node input, GroupByWindowOptions options)
      : input_(std::move(input)),
        options_(
            std::make_shared<const GroupByWindowOptions>(std::move(options))) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<GroupByWindowIterator>(*std::move(input), options_,
                                                   context);
  }
  std::optional<ElementSpec> spec() const override {
    return options_->output_spec;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", GroupStageName(*options_));
  }

 private:
  Node input_;
  std::shared_ptr<const GroupByWindowOptions> options_;
};

}  // namespace

Node GroupByWindowNode(Node input, GroupByWindowOptions options) {
  return std::make_shared<GroupByWindowDataset>(std::move(input),
                                                std::move(options));
}

}  // namespace cosession::detail
