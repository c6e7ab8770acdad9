// The predict body's fast path (serving/predict_fast_path.h): it takes the
// common bodies, gives exactly what the tree path gives for them, and
// declines every other body, which ParsePredictRequest then answers through
// the tree as before (same requests, same errors).
#include "cosession/serving/predict_fast_path.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/serving/rest_json.h"
#include "tests/signature_spec.h"

namespace cosession::predict_fast_path_test {
namespace {

using testing::Spec;

// serving_default: x float; "wide": w double; "ints": i int32; "pair": a
// float and b int64.
std::map<std::string, Signature> Signatures() {
  std::map<std::string, Signature> sigs;
  sigs[kDefaultServingSignature].inputs["x"] =
      Spec(DType::kFloat, TensorShape::Unknown());
  sigs["wide"].inputs["w"] = Spec(DType::kDouble, TensorShape::Unknown());
  sigs["ints"].inputs["i"] = Spec(DType::kInt32, TensorShape::Unknown());
  sigs["pair"].inputs["a"] = Spec(DType::kFloat, TensorShape{-1});
  sigs["pair"].inputs["b"] = Spec(DType::kInt64, TensorShape{-1});
  return sigs;
}

// Two requests are the same: signature, format, and each input's dtype,
// shape and bytes.
void ExpectSameRequest(const PredictRequest& a, const PredictRequest& b,
                       absl::string_view body) {
  SCOPED_TRACE(body);
  EXPECT_EQ(a.signature_name, b.signature_name);
  EXPECT_EQ(a.format, b.format);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (const auto& [name, t] : a.inputs) {
    auto other = b.inputs.find(name);
    ASSERT_NE(other, b.inputs.end()) << name;
    EXPECT_EQ(t.dtype(), other->second.dtype()) << name;
    EXPECT_EQ(t.shape().DebugString(), other->second.shape().DebugString())
        << name;
    ASSERT_EQ(t.TotalBytes(), other->second.TotalBytes()) << name;
    if (t.TotalBytes() > 0) {
      EXPECT_EQ(
          std::memcmp(t.raw_data(), other->second.raw_data(), t.TotalBytes()),
          0)
          << name;
    }
  }
}

TEST(PredictFastPath, TakesTheCommonBodiesAsTheTreeDoes) {
  const auto sigs = Signatures();
  const std::string bodies[] = {
      R"({"instances": [[1, 2.5], [3, 4]]})",
      R"({"instances": [1, 2, 3]})",
      R"({"instances": [[[1], [2]], [[3], [4]], [[5], [6]]]})",
      R"({"inputs": [[1, 2], [3, 4], [5, 6]]})",
      R"({"inputs": 7.25})",
      R"({"inputs": {"x": [[0.5, -1e-3]], "other": [1, [2, "three"]]}})",
      R"({"signature_name": "serving_default", "instances": [[1e10]]})",
      R"({"instances": [[1, 2]], "signature_name": "serving_default"})",
      R"({"signature_name": "wide", "instances": [[0.1, 1e-300]]})",
      R"({"comment": {"nested": [null, true, "s"]}, "instances": [[1]],
          "more": 5})",
      R"({"inst\u0061nces": [[16777215, -16777215]]})",
      R"({"signature_name": "wide",
          "instances": [[9007199254740991, -9007199254740991, 1e300]]})",
      R"( { "instances" : [ [ 1 , 2 ] , [ 3 , 4 ] ] } )",
      R"({"instances": [[3.4028234e38, -3.4028234e38, 1e-50, -0, -0.0]]})",
      R"({"instances": [[1e-400, 0e308, 0.0e309]]})",  // zeros to both
      R"({"signature_name": "", "instances": [[1, 2]]})",
      R"({"instances": [[1, 2]], "signature_name": ""})",
      // Numbers the dtype cannot hold exactly, rounded as TensorFlow
      // Serving rounds them (rest_json.h's JsonNumberAs).
      R"({"instances": [[16777217, 1]]})",
      R"({"instances": [[-16777217, 1]]})",
      R"({"instances": [[18446744073709551615]]})",
      R"({"instances": [[3.5e38, 1]]})",
      R"({"inputs": -1e39})",
      R"({"signature_name": "wide", "instances": [[9007199254740993]]})",
  };
  for (const std::string& body : bodies) {
    std::optional<PredictRequest> dense =
        TryParseDensePredictRequest(body, sigs);
    ASSERT_TRUE(dense.has_value()) << body;
    if (absl::StrContains(body, R"("signature_name": "")")) {
      // An empty name is the default signature, as in TensorFlow Serving.
      EXPECT_EQ(dense->signature_name, kDefaultServingSignature) << body;
    }
    absl::StatusOr<PredictRequest> tree =
        ParsePredictRequestThroughTree(body, sigs);
    ASSERT_TRUE(tree.ok()) << body << ": " << tree.status();
    ExpectSameRequest(*dense, *tree, body);
  }
}

