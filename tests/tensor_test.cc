// Tests of Tensor and TensorShape: construction, buffer sharing, access
// checks, comparison, debug strings, and snapshot semantics of variable reads.
#include "cosession/graph/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor_shape.h"
#include "tests/test_util.h"

namespace cosession::tensor_test {
namespace {

using ::cosession::testing::StatusThrownBy;

// ---------------------------------------------------------------- TensorShape

TEST(TensorShape, DebugStringOfAKnownShapeListsTheDims) {
  EXPECT_EQ(TensorShape({2, 3}).DebugString(), "[2,3]");
}

TEST(TensorShape, DebugStringShowsUnknownDimsAsQuestionMarks) {
  EXPECT_EQ(TensorShape({kUnknownDim, 3}).DebugString(), "[?,3]");
}

TEST(TensorShape, DebugStringOfUnknownRankIsUnknown) {
  EXPECT_EQ(TensorShape::Unknown().DebugString(), "<unknown>");
}

TEST(TensorShape, DebugStringOfAScalarIsEmptyBrackets) {
  EXPECT_EQ(TensorShape().DebugString(), "[]");
}

TEST(TensorShape, UnknownRankHasRankMinusOne) {
  TensorShape shape = TensorShape::Unknown();
  EXPECT_TRUE(shape.unknown_rank());
  EXPECT_EQ(shape.dims(), -1);
  EXPECT_FALSE(shape.IsFullyDefined());
  EXPECT_EQ(TensorShape({4, 5}).dims(), 2);
}

TEST(TensorShape, NumElementsOfAScalarIsOne) {
  EXPECT_EQ(TensorShape().num_elements(), 1);
}

TEST(TensorShape, NumElementsIsTheProductOfTheDims) {
  EXPECT_EQ(TensorShape({2, 3, 4}).num_elements(), 24);
  EXPECT_EQ(TensorShape({0, 3}).num_elements(), 0);
}

TEST(TensorShape, NumElementsOfAPartialShapeIsMinusOne) {
  EXPECT_EQ(TensorShape({kUnknownDim, 3}).num_elements(), -1);
  EXPECT_EQ(TensorShape::Unknown().num_elements(), -1);
}

TEST(TensorShape, UnknownDimsAreCompatibleWithAnySize) {
  TensorShape partial{kUnknownDim, 3};
  EXPECT_TRUE(partial.IsCompatibleWith(TensorShape{5, 3}));
  EXPECT_TRUE(TensorShape({5, 3}).IsCompatibleWith(partial));
  EXPECT_TRUE(partial.IsCompatibleWith(TensorShape{kUnknownDim, kUnknownDim}));
  EXPECT_FALSE(partial.IsCompatibleWith(TensorShape{5, 4}));
}

TEST(TensorShape, UnknownRankIsCompatibleWithEveryShape) {
  TensorShape unknown = TensorShape::Unknown();
  EXPECT_TRUE(unknown.IsCompatibleWith(TensorShape{}));
  EXPECT_TRUE(unknown.IsCompatibleWith(TensorShape{2, 3, 4}));
  EXPECT_TRUE(TensorShape({7}).IsCompatibleWith(unknown));
  EXPECT_TRUE(unknown.IsCompatibleWith(TensorShape::Unknown()));
}

TEST(TensorShape, DifferentRanksAreIncompatible) {
  EXPECT_FALSE(TensorShape({3}).IsCompatibleWith(TensorShape{3, 1}));
  EXPECT_FALSE(TensorShape({kUnknownDim}).IsCompatibleWith(TensorShape{}));
}

TEST(TensorShape, ValidateAcceptsKnownAndUnknownDims) {
  EXPECT_TRUE(TensorShape({0, kUnknownDim, 5}).Validate().ok());
  EXPECT_TRUE(TensorShape::Unknown().Validate().ok());
}

TEST(TensorShape, ValidateRejectsDimsBelowMinusOne) {
  absl::Status status = TensorShape({3, -2}).Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "-2")) << status;
}

