// Tests of the math, array and random ops: the values each kernel computes
// (checked against hand-computed results), broadcasting, dtypes, empty
// tensors, build-time shape and dtype checks, run-time errors, seeding of the
// random ops and the cost estimates the executor schedules by.
#include "cosession/graph/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/resource_manager.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor.h"
#include "tests/test_util.h"

namespace cosession::ops_test {
namespace {

using testing::CostOf;

using ::cosession::testing::StatusThrownBy;

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T>
Tensor T2(std::vector<T> values, TensorShape shape) {
  return Tensor::FromVector<T>(values, std::move(shape));
}

template <typename T>
Output ConstOf(Graph& g, std::vector<T> values, TensorShape shape) {
  return ops::Const(g, Tensor::FromVector<T>(values, std::move(shape)));
}

// The value of `fetch`, or an uninitialised-looking empty tensor after
// recording a failure.
Tensor EvalOk(Graph& g, Output fetch,
              std::vector<std::pair<Output, Tensor>> feeds = {}) {
  absl::StatusOr<Tensor> value = testing::EvalOne(g, fetch, std::move(feeds));
  if (!value.ok()) {
    ADD_FAILURE() << "evaluating " << fetch.name() << ": " << value.status();
    return Tensor();
  }
  return *std::move(value);
}

// The error of evaluating `fetch` (OK after recording a failure when the run
// succeeded).
absl::Status EvalError(Graph& g, Output fetch,
                       std::vector<std::pair<Output, Tensor>> feeds = {}) {
  absl::StatusOr<Tensor> value = testing::EvalOne(g, fetch, std::move(feeds));
  if (value.ok()) {
    ADD_FAILURE() << "evaluating " << fetch.name() << " succeeded with "
                  << value->DebugString();
    return absl::OkStatus();
  }
  return value.status();
}

AssertionResult MessageContains(const absl::Status& status,
                                std::string_view part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return AssertionSuccess();
  }
  return AssertionFailure()
         << "'" << status.message() << "' lacks '" << part << "'";
}

// `t` has dtype T, shape `shape` and the values `want` (floats within
// `tolerance`, relative for large values; NaN matches NaN).
template <typename T>
AssertionResult HasValues(const Tensor& t, TensorShape shape,
                          std::vector<T> want, double tolerance = 1e-6) {
  if (t.dtype() != kDTypeOf<T>) {
    return AssertionFailure() << "dtype " << DTypeName(t.dtype()) << ", want "
                              << DTypeName(kDTypeOf<T>);
  }
  if (t.shape() != shape) {
    return AssertionFailure() << "shape " << t.shape().DebugString()
                              << ", want " << shape.DebugString();
  }
  auto got = t.flat<T>();
  if (got.size() != want.size()) {
    return AssertionFailure() << got.size() << " values, want " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    bool same;
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) {
        same = std::isnan(got[i]);
      } else if (std::isinf(want[i])) {
        same = got[i] == want[i];
      } else {
        const double scale = std::max(1.0, std::abs(double(want[i])));
        same = std::abs(double(got[i]) - double(want[i])) <= tolerance * scale;
      }
    } else {
      same = got[i] == want[i];
    }
    if (!same) {
      return AssertionFailure()
             << "value " << i << " is " << got[i] << ", want " << want[i]
             << " in " << t.DebugString(32);
    }
  }
  return AssertionSuccess();
}

// ------------------------------------------------------------- broadcasting

TEST(OpsBroadcast, AddsARowVectorToEachRowOfAMatrix) {
  Graph g;
  Output y = ops::Add(g, ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3}),
                      ConstOf<float>(g, {10, 20, 30}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 3}, {11, 22, 33, 14, 25, 36}));
}

TEST(OpsBroadcast, MultipliesAColumnByARowIntoAnOuterProduct) {
  Graph g;
  Output y = ops::Mul(g, ConstOf<float>(g, {2, 3}, {2, 1}),
                      ConstOf<float>(g, {1, 10, 100}, {1, 3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 3}, {2, 20, 200, 3, 30, 300}));
}

TEST(OpsBroadcast, AddsAScalarOnTheLeftToEveryElement) {
  Graph g;
  Output y = ops::Add(g, ops::Const(g, 100.0f),
                      ConstOf<float>(g, {1, 2, 3, 4}, {2, 2}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 2}, {101, 102, 103, 104}));
}

TEST(OpsBroadcast, SubtractsAScalarOnTheRightFromEveryElement) {
  Graph g;
  Output y = ops::Sub(g, ConstOf<int32_t>(g, {1, 2, 3}, {3}),
                      ops::Const(g, int32_t{10}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {3}, {-9, -8, -7}));
}

TEST(OpsBroadcast, StretchesDimensionsOfBothOperandsInRankThree) {
  Graph g;
  // [2,1,3] + [2,1] -> [2,2,3]: out[i][j][k] = a[i][0][k] + b[j][0].
  Output y = ops::Add(g, ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 1, 3}),
                      ConstOf<float>(g, {10, 20}, {2, 1}));
  EXPECT_TRUE(
      HasValues<float>(EvalOk(g, y), {2, 2, 3},
                       {11, 12, 13, 21, 22, 23, 14, 15, 16, 24, 25, 26}));
}

TEST(OpsBroadcast, SubtractsARowOnTheLeftFromEachRowInOperandOrder) {
  Graph g;
  // [3] - [2,3] and [1,3] - [2,3]: the row is the left operand.
  Output row = ConstOf<float>(g, {10, 20, 30}, {3});
  Output matrix = ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, ops::Sub(g, row, matrix)), {2, 3},
                               {9, 18, 27, 6, 15, 24}));
  Output row2d = ConstOf<float>(g, {10, 20, 30}, {1, 3});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, ops::Sub(g, row2d, matrix)), {2, 3},
                               {9, 18, 27, 6, 15, 24}));
}

