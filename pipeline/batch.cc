// Batch and PaddedBatch, as tf.data's batch and padded_batch.
//   Batch(n, drop_remainder): n consecutive elements, each component
//     stacked along a new dimension 0; every element of a batch must have
//     the same shape in a component (else InvalidArgument naming the
//     component, both shapes and the element's origin). At the end of the
//     input the smaller last batch is returned, or dropped with
//     drop_remainder. The spec's dimension 0 is n with drop_remainder, else
//     unknown.
//   PaddedBatch: the same for elements of different shapes: each component
//     of the batch gets the padded shape (an unknown dimension becomes the
//     batch's longest), every element is copied into the leading corner of
//     a tensor filled with the padding value (zeros by default). As in
//     TensorFlow, an element longer than a fixed padded dimension is
//     DataLoss "Attempted to pad to a smaller size than the input
//     element", one of another rank InvalidArgument; a padding value that
//     is not a scalar of the component's dtype is InvalidArgument
//     "Mismatched type between padding value ..." (at construction when
//     the input's spec is known, else at the batch).
// An input error is returned at once; the partial batch is dropped. A
// batch too large to make (a padded shape of 2^50, memory running out) is
// an error naming the stage, never an exception (AllocateBatchTensor).
// Batch over a stage that builds its own batches (detail::BatchFusable:
// CsvRows) is that stage's fused batch, with the same results.
// Skip(k) skips k * n input elements (Batch; PaddedBatch too), building
// nothing. Both take what their input has ready in one call
// (ElementIterator::TryTakeInto), not one Result per element.
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/graph/status.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

class BatchingIterator : public ElementIterator {
 public:
  BatchingIterator(std::unique_ptr<ElementIterator> input, int64_t batch_size,
                   bool drop_remainder, std::string stage)
      : input_(std::move(input)),
        batch_size_(static_cast<size_t>(batch_size)),
        drop_remainder_(drop_remainder),
        stage_(std::move(stage)) {}

  std::optional<Result> TryNext() override {
    if (!input_done_ && pending_.size() < batch_size_) {
      if (std::optional<Result> failed = TakeReady()) return failed;
      if (!input_done_ && pending_.size() < batch_size_) return std::nullopt;
    }
    return Emit();
  }
  asio::awaitable<Result> Next() override {
    while (!input_done_ && pending_.size() < batch_size_) {
      if (std::optional<Result> failed = TakeReady()) co_return *failed;
      if (input_done_ || pending_.size() == batch_size_) break;
      if (std::optional<Result> failed = Take(co_await input_->Next())) {
        co_return *std::move(failed);
      }
    }
    co_return Emit();
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (!pending_.empty() || input_done_) {
      co_return co_await ElementIterator::Skip(n);
    }
    const int64_t want = n * static_cast<int64_t>(batch_size_);
    absl::StatusOr<int64_t> skipped = co_await input_->Skip(want);
    if (!skipped.ok()) co_return skipped.status();
    if (*skipped == want) co_return n;
    input_done_ = true;
    const int64_t b = static_cast<int64_t>(batch_size_);
    co_return *skipped / b + (*skipped % b != 0 && !drop_remainder_ ? 1 : 0);
  }

 protected:
  // The batch of `elements` (1 <= size <= batch_size).
  virtual Result Stack(std::vector<Element>& elements) = 0;
  const std::string& stage() const { return stage_; }

 private:
  // Takes what the input has ready, up to a batch; a result to return at
  // once (an error).
  std::optional<Result> TakeReady() {
    if (pending_.capacity() == 0) pending_.reserve(batch_size_);
    absl::StatusOr<Taken> taken = input_->TryTakeInto(pending_, batch_size_);
    if (!taken.ok()) {
      pending_.clear();
      return Result(taken.status());
    }
    if (*taken == Taken::kEnd) input_done_ = true;
    return std::nullopt;
  }
  // Records an input result; a result to return at once (an error).
  std::optional<Result> Take(Result in) {
    if (!in.ok()) {
      pending_.clear();
      return in;
    }
    if (!in->has_value()) {
      input_done_ = true;
      return std::nullopt;
    }
    if (pending_.capacity() == 0) pending_.reserve(batch_size_);
    pending_.push_back(**std::move(in));
    return std::nullopt;
  }
  Result Emit() {
    if (pending_.empty() ||
        (drop_remainder_ && pending_.size() < batch_size_)) {
      pending_.clear();
      return std::optional<Element>();
    }
    Result batch = Stack(pending_);
    pending_.clear();
    return batch;
  }

  std::unique_ptr<ElementIterator> input_;
  size_t batch_size_;
  bool drop_remainder_;
  std::string stage_;
  std::vector<Element> pending_;
  bool input_done_ = false;
};

