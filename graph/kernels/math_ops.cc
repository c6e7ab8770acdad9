// Math ops: elementwise arithmetic with broadcasting, unary functions,
// AddN, reductions, activations, Cast, comparisons and numeric checks.
// MatMul's kernel is in matmul_op.cc (its builder, ops::MatMul, is here).
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/graph/kernels/kernel_util.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor_eigen.h"

namespace cosession {
namespace {

using kernels::BroadcastShapes;
using kernels::BroadcastStrides;
using kernels::ExpectDType;
using kernels::ForEachStrided;
using kernels::KernelError;
using kernels::kFloatingDTypes;
using kernels::kNumericDTypes;

template <typename T>
inline constexpr bool kIsNumeric = !std::is_same_v<T, bool>;
template <typename T>
inline constexpr bool kIsFloating = std::is_floating_point_v<T>;

absl::Status UnsupportedDType(const KernelContext& ctx, DType dtype) {
  return KernelError(
      ctx, absl::StrCat("dtype ", DTypeName(dtype), " is not supported"));
}

// ---- Elementwise binary ops ----

// Integer arithmetic wraps around (as TensorFlow's does on CPU) instead of
// overflowing, which would be undefined behaviour.
template <typename T, typename Fn>
T Wrapping(T a, T b, Fn fn) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(fn(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return fn(a, b);
  }
}

struct AddFn {
  template <typename T>
  T operator()(T a, T b) const {
    return Wrapping(a, b, [](auto x, auto y) { return x + y; });
  }
};
struct SubFn {
  template <typename T>
  T operator()(T a, T b) const {
    return Wrapping(a, b, [](auto x, auto y) { return x - y; });
  }
};
struct MulFn {
  template <typename T>
  T operator()(T a, T b) const {
    return Wrapping(a, b, [](auto x, auto y) { return x * y; });
  }
};
// The divisor was checked for zeros when T is an integer.
struct DivFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == -1)
        return Wrapping(T{0}, a, [](auto x, auto y) { return x - y; });
    }
    return a / b;
  }
};
struct MaximumFn {
  template <typename T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct EqualFn {
  template <typename T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};

absl::Status BinaryShape(InferenceContext& c, bool allow_bool,
                         bool bool_output) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(2, 2));
  COSESSION_RETURN_IF_ERROR(c.ExpectSameDType());
  if (!allow_bool) COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kNumericDTypes));
  COSESSION_ASSIGN_OR_RETURN(
      TensorShape shape, BroadcastShapes(c.input_shape(0), c.input_shape(1)));
  c.AddOutput(bool_output ? DType::kBool : c.input_dtype(0), std::move(shape));
  return absl::OkStatus();
}

absl::Status ArithmeticShape(InferenceContext& c) {
  return BinaryShape(c, /*allow_bool=*/false, /*bool_output=*/false);
}
absl::Status ComparisonShape(InferenceContext& c) {
  return BinaryShape(c, /*allow_bool=*/true, /*bool_output=*/true);
}

// How `small` repeats when broadcast to `big` (its dimensions aligned on
// big's last ones), in the two patterns that need no strides:
//   kRows: block after block, each small in order -- small's dimensions are
//     big's last ones, with 1s or nothing before them (a bias added to
//     each row of a matrix, or a scalar);
//   kColumns: each element of small over a block of big -- small's
//     dimensions are big's first ones, then 1s ([N,1] against [N,C]).
enum class Repeat { kNeither, kRows, kColumns };

Repeat RepeatOf(const TensorShape& small, const TensorShape& big) {
  const int d = small.dims();
  const int offset = big.dims() - d;
  if (offset < 0) return Repeat::kNeither;
  auto aligned = [&](int i) -> int64_t {
    return i < offset ? 1 : small.dim_size(i - offset);
  };
  // kRows: 1s up to some axis k, then big's own sizes.
  int k = 0;
  while (k < big.dims() && aligned(k) == 1 && big.dim_size(k) != 1) ++k;
  bool rows = true;
  for (int i = k; i < big.dims() && rows; ++i)
    rows = aligned(i) == big.dim_size(i);
  if (rows) return Repeat::kRows;
  if (offset != 0) return Repeat::kNeither;
  // kColumns: big's own sizes up to some axis k, then 1s.
  k = 0;
  while (k < d && small.dim_size(k) == big.dim_size(k)) ++k;
  for (int i = k; i < d; ++i) {
    if (small.dim_size(i) != 1) return Repeat::kNeither;
  }
  return Repeat::kColumns;
}

