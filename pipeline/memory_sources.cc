// The in-memory sources: FromElements, FromTensorSlices, Range. They never
// wait, skip in O(1) and are deterministic. A slice is a copy of its rows
// (a new tensor): the source tensors stay shared and immutable. Batch over
// FromTensorSlices is fused (detail::BatchFusable): a batch is one copy of
// its consecutive rows per tensor, not a tensor per row stacked.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/detail/sync_iterator.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;

// An iterator over n positions, where position i is make(i).
template <typename Make>
class IndexIterator : public SyncIterator {
 public:
  IndexIterator(int64_t n, Make make) : n_(n), make_(std::move(make)) {}
  Result NextNow() override {
    if (next_ >= n_) return std::optional<Element>();
    return std::optional<Element>(make_(next_++));
  }
  absl::StatusOr<Taken> TryTakeInto(std::vector<Element>& out,
                                    size_t size) override {
    while (out.size() < size) {
      if (next_ >= n_) return Taken::kEnd;
      out.push_back(make_(next_++));
    }
    return Taken::kFull;
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    const int64_t skipped = std::min(n, n_ - next_);
    next_ += skipped;
    co_return skipped;
  }

 private:
  int64_t n_;
  Make make_;
  int64_t next_ = 0;
};

template <typename Make>
std::unique_ptr<ElementIterator> MakeIndexIterator(int64_t n, Make make) {
  return std::make_unique<IndexIterator<Make>>(n, std::move(make));
}

class FromElementsDataset : public DatasetNode {
 public:
  explicit FromElementsDataset(std::vector<Element> elements)
      : elements_(
            std::make_shared<const std::vector<Element>>(std::move(elements))) {
    if (!elements_->empty()) {
      ElementSpec spec = SpecOf((*elements_)[0]);
      for (const Element& e : *elements_) {
        spec = *MostSpecificCommonSpec(spec, SpecOf(e));
      }
      spec_ = std::move(spec);
    }
  }
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    return MakeIndexIterator(
        static_cast<int64_t>(elements_->size()),
        [elements = elements_](int64_t i) { return (*elements)[i]; });
  }
  std::optional<ElementSpec> spec() const override { return spec_; }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("FromElements(", elements_->size(), ")");
  }
  int64_t cardinality() const override {
    return static_cast<int64_t>(elements_->size());
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  std::optional<ElementSpec> spec_;
};

// Batch(n) over FromTensorSlices: each batch is a block of consecutive
// rows, copied at once per tensor.
class SliceBatchesDataset : public DatasetNode {
 public:
  SliceBatchesDataset(std::shared_ptr<const std::vector<Tensor>> tensors,
                      Node unfused, int64_t batch_size, bool drop_remainder)
      : tensors_(std::move(tensors)),
        unfused_(std::move(unfused)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    const int64_t rows = (*tensors_)[0].shape().dim_size(0);
    const int64_t batches = drop_remainder_
                                ? rows / batch_size_
                                : (rows + batch_size_ - 1) / batch_size_;
    return MakeIndexIterator(
        batches, [tensors = tensors_, n = batch_size_, rows](int64_t b) {
          const int64_t first = b * n;
          const int64_t count = std::min(n, rows - first);
          Element batch;
          for (const Tensor& t : *tensors) {
            TensorShape shape = t.shape();
            shape.set_dim(0, count);
            Tensor block = Tensor::Allocate(t.dtype(), shape);
            const size_t row_bytes =
                rows == 0 ? 0 : t.TotalBytes() / static_cast<size_t>(rows);
            if (block.TotalBytes() > 0) {
              std::memcpy(block.raw_data(),
                          static_cast<const char*>(t.raw_data()) +
                              static_cast<size_t>(first) * row_bytes,
                          block.TotalBytes());
            }
            batch.components.emplace_back(std::move(block));
          }
          return batch;
        });
  }
  std::optional<ElementSpec> spec() const override { return unfused_->spec(); }
  bool deterministic() const override { return true; }
  std::string DebugString() const override { return unfused_->DebugString(); }
  int64_t cardinality() const override { return unfused_->cardinality(); }

 private:
  std::shared_ptr<const std::vector<Tensor>> tensors_;
  Node unfused_;
  int64_t batch_size_;
  bool drop_remainder_;
};

class FromTensorSlicesDataset : public DatasetNode, public BatchFusable {
 public:
  explicit FromTensorSlicesDataset(std::vector<Tensor> tensors)
      : tensors_(
            std::make_shared<const std::vector<Tensor>>(std::move(tensors))) {
    ElementSpec spec;
    for (const Tensor& t : *tensors_) {
      spec.push_back(ComponentSpec::Of(t.dtype(), SliceShape(t)));
    }
    spec_ = std::move(spec);
  }
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    return MakeIndexIterator((*tensors_)[0].shape().dim_size(0),
                             [tensors = tensors_](int64_t i) {
                               Element element;
                               for (const Tensor& t : *tensors) {
                                 element.components.emplace_back(CopyRow(t, i));
                               }
                               return element;
                             });
  }
  std::optional<ElementSpec> spec() const override { return spec_; }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("FromTensorSlices(", (*tensors_)[0].shape().dim_size(0),
                        ")");
  }
  int64_t cardinality() const override {
    return (*tensors_)[0].shape().dim_size(0);
  }
  Node FusedBatch(const Node& self, int64_t batch_size,
                  bool drop_remainder) const override {
    return std::make_shared<SliceBatchesDataset>(
        tensors_, StackingBatchNode(self, batch_size, drop_remainder),
        batch_size, drop_remainder);
  }

 private:
  static TensorShape SliceShape(const Tensor& t) {
    return TensorShape(t.shape().dim_sizes().subspan(1));
  }
  std::shared_ptr<const std::vector<Tensor>> tensors_;
  ElementSpec spec_;
};

class RangeDataset : public DatasetNode {
 public:
  RangeDataset(int64_t start, int64_t stop, int64_t step)
      : start_(start), stop_(stop), step_(step) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    return MakeIndexIterator(
        Count(), [start = start_, step = step_](int64_t i) {
          Element element;
          element.components.emplace_back(
              Tensor::Scalar<int64_t>(static_cast<int64_t>(
                  static_cast<uint64_t>(start) +
                  static_cast<uint64_t>(i) * static_cast<uint64_t>(step))));
          return element;
        });
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::Scalar(DType::kInt64)};
  }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("Range(", start_, ", ", stop_, ", ", step_, ")");
  }
  int64_t cardinality() const override { return Count(); }

 private:
  // Python's len(range(start, stop, step)), without overflow.
  int64_t Count() const {
    if (step_ > 0 && start_ < stop_) {
      return static_cast<int64_t>(
          (static_cast<uint64_t>(stop_) - static_cast<uint64_t>(start_) - 1) /
              static_cast<uint64_t>(step_) +
          1);
    }
    if (step_ < 0 && start_ > stop_) {
      return static_cast<int64_t>(
          (static_cast<uint64_t>(start_) - static_cast<uint64_t>(stop_) - 1) /
              (0 - static_cast<uint64_t>(step_)) +
          1);
    }
    return 0;
  }
  int64_t start_, stop_, step_;
};

}  // namespace

Node FromElementsNode(std::vector<Element> elements) {
  return std::make_shared<FromElementsDataset>(std::move(elements));
}
Node FromTensorSlicesNode(std::vector<Tensor> tensors) {
  return std::make_shared<FromTensorSlicesDataset>(std::move(tensors));
}
Node RangeNode(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<RangeDataset>(start, stop, step);
}

}  // namespace cosession::detail