// Called in a catch block: what a stacking threw as a status naming
// `stage`.
absl::Status StackingFailure(const std::string& stage) {
  try {
    throw;
  } catch (const StatusError& e) {
    return absl::Status(e.status().code(),
                        absl::StrCat(stage, ": ", e.status().message()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(stage, ": out of memory for the batch"));
  } catch (...) {
    return StatusFromException(std::current_exception(), stage);
  }
}

// A batch's tensor of `shape` (zeros when `zero_fill`), or what making it
// threw -- a shape too large, memory running out -- as a status naming
// `stage`. Out of line, so that the loops copying the elements in are
// compiled as they are without the exception handling around them.
[[gnu::noinline]] absl::StatusOr<Tensor> AllocateBatchTensor(
    DType dtype, const TensorShape& shape, bool zero_fill,
    const std::string& stage) {
  try {
    return zero_fill ? Tensor(dtype, shape) : Tensor::Allocate(dtype, shape);
  } catch (...) {
    return StackingFailure(stage);
  }
}

absl::Status ComponentCountError(const std::string& stage, const Element& first,
                                 const Element& other, size_t index) {
  return absl::InvalidArgumentError(
      absl::StrCat(stage, ": ",
                   other.origin.Describe(absl::StrCat(
                       "element ", index, " of the batch has ", other.size(),
                       " components, the first had ", first.size()))));
}

class BatchIterator : public BatchingIterator {
 public:
  using BatchingIterator::BatchingIterator;

 protected:
  Result Stack(std::vector<Element>& elements) override {
    return StackElements(elements, stage());
  }
};

class BatchDataset : public DatasetNode {
 public:
  BatchDataset(Node input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<BatchIterator>(
        *std::move(input), batch_size_, drop_remainder_,
        absl::StrCat("Batch(", batch_size_, ")"));
  }
  std::optional<ElementSpec> spec() const override {
    return StackedSpec(input_->spec(),
                       drop_remainder_ ? batch_size_ : kUnknownDim);
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Batch(", batch_size_,
                        drop_remainder_ ? ", drop_remainder" : "", ")");
  }
  int64_t cardinality() const override {
    return BatchedCardinality(input_->cardinality(), batch_size_,
                              drop_remainder_);
  }

 private:
  Node input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

// Copies `in` (shape `in_dims`) into the leading corner of `out` (shape
// `out_dims`, same rank, each dimension at least as long), both row-major,
// `element_bytes` per element.
void CopyIntoCorner(const char* in, absl::Span<const int64_t> in_dims,
                    char* out, absl::Span<const int64_t> out_dims,
                    size_t element_bytes) {
  if (in_dims.empty()) {
    std::memcpy(out, in, element_bytes);
    return;
  }
  size_t in_stride = element_bytes, out_stride = element_bytes;
  for (size_t d = 1; d < in_dims.size(); ++d) {
    in_stride *= static_cast<size_t>(in_dims[d]);
    out_stride *= static_cast<size_t>(out_dims[d]);
  }
  if (in_dims.size() == 1) {
    std::memcpy(out, in, static_cast<size_t>(in_dims[0]) * element_bytes);
    return;
  }
  for (int64_t i = 0; i < in_dims[0]; ++i) {
    CopyIntoCorner(in + static_cast<size_t>(i) * in_stride, in_dims.subspan(1),
                   out + static_cast<size_t>(i) * out_stride,
                   out_dims.subspan(1), element_bytes);
  }
}

class PaddedBatchIterator : public BatchingIterator {
 public:
  PaddedBatchIterator(std::unique_ptr<ElementIterator> input,
                      int64_t batch_size, PaddedBatchOptions options,
                      std::string stage)
      : BatchingIterator(std::move(input), batch_size, options.drop_remainder,
                         std::move(stage)),
        options_(std::move(options)) {}

 protected:
  Result Stack(std::vector<Element>& elements) override {
    const Element& first = elements[0];
    if (first.size() != options_.padded_shapes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(stage(), ": ",
                       first.origin.Describe(absl::StrCat(
                           "an element of ", first.size(), " components for ",
                           options_.padded_shapes.size(), " padded_shapes"))));
    }
    Element batch;
    batch.origin = first.origin;
    for (size_t c = 0; c < first.size(); ++c) {
      const TensorShape& padded = options_.padded_shapes[c];
      std::vector<int64_t> dims(padded.dim_sizes().begin(),
                                padded.dim_sizes().end());
      std::vector<bool> to_longest(dims.size());
      for (size_t d = 0; d < dims.size(); ++d) {
        to_longest[d] = dims[d] == kUnknownDim;
        if (to_longest[d]) dims[d] = 0;
      }
      DType dtype = DType::kFloat;
      for (size_t i = 0; i < elements.size(); ++i) {
        const Element& e = elements[i];
        if (e.size() != first.size()) {
          return ComponentCountError(stage(), first, e, i);
        }
        const Tensor* t = std::get_if<Tensor>(&e.components[c]);
        auto fail = [&](const std::string& problem) {
          return absl::InvalidArgumentError(
              absl::StrCat(stage(), ": ", e.origin.Describe(problem)));
        };
        if (t == nullptr) {
          return fail(absl::StrCat("component ", c, " is a string"));
        }
        if (i == 0) dtype = t->dtype();
        if (t->dtype() != dtype) {
          return fail(absl::StrCat("component ", c, " is ",
                                   DTypeName(t->dtype()), ", the first was ",
                                   DTypeName(dtype)));
        }
        if (t->shape().dims() != static_cast<int>(dims.size())) {
          // TensorFlow's sentence, then the shapes.
          return fail(absl::StrCat(
              "All elements in a batch must have the same rank as the padded "
              "shape for component",
              c, ": expected rank ", dims.size(), " but got element with rank ",
              t->shape().dims(), " (shape ", t->shape().DebugString(),
              ", padded shape ", padded.DebugString(), ")"));
        }
        for (size_t d = 0; d < dims.size(); ++d) {
          const int64_t n = t->shape().dim_size(static_cast<int>(d));
          if (to_longest[d]) {
            dims[d] = std::max(dims[d], n);
          } else if (n > dims[d]) {
            // DataLoss and its sentence, as TensorFlow's padded batch.
            return absl::DataLossError(absl::StrCat(
                stage(), ": ",
                e.origin.Describe(absl::StrCat(
                    "Attempted to pad to a smaller size than the input "
                    "element: component ",
                    c, " has shape ", t->shape().DebugString(),
                    ", longer than its padded shape ", padded.DebugString()))));
          }
        }
      }
      // Checked at construction when the input's spec is known; a map
      // without output_spec leaves it to here. A value of another dtype
      // would be copied with the component's element size.
      if (!options_.padding_values.empty()) {
        const Tensor& v = options_.padding_values[c];
        if (v.dtype() != dtype || v.shape().dims() != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              stage(), ": Mismatched type between padding value ", c,
              " and input dataset's component ", c, ": ", DTypeName(v.dtype()),
              " ", v.shape().DebugString(), " vs. ", DTypeName(dtype),
              " (padding values are scalars of the component's dtype)"));
        }
      }
      TensorShape element_shape{absl::MakeConstSpan(dims)};
      TensorShape shape{static_cast<int64_t>(elements.size())};
      for (int64_t d : dims) shape.AddDim(d);
      absl::StatusOr<Tensor> made =
          AllocateBatchTensor(dtype, shape, /*zero_fill=*/true, stage());
      if (!made.ok()) return made.status();
      Tensor out = *std::move(made);
      const size_t element_bytes = DTypeSize(dtype);
      const size_t item_bytes =
          static_cast<size_t>(element_shape.num_elements()) * element_bytes;
      char* dst = static_cast<char*>(out.raw_data());
      if (!options_.padding_values.empty() && item_bytes > 0) {
        const char* value =
            static_cast<const char*>(options_.padding_values[c].raw_data());
        const size_t total = static_cast<size_t>(shape.num_elements());
        for (size_t i = 0; i < total; ++i) {
          std::memcpy(dst + i * element_bytes, value, element_bytes);
        }
      }
      for (size_t i = 0; i < elements.size() && item_bytes > 0; ++i) {
        const Tensor& t = std::get<Tensor>(elements[i].components[c]);
        if (t.NumElements() == 0) continue;
        CopyIntoCorner(static_cast<const char*>(t.raw_data()),
                       t.shape().dim_sizes(), dst + i * item_bytes, dims,
                       element_bytes);
      }
      batch.components.emplace_back(std::move(out));
    }
    return std::optional<Element>(std::move(batch));
  }

 private:
  PaddedBatchOptions options_;
};