// z = fn(x, y) elementwise where one operand, `small` (x when small_is_x),
// repeats over the other, `big`, as RepeatOf found; n is big's element count
// and m small's (at least 1).
template <typename T, typename Out, typename Fn>
void ApplyRepeated(Repeat repeat, bool small_is_x, const T* big, const T* small,
                   Out* z, int64_t n, int64_t m, Fn fn) {
  auto apply = [&](int64_t i, T small_value) {
    z[i] = small_is_x ? fn(small_value, big[i]) : fn(big[i], small_value);
  };
  if (m == 1) {  // a scalar, or one element: a single loop
    for (int64_t i = 0; i < n; ++i) apply(i, small[0]);
  } else if (repeat == Repeat::kRows) {
    for (int64_t base = 0; base < n; base += m) {
      for (int64_t j = 0; j < m; ++j) apply(base + j, small[j]);
    }
  } else {
    const int64_t block = n / m;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < block; ++j) apply(r * block + j, small[r]);
    }
  }
}

// out[i] = fn(a[ia], b[ib]) over the broadcast of a and b.
template <typename T, typename Out, typename Fn>
absl::Status ApplyBinary(KernelContext& ctx, Fn fn) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const T* x = a.flat<T>().data();
  const T* y = b.flat<T>().data();
  if (a.shape() == b.shape()) {
    // The common case, and the cheapest: no broadcast to work out (a scalar
    // op's whole cost is the framework's, see BM_Executor_Chain). z may be
    // x or y (a forwarded input; x and y were read above).
    Tensor& out = ctx.ForwardInputOrAllocateOutput({0, 1}, 0, kDTypeOf<Out>, a);
    Out* z = static_cast<Out*>(out.raw_data());
    const int64_t n = out.NumElements();
    for (int64_t i = 0; i < n; ++i) z[i] = fn(x[i], y[i]);
    return absl::OkStatus();
  }
  // One operand repeating over the other in order (a bias, a scalar, a
  // column): a plain loop, without working out the broadcast's strides,
  // which cost more than the arithmetic of a small batch.
  for (const bool small_is_a : {false, true}) {
    const Tensor& small = small_is_a ? a : b;
    const Tensor& big = small_is_a ? b : a;
    const Repeat repeat = RepeatOf(small.shape(), big.shape());
    if (repeat == Repeat::kNeither || small.NumElements() == 0) continue;
    const int64_t n = big.NumElements();
    const int64_t m = small.NumElements();
    // Written in place when `big` is forwarded (left empty then): each
    // element of big is read just before the same element is written.
    Tensor& out = ctx.ForwardInputOrAllocateOutput({small_is_a ? 1 : 0}, 0,
                                                   kDTypeOf<Out>, big);
    ApplyRepeated<T, Out>(repeat, small_is_a, small_is_a ? y : x,
                          small_is_a ? x : y, static_cast<Out*>(out.raw_data()),
                          n, m, fn);
    return absl::OkStatus();
  }
  absl::StatusOr<TensorShape> shape = BroadcastShapes(a.shape(), b.shape());
  if (!shape.ok()) return KernelError(ctx, shape.status().message());
  Tensor out = Tensor::Allocate(kDTypeOf<Out>, *shape);
  Out* z = out.mutable_flat<Out>().data();
  const int64_t n = out.NumElements();
  if (a.NumElements() == 1 && b.shape() == *shape) {
    const T scalar = x[0];
    for (int64_t i = 0; i < n; ++i) z[i] = fn(scalar, y[i]);
  } else if (b.NumElements() == 1 && a.shape() == *shape) {
    const T scalar = y[0];
    for (int64_t i = 0; i < n; ++i) z[i] = fn(x[i], scalar);
  } else {
    const kernels::Strides sa = BroadcastStrides(a.shape(), *shape);
    const kernels::Strides sb = BroadcastStrides(b.shape(), *shape);
    ForEachStrided(
        shape->dim_sizes(), sa, sb,
        [&](int64_t i, int64_t ia, int64_t ib) { z[i] = fn(x[ia], y[ib]); });
  }
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