TEST(OpsBroadcast, SubtractsAColumnFromEachColumnOnEitherSide) {
  Graph g;
  Output matrix = ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  Output column = ConstOf<float>(g, {10, 100}, {2, 1});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, ops::Sub(g, matrix, column)), {2, 3},
                               {-9, -8, -7, -96, -95, -94}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, ops::Sub(g, column, matrix)), {2, 3},
                               {9, 8, 7, 96, 95, 94}));
}

TEST(OpsBroadcast, RepeatsTrailingAndLeadingBlocksInRankThree) {
  Graph g;
  Output cube =
      ConstOf<int32_t>(g, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 2, 3});
  // The last two axes repeated over the first ...
  Output plane = ConstOf<int32_t>(g, {100, 200, 300, 400, 500, 600}, {2, 3});
  EXPECT_TRUE(HasValues<int32_t>(
      EvalOk(g, ops::Add(g, cube, plane)), {2, 2, 3},
      {100, 201, 302, 403, 504, 605, 106, 207, 308, 409, 510, 611}));
  // ... and one value per leading index, over the last two.
  Output leading = ConstOf<int32_t>(g, {1000, 2000}, {2, 1, 1});
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, ops::Add(g, leading, cube)),
                                 {2, 2, 3},
                                 {1000, 1001, 1002, 1003, 1004, 1005, 2006,
                                  2007, 2008, 2009, 2010, 2011}));
  // [2,1,3] against [2,2,3] is neither pattern: the strided path.
  Output middle = ConstOf<int32_t>(g, {1, 2, 3, 4, 5, 6}, {2, 1, 3});
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, ops::Mul(g, cube, middle)),
                                 {2, 2, 3},
                                 {0, 2, 6, 3, 8, 15, 24, 35, 48, 36, 50, 66}));
}

TEST(OpsBroadcast, AddingARowToAnEmptyMatrixGivesAnEmptyMatrix) {
  Graph g;
  Output y = ops::Add(g, ops::Const(g, Tensor(DType::kFloat, {0, 3})),
                      ConstOf<float>(g, {1, 2, 3}, {3}));
  EXPECT_EQ(y.shape(), TensorShape({0, 3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {0, 3}, {}));
}

TEST(OpsBroadcast, InfersPartiallyKnownShapesAtBuildTime) {
  Graph g;
  Output rows = ops::Placeholder(g, DType::kFloat, {kUnknownDim, 3});
  Output column = ops::Placeholder(g, DType::kFloat, {kUnknownDim, 1});
  Output any = ops::Placeholder(g, DType::kFloat);
  EXPECT_EQ(ops::Add(g, rows, ConstOf<float>(g, {1, 2, 3}, {3})).shape(),
            TensorShape({kUnknownDim, 3}));
  EXPECT_EQ(ops::Add(g, column, ConstOf<float>(g, {1, 2}, {1, 2})).shape(),
            TensorShape({kUnknownDim, 2}));
  EXPECT_EQ(ops::Add(g, rows, rows).shape(), TensorShape({kUnknownDim, 3}));
  EXPECT_TRUE(ops::Add(g, rows, any).shape().unknown_rank());
}

TEST(OpsBroadcast, IncompatibleShapesFailAtBuildTimeNamingTheOp) {
  Graph g;
  Output a = ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  Output b = ConstOf<float>(g, {1, 2, 3, 4}, {4});
  absl::Status status = StatusThrownBy([&] { ops::Add(g, a, b, "bad_add"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "bad_add"));
  EXPECT_TRUE(MessageContains(status, "[2,3] vs. [4]"));
}

TEST(OpsBroadcast, IncompatibleFedShapesFailAtRunTimeNamingTheOp) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kFloat);
  Output b = ops::Placeholder(g, DType::kFloat);
  Output y = ops::Add(g, a, b, "fed_add");
  absl::Status status = EvalError(g, y,
                                  {{a, Tensor::FromVector<float>({1, 2})},
                                   {b, Tensor::FromVector<float>({1, 2, 3})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "fed_add"));
  EXPECT_TRUE(MessageContains(status, "Incompatible shapes"));
}

// ---------------------------------------------------------------- arithmetic

TEST(OpsArithmetic, AddsTwoScalars) {
  Graph g;
  Output y = ops::Add(g, ops::Const(g, 2.5), ops::Const(g, 1.25));
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {}, {3.75}));
}

TEST(OpsArithmetic, SubtractsElementwise) {
  Graph g;
  Output y = ops::Sub(g, ConstOf<float>(g, {5, 1, -2}, {3}),
                      ConstOf<float>(g, {2, 4, -2}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {3, -3, 0}));
}

TEST(OpsArithmetic, MultipliesInt64Elementwise) {
  Graph g;
  Output y = ops::Mul(g, ConstOf<int64_t>(g, {3, -4, 1LL << 40}, {3}),
                      ConstOf<int64_t>(g, {7, 5, 4}, {3}));
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {3}, {21, -20, 1LL << 42}));
}

TEST(OpsArithmetic, IntegerDivisionTruncatesTowardZero) {
  Graph g;
  Output y = ops::Div(g, ConstOf<int32_t>(g, {7, -7, 7, -7, 6}, {5}),
                      ConstOf<int32_t>(g, {2, 2, -2, -2, 3}, {5}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {5}, {3, -3, -3, 3, 2}));
}

TEST(OpsArithmetic, FloatDivisionByZeroGivesInfinity) {
  Graph g;
  Output y = ops::Div(g, ConstOf<float>(g, {1, 3, -1}, {3}),
                      ConstOf<float>(g, {2, 4, 0}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {0.5f, 0.75f, -kInf}));
}

TEST(OpsArithmetic, IntegerDivisionByZeroFailsAtRunTimeNamingTheOp) {
  Graph g;
  Output y = ops::Div(g, ConstOf<int32_t>(g, {4, 5}, {2}),
                      ConstOf<int32_t>(g, {2, 0}, {2}), "int_div");
  absl::Status status = EvalError(g, y);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "int_div"));
  EXPECT_TRUE(MessageContains(status, "division by zero"));
}