TEST(TensorShape, ValidateRejectsAnElementCountThatOverflows) {
  const int64_t big = int64_t{1} << 32;
  absl::Status status = TensorShape({big, big}).Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorShape, EqualityComparesRankAndDims) {
  EXPECT_EQ(TensorShape({2, 3}), TensorShape({2, 3}));
  EXPECT_NE(TensorShape({2, 3}), TensorShape({3, 2}));
  EXPECT_NE(TensorShape(), TensorShape::Unknown());
}

// --------------------------------------------------------------------- Tensor

TEST(Tensor, ScalarHoldsItsValue) {
  Tensor t = Tensor::Scalar<float>(2.5f);
  EXPECT_EQ(t.dtype(), DType::kFloat);
  EXPECT_EQ(t.shape(), TensorShape());
  EXPECT_EQ(t.NumElements(), 1);
  EXPECT_EQ(t.scalar<float>(), 2.5f);

  Tensor i = Tensor::Scalar<int64_t>(-7);
  EXPECT_EQ(i.dtype(), DType::kInt64);
  EXPECT_EQ(i.scalar<int64_t>(), -7);
}

TEST(Tensor, FromVectorHoldsTheValuesInRowMajorOrder) {
  Tensor t = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, TensorShape{2, 3});
  EXPECT_EQ(t.dtype(), DType::kInt32);
  EXPECT_EQ(t.shape(), TensorShape({2, 3}));
  auto values = t.flat<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(values.begin(), values.end()),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
}

TEST(Tensor, FromVectorWithoutShapeIsRankOne) {
  Tensor t = Tensor::FromVector<double>({1.5, 2.5, 3.5});
  EXPECT_EQ(t.shape(), TensorShape({3}));
  EXPECT_EQ(t.flat<double>()[2], 3.5);
}

TEST(Tensor, FromVectorWithWrongElementCountThrowsInvalidArgument) {
  absl::Status status = StatusThrownBy([] {
    Tensor::FromVector<float>({1, 2, 3}, TensorShape{2, 2});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[2,2]")) << status;
}

TEST(Tensor, ConstructorZeroFills) {
  for (DType dtype : {DType::kFloat, DType::kDouble, DType::kInt32,
                      DType::kInt64, DType::kBool}) {
    // Dirty the allocator's free lists first so zeroes are not an accident.
    {
      Tensor dirty = Tensor::Allocate(dtype, TensorShape{7, 5});
      auto* bytes = static_cast<unsigned char*>(dirty.raw_data());
      for (size_t i = 0; i < dirty.TotalBytes(); ++i) bytes[i] = 0x5A;
    }
    Tensor t(dtype, TensorShape{7, 5});
    ASSERT_TRUE(t.IsInitialized());
    ASSERT_EQ(t.TotalBytes(), 35 * DTypeSize(dtype));
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.TotalBytes(); ++i) {
      ASSERT_EQ(bytes[i], 0) << DTypeName(dtype) << " byte " << i;
    }
  }
}

TEST(Tensor, CopiesShareTheBuffer) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3});
  Tensor b = a;
  Tensor c;
  c = a;
  EXPECT_TRUE(b.SharesBufferWith(a));
  EXPECT_TRUE(c.SharesBufferWith(a));
  EXPECT_EQ(b.raw_data(), a.raw_data());
}

TEST(Tensor, CopyKeepsTheBufferAliveAfterTheOriginalIsGone) {
  Tensor copy;
  {
    Tensor original = Tensor::FromVector<int64_t>({10, 20, 30});
    copy = original;
  }
  EXPECT_EQ(copy.flat<int64_t>()[0], 10);
  EXPECT_EQ(copy.flat<int64_t>()[2], 30);
}

TEST(Tensor, MoveTransfersTheBuffer) {
  Tensor a = Tensor::FromVector<float>({1, 2});
  const void* data = a.raw_data();
  Tensor b = std::move(a);
  EXPECT_EQ(b.raw_data(), data);
  EXPECT_EQ(b.flat<float>()[1], 2.0f);
}