template <typename Fn, bool kBoolOutput = false>
absl::Status BinaryKernel(KernelContext& ctx) {
  const DType dtype = ctx.input(0).dtype();
  return VisitDType(dtype, [&]<typename T>() -> absl::Status {
    if constexpr (kBoolOutput) {
      return ApplyBinary<T, bool>(ctx, Fn{});
    } else if constexpr (kIsNumeric<T>) {
      return ApplyBinary<T, T>(ctx, Fn{});
    } else {
      return UnsupportedDType(ctx, dtype);
    }
  });
}

absl::Status DivKernel(KernelContext& ctx) {
  const DType dtype = ctx.input(1).dtype();
  if (IsInteger(dtype)) {
    const bool has_zero = VisitDType(dtype, [&]<typename T>() {
      for (T v : ctx.input(1).flat<T>()) {
        if (v == T{0}) return true;
      }
      return false;
    });
    if (has_zero && ctx.input(0).NumElements() > 0) {
      return KernelError(ctx, "Integer division by zero");
    }
  }
  return BinaryKernel<DivFn>(ctx);
}

// ---- Elementwise unary ops ----

struct NegOp {
  static constexpr bool kFloatOnly = false;
  template <typename X>
  static auto Apply(const X& x) {
    return -x;
  }
};
struct SquareOp {
  static constexpr bool kFloatOnly = false;
  template <typename X>
  static auto Apply(const X& x) {
    return x.square();
  }
};
struct ReluOp {
  static constexpr bool kFloatOnly = false;
  template <typename X>
  static auto Apply(const X& x) {
    return x.max(typename X::Scalar(0));
  }
};
struct SqrtOp {
  static constexpr bool kFloatOnly = true;
  template <typename X>
  static auto Apply(const X& x) {
    return x.sqrt();
  }
};
struct ExpOp {
  static constexpr bool kFloatOnly = true;
  template <typename X>
  static auto Apply(const X& x) {
    return x.exp();
  }
};
struct LogOp {
  static constexpr bool kFloatOnly = true;
  template <typename X>
  static auto Apply(const X& x) {
    return x.log();
  }
};
struct SigmoidOp {
  static constexpr bool kFloatOnly = true;
  template <typename X>
  static auto Apply(const X& x) {
    using T = typename X::Scalar;
    return (T(1) + (-x).exp()).inverse();
  }
};
struct TanhOp {
  static constexpr bool kFloatOnly = true;
  template <typename X>
  static auto Apply(const X& x) {
    return x.tanh();
  }
};

template <typename Op>
absl::Status UnaryShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(
      ExpectDType(c, 0,
                  Op::kFloatOnly ? absl::Span<const DType>(kFloatingDTypes)
                                 : absl::Span<const DType>(kNumericDTypes)));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

template <typename Op>
absl::Status UnaryKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  return VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T> || (Op::kFloatOnly && !kIsFloating<T>)) {
      return UnsupportedDType(ctx, x.dtype());
    } else {
      // Mapped before x may be forwarded (and left empty); the expression
      // is elementwise, so writing it over its own input is safe.
      const auto in = FlatMap<T>(x);
      Tensor& out = ctx.ForwardInputOrAllocateOutput({0}, 0, x.dtype(), x);
      MutableFlatMap<T>(out) = Op::Apply(in);
      return absl::OkStatus();
    }
  });
}

// ---- AddN ----

// The most specific shape compatible with both; InvalidArgument when none.
absl::StatusOr<TensorShape> MergeShapes(const TensorShape& a,
                                        const TensorShape& b) {
  if (a.unknown_rank()) return b;
  if (b.unknown_rank()) return a;
  if (!a.IsCompatibleWith(b)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes ", a.DebugString(), " and ", b.DebugString(), " differ"));
  }
  TensorShape merged = a;
  for (int d = 0; d < a.dims(); ++d) {
    if (merged.dim_size(d) == kUnknownDim) merged.set_dim(d, b.dim_size(d));
  }
  return merged;
}