TEST(OpsArithmetic, MaximumPicksTheLargerElement) {
  Graph g;
  Output y = ops::Maximum(g, ConstOf<float>(g, {-1, 2, 0.5f}, {3}),
                          ops::Const(g, 1.0f));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {1, 2, 1}));
}

TEST(OpsArithmetic, MismatchedDTypesFailAtBuildTimeNamingTheOp) {
  Graph g;
  Output a = ops::Const(g, 1.0f);
  Output b = ops::Const(g, int32_t{1});
  absl::Status status = StatusThrownBy([&] { ops::Add(g, a, b, "mixed"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "'mixed' (Add)"));
  EXPECT_TRUE(MessageContains(status, "int32"));
}

TEST(OpsArithmetic, BoolOperandsFailAtBuildTime) {
  Graph g;
  Output a = ops::Const(g, true);
  absl::Status status = StatusThrownBy([&] { ops::Mul(g, a, a); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "bool"));
}

// -------------------------------------------------------------------- unary

TEST(OpsUnary, NegNegatesInt32) {
  Graph g;
  Output y = ops::Neg(g, ConstOf<int32_t>(g, {1, -2, 0}, {3}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {3}, {-1, 2, 0}));
}

TEST(OpsUnary, SquareSquaresEachElement) {
  Graph g;
  Output y = ops::Square(g, ConstOf<double>(g, {-3, 0.5, 2}, {3}));
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {3}, {9, 0.25, 4}));
}

TEST(OpsUnary, SqrtOfANegativeNumberIsNaN) {
  Graph g;
  Output y = ops::Sqrt(g, ConstOf<float>(g, {4, 2.25f, -1}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {2, 1.5f, kNaN}));
}

TEST(OpsUnary, ExpRaisesEToEachElement) {
  Graph g;
  Output y = ops::Exp(g, ConstOf<double>(g, {0, 1, -1}, {3}));
  EXPECT_TRUE(HasValues<double>(
      EvalOk(g, y), {3}, {1, 2.718281828459045, 0.36787944117144233}, 1e-12));
}

TEST(OpsUnary, LogOfZeroIsMinusInfinity) {
  Graph g;
  Output y = ops::Log(g, ConstOf<float>(g, {1, 2.7182817f, 0}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {0, 1, -kInf}));
}

TEST(OpsUnary, SqrtOfIntegersFailsAtBuildTime) {
  Graph g;
  Output x = ops::Const(g, int32_t{4});
  absl::Status status = StatusThrownBy([&] { ops::Sqrt(g, x); });
  EXPECT_TRUE(MessageContains(status, "(Sqrt)"));
  EXPECT_TRUE(MessageContains(status, "int32"));
}

TEST(OpsUnary, KeepsTheShapeOfAnEmptyTensor) {
  Graph g;
  Output y = ops::Exp(g, ops::Const(g, Tensor(DType::kFloat, {0, 2})));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {0, 2}, {}));
}

// --------------------------------------------------------------------- AddN

TEST(OpsAddN, SumsAllInputs) {
  Graph g;
  Output y = ops::AddN(
      g, {ConstOf<float>(g, {1, 2}, {2}), ConstOf<float>(g, {10, 20}, {2}),
          ConstOf<float>(g, {100, 200}, {2})});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2}, {111, 222}));
}

TEST(OpsAddN, ReturnsASingleInputUnchanged) {
  Graph g;
  Output y = ops::AddN(g, {ConstOf<int64_t>(g, {4, 5}, {2})});
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {2}, {4, 5}));
}

TEST(OpsAddN, MismatchedShapesFailAtBuildTime) {
  Graph g;
  Output a = ConstOf<float>(g, {1, 2}, {2});
  Output b = ConstOf<float>(g, {1, 2, 3}, {3});
  absl::Status status = StatusThrownBy([&] { ops::AddN(g, {a, b}); });
  EXPECT_TRUE(MessageContains(status, "(AddN)"));
}

TEST(OpsAddN, NoInputsFailAtBuildTime) {
  Graph g;
  absl::Status status = StatusThrownBy([&] { ops::AddN(g, {}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------- MatMul

// a = [[1,2,3],[4,5,6]], b = [[7,8],[9,10],[11,12]]: a*b = [[58,64],[139,154]].
TEST(OpsMatMul, MultipliesTwoMatrices) {
  Graph g;
  Output y = ops::MatMul(g, ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3}),
                         ConstOf<float>(g, {7, 8, 9, 10, 11, 12}, {3, 2}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 2}, {58, 64, 139, 154}));
}

TEST(OpsMatMul, TransposesTheFirstOperand) {
  Graph g;
  // a given as its transpose [[1,4],[2,5],[3,6]].
  Output y = ops::MatMul(g, ConstOf<float>(g, {1, 4, 2, 5, 3, 6}, {3, 2}),
                         ConstOf<float>(g, {7, 8, 9, 10, 11, 12}, {3, 2}),
                         /*transpose_a=*/true, /*transpose_b=*/false);
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 2}, {58, 64, 139, 154}));
}

TEST(OpsMatMul, TransposesTheSecondOperand) {
  Graph g;
  // b given as its transpose [[7,9,11],[8,10,12]].
  Output y = ops::MatMul(g, ConstOf<double>(g, {1, 2, 3, 4, 5, 6}, {2, 3}),
                         ConstOf<double>(g, {7, 9, 11, 8, 10, 12}, {2, 3}),
                         /*transpose_a=*/false, /*transpose_b=*/true);
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {2, 2}, {58, 64, 139, 154}));
}

TEST(OpsMatMul, TransposesBothOperands) {
  Graph g;
  Output y = ops::MatMul(g, ConstOf<float>(g, {1, 4, 2, 5, 3, 6}, {3, 2}),
                         ConstOf<float>(g, {7, 9, 11, 8, 10, 12}, {2, 3}),
                         /*transpose_a=*/true, /*transpose_b=*/true);
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 2}, {58, 64, 139, 154}));
}