TEST(Tensor, CloneHasItsOwnBufferWithEqualValues) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3});
  Tensor b = a.Clone();
  EXPECT_FALSE(b.SharesBufferWith(a));
  EXPECT_NE(b.raw_data(), a.raw_data());
  EXPECT_TRUE(b.IsSameAs(a));
  b.mutable_flat<float>()[0] = 100;
  EXPECT_EQ(a.flat<float>()[0], 1.0f);
}

TEST(Tensor, ScalarWithTheWrongDTypeThrows) {
  Tensor t = Tensor::Scalar<float>(1.0f);
  absl::Status status = StatusThrownBy([&] { (void)t.scalar<int32_t>(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "float")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "int32")) << status;
}

TEST(Tensor, FlatWithTheWrongDTypeThrows) {
  Tensor t = Tensor::FromVector<int64_t>({1, 2});
  absl::Status status = StatusThrownBy([&] { (void)t.flat<int32_t>(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, ScalarOnANonScalarThrows) {
  Tensor t = Tensor::FromVector<float>({1, 2});
  absl::Status status = StatusThrownBy([&] { (void)t.scalar<float>(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[2]")) << status;
}

TEST(Tensor, ScalarOfAOneElementTensorOfHigherRankWorks) {
  Tensor t = Tensor::FromVector<int32_t>({42}, TensorShape{1, 1});
  EXPECT_EQ(t.scalar<int32_t>(), 42);
}

TEST(Tensor, ReshapedSharesTheBuffer) {
  Tensor a = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, TensorShape{2, 3});
  Tensor b = a.Reshaped(TensorShape{3, 2});
  EXPECT_EQ(b.shape(), TensorShape({3, 2}));
  EXPECT_TRUE(b.SharesBufferWith(a));
  EXPECT_EQ(b.flat<int32_t>()[5], 6);
  EXPECT_EQ(a.shape(), TensorShape({2, 3}));
}

TEST(Tensor, ReshapedToAnotherElementCountThrows) {
  Tensor a = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6});
  absl::Status status = StatusThrownBy([&] { a.Reshaped(TensorShape{4, 2}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[4,2]")) << status;
}

TEST(Tensor, ReshapedToAPartialShapeThrows) {
  Tensor a = Tensor::FromVector<int32_t>({1, 2, 3, 4});
  absl::Status status = StatusThrownBy([&] {
    a.Reshaped(TensorShape{kUnknownDim, 2});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, BufferIs64ByteAligned) {
  for (int64_t n : {1, 2, 3, 7, 16, 17, 63, 64, 65, 1000, 4099}) {
    for (DType dtype : {DType::kBool, DType::kFloat, DType::kDouble}) {
      Tensor t(dtype, TensorShape{n});
      ASSERT_NE(t.raw_data(), nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u)
          << DTypeName(dtype) << " [" << n << "]";
      Tensor u = Tensor::Allocate(dtype, TensorShape{n});
      EXPECT_EQ(reinterpret_cast<uintptr_t>(u.raw_data()) % 64, 0u)
          << "Allocate " << DTypeName(dtype) << " [" << n << "]";
    }
  }
  Tensor s = Tensor::Scalar<bool>(true);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.raw_data()) % 64, 0u);
}

TEST(Tensor, EmptyTensorHasNoElementsAndIsInitialized) {
  Tensor t(DType::kFloat, TensorShape{0, 3});
  EXPECT_EQ(t.NumElements(), 0);
  EXPECT_EQ(t.TotalBytes(), 0u);
  EXPECT_TRUE(t.IsInitialized());
  EXPECT_EQ(t.shape(), TensorShape({0, 3}));
  EXPECT_TRUE(t.flat<float>().empty());
}

TEST(Tensor, DefaultTensorIsNotInitialized) {
  Tensor t;
  EXPECT_FALSE(t.IsInitialized());
  EXPECT_EQ(t.dtype(), DType::kFloat);
  EXPECT_EQ(t.shape(), TensorShape());
  EXPECT_EQ(t.raw_data(), nullptr);
}

TEST(Tensor, ReadingADefaultTensorThrowsFailedPrecondition) {
  Tensor t;
  absl::Status status = StatusThrownBy([&] { (void)t.scalar<float>(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Tensor, ConstructingWithAnUnknownDimThrows) {
  absl::Status status = StatusThrownBy([] {
    Tensor t(DType::kFloat, TensorShape{kUnknownDim, 3});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "[?,3]")) << status;
}

TEST(Tensor, ConstructingWithAnUnknownRankThrows) {
  absl::Status status =
      StatusThrownBy([] { Tensor t(DType::kInt32, TensorShape::Unknown()); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, ConstructingWithAnOverflowingShapeThrows) {
  const int64_t big = int64_t{1} << 32;
  absl::Status status = StatusThrownBy([&] {
    Tensor t(DType::kFloat, TensorShape{big, big});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, ConstructingAboveTwoToThe48BytesThrowsNamingTheShape) {
  // 2^46 + 1 floats: the element count fits, the byte count does not.
  const int64_t elements = (int64_t{1} << 46) + 1;
  absl::Status status =
      StatusThrownBy([&] { Tensor t(DType::kFloat, TensorShape{elements}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "too large")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), std::to_string(elements)))
      << status;
  // An element count times the element size that wraps around int64.
  status = StatusThrownBy([] {
    Tensor t(DType::kDouble, TensorShape{int64_t{1} << 61, 2});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, IsSameAsIsTrueForEqualValues) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2});
  Tensor b = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2});
  EXPECT_FALSE(a.SharesBufferWith(b));
  EXPECT_TRUE(a.IsSameAs(b));
  EXPECT_TRUE(b.IsSameAs(a));
}

TEST(Tensor, IsSameAsIsFalseForADifferentDType) {
  Tensor a = Tensor::FromVector<int32_t>({0, 0});
  Tensor b = Tensor::FromVector<float>({0, 0});
  EXPECT_FALSE(a.IsSameAs(b));
  EXPECT_FALSE(b.IsSameAs(a));
}

TEST(Tensor, IsSameAsIsFalseForADifferentShape) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2});
  Tensor b = Tensor::FromVector<float>({1, 2, 3, 4});
  EXPECT_FALSE(a.IsSameAs(b));
  EXPECT_TRUE(a.IsSameAs(b.Reshaped(TensorShape{2, 2})));
}

TEST(Tensor, IsSameAsIsFalseForADifferentValue) {
  Tensor a = Tensor::FromVector<double>({1, 2, 3});
  Tensor b = Tensor::FromVector<double>({1, 2, 3.0000001});
  EXPECT_FALSE(a.IsSameAs(b));
  Tensor c = Tensor::FromVector<bool>({true, false});
  Tensor d = Tensor::FromVector<bool>({true, true});
  EXPECT_FALSE(c.IsSameAs(d));
  EXPECT_TRUE(c.IsSameAs(Tensor::FromVector<bool>({true, false})));
}

TEST(Tensor, IsSameAsTreatsNaNsAtTheSamePositionAsEqual) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::FromVector<float>({1, nan, 3});
  Tensor b = Tensor::FromVector<float>({1, nan, 3});
  EXPECT_TRUE(a.IsSameAs(b));
  Tensor c = Tensor::FromVector<float>({nan, 1, 3});
  EXPECT_FALSE(a.IsSameAs(c));
}

TEST(Tensor, IsSameAsComparesEmptyTensorsByShape) {
  Tensor a(DType::kFloat, TensorShape{0, 3});
  EXPECT_TRUE(a.IsSameAs(Tensor(DType::kFloat, TensorShape{0, 3})));
  EXPECT_FALSE(a.IsSameAs(Tensor(DType::kFloat, TensorShape{3, 0})));
}

TEST(Tensor, DebugStringShowsDTypeShapeAndValues) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2});
  EXPECT_EQ(t.DebugString(), "Tensor<float [2,2]: 1 2 3 4>");
  EXPECT_EQ(Tensor::Scalar<int64_t>(-3).DebugString(), "Tensor<int64 []: -3>");
  EXPECT_EQ(Tensor::FromVector<bool>({true, false}).DebugString(),
            "Tensor<bool [2]: true false>");
}

TEST(Tensor, DebugStringTruncatesWithAnEllipsis) {
  std::vector<int32_t> values(20);
  for (int i = 0; i < 20; ++i) values[i] = i;
  Tensor t = Tensor::FromVector(values);
  EXPECT_EQ(t.DebugString(3), "Tensor<int32 [20]: 0 1 2 ...>");
  const std::string by_default = t.DebugString();
  EXPECT_TRUE(absl::EndsWith(by_default, " 14 15 ...>")) << by_default;
  EXPECT_FALSE(absl::StrContains(by_default, " 16")) << by_default;
  EXPECT_EQ(Tensor::FromVector<int32_t>({1, 2, 3}).DebugString(3),
            "Tensor<int32 [3]: 1 2 3>");
}

TEST(Tensor, DebugStringOfADefaultTensorSaysUninitialised) {
  EXPECT_EQ(Tensor().DebugString(), "Tensor<float []: uninitialised>");
}

TEST(Tensor, SnapshotReadFromAVariableIsUnchangedByALaterAssignAdd) {
  Graph graph;
  Output v = ops::Variable(graph, Tensor::FromVector<float>({1, 2, 3}), "v");
  Output add = ops::AssignAdd(
      graph, v, ops::Const(graph, Tensor::FromVector<float>({10, 20, 30})));
  Operation init = GlobalVariablesInitializer(graph);
  graph.Finalize();

  Session session(graph, cosession::testing::TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  auto before = session.RunBlocking({.fetches = {v}});
  ASSERT_TRUE(before.ok()) << before.status();
  auto updated = session.RunBlocking({.fetches = {add}});
  ASSERT_TRUE(updated.ok()) << updated.status();
  auto after = session.RunBlocking({.fetches = {v}});
  ASSERT_TRUE(after.ok()) << after.status();

  EXPECT_TRUE((*before)[0].IsSameAs(Tensor::FromVector<float>({1, 2, 3})))
      << (*before)[0].DebugString();
  EXPECT_TRUE((*updated)[0].IsSameAs(Tensor::FromVector<float>({11, 22, 33})))
      << (*updated)[0].DebugString();
  EXPECT_TRUE((*after)[0].IsSameAs(Tensor::FromVector<float>({11, 22, 33})))
      << (*after)[0].DebugString();
  EXPECT_FALSE((*before)[0].SharesBufferWith((*after)[0]));
}

// What making a tensor of `shape` throws ("" when it succeeds).
std::string ErrorMaking(const TensorShape& shape, DType dtype = DType::kFloat) {
  try {
    Tensor t(dtype, shape);
    return "";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(e.status().message());
  }
}

TEST(Tensor, AShapeThatIsNotAUsualOneIsRefusedNamingWhatIsWrong) {
  constexpr int64_t kBig = int64_t{1} << 40;
  EXPECT_EQ(ErrorMaking(TensorShape{2, -1}),
            "A tensor needs a fully defined shape, got [2,?]");
  EXPECT_EQ(ErrorMaking(TensorShape::Unknown()),
            "A tensor needs a fully defined shape, got <unknown>");
  EXPECT_TRUE(absl::StrContains(ErrorMaking(TensorShape{3, -5}),
                                "fully defined shape"));
  EXPECT_EQ(ErrorMaking(TensorShape{kBig, kBig}),
            "Shape [1099511627776,1099511627776] has too many elements");
  EXPECT_TRUE(absl::StrContains(ErrorMaking(TensorShape{kBig, 1 << 10}),
                                "is too large"));
  // Usual shapes, zero elements included.
  EXPECT_EQ(ErrorMaking(TensorShape{0, kBig}), "");
  EXPECT_EQ(Tensor(DType::kFloat, TensorShape{0, kBig}).NumElements(), 0);
  EXPECT_EQ(Tensor(DType::kInt64, TensorShape{3, 1, 4}).NumElements(), 12);
  EXPECT_EQ(Tensor(DType::kInt64, TensorShape{}).NumElements(), 1);
}

}  // namespace
}  // namespace cosession::tensor_test