absl::Status AddNShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, std::numeric_limits<int>::max()));
  COSESSION_RETURN_IF_ERROR(c.ExpectSameDType());
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kNumericDTypes));
  TensorShape shape = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    COSESSION_ASSIGN_OR_RETURN(shape, MergeShapes(shape, c.input_shape(i)));
  }
  c.AddOutput(c.input_dtype(0), std::move(shape));
  return absl::OkStatus();
}

absl::Status AddNKernel(KernelContext& ctx) {
  const Tensor& first = ctx.input(0);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i).shape() != first.shape()) {
      return KernelError(ctx, absl::StrCat("input ", i, " has shape ",
                                           ctx.input(i).shape().DebugString(),
                                           " but input 0 has shape ",
                                           first.shape().DebugString()));
    }
  }
  if (ctx.num_inputs() == 1) {
    ctx.set_output(0, first);
    return absl::OkStatus();
  }
  return VisitDType(first.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedDType(ctx, first.dtype());
    } else {
      Tensor out = Tensor::AllocateWithShapeOf(first.dtype(), first);
      auto sum = MutableFlatMap<T>(out);
      // Each piece sums a slice of every input (intra-op parallelism: a
      // fan-in of many big tensors is memory-bound work for every core).
      ctx.ParallelFor(first.NumElements(), ctx.num_inputs(),
                      [&](int64_t begin, int64_t end) {
                        const int64_t len = end - begin;
                        auto slice = sum.segment(begin, len);
                        slice = FlatMap<T>(first).segment(begin, len) +
                                FlatMap<T>(ctx.input(1)).segment(begin, len);
                        for (int i = 2; i < ctx.num_inputs(); ++i) {
                          slice += FlatMap<T>(ctx.input(i)).segment(begin, len);
                        }
                      });
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- Reductions ----

struct SumReducer {
  template <typename T>
  static T Init() {
    return T{0};
  }
  template <typename T>
  static T Step(T acc, T x) {
    return AddFn{}(acc, x);
  }
  template <typename T>
  static T Finish(T acc, int64_t /*count*/) {
    return acc;
  }
};
// Integer means truncate; the mean of no elements is NaN for floats and 0
// for integers.
struct MeanReducer {
  template <typename T>
  static T Init() {
    return T{0};
  }
  template <typename T>
  static T Step(T acc, T x) {
    return AddFn{}(acc, x);
  }
  template <typename T>
  static T Finish(T acc, int64_t count) {
    if (count == 0) {
      if constexpr (kIsFloating<T>) return std::numeric_limits<T>::quiet_NaN();
      return T{0};
    }
    return static_cast<T>(acc / static_cast<T>(count));
  }
};
// The max of no elements is the lowest value (-inf for floats), as in
// TensorFlow. A NaN propagates.
struct MaxReducer {
  template <typename T>
  static T Init() {
    if constexpr (kIsFloating<T>) return -std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::lowest();
  }
  template <typename T>
  static T Step(T acc, T x) {
    if constexpr (kIsFloating<T>) {
      if (std::isnan(x)) return x;
    }
    return acc < x ? x : acc;
  }
  template <typename T>
  static T Finish(T acc, int64_t /*count*/) {
    return acc;
  }
};

absl::Status ReductionShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kNumericDTypes));
  COSESSION_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                             c.attr<std::vector<int64_t>>("axes"));
  COSESSION_ASSIGN_OR_RETURN(bool keep_dims, c.attr<bool>("keep_dims"));
  const TensorShape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    c.AddOutput(c.input_dtype(0), axes.empty() && !keep_dims
                                      ? TensorShape{}
                                      : TensorShape::Unknown());
    return absl::OkStatus();
  }
  COSESSION_ASSIGN_OR_RETURN(auto reduced,
                             kernels::ReducedDims(axes, in.dims()));
  c.AddOutput(c.input_dtype(0), kernels::ReducedShape(in, reduced, keep_dims));
  return absl::OkStatus();
}