// The kernel splits the product into bands of rows (m >= 128) or of
// columns (otherwise); with every piece worth splitting, each band of each
// transpose combination must match a naive product.
TEST(OpsMatMul, BandsOfRowsAndOfColumnsMatchANaiveProductForEveryTranspose) {
  Runtime runtime({.num_threads = 3, .min_parallel_piece_cost = 1});
  struct Case {
    int64_t m, k, n;
  };
  for (Case c : {Case{160, 7, 5}, Case{9, 6, 40}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(
            absl::StrCat(c.m, "x", c.k, "x", c.n, " ta=", ta, " tb=", tb));
        // Small integers: every product and sum is exact in double.
        auto a = [&](int64_t i, int64_t p) { return double((i * 7 + p) % 11); };
        auto b = [&](int64_t p, int64_t j) { return double((p * 5 + j) % 13); };
        std::vector<double> av(c.m * c.k), bv(c.k * c.n);
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t p = 0; p < c.k; ++p) {
            av[ta ? p * c.m + i : i * c.k + p] = a(i, p);
          }
        }
        for (int64_t p = 0; p < c.k; ++p) {
          for (int64_t j = 0; j < c.n; ++j) {
            bv[tb ? j * c.k + p : p * c.n + j] = b(p, j);
          }
        }
        std::vector<double> want(c.m * c.n, 0.0);
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < c.n; ++j) {
            for (int64_t p = 0; p < c.k; ++p)
              want[i * c.n + j] += a(i, p) * b(p, j);
          }
        }
        Graph g;
        TensorShape a_shape =
            ta ? TensorShape{c.k, c.m} : TensorShape{c.m, c.k};
        TensorShape b_shape =
            tb ? TensorShape{c.n, c.k} : TensorShape{c.k, c.n};
        Output y = ops::MatMul(g, ConstOf<double>(g, av, a_shape),
                               ConstOf<double>(g, bv, b_shape), ta, tb);
        Session session(g, runtime);
        auto got = session.RunBlocking({.fetches = {y}});
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_TRUE(HasValues<double>((*got)[0], {c.m, c.n}, want));
      }
    }
  }
}

TEST(OpsMatMul, MultipliesInt32Matrices) {
  Graph g;
  Output y = ops::MatMul(g, ConstOf<int32_t>(g, {1, 2, 3, 4}, {2, 2}),
                         ConstOf<int32_t>(g, {5, 6, 7, 8}, {2, 2}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {2, 2}, {19, 22, 43, 50}));
}

TEST(OpsMatMul, AnEmptyInnerDimensionGivesZeros) {
  Graph g;
  Output y = ops::MatMul(g, ops::Const(g, Tensor(DType::kFloat, {2, 0})),
                         ops::Const(g, Tensor(DType::kFloat, {0, 3})));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 3}, {0, 0, 0, 0, 0, 0}));
}

TEST(OpsMatMul, InnerDimensionMismatchFailsAtBuildTime) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kFloat, {kUnknownDim, 3});
  Output b = ops::Placeholder(g, DType::kFloat, {4, 2});
  absl::Status status = StatusThrownBy([&] { ops::MatMul(g, a, b); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "(MatMul)"));
  EXPECT_TRUE(MessageContains(status, "3 vs. 4"));
}

TEST(OpsMatMul, InfersTheOutputShapeFromTransposedOperands) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kFloat, {5, kUnknownDim});
  Output b = ops::Placeholder(g, DType::kFloat, {7, 5});
  EXPECT_EQ(ops::MatMul(g, a, b, true, true).shape(),
            TensorShape({kUnknownDim, 7}));
}

TEST(OpsMatMul, AVectorOperandFailsAtBuildTime) {
  Graph g;
  Output a = ConstOf<float>(g, {1, 2}, {2});
  absl::Status status = StatusThrownBy([&] { ops::MatMul(g, a, a); });
  EXPECT_TRUE(MessageContains(status, "must be a matrix"));
}

// --------------------------------------------------------------- reductions

// x = [[1,2,3],[4,5,6]] in the tests below.
Output Matrix23(Graph& g) {
  return ConstOf<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
}

TEST(OpsReduce, SumOverNoAxesReducesEverythingToAScalar) {
  Graph g;
  Output y = ops::Sum(g, Matrix23(g));
  EXPECT_EQ(y.shape(), TensorShape({}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {}, {21}));
}

TEST(OpsReduce, SumOverAxisZeroAddsTheRows) {
  Graph g;
  Output y = ops::Sum(g, Matrix23(g), {0});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {5, 7, 9}));
}

TEST(OpsReduce, KeepDimsLeavesReducedDimensionsAsOnes) {
  Graph g;
  Output y = ops::Sum(g, Matrix23(g), {1}, /*keep_dims=*/true);
  EXPECT_EQ(y.shape(), TensorShape({2, 1}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2, 1}, {6, 15}));
}

TEST(OpsReduce, NegativeAxesCountFromTheEnd) {
  Graph g;
  Output y = ops::Sum(g, Matrix23(g), {-1});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2}, {6, 15}));
}

TEST(OpsReduce, SumsOverTheMiddleAxisOfARankThreeTensor) {
  Graph g;
  // x[i][j][k] = 6i + 2j + k; sum over j: 3*(6i + k) + 6.
  std::vector<int32_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = i;
  Output y = ops::Sum(g, ConstOf<int32_t>(g, values, {2, 3, 2}), {1});
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {2, 2}, {6, 9, 24, 27}));
}

