// Unique: tf.data's unique() -- each element once, at its first
// occurrence. As in tf.data, an element is one scalar: int32, int64 or a
// string (else InvalidArgument, when the dataset is made if the input's
// spec is known, else at the element, naming its origin). The values seen
// are kept for the iterator's life, counted against UniqueOptions::
// max_bytes (8 bytes an integer, a string's length plus 32); past it,
// ResourceExhausted naming the stage, as Cache's bound. An input error is
// passed on and the next call goes on.
// Thread safety: an iterator is used by one caller at a time.
#include <boost/asio/use_awaitable.hpp>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

// What a kept string is counted as beyond its bytes: the set's slot and
// the string's own header.
constexpr int64_t kStringOverhead = 32;

class UniqueIterator : public DroppingIterator<UniqueIterator> {
 public:
  UniqueIterator(std::unique_ptr<ElementIterator> input, UniqueOptions options)
      : DroppingIterator(std::move(input)),
        options_(std::move(options)),
        stage_(absl::StrCat("Unique(", options_.name, ")")) {}

 private:
  friend class DroppingIterator<UniqueIterator>;
  // The result to return, or nullopt for an element seen before.
  std::optional<Result> Keep(Result in) {
    if (!in.ok() || !in->has_value()) return in;
    const Element& e = **in;
    auto fail = [&](absl::Status status) {
      return Result(absl::Status(
          status.code(),
          absl::StrCat(stage_, ": ", e.origin.Describe(status.message()))));
    };
    if (e.size() != 1) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "an element of ", e.size(), " components; Unique takes one scalar")));
    }
    bool first = false;
    int64_t bytes = 0;
    if (const std::string* text = std::get_if<std::string>(&e.components[0])) {
      bytes = static_cast<int64_t>(text->size()) + kStringOverhead;
      if (!Fits(bytes)) return fail(Full());
      first = texts_.insert(*text).second;
    } else {
      const Tensor& t = std::get<Tensor>(e.components[0]);
      if (t.shape().dims() != 0 ||
          (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "a ", DTypeName(t.dtype()), " ", t.shape().DebugString(),
            " element; Unique takes int32, int64 or string scalars")));
      }
      bytes = sizeof(int64_t);
      if (!Fits(bytes)) return fail(Full());
      first = numbers_
                  .insert(t.dtype() == DType::kInt64 ? t.scalar<int64_t>()
                                                     : t.scalar<int32_t>())
                  .second;
    }
    if (!first) return std::nullopt;
    kept_bytes_ += bytes;
    return in;
  }
  bool Fits(int64_t bytes) const {
    return kept_bytes_ + bytes <= options_.max_bytes;
  }
  absl::Status Full() const {
    return absl::ResourceExhaustedError(
        absl::StrCat("the values seen take max_bytes = ", options_.max_bytes,
                     " bytes (", numbers_.size() + texts_.size(), " values)"));
  }

  UniqueOptions options_;
  std::string stage_;
  absl::flat_hash_set<int64_t> numbers_;
  absl::flat_hash_set<std::string> texts_;
  int64_t kept_bytes_ = 0;
};

class UniqueDataset : public DatasetNode {
 public:
  UniqueDataset(Node input, UniqueOptions options)
      : input_(std::move(input)), options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<UniqueIterator>(*std::move(input), options_);
  }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Unique(", options_.name, ")");
  }

 private:
  Node input_;
  UniqueOptions options_;
};

}  // namespace

Node UniqueNode(Node input, UniqueOptions options) {
  return std::make_shared<UniqueDataset>(std::move(input), std::move(options));
}

}  // namespace cosession::detail