template <typename Reducer>
absl::Status ReductionKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TensorShape& in = x.shape();
  absl::StatusOr<absl::InlinedVector<bool, 6>> reduced = kernels::ReducedDims(
      ctx.node().attr<std::vector<int64_t>>("axes"), in.dims());
  if (!reduced.ok()) return KernelError(ctx, reduced.status().message());
  const bool keep_dims = ctx.node().attr<bool>("keep_dims");
  // Where each input element lands in the output: the output's row-major
  // strides along kept dimensions, 0 along reduced ones.
  kernels::Strides out_strides(in.dims(), 0);
  int64_t stride = 1, count = 1;
  for (int d = in.dims() - 1; d >= 0; --d) {
    if ((*reduced)[d]) {
      count *= in.dim_size(d);
    } else {
      out_strides[d] = stride;
      stride *= in.dim_size(d);
    }
  }
  // When the reduced dimensions are consecutive: the elements before them
  // (outer) and after them (inner).
  std::optional<std::pair<int64_t, int64_t>> reduced_run;
  {
    int first = -1, last = -1;
    for (int d = 0; d < in.dims(); ++d) {
      if (!(*reduced)[d]) continue;
      if (first < 0) first = d;
      last = d;
    }
    bool consecutive = true;
    for (int d = first; first >= 0 && d <= last; ++d) {
      consecutive = consecutive && (*reduced)[d];
    }
    if (consecutive) {
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < in.dims(); ++d) {
        if (first >= 0 && d < first) outer *= in.dim_size(d);
        if (first < 0 || d > last) inner *= in.dim_size(d);
      }
      reduced_run.emplace(outer, inner);
    }
  }
  return VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsNumeric<T>) {
      return UnsupportedDType(ctx, x.dtype());
    } else {
      Tensor out = Tensor::Allocate(
          x.dtype(), kernels::ReducedShape(in, *reduced, keep_dims));
      auto acc = out.mutable_flat<T>();
      for (T& v : acc) v = Reducer::template Init<T>();
      const T* values = x.flat<T>().data();
      if (reduced_run.has_value()) {
        // The reduced dimensions are one run: the input is [outer, count,
        // inner] and the output [outer, inner], walked in order (a bias
        // gradient sums over the batch, dimension 0, every step).
        const auto [outer, inner] = *reduced_run;
        for (int64_t o = 0; o < outer; ++o) {
          T* row = acc.data() + o * inner;
          for (int64_t k = 0; k < count; ++k) {
            const T* in_row = values + (o * count + k) * inner;
            for (int64_t i = 0; i < inner; ++i) {
              row[i] = Reducer::Step(row[i], in_row[i]);
            }
          }
        }
      } else {
        const kernels::Strides in_strides = kernels::ContiguousStrides(in);
        ForEachStrided(in.dim_sizes(), in_strides, out_strides,
                       [&](int64_t, int64_t i, int64_t o) {
                         acc[o] = Reducer::Step(acc[o], values[i]);
                       });
      }
      for (T& v : acc) v = Reducer::Finish(v, count);
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- Softmax ----

absl::Status SoftmaxShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kFloatingDTypes));
  if (c.input_shape(0).dims() == 0) {
    return absl::InvalidArgumentError(
        "logits must have rank >= 1, got a scalar");
  }
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

absl::Status SoftmaxKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.shape().dims() < 1) {
    return KernelError(ctx, "logits must have rank >= 1, got a scalar");
  }
  return VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsFloating<T>) {
      return UnsupportedDType(ctx, x.dtype());
    } else {
      Tensor out = Tensor::AllocateWithShapeOf(x.dtype(), x);
      const int64_t cols = x.shape().dim_size(x.shape().dims() - 1);
      if (x.NumElements() > 0) {
        const int64_t rows = x.NumElements() / cols;
        Eigen::Map<const EigenMatrix<T>> logits(x.flat<T>().data(), rows, cols);
        Eigen::Map<EigenMatrix<T>> probs(out.mutable_flat<T>().data(), rows,
                                         cols);
        for (int64_t r = 0; r < rows; ++r) {
          // Subtracting the row's max keeps exp() from overflowing.
          const T max = logits.row(r).maxCoeff();
          probs.row(r) = (logits.row(r).array() - max).exp().matrix();
          probs.row(r) /= probs.row(r).sum();
        }
      }
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

// ---- Cast ----

// Float to integer truncates toward zero and saturates (NaN becomes 0), so
// that no input is undefined behaviour. Anything to bool is "!= 0".
template <typename To, typename From>
To CastValue(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From{0};
  } else if constexpr (std::is_integral_v<To> && kIsFloating<From>) {
    if (std::isnan(v)) return To{0};
    if (v <= static_cast<From>(std::numeric_limits<To>::lowest())) {
      return std::numeric_limits<To>::lowest();
    }
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) {
      return std::numeric_limits<To>::max();
    }
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

absl::Status CastShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_ASSIGN_OR_RETURN(DType dtype, c.attr<DType>("dtype"));
  c.AddOutput(dtype, c.input_shape(0));
  return absl::OkStatus();
}