TEST(OpsReduce, SumsOverSeveralAxesAtOnce) {
  Graph g;
  std::vector<int64_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = i;
  // Sum over i and k of 6i + 2j + k: 4*2j + 12 + 2 = 8j + 14.
  Output y = ops::Sum(g, ConstOf<int64_t>(g, values, {2, 3, 2}), {0, -1},
                      /*keep_dims=*/true);
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {1, 3, 1}, {14, 22, 30}));
}

TEST(OpsReduce, MeanDividesByTheNumberOfReducedElements) {
  Graph g;
  Output y = ops::Mean(g, Matrix23(g), {1});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2}, {2, 5}));
}

TEST(OpsReduce, IntegerMeanTruncates) {
  Graph g;
  Output y = ops::Mean(g, ConstOf<int32_t>(g, {1, 2, 4, 4}, {2, 2}), {1});
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {2}, {1, 4}));
}

TEST(OpsReduce, MaxFindsTheLargestValuePerColumn) {
  Graph g;
  Output y = ops::Max(g, ConstOf<float>(g, {1, 9, -3, 4, 2, -5}, {2, 3}), {0});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {4, 9, -3}));
}

TEST(OpsReduce, SumOverAnEmptyDimensionIsZero) {
  Graph g;
  Output y = ops::Sum(g, ops::Const(g, Tensor(DType::kFloat, {0, 3})), {0});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {0, 0, 0}));
}

TEST(OpsReduce, MeanOverAnEmptyDimensionIsNaN) {
  Graph g;
  Output y = ops::Mean(g, ops::Const(g, Tensor(DType::kDouble, {0, 2})), {0});
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {2}, {NAN, NAN}));
}

TEST(OpsReduce, MaxOverAnEmptyDimensionIsTheLowestValue) {
  Graph g;
  Output f = ops::Max(g, ops::Const(g, Tensor(DType::kFloat, {0})));
  Output i = ops::Max(g, ops::Const(g, Tensor(DType::kInt32, {2, 0})), {1});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, f), {}, {-kInf}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, i), {2},
                                 {std::numeric_limits<int32_t>::lowest(),
                                  std::numeric_limits<int32_t>::lowest()}));
}

TEST(OpsReduce, AnAxisOutOfRangeFailsAtBuildTime) {
  Graph g;
  Output x = Matrix23(g);
  absl::Status status =
      StatusThrownBy([&] { ops::Sum(g, x, {2}, false, "s"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "'s' (Sum)"));
  EXPECT_TRUE(MessageContains(status, "axis 2 is out of range"));
}

TEST(OpsReduce, ReducingEverythingOfAnUnknownRankGivesAScalar) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  EXPECT_EQ(ops::Sum(g, x).shape(), TensorShape({}));
  EXPECT_TRUE(ops::Sum(g, x, {0}).shape().unknown_rank());
}

// -------------------------------------------------------------- activations

TEST(OpsActivation, ReluZeroesNegativeValues) {
  Graph g;
  Output y = ops::Relu(g, ConstOf<float>(g, {-2, 0, 3.5f}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {0, 0, 3.5f}));
}

TEST(OpsActivation, SigmoidIsTheLogisticFunction) {
  Graph g;
  Output y = ops::Sigmoid(g, ConstOf<double>(g, {0, 2, -100}, {3}));
  EXPECT_TRUE(HasValues<double>(
      EvalOk(g, y), {3}, {0.5, 0.8807970779778823, 3.720075976020836e-44},
      1e-12));
}

TEST(OpsActivation, TanhIsTheHyperbolicTangent) {
  Graph g;
  Output y = ops::Tanh(g, ConstOf<float>(g, {0, 0.5f, -20}, {3}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3}, {0, 0.46211716f, -1}));
}

TEST(OpsActivation, SoftmaxNormalisesEachRowOverTheLastAxis) {
  Graph g;
  Output y = ops::Softmax(g, ConstOf<double>(g, {1, 2, 3, 0, 0, 0}, {2, 3}));
  // e^k / (e + e^2 + e^3) for the first row; uniform for the second.
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {2, 3},
                                {0.09003057317038046, 0.24472847105479767,
                                 0.6652409557748219, 1.0 / 3, 1.0 / 3, 1.0 / 3},
                                1e-12));
}

TEST(OpsActivation, SoftmaxRowsSumToOne) {
  Graph g;
  Output y = ops::Sum(
      g,
      ops::Softmax(g, ConstOf<float>(g, {0.3f, -7, 4, 9, 1, 1, 2, 2}, {2, 4})),
      {1});
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2}, {1, 1}));
}

TEST(OpsActivation, SoftmaxIsStableForLargeLogits) {
  Graph g;
  Output y = ops::Softmax(g, ConstOf<float>(g, {1000, 1001, -1000}, {3}));
  // As for [0, 1, -2000]: 1/(1+e), e/(1+e), 0.
  EXPECT_TRUE(
      HasValues<float>(EvalOk(g, y), {3}, {0.26894142f, 0.73105858f, 0}));
}

TEST(OpsActivation, SoftmaxOfAScalarFailsAtBuildTime) {
  Graph g;
  Output x = ops::Const(g, 1.0f);
  absl::Status status = StatusThrownBy([&] { ops::Softmax(g, x); });
  EXPECT_TRUE(MessageContains(status, "rank >= 1"));
}

// --------------------------------------------------------------------- Cast

TEST(OpsCast, FloatToInt32TruncatesTowardZero) {
  Graph g;
  Output y = ops::Cast(g, ConstOf<float>(g, {1.7f, -1.7f, 2.5f, -0.5f}, {4}),
                       DType::kInt32);
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {4}, {1, -1, 2, 0}));
}

TEST(OpsCast, Int64ToDoubleKeepsTheValues) {
  Graph g;
  Output y =
      ops::Cast(g, ConstOf<int64_t>(g, {-3, 1LL << 40}, {2}), DType::kDouble);
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {2}, {-3, 1099511627776.0}));
}