class PaddedBatchDataset : public DatasetNode {
 public:
  PaddedBatchDataset(Node input, int64_t batch_size, PaddedBatchOptions options)
      : input_(std::move(input)),
        batch_size_(batch_size),
        options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    auto input = input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<PaddedBatchIterator>(
        *std::move(input), batch_size_, options_,
        absl::StrCat("PaddedBatch(", batch_size_, ")"));
  }
  std::optional<ElementSpec> spec() const override {
    std::optional<ElementSpec> in = input_->spec();
    ElementSpec out;
    for (size_t c = 0; c < options_.padded_shapes.size(); ++c) {
      TensorShape shape{options_.drop_remainder ? batch_size_ : kUnknownDim};
      for (int64_t d : options_.padded_shapes[c].dim_sizes()) shape.AddDim(d);
      const DType dtype = in.has_value() ? (*in)[c].dtype
                          : options_.padding_values.empty()
                              ? DType::kFloat
                              : options_.padding_values[c].dtype();
      out.push_back(ComponentSpec::Of(dtype, std::move(shape)));
    }
    if (!in.has_value() && options_.padding_values.empty()) {
      return std::nullopt;  // the dtypes are unknown
    }
    return out;
  }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".PaddedBatch(", batch_size_,
                        ")");
  }
  int64_t cardinality() const override {
    return BatchedCardinality(input_->cardinality(), batch_size_,
                              options_.drop_remainder);
  }

 private:
  Node input_;
  int64_t batch_size_;
  PaddedBatchOptions options_;
};

}  // namespace