absl::Status CastKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType to = ctx.node().attr<DType>("dtype");
  if (to == x.dtype()) {
    ctx.set_output(0, x);
    return absl::OkStatus();
  }
  Tensor out = Tensor::AllocateWithShapeOf(to, x);
  VisitDType(x.dtype(), [&]<typename From>() {
    VisitDType(to, [&]<typename To>() {
      auto in = x.flat<From>();
      auto result = out.mutable_flat<To>();
      for (size_t i = 0; i < in.size(); ++i) {
        result[i] = CastValue<To, From>(in[i]);
      }
    });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// ---- ArgMax ----

absl::Status ArgMaxShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kNumericDTypes));
  COSESSION_ASSIGN_OR_RETURN(int64_t axis, c.attr<int64_t>("axis"));
  const TensorShape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    c.AddOutput(DType::kInt64, TensorShape::Unknown());
    return absl::OkStatus();
  }
  COSESSION_ASSIGN_OR_RETURN(int d, kernels::NormalizeAxis(axis, in.dims()));
  if (in.dim_size(d) == 0) {
    return absl::InvalidArgumentError("ArgMax over an empty dimension");
  }
  absl::InlinedVector<bool, 6> reduced(in.dims(), false);
  reduced[d] = true;
  c.AddOutput(DType::kInt64, kernels::ReducedShape(in, reduced, false));
  return absl::OkStatus();
}

absl::Status ArgMaxKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TensorShape& in = x.shape();
  absl::StatusOr<int> axis =
      kernels::NormalizeAxis(ctx.node().attr<int64_t>("axis"), in.dims());
  if (!axis.ok()) return KernelError(ctx, axis.status().message());
  const int64_t n = in.dim_size(*axis);
  if (n == 0) return KernelError(ctx, "ArgMax over an empty dimension");
  // View x as [outer, n, inner].
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < *axis; ++d) outer *= in.dim_size(d);
  for (int d = *axis + 1; d < in.dims(); ++d) inner *= in.dim_size(d);
  absl::InlinedVector<bool, 6> reduced(in.dims(), false);
  reduced[*axis] = true;
  Tensor out = Tensor::Allocate(DType::kInt64,
                                kernels::ReducedShape(in, reduced, false));
  auto result = out.mutable_flat<int64_t>();
  absl::Status status =
      VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
        if constexpr (!kIsNumeric<T>) {
          return UnsupportedDType(ctx, x.dtype());
        } else {
          const T* values = x.flat<T>().data();
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t i = 0; i < inner; ++i) {
              const T* base = values + o * n * inner + i;
              int64_t best = 0;
              for (int64_t k = 1; k < n; ++k) {
                if (base[k * inner] > base[best * inner]) best = k;
              }
              result[o * inner + i] = best;
            }
          }
          return absl::OkStatus();
        }
      });
  COSESSION_RETURN_IF_ERROR(status);
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// ---- IsFinite, CheckNumerics ----

absl::Status IsFiniteShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(ExpectDType(c, 0, kFloatingDTypes));
  c.AddOutput(DType::kBool, c.input_shape(0));
  return absl::OkStatus();
}