TEST(PredictFastPath, DeclinesEveryOtherBodyWhichTheTreeThenAnswers) {
  const auto sigs = Signatures();
  const std::string bodies[] = {
      "",
      "  ",
      "[1, 2]",
      R"({"instances": [[1, 2], [3]]})",             // ragged
      R"({"instances": [[1, 2], [3], [4, 5, 6]]})",  // ragged, 6 values
      R"({"instances": [[1, 2], [3, [4]]]})",        // a list among leaves
      R"({"instances": [[[1]], [2]]})",              // leaves at two levels
      R"({"instances": []})",                        // no rows
      R"({"instances": [[], []]})",                  // empty rows
      R"({"inputs": []})",                           // an empty tensor
      R"({"instances": 5})",                         // rows not a list
      R"({"instances": [[1, "2"]]})",                // a string leaf
      R"({"instances": [[1, true]]})",               // a bool leaf
      R"({"instances": [[1, null]]})",               // a null leaf
      R"({"instances": [{"x": [1, 2]}]})",           // a named row
      R"({"instances": [[NaN, Infinity]]})",  // TensorFlow Serving's tokens
      // 0e400 Boost.JSON reads as NaN, RapidJSON refuses.
      R"({"instances": [[0e400, 1]]})",
      R"({"instances": [[1, 2]]} trailing)",  // not one document
      R"({"instances": [[1, 2]])",            // unterminated
      R"({"instances": [[1]], "inputs": [[1]]})",
      R"({"instances": [[1]], "instances": [[2]]})",
      R"({"signature_name": "pair", "instances": [{"a": 1, "b": 2}]})",
      R"({"signature_name": "ints", "instances": [[1, 2]]})",
      R"({"signature_name": "missing", "instances": [[1, 2]]})",
      R"({"signature_name": 3, "instances": [[1, 2]]})",
      R"({"signature_name": "a", "signature_name": "b", "inputs": 1})",
      // The tensor was read for serving_default, the body asks for another.
      R"({"instances": [[1, 2]], "signature_name": "ints"})",
      R"({"instances": [[1, 2]], "signature_name": "wide"})",
      R"({"inputs": {"y": [1, 2]}})",         // no entry for the input
      R"({"inputs": {"x": [1], "x": [2]}})",  // two entries for it
      R"({"inputs": {"x": {"nested": 1}}})",
      R"({"inputs": "text"})",
      R"({"other": 1})",                            // no tensor at all
      std::string(70, '[') + std::string(70, ']'),  // past 64 levels
      absl::StrCat(R"({"instances": )", std::string(70, '['), "1",
                   std::string(70, ']'), "}"),
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(TryParseDensePredictRequest(body, sigs).has_value());
    absl::StatusOr<PredictRequest> through_both =
        ParsePredictRequest(body, sigs);
    absl::StatusOr<PredictRequest> tree =
        ParsePredictRequestThroughTree(body, sigs);
    ASSERT_EQ(through_both.status(), tree.status());
    if (tree.ok()) ExpectSameRequest(*through_both, *tree, body);
  }
}

TEST(PredictFastPath, ParsePredictRequestTakesItForTheCommonBody) {
  // The same request whichever path read it; what shows that the fast path
  // ran is that it also accepts the body alone (the test above shows it
  // declines the rest).
  const auto sigs = Signatures();
  std::string body = R"({"instances": [)";
  for (int row = 0; row < 3; ++row) {
    absl::StrAppend(&body, row > 0 ? ", " : "", "[");
    for (int i = 0; i < 784; ++i) {
      absl::StrAppend(&body, i > 0 ? ", " : "", (row * 784 + i) * 0.001);
    }
    absl::StrAppend(&body, "]");
  }
  absl::StrAppend(&body, "]}");
  ASSERT_TRUE(TryParseDensePredictRequest(body, sigs).has_value());
  absl::StatusOr<PredictRequest> request = ParsePredictRequest(body, sigs);
  ASSERT_TRUE(request.ok()) << request.status();
  const Tensor& x = request->inputs.at("x");
  EXPECT_EQ(x.shape().DebugString(), "[3,784]");
  EXPECT_EQ(x.flat<float>()[785], static_cast<float>(785 * 0.001));
}

}  // namespace
}  // namespace cosession::predict_fast_path_test
