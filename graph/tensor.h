// Tensor: an n-dimensional array of one DType, a value type over a shared,
// 64-byte aligned buffer.
//
// Copying a Tensor is cheap: copies share the buffer (reference counted).
// Who may mutate what:
//   * The code that created a tensor (a kernel filling its output, a user
//     filling a feed) may write through mutable_flat<T>() until it hands the
//     tensor to anyone else (returns it, feeds it, stores it).
//   * After that the buffer is immutable: every holder may read it from any
//     thread without locks. Variables write into their buffer in place only
//     while nobody else holds it (copy-on-write, under the variable's lock);
//     otherwise an update builds a new buffer and swaps it in. So a tensor
//     read from a variable is a stable snapshot.
// Thread safety: distinct Tensor objects may be used concurrently even when
// they share a buffer; one Tensor object is thread-compatible.
//
// Misuse (wrong element type in scalar<T>(), a shape that is not fully
// defined, a value count that does not match the shape) is a programming
// error and throws StatusError.
#ifndef COSESSION_GRAPH_TENSOR_H_
#define COSESSION_GRAPH_TENSOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/tensor_shape.h"

namespace cosession {

namespace detail {
// A reference-counted, 64-byte aligned block of bytes. Header and data share
// one allocation from TensorAllocator::Default() (graph/tensor_allocator.h),
// so a scalar costs one malloc and a large buffer is usually a reused one.
class TensorBuffer {
 public:
  static TensorBuffer* Allocate(size_t bytes);  // refcount 1, uninitialised
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();
  // Acquire: every earlier holder's accesses happen before what the caller
  // does next with a buffer it finds unshared.
  bool RefCountIsOne() const {
    return refs_.load(std::memory_order_acquire) == 1;
  }
  void* data() { return reinterpret_cast<char*>(this) + kHeaderBytes; }
  size_t size() const { return bytes_; }

  static constexpr size_t kAlignment = 64;

 private:
  static constexpr size_t kHeaderBytes = kAlignment;
  // The size of the block that holds `bytes` of data.
  static size_t BlockBytes(size_t bytes);
  TensorBuffer(size_t bytes, void* block) : bytes_(bytes), block_(block) {}
  std::atomic<int32_t> refs_{1};
  size_t bytes_;
  void* block_;  // what malloc returned; the header sits at the next 64 bytes
};
}  // namespace detail

class Tensor {
 public:
  // An empty float scalar without a buffer (IsInitialized() is false).
  Tensor() = default;
  // A zero-filled tensor. Throws StatusError unless `shape` is fully defined.
  Tensor(DType dtype, TensorShape shape);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  // Moves and the destructor are inline: the executor moves every op's
  // outputs into its slots and drops them, per op.
  Tensor(Tensor&& other) noexcept
      : dtype_(other.dtype_),
        shape_(std::move(other.shape_)),
        num_elements_(other.num_elements_),
        buffer_(std::exchange(other.buffer_, nullptr)) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      if (buffer_) buffer_->Unref();
      dtype_ = other.dtype_;
      shape_ = std::move(other.shape_);
      num_elements_ = other.num_elements_;
      buffer_ = std::exchange(other.buffer_, nullptr);
    }
    return *this;
  }
  ~Tensor() {
    if (buffer_) buffer_->Unref();
  }

  // An uninitialised tensor, for kernels that write every element.
  static Tensor Allocate(DType dtype, TensorShape shape);
  // The same with the shape of `like` (a tensor that exists, so its shape
  // needs no checks): what elementwise kernels allocate per op.
  static Tensor AllocateWithShapeOf(DType dtype, const Tensor& like);

  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t = Allocate(kDTypeOf<T>, TensorShape{});
    *static_cast<T*>(t.raw_data()) = value;
    return t;
  }
  // Throws StatusError when values.size() != shape.num_elements().
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, TensorShape shape);
  // A rank-1 tensor holding `values`.
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values) {
    return FromVector(values, TensorShape{static_cast<int64_t>(values.size())});
  }

  bool IsInitialized() const {
    return buffer_ != nullptr || num_elements_ == 0;
  }
  DType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int64_t NumElements() const { return num_elements_; }
  size_t TotalBytes() const { return num_elements_ * DTypeSize(dtype_); }

  // The single value of a one-element tensor.
  template <typename T>
  T scalar() const {
    CheckAccess(kDTypeOf<T>, /*want_one_element=*/true);
    return *static_cast<const T*>(raw_data());
  }
  // All elements in row-major order.
  template <typename T>
  absl::Span<const T> flat() const {
    CheckAccess(kDTypeOf<T>, false);
    return absl::Span<const T>(static_cast<const T*>(raw_data()),
                               static_cast<size_t>(num_elements_));
  }
  // Writable view; only for the tensor's creator (see the contract above).
  template <typename T>
  absl::Span<T> mutable_flat() {
    CheckAccess(kDTypeOf<T>, false);
    return absl::Span<T>(static_cast<T*>(raw_data()),
                         static_cast<size_t>(num_elements_));
  }

  const void* raw_data() const { return buffer_ ? buffer_->data() : nullptr; }
  void* raw_data() { return buffer_ ? buffer_->data() : nullptr; }

  // A tensor with the same buffer and another shape of the same element
  // count. Throws StatusError on a count mismatch.
  Tensor Reshaped(TensorShape shape) const;
  // A deep copy with a buffer of its own.
  Tensor Clone() const;
  bool SharesBufferWith(const Tensor& other) const {
    return buffer_ != nullptr && buffer_ == other.buffer_;
  }
  // True when this Tensor object is the only holder of its buffer; then its
  // owner may write into it (copy-on-write updates of variables). Only
  // meaningful while no other thread can make a new copy of this object.
  bool RefCountIsOne() const {
    return buffer_ != nullptr && buffer_->RefCountIsOne();
  }

  // Same dtype, shape and element values (bitwise for floats, so NaNs at the
  // same positions compare equal).
  bool IsSameAs(const Tensor& other) const;

  // "Tensor<float [2,2]: 1 2 3 4>", at most `max_values` values shown.
  std::string DebugString(int max_values = 16) const;

 private:
  Tensor(DType dtype, TensorShape shape, bool zero_fill);
  // For AllocateWithShapeOf: `shape` and `num_elements` are a tensor's.
  Tensor(DType dtype, const TensorShape& shape, int64_t num_elements)
      : dtype_(dtype), shape_(shape), num_elements_(num_elements) {}
  // Inline: flat<T>() is called per op; the error's text is built out of
  // line.
  void CheckAccess(DType want, bool want_one_element) const {
    if (want != dtype_ || (want_one_element && num_elements_ != 1) ||
        !IsInitialized()) [[unlikely]] {
      ThrowAccessError(want, want_one_element);
    }
  }
  [[noreturn]] void ThrowAccessError(DType want, bool want_one_element) const;
  void CheckCount(size_t count) const;

  DType dtype_ = DType::kFloat;
  TensorShape shape_;
  int64_t num_elements_ = 1;
  detail::TensorBuffer* buffer_ = nullptr;
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, TensorShape shape) {
  Tensor t = Allocate(kDTypeOf<T>, std::move(shape));
  t.CheckCount(values.size());
  T* out = static_cast<T*>(t.raw_data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace cosession

#endif  // COSESSION_GRAPH_TENSOR_H_