absl::Status IsFiniteKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  return VisitDType(x.dtype(), [&]<typename T>() -> absl::Status {
    if constexpr (!kIsFloating<T>) {
      return UnsupportedDType(ctx, x.dtype());
    } else {
      Tensor out = Tensor::AllocateWithShapeOf(DType::kBool, x);
      auto in = x.flat<T>();
      auto result = out.mutable_flat<bool>();
      for (size_t i = 0; i < in.size(); ++i) result[i] = std::isfinite(in[i]);
      ctx.set_output(0, std::move(out));
      return absl::OkStatus();
    }
  });
}

absl::Status CheckNumericsShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(1, 1));
  COSESSION_RETURN_IF_ERROR(c.attr<std::string>("message").status());
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

absl::Status CheckNumericsKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool has_nan = false, has_inf = false;
  VisitDType(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloating<T>) {
      for (T v : x.flat<T>()) {
        has_nan |= std::isnan(v);
        has_inf |= std::isinf(v);
      }
    }
  });
  if (has_nan || has_inf) {
    const char* what = has_nan && has_inf ? "Inf and NaN"
                       : has_nan          ? "NaN"
                                          : "Inf";
    return KernelError(ctx,
                       absl::StrCat(ctx.node().attr<std::string>("message"),
                                    " : Tensor had ", what, " values"));
  }
  ctx.set_output(0, x);
  return absl::OkStatus();
}

// ---- Builders' helpers ----

Output AddUnary(Graph& g, const char* op, Output x, std::string name) {
  return Output(g.AddNode({op, std::move(name), {x}, {}, {}}), 0);
}

Output AddBinary(Graph& g, const char* op, Output x, Output y,
                 std::string name) {
  return Output(g.AddNode({op, std::move(name), {x, y}, {}, {}}), 0);
}

Output AddReduction(Graph& g, const char* op, Output x,
                    std::vector<int64_t> axes, bool keep_dims,
                    std::string name) {
  NodeSpec spec{op, std::move(name), {x}, {}, {}};
  spec.attrs["axes"] = std::move(axes);
  spec.attrs["keep_dims"] = keep_dims;
  return Output(g.AddNode(std::move(spec)), 0);
}

}  // namespace

void RegisterMathOps(OpRegistry& r) {
  using kernels::BroadcastElementsCost;
  using kernels::FirstInputElementsCost;
  using kernels::SyncOpDef;
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };

  must(r.Register(SyncOpDef("Add", ArithmeticShape, BinaryKernel<AddFn>,
                            BroadcastElementsCost)));
  must(r.Register(SyncOpDef("Sub", ArithmeticShape, BinaryKernel<SubFn>,
                            BroadcastElementsCost)));
  must(r.Register(SyncOpDef("Mul", ArithmeticShape, BinaryKernel<MulFn>,
                            BroadcastElementsCost)));
  must(r.Register(
      SyncOpDef("Div", ArithmeticShape, DivKernel, BroadcastElementsCost)));
  must(r.Register(SyncOpDef("Maximum", ArithmeticShape, BinaryKernel<MaximumFn>,
                            BroadcastElementsCost)));
  must(r.Register(SyncOpDef("Equal", ComparisonShape,
                            BinaryKernel<EqualFn, /*kBoolOutput=*/true>,
                            BroadcastElementsCost)));

  must(r.Register(SyncOpDef("Neg", UnaryShape<NegOp>, UnaryKernel<NegOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Square", UnaryShape<SquareOp>,
                            UnaryKernel<SquareOp>, FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Sqrt", UnaryShape<SqrtOp>, UnaryKernel<SqrtOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Exp", UnaryShape<ExpOp>, UnaryKernel<ExpOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Log", UnaryShape<LogOp>, UnaryKernel<LogOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Relu", UnaryShape<ReluOp>, UnaryKernel<ReluOp>,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Sigmoid", UnaryShape<SigmoidOp>,
                            UnaryKernel<SigmoidOp>, FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Tanh", UnaryShape<TanhOp>, UnaryKernel<TanhOp>,
                            FirstInputElementsCost)));

  must(r.Register(
      SyncOpDef("AddN", AddNShape, AddNKernel, kernels::AllInputElementsCost)));

  must(r.Register(SyncOpDef("Sum", ReductionShape, ReductionKernel<SumReducer>,
                            FirstInputElementsCost)));
  must(
      r.Register(SyncOpDef("Mean", ReductionShape, ReductionKernel<MeanReducer>,
                           FirstInputElementsCost)));
  must(r.Register(SyncOpDef("Max", ReductionShape, ReductionKernel<MaxReducer>,
                            FirstInputElementsCost)));

  must(r.Register(SyncOpDef("Softmax", SoftmaxShape, SoftmaxKernel,
                            FirstInputElementsCost)));
  must(r.Register(
      SyncOpDef("Cast", CastShape, CastKernel, FirstInputElementsCost)));
  must(r.Register(
      SyncOpDef("ArgMax", ArgMaxShape, ArgMaxKernel, FirstInputElementsCost)));
  must(r.Register(SyncOpDef("IsFinite", IsFiniteShape, IsFiniteKernel,
                            FirstInputElementsCost)));
  must(r.Register(SyncOpDef("CheckNumerics", CheckNumericsShape,
                            CheckNumericsKernel, FirstInputElementsCost)));
}

