#include "cosession/graph/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "cosession/graph/small_block_cache.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor_allocator.h"

namespace cosession {
namespace detail {

size_t TensorBuffer::BlockBytes(size_t bytes) {
  return kHeaderBytes + bytes + kAlignment;
}

TensorBuffer* TensorBuffer::Allocate(size_t bytes) {
  // Over-allocate and align by hand: glibc's aligned allocation (memalign)
  // costs ~10 times a plain malloc, and small tensors are allocated per op.
  // Small blocks skip TensorAllocator (and its locks): a scalar op's output
  // is allocated per run (BM_Executor_Chain).
  const size_t block_bytes = BlockBytes(bytes);
  void* block;
  if (block_bytes <= SmallBlockCache::kMaxBytes) {
    block = SmallBlockCache::Allocate(block_bytes);
  } else if (TensorAllocator::IsCached(block_bytes)) {
    block = TensorAllocator::Default().Allocate(block_bytes);
  } else {
    block = std::malloc(block_bytes);
  }
  if (block == nullptr) throw std::bad_alloc();
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(block) + kAlignment - 1) & ~(kAlignment - 1);
  return new (reinterpret_cast<void*>(aligned)) TensorBuffer(bytes, block);
}

void TensorBuffer::Unref() {
  // acq_rel: the last owner must see every write made by the others before
  // it frees the block. A sole owner (the common case: an op's output
  // dropped by its one reader) skips the locked decrement, which costs more
  // than the rest of a scalar's release: no other thread holds a reference
  // it could copy, and the acquire load orders the earlier owners' writes.
  if (RefCountIsOne() || refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    void* block = block_;
    const size_t block_bytes = BlockBytes(bytes_);
    this->~TensorBuffer();
    if (block_bytes <= SmallBlockCache::kMaxBytes) {
      SmallBlockCache::Deallocate(block, block_bytes);
    } else if (TensorAllocator::IsCached(block_bytes)) {
      TensorAllocator::Default().Deallocate(block, block_bytes);
    } else {
      std::free(block);
    }
  }
}

}  // namespace detail

namespace {

// 2^48 bytes is far beyond any machine; the check keeps the byte count
// (elements * element size + header) from wrapping around. A checked
// multiply rather than a division: a tensor is made per op output, and a
// 64-bit division costs more than the rest of the check.
bool TooManyBytes(int64_t num_elements, DType dtype) {
  constexpr int64_t kMaxBytes = int64_t{1} << 48;
  int64_t bytes;
  return __builtin_mul_overflow(
             num_elements, static_cast<int64_t>(DTypeSize(dtype)), &bytes) ||
         bytes > kMaxBytes;
}

}  // namespace

Tensor::Tensor(DType dtype, TensorShape shape)
    : Tensor(dtype, std::move(shape), /*zero_fill=*/true) {}

Tensor::Tensor(DType dtype, TensorShape shape, bool zero_fill)
    : dtype_(dtype), shape_(std::move(shape)) {
  // One pass for the usual shape (known, each dimension >= 0, a product
  // that fits): a tensor is made per op output. Anything else takes the
  // checks below, which name what is wrong.
  int64_t n = 1;
  bool usual = !shape_.unknown_rank();
  for (int64_t d : shape_.dim_sizes()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      usual = false;
      break;
    }
  }
  if (!usual) {
    if (!shape_.IsFullyDefined()) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "A tensor needs a fully defined shape, got ", shape_.DebugString())));
    }
    ThrowIfError(shape_.Validate());
    n = shape_.num_elements();  // not reached: one of the two threw
  }
  num_elements_ = n;
  if (TooManyBytes(num_elements_, dtype_)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "A tensor of shape ", shape_.DebugString(), " is too large")));
  }
  const size_t bytes = TotalBytes();
  if (bytes > 0) {
    buffer_ = detail::TensorBuffer::Allocate(bytes);
    if (zero_fill) std::memset(buffer_->data(), 0, bytes);
  }
}

Tensor Tensor::Allocate(DType dtype, TensorShape shape) {
  return Tensor(dtype, std::move(shape), /*zero_fill=*/false);
}

Tensor Tensor::AllocateWithShapeOf(DType dtype, const Tensor& like) {
  Tensor t(dtype, like.shape_, like.num_elements_);
  // `like`'s element count fit its own dtype; a wider one may not.
  if (TooManyBytes(t.num_elements_, dtype)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "A tensor of shape ", t.shape_.DebugString(), " is too large")));
  }
  const size_t bytes = t.TotalBytes();
  if (bytes > 0) t.buffer_ = detail::TensorBuffer::Allocate(bytes);
  return t;
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      num_elements_(other.num_elements_),
      buffer_(other.buffer_) {
  if (buffer_) buffer_->Ref();
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::ThrowAccessError(DType want, bool want_one_element) const {
  if (want != dtype_) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("Tensor of dtype ", DTypeName(dtype_), " accessed as ",
                     DTypeName(want))));
  }
  if (want_one_element && num_elements_ != 1) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("scalar() on a tensor of shape ", shape_.DebugString())));
  }
  throw StatusError(
      absl::FailedPreconditionError("Access to an uninitialised Tensor"));
}

void Tensor::CheckCount(size_t count) const {
  if (static_cast<int64_t>(count) != num_elements_) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(count, " values given for a tensor of shape ",
                     shape_.DebugString(), " (", num_elements_, " elements)")));
  }
}

Tensor Tensor::Reshaped(TensorShape shape) const {
  ThrowIfError(shape.Validate());
  if (!shape.IsFullyDefined() || shape.num_elements() != num_elements_) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("Cannot reshape a tensor of shape ", shape_.DebugString(),
                     " to ", shape.DebugString())));
  }
  Tensor t(*this);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  if (!IsInitialized()) return *this;
  // This tensor's shape and size were checked when it was made: no second
  // validation (a variable read in the step that updates it is cloned per
  // step, BM_Step_DefaultHooks's global step).
  Tensor t(dtype_, shape_, num_elements_);
  if (const size_t bytes = TotalBytes(); bytes > 0) {
    t.buffer_ = detail::TensorBuffer::Allocate(bytes);
    std::memcpy(t.buffer_->data(), buffer_->data(), bytes);
  }
  return t;
}

bool Tensor::IsSameAs(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (IsInitialized() != other.IsInitialized()) return false;
  if (!IsInitialized() || TotalBytes() == 0) return true;
  if (dtype_ == DType::kBool) {
    auto a = flat<bool>();
    auto b = other.flat<bool>();
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  return std::memcmp(raw_data(), other.raw_data(), TotalBytes()) == 0;
}

std::string Tensor::DebugString(int max_values) const {
  std::string out = absl::StrCat("Tensor<", DTypeName(dtype_), " ",
                                 shape_.DebugString(), ":");
  if (!IsInitialized()) return out + " uninitialised>";
  VisitDType(dtype_, [&]<typename T>() {
    auto values = flat<T>();
    const int64_t shown =
        std::min<int64_t>(values.size(), std::max(0, max_values));
    for (int64_t i = 0; i < shown; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        absl::StrAppend(&out, " ", values[i] ? "true" : "false");
      } else {
        absl::StrAppend(&out, " ", values[i]);
      }
    }
    if (shown < static_cast<int64_t>(values.size())) out += " ...";
  });
  return out + ">";
}

}  // namespace cosession