TEST(OpsCast, NonZeroNumbersCastToTrue) {
  Graph g;
  Output y = ops::Cast(g, ConstOf<float>(g, {0, 2.5f, -1}, {3}), DType::kBool);
  EXPECT_TRUE(HasValues<bool>(EvalOk(g, y), {3}, {false, true, true}));
}

TEST(OpsCast, BoolsCastToZeroAndOne) {
  Graph g;
  Output y = ops::Cast(g, ConstOf<bool>(g, {true, false}, {2}), DType::kFloat);
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {2}, {1, 0}));
}

TEST(OpsCast, OutOfRangeFloatsSaturate) {
  Graph g;
  Output y = ops::Cast(g, ConstOf<float>(g, {1e20f, -1e20f, kNaN}, {3}),
                       DType::kInt32);
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {3},
                                 {std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::lowest(), 0}));
}

// -------------------------------------------------------------------- Equal

TEST(OpsEqual, ComparesElementwiseWithBroadcasting) {
  Graph g;
  Output y = ops::Equal(g, ConstOf<int32_t>(g, {1, 2, 3, 2}, {2, 2}),
                        ConstOf<int32_t>(g, {1, 2}, {2}));
  EXPECT_EQ(y.dtype(), DType::kBool);
  EXPECT_TRUE(HasValues<bool>(EvalOk(g, y), {2, 2}, {true, true, false, true}));
}

TEST(OpsEqual, ComparesBools) {
  Graph g;
  Output y =
      ops::Equal(g, ConstOf<bool>(g, {true, false}, {2}), ops::Const(g, false));
  EXPECT_TRUE(HasValues<bool>(EvalOk(g, y), {2}, {false, true}));
}

TEST(OpsEqual, NaNIsNotEqualToItself) {
  Graph g;
  Output x = ConstOf<float>(g, {kNaN, 1}, {2});
  EXPECT_TRUE(
      HasValues<bool>(EvalOk(g, ops::Equal(g, x, x)), {2}, {false, true}));
}

// ------------------------------------------------------------------- ArgMax

TEST(OpsArgMax, FindsTheLargestAlongTheLastAxis) {
  Graph g;
  Output y = ops::ArgMax(g, ConstOf<float>(g, {1, 9, 3, 7, 2, 8}, {2, 3}), 1);
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {2}, {1, 2}));
}

TEST(OpsArgMax, FindsTheLargestAlongANegativeAxis) {
  Graph g;
  Output y =
      ops::ArgMax(g, ConstOf<int32_t>(g, {1, 9, 3, 7, 2, 8}, {2, 3}), -2);
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {3}, {1, 0, 1}));
}

TEST(OpsArgMax, PicksTheFirstIndexOnTies) {
  Graph g;
  Output y = ops::ArgMax(g, ConstOf<float>(g, {2, 5, 5, 5, 1}, {5}), 0);
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {}, {1}));
}

TEST(OpsArgMax, AnAxisOutOfRangeFailsAtBuildTime) {
  Graph g;
  Output x = ConstOf<float>(g, {1, 2}, {2});
  absl::Status status = StatusThrownBy([&] { ops::ArgMax(g, x, 1); });
  EXPECT_TRUE(MessageContains(status, "(ArgMax)"));
}

// ---------------------------------------------------- IsFinite, CheckNumerics

TEST(OpsNumerics, IsFiniteIsFalseForNaNAndInfinities) {
  Graph g;
  Output y = ops::IsFinite(g, ConstOf<float>(g, {1, kNaN, kInf, -kInf}, {4}));
  EXPECT_TRUE(HasValues<bool>(EvalOk(g, y), {4}, {true, false, false, false}));
}

TEST(OpsNumerics, CheckNumericsPassesFiniteValuesThrough) {
  Graph g;
  Output y = ops::CheckNumerics(g, ConstOf<double>(g, {1, -2}, {2}), "ok");
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {2}, {1, -2}));
}

TEST(OpsNumerics, CheckNumericsReportsNaNWithItsMessage) {
  Graph g;
  Output y =
      ops::CheckNumerics(g, ConstOf<float>(g, {1, kNaN}, {2}), "loss check");
  absl::Status status = EvalError(g, y);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "loss check : Tensor had NaN values"));
}

TEST(OpsNumerics, CheckNumericsReportsInfinitiesWithItsMessage) {
  Graph g;
  Output y = ops::CheckNumerics(g, ConstOf<float>(g, {-kInf, 1}, {2}), "grad");
  absl::Status status = EvalError(g, y);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "grad : Tensor had Inf values"));
}

TEST(OpsNumerics, CheckNumericsPassesIntegersThroughUnchanged) {
  Graph g;
  Output y = ops::CheckNumerics(g, ConstOf<int32_t>(g, {7, -1}, {2}), "ints");
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {2}, {7, -1}));
}

// ------------------------------------------------------------------ Reshape

TEST(OpsReshape, InfersTheMinusOneDimension) {
  Graph g;
  Output y = ops::Reshape(g, Matrix23(g), {kUnknownDim, 2});
  EXPECT_EQ(y.shape(), TensorShape({3, 2}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3, 2}, {1, 2, 3, 4, 5, 6}));
}

TEST(OpsReshape, AMismatchedElementCountFailsAtBuildTime) {
  Graph g;
  Output x = Matrix23(g);
  absl::Status status = StatusThrownBy([&] { ops::Reshape(g, x, {4, 2}); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "(Reshape)"));
}

TEST(OpsReshape, AMinusOneThatDoesNotDivideFailsAtBuildTime) {
  Graph g;
  Output x = Matrix23(g);
  absl::Status status = StatusThrownBy([&] {
    ops::Reshape(g, x, {4, kUnknownDim});
  });
  EXPECT_TRUE(MessageContains(status, "cannot be inferred"));
}

TEST(OpsReshape, TwoMinusOnesFailAtBuildTime) {
  Graph g;
  Output x = Matrix23(g);
  absl::Status status = StatusThrownBy([&] {
    ops::Reshape(g, x, {kUnknownDim, kUnknownDim});
  });
  EXPECT_TRUE(MessageContains(status, "only one dimension may be -1"));
}