namespace ops {

Output Add(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Add", x, y, std::move(name));
}
Output Sub(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Sub", x, y, std::move(name));
}
Output Mul(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Mul", x, y, std::move(name));
}
Output Div(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Div", x, y, std::move(name));
}
Output Maximum(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Maximum", x, y, std::move(name));
}
Output Equal(Graph& g, Output x, Output y, std::string name) {
  return AddBinary(g, "Equal", x, y, std::move(name));
}

Output Neg(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Neg", x, std::move(name));
}
Output Square(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Square", x, std::move(name));
}
Output Sqrt(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Sqrt", x, std::move(name));
}
Output Exp(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Exp", x, std::move(name));
}
Output Log(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Log", x, std::move(name));
}
Output Relu(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Relu", x, std::move(name));
}
Output Sigmoid(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Sigmoid", x, std::move(name));
}
Output Tanh(Graph& g, Output x, std::string name) {
  return AddUnary(g, "Tanh", x, std::move(name));
}
Output Softmax(Graph& g, Output logits, std::string name) {
  return AddUnary(g, "Softmax", logits, std::move(name));
}
Output IsFinite(Graph& g, Output x, std::string name) {
  return AddUnary(g, "IsFinite", x, std::move(name));
}

Output AddN(Graph& g, std::vector<Output> inputs, std::string name) {
  return Output(g.AddNode({"AddN", std::move(name), std::move(inputs), {}, {}}),
                0);
}

Output MatMul(Graph& g, Output a, Output b, bool transpose_a, bool transpose_b,
              std::string name) {
  NodeSpec spec{"MatMul", std::move(name), {a, b}, {}, {}};
  spec.attrs["transpose_a"] = transpose_a;
  spec.attrs["transpose_b"] = transpose_b;
  return Output(g.AddNode(std::move(spec)), 0);
}

Output Sum(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
           std::string name) {
  return AddReduction(g, "Sum", x, std::move(axes), keep_dims, std::move(name));
}
Output Mean(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
            std::string name) {
  return AddReduction(g, "Mean", x, std::move(axes), keep_dims,
                      std::move(name));
}
Output Max(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
           std::string name) {
  return AddReduction(g, "Max", x, std::move(axes), keep_dims, std::move(name));
}

Output Cast(Graph& g, Output x, DType dtype, std::string name) {
  NodeSpec spec{"Cast", std::move(name), {x}, {}, {}};
  spec.attrs["dtype"] = dtype;
  return Output(g.AddNode(std::move(spec)), 0);
}

Output ArgMax(Graph& g, Output x, int64_t axis, std::string name) {
  NodeSpec spec{"ArgMax", std::move(name), {x}, {}, {}};
  spec.attrs["axis"] = axis;
  return Output(g.AddNode(std::move(spec)), 0);
}

Output CheckNumerics(Graph& g, Output x, std::string message,
                     std::string name) {
  NodeSpec spec{"CheckNumerics", std::move(name), {x}, {}, {}};
  spec.attrs["message"] = std::move(message);
  return Output(g.AddNode(std::move(spec)), 0);
}

}  // namespace ops
}  // namespace cosession
