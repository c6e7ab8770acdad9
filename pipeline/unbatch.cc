// Unbatch: each input element split along dimension 0 into that many
// elements (tf.data's unbatch, the inverse of Batch). Every component must
// be a tensor of rank >= 1, and all of an element's components must have
// the same dimension 0; otherwise the stream returns InvalidArgument with
// TensorFlow's message and the element's origin (and goes on with the next
// element). An element of dimension 0 gives no element. Each row is a copy
// (a slice does not share its batch's buffer), made when it is returned.
#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

class UnbatchIterator : public ElementIterator {
 public:
  explicit UnbatchIterator(std::unique_ptr<ElementIterator> input)
      : input_(std::move(input)) {}

  std::optional<Result> TryNext() override {
    while (next_row_ >= rows_) {
      std::optional<Result> r = input_->TryNext();
      if (!r.has_value()) return std::nullopt;
      if (std::optional<Result> out = Take(*std::move(r))) return out;
    }
    return Row();
  }
  asio::awaitable<Result> Next() override {
    while (next_row_ >= rows_) {
      if (std::optional<Result> out = Take(co_await NextOf(*input_))) {
        co_return *std::move(out);
      }
    }
    co_return Row();
  }

 private:
  // Takes an input element to split; returns what to answer instead (its
  // error, the end) or nullopt when rows are ready or it had none.
  std::optional<Result> Take(Result r) {
    if (!r.ok() || !r->has_value()) return r;
    Element& batch = **r;
    int64_t rows = -1;
    for (size_t i = 0; i < batch.components.size(); ++i) {
      const Tensor* t = std::get_if<Tensor>(&batch.components[i]);
      if (t == nullptr || t->shape().dims() < 1) {
        return Result(absl::InvalidArgumentError(batch.origin.Describe(
            "Unbatch: Input element must have a non-scalar value in each "
            "component.")));
      }
      const int64_t n = t->shape().dim_size(0);
      if (rows >= 0 && n != rows) {
        return Result(absl::InvalidArgumentError(batch.origin.Describe(
            absl::StrCat("Unbatch: Input element must have the same batch "
                         "size in each component. Component 0 had size ",
                         rows, " but component ", i, " had size ", n, "."))));
      }
      rows = n;
    }
    batch_ = std::move(batch);
    rows_ = rows < 0 ? 0 : rows;
    next_row_ = 0;
    return std::nullopt;
  }
  Result Row() {
    Element out;
    out.origin = batch_.origin;
    for (const Component& c : batch_.components) {
      out.components.emplace_back(CopyRow(std::get<Tensor>(c), next_row_));
    }
    ++next_row_;
    return Result(std::move(out));
  }

  std::unique_ptr<ElementIterator> input_;
  Element batch_;
  int64_t rows_ = 0;
  int64_t next_row_ = 0;
};

class UnbatchDataset : public DatasetNode {
 public:
  explicit UnbatchDataset(Node input) : input_(std::move(input)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<UnbatchIterator>(*std::move(input));
  }
  std::optional<ElementSpec> spec() const override {
    std::optional<ElementSpec> spec = input_->spec();
    if (!spec.has_value()) return std::nullopt;
    for (ComponentSpec& c : *spec) {
      // Dataset::Unbatch checked every component is a tensor of rank >= 1
      // (or of an unknown rank, which stays unknown).
      if (!c.shape.unknown_rank()) {
        c.shape = TensorShape(c.shape.dim_sizes().subspan(1));
      }
    }
    return spec;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Unbatch()");
  }

 private:
  Node input_;
};

}  // namespace

Node UnbatchNode(Node input) {
  return std::make_shared<UnbatchDataset>(std::move(input));
}

}  // namespace cosession::detail