TEST(OpsReshape, AMismatchedFedShapeFailsAtRunTimeNamingTheOp) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat);
  Output y = ops::Reshape(g, x, {2, kUnknownDim}, "reshape_fed");
  EXPECT_TRUE(y.shape() == TensorShape({2, kUnknownDim}));
  absl::Status status =
      EvalError(g, y, {{x, Tensor::FromVector<float>({1, 2, 3})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(status, "reshape_fed"));
}

TEST(OpsReshape, OutputSharesTheInputBuffer) {
  Graph g;
  Output x = Matrix23(g);
  Output y = ops::Reshape(g, x, {6});
  absl::StatusOr<std::vector<Tensor>> values = testing::Eval(g, {x, y});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE((*values)[1].SharesBufferWith((*values)[0]));
  EXPECT_TRUE(HasValues<float>((*values)[1], {6}, {1, 2, 3, 4, 5, 6}));
}

// ---------------------------------------------------------------- Transpose

TEST(OpsTranspose, ReversesTheDimensionsByDefault) {
  Graph g;
  Output y = ops::Transpose(g, Matrix23(g));
  EXPECT_EQ(y.shape(), TensorShape({3, 2}));
  EXPECT_TRUE(HasValues<float>(EvalOk(g, y), {3, 2}, {1, 4, 2, 5, 3, 6}));
}

TEST(OpsTranspose, AppliesAPermutation) {
  Graph g;
  std::vector<int32_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = i;
  // out[i][j][k] = in[j][k][i] = 6j + 2k + i.
  Output y =
      ops::Transpose(g, ConstOf<int32_t>(g, values, {2, 3, 2}), {2, 0, 1});
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {2, 2, 3},
                                 {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
}

TEST(OpsTranspose, AnInvalidPermutationFailsAtBuildTime) {
  Graph g;
  Output x = Matrix23(g);
  absl::Status status = StatusThrownBy([&] { ops::Transpose(g, x, {0, 0}); });
  EXPECT_TRUE(MessageContains(status, "not a permutation"));
}

// ----------------------------------------------------- Fill, Zeros/OnesLike

TEST(OpsFill, FillsTheShapeWithTheScalarValue) {
  Graph g;
  Output y = ops::Fill(g, {2, 2}, ops::Const(g, int64_t{7}));
  EXPECT_TRUE(HasValues<int64_t>(EvalOk(g, y), {2, 2}, {7, 7, 7, 7}));
}

TEST(OpsFill, ANonScalarValueFailsAtBuildTime) {
  Graph g;
  Output v = ConstOf<float>(g, {1, 2}, {2});
  absl::Status status = StatusThrownBy([&] { ops::Fill(g, {2}, v); });
  EXPECT_TRUE(MessageContains(status, "must be a scalar"));
}

TEST(OpsLike, ZerosLikeHasTheInputsShapeAndDType) {
  Graph g;
  Output y = ops::ZerosLike(g, ConstOf<double>(g, {3, 4}, {1, 2}));
  EXPECT_TRUE(HasValues<double>(EvalOk(g, y), {1, 2}, {0, 0}));
}

TEST(OpsLike, OnesLikeOfIntegersIsOne) {
  Graph g;
  Output y = ops::OnesLike(g, ConstOf<int32_t>(g, {3, 4, 5}, {3}));
  EXPECT_TRUE(HasValues<int32_t>(EvalOk(g, y), {3}, {1, 1, 1}));
}

TEST(OpsLike, OnesLikeOfBoolsIsTrue) {
  Graph g;
  Output y = ops::OnesLike(g, ConstOf<bool>(g, {false, true}, {2}));
  EXPECT_TRUE(HasValues<bool>(EvalOk(g, y), {2}, {true, true}));
}

// ------------------------------------------------------------------- random

std::vector<float> FloatValues(const Tensor& t) {
  if (t.dtype() != DType::kFloat) return {};
  auto flat = t.flat<float>();
  return std::vector<float>(flat.begin(), flat.end());
}

TEST(OpsRandom, UniformFloatsLieInZeroToOne) {
  Graph g;
  Output r = ops::RandomUniform(g, {4000}, DType::kFloat, /*seed=*/3);
  Tensor t = EvalOk(g, r);
  ASSERT_EQ(t.NumElements(), 4000);
  float low = 1, high = 0;
  for (float v : t.flat<float>()) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  EXPECT_LT(low, 0.01f);  // spread over the whole interval
  EXPECT_GT(high, 0.99f);
}

TEST(OpsRandom, UniformDoublesLieInZeroToOne) {
  Graph g;
  Tensor t = EvalOk(g, ops::RandomUniform(g, {1000}, DType::kDouble, 5));
  ASSERT_EQ(t.dtype(), DType::kDouble);
  for (double v : t.flat<double>()) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
}

TEST(OpsRandom, AnOpSeedGivesTheSameValuesInTwoSessions) {
  Graph g;
  Output r = ops::RandomNormal(g, {16}, DType::kFloat, 0, 1, /*seed=*/42);
  std::vector<float> first = FloatValues(EvalOk(g, r));
  std::vector<float> second = FloatValues(EvalOk(g, r));
  ASSERT_EQ(first.size(), 16u);
  EXPECT_EQ(first, second);
}

TEST(OpsRandom, AGraphSeedAloneGivesTheSameValuesInTwoSessions) {
  Graph g;
  g.set_seed(7);
  Output r = ops::RandomUniform(g, {16});
  std::vector<float> first = FloatValues(EvalOk(g, r));
  std::vector<float> second = FloatValues(EvalOk(g, r));
  ASSERT_EQ(first.size(), 16u);
  EXPECT_EQ(first, second);
}

TEST(OpsRandom, TwoGraphsWithTheSameSeedsDrawTheSameValues) {
  Graph g1, g2;
  g1.set_seed(11);
  g2.set_seed(11);
  Output r1 = ops::TruncatedNormal(g1, {16}, DType::kFloat, 0, 1, 5);
  Output r2 = ops::TruncatedNormal(g2, {16}, DType::kFloat, 0, 1, 5);
  EXPECT_EQ(FloatValues(EvalOk(g1, r1)), FloatValues(EvalOk(g2, r2)));
}

TEST(OpsRandom, OpsWithoutOpSeedsInOneSeededGraphDiffer) {
  Graph g;
  g.set_seed(7);
  Output a = ops::RandomUniform(g, {16});
  Output b = ops::RandomUniform(g, {16});
  absl::StatusOr<std::vector<Tensor>> values = testing::Eval(g, {a, b});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_NE(FloatValues((*values)[0]), FloatValues((*values)[1]));
}

TEST(OpsRandom, DifferentOpSeedsGiveDifferentValues) {
  Graph g;
  Output a = ops::RandomUniform(g, {16}, DType::kFloat, 1);
  Output b = ops::RandomUniform(g, {16}, DType::kFloat, 2);
  absl::StatusOr<std::vector<Tensor>> values = testing::Eval(g, {a, b});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_NE(FloatValues((*values)[0]), FloatValues((*values)[1]));
}

TEST(OpsRandom, SuccessiveRunsOfOneSessionDrawNewValues) {
  Graph g;
  Output r = ops::RandomUniform(g, {16}, DType::kFloat, /*seed=*/9);
  Session session(g, testing::TestRuntime());
  absl::StatusOr<std::vector<Tensor>> first =
      session.RunBlocking({.fetches = {r}});
  absl::StatusOr<std::vector<Tensor>> second =
      session.RunBlocking({.fetches = {r}});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(FloatValues((*first)[0]), FloatValues((*second)[0]));
}

TEST(OpsRandom, SuccessiveRunsRepeatAcrossSessionsWithTheSameSeed) {
  Graph g;
  Output r = ops::RandomUniform(g, {8}, DType::kFloat, /*seed=*/9);
  std::vector<std::vector<float>> runs[2];
  for (auto& session_runs : runs) {
    Session session(g, testing::TestRuntime());
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::vector<Tensor>> v =
          session.RunBlocking({.fetches = {r}});
      ASSERT_TRUE(v.ok()) << v.status();
      session_runs.push_back(FloatValues((*v)[0]));
    }
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(OpsRandom, UnseededOpsDifferBetweenSessions) {
  Graph g;
  Output r = ops::RandomUniform(g, {16});
  EXPECT_NE(FloatValues(EvalOk(g, r)), FloatValues(EvalOk(g, r)));
}

TEST(OpsRandom, NormalHasTheRequestedMeanAndStddev) {
  Graph g;
  Output r = ops::RandomNormal(g, {20000}, DType::kDouble, /*mean=*/3,
                               /*stddev=*/2, /*seed=*/17);
  Tensor t = EvalOk(g, r);
  ASSERT_EQ(t.dtype(), DType::kDouble);
  double sum = 0, sum_sq = 0;
  for (double v : t.flat<double>()) {
    sum += v;
    sum_sq += v * v;
  }
  const double n = static_cast<double>(t.NumElements());
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 3.0, 0.05);  // the standard error is 2/sqrt(20000) = 0.014
  EXPECT_NEAR(stddev, 2.0, 0.05);
}

TEST(OpsRandom, TruncatedNormalStaysWithinTwoStddevsOfTheMean) {
  Graph g;
  Output r = ops::TruncatedNormal(g, {5000}, DType::kFloat, /*mean=*/5,
                                  /*stddev=*/0.5, /*seed=*/23);
  Tensor t = EvalOk(g, r);
  ASSERT_EQ(t.NumElements(), 5000);
  float low = 5, high = 5;
  for (float v : t.flat<float>()) {
    ASSERT_GE(v, 4.0f);
    ASSERT_LE(v, 6.0f);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  EXPECT_LT(low, 4.1f);  // the tails are populated, not clipped at 1 stddev
  EXPECT_GT(high, 5.9f);
}

TEST(OpsRandom, IntegerDTypesFailAtBuildTime) {
  Graph g;
  absl::Status status = StatusThrownBy(
      [&] { ops::RandomUniform(g, {2}, DType::kInt32, 0, "ints"); });
  EXPECT_TRUE(MessageContains(status, "'ints' (RandomUniform)"));
  EXPECT_TRUE(MessageContains(status, "int32"));
}

TEST(OpsRandom, RandomOpsAreStateful) {
  Graph g;
  EXPECT_TRUE(ops::RandomUniform(g, {1}).node()->op_def().stateful);
  EXPECT_TRUE(ops::RandomNormal(g, {1}).node()->op_def().stateful);
  EXPECT_TRUE(ops::TruncatedNormal(g, {1}).node()->op_def().stateful);
}

// -------------------------------------------------------------------- costs

TEST(OpsCost, MatMulCostsMTimesKTimesN) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kFloat, {2, 3});
  Output b = ops::Placeholder(g, DType::kFloat, {5, 3});
  Output y = ops::MatMul(g, a, b, false, /*transpose_b=*/true);
  EXPECT_EQ(
      CostOf(y, {Tensor(DType::kFloat, {2, 3}), Tensor(DType::kFloat, {5, 3})}),
      2 * 3 * 5);
}

TEST(OpsCost, BroadcastingOpsCostTheirOutputElements) {
  Graph g;
  Output a = ops::Placeholder(g, DType::kFloat, {4, 1});
  Output b = ops::Placeholder(g, DType::kFloat, {1, 6});
  Output y = ops::Mul(g, a, b);
  EXPECT_EQ(
      CostOf(y, {Tensor(DType::kFloat, {4, 1}), Tensor(DType::kFloat, {1, 6})}),
      24);
}

}  // namespace
}  // namespace cosession::ops_test