int64_t BatchedCardinality(int64_t n, int64_t size, bool drop_remainder) {
  if (n < 0) return n;  // infinite or unknown
  return drop_remainder ? n / size : n / size + (n % size != 0 ? 1 : 0);
}

std::optional<ElementSpec> StackedSpec(const std::optional<ElementSpec>& in,
                                       int64_t leading) {
  if (!in.has_value()) return std::nullopt;
  ElementSpec out;
  for (const ComponentSpec& c : *in) {
    TensorShape shape{leading};
    if (c.shape.unknown_rank()) {
      shape = TensorShape::Unknown();
    } else {
      for (int64_t d : c.shape.dim_sizes()) shape.AddDim(d);
    }
    out.push_back(ComponentSpec::Of(c.dtype, std::move(shape)));
  }
  return out;
}

ElementIterator::Result StackElements(const std::vector<Element>& elements,
                                      const std::string& stage) {
  const Element& first = elements[0];
  Element batch;
  batch.origin = first.origin;
  const int64_t k = static_cast<int64_t>(elements.size());
  for (size_t c = 0; c < first.size(); ++c) {
    const Tensor* head = std::get_if<Tensor>(&first.components[c]);
    if (head == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          stage, ": component ", c, " is a string; only tensors batch"));
    }
    TensorShape shape{k};
    for (int64_t d : head->shape().dim_sizes()) shape.AddDim(d);
    absl::StatusOr<Tensor> made =
        AllocateBatchTensor(head->dtype(), shape, /*zero_fill=*/false, stage);
    if (!made.ok()) return made.status();
    Tensor out = *std::move(made);
    const size_t bytes = head->TotalBytes();
    char* dst = static_cast<char*>(out.raw_data());
    for (size_t i = 0; i < elements.size(); ++i) {
      const Element& e = elements[i];
      if (e.size() != first.size()) {
        return ComponentCountError(stage, first, e, i);
      }
      const Tensor* t = std::get_if<Tensor>(&e.components[c]);
      if (t == nullptr || t->dtype() != head->dtype() ||
          t->shape() != head->shape()) {
        // TensorFlow's sentence first (its tests match it), then the
        // dtypes when they differ too.
        const std::string other =
            t == nullptr ? std::string("a string")
                         : absl::StrCat("shape ", t->shape().DebugString());
        const std::string dtypes =
            t != nullptr && t->dtype() != head->dtype()
                ? absl::StrCat(
                      " Their dtypes differ: ", DTypeName(head->dtype()),
                      " and ", DTypeName(t->dtype()), ".")
                : std::string();
        return absl::InvalidArgumentError(absl::StrCat(
            stage, ": ",
            e.origin.Describe(absl::StrCat(
                "Cannot batch tensors with different shapes in component ", c,
                ". First element had shape ", head->shape().DebugString(),
                " and element ", i, " had ", other, ".", dtypes,
                " (PaddedBatch pads different lengths.)"))));
      }
      if (bytes > 0) std::memcpy(dst + i * bytes, t->raw_data(), bytes);
    }
    batch.components.emplace_back(std::move(out));
  }
  return std::optional<Element>(std::move(batch));
}

Node BatchNode(Node input, int64_t batch_size, bool drop_remainder) {
  if (const auto* fusable = dynamic_cast<const BatchFusable*>(input.get())) {
    return fusable->FusedBatch(input, batch_size, drop_remainder);
  }
  return StackingBatchNode(std::move(input), batch_size, drop_remainder);
}
Node StackingBatchNode(Node input, int64_t batch_size, bool drop_remainder) {
  return std::make_shared<BatchDataset>(std::move(input), batch_size,
                                        drop_remainder);
}
Node PaddedBatchNode(Node input, int64_t batch_size,
                     PaddedBatchOptions options) {
  return std::make_shared<PaddedBatchDataset>(std::move(input), batch_size,
                                              std::move(options));
}

}  // namespace cosession::detail
