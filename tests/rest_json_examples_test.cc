// TensorFlow Serving's classify and regress bodies: examples' features into
// a signature's inputs, the label/score pairs and values out, and the
// messages for what a client gets wrong (cases from TensorFlow Serving's
// REST API documentation and its JSON conversion's checks).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/serving/rest_json.h"
#include "tests/signature_spec.h"

namespace cosession::rest_json_examples_test {
namespace {

using testing::Spec;

// "classification": x float [-1, 2], n int64 [-1] -> classes, scores;
// "regression": x -> outputs; serving_default: a predict signature.
std::map<std::string, Signature> Signatures() {
  std::map<std::string, Signature> sigs;
  Signature& c = sigs["classification"];
  c.method_name = kClassifyMethodName;
  c.inputs["x"] = Spec(DType::kFloat, TensorShape{-1, 2});
  c.inputs["n"] = Spec(DType::kInt64, TensorShape{-1});
  c.outputs["classes"] = Spec(DType::kInt64, TensorShape{-1, 3});
  c.outputs["scores"] = Spec(DType::kFloat, TensorShape{-1, 3});
  Signature& r = sigs["regression"];
  r.method_name = kRegressMethodName;
  r.inputs["x"] = Spec(DType::kFloat, TensorShape{-1, 2});
  r.outputs["outputs"] = Spec(DType::kFloat, TensorShape{-1});
  Signature& p = sigs[kDefaultServingSignature];
  p.inputs["x"] = Spec(DType::kFloat, TensorShape{-1, 2});
  p.outputs["y"] = Spec(DType::kFloat, TensorShape{-1});
  return sigs;
}

absl::StatusOr<ExamplesRequest> Parse(absl::string_view body,
                                      ExamplesMethod method) {
  return ParseExamplesRequest(body, method, Signatures());
}

TEST(RestJsonExamples, EachExamplesFeaturesAreARowOfTheInputOfTheirName) {
  // Whole numbers are floats' too; a scalar fills a one-value row; the
  // context's features are every example's; other features are ignored.
  auto request = Parse(R"({"signature_name": "classification",
      "context": {"n": 7},
      "examples": [{"x": [1, 2.5], "unused": "text"}, {"x": [-3, NaN]}]})",
                       ExamplesMethod::kClassify);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->signature_name, "classification");
  EXPECT_EQ(request->num_examples, 2);
  const Tensor& x = request->inputs.at("x");
  ASSERT_EQ(x.shape().DebugString(), "[2,2]");
  EXPECT_EQ(x.flat<float>()[1], 2.5f);
  EXPECT_EQ(x.flat<float>()[2], -3.0f);
  EXPECT_TRUE(std::isnan(x.flat<float>()[3]));
  const Tensor& n = request->inputs.at("n");
  ASSERT_EQ(n.shape().DebugString(), "[2]");
  EXPECT_EQ(n.flat<int64_t>()[0], 7);
  EXPECT_EQ(n.flat<int64_t>()[1], 7);

  auto regress =
      Parse(R"({"signature_name": "regression", "examples": [{"x": [0, 1]}]})",
            ExamplesMethod::kRegress);
  ASSERT_TRUE(regress.ok()) << regress.status();
  EXPECT_EQ(regress->inputs.at("x").shape().DebugString(), "[1,2]");
}

// A float feature's value a float cannot hold exactly is rounded, as
// TensorFlow Serving's float_list takes it (past a float's range: an
// infinity).
TEST(RestJsonExamples, FloatFeaturesAreRoundedAsTensorFlowServingDoes) {
  auto request = Parse(R"({"signature_name": "classification",
      "examples": [{"x": [16777217, -1e39], "n": 1}]})",
                       ExamplesMethod::kClassify);
  ASSERT_TRUE(request.ok()) << request.status();
  const Tensor& x = request->inputs.at("x");
  EXPECT_EQ(x.flat<float>()[0], 16777216.0f);
  EXPECT_EQ(x.flat<float>()[1], -std::numeric_limits<float>::infinity());
}

TEST(RestJsonExamples, AnInputWithAnUnknownRowLengthTakesTheFirstExamples) {
  auto sigs = Signatures();
  sigs["classification"].inputs["x"] = Spec(DType::kFloat, TensorShape{-1, -1});
  auto request = ParseExamplesRequest(R"({"signature_name": "classification",
      "examples": [{"x": [1, 2, 3], "n": 1}, {"x": [4, 5, 6], "n": 2}]})",
                                      ExamplesMethod::kClassify, sigs);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("x").shape().DebugString(), "[2,3]");
  request = ParseExamplesRequest(R"({"signature_name": "classification",
      "examples": [{"x": [1, 2, 3], "n": 1}, {"x": [4], "n": 2}]})",
                                 ExamplesMethod::kClassify, sigs);
  ASSERT_FALSE(request.ok());
  EXPECT_TRUE(absl::StrContains(request.status().message(),
                                "Key: x, Index: 1.  Number of float values != "
                                "expected.  Values size: 1 but output shape: "
                                "[3]"))
      << request.status();
}

TEST(RestJsonExamples, BadRequestsNameTheFeatureAndTheExample) {
  struct Case {
    ExamplesMethod method;
    std::string body, message;
  };
  const auto kClassify = ExamplesMethod::kClassify;
  const auto kRegress = ExamplesMethod::kRegress;
  const std::vector<Case> cases = {
      {kClassify, "", "JSON Parse error: The document is empty"},
      {kClassify, "[1]", "Is not object"},
      {kClassify, R"({"signature_name": "classification"})",
       "When method is classify, key 'examples' is expected and was not "
       "found"},
      // (TensorFlow Serving's words for :regress too.)
      {kRegress, R"({"signature_name": "regression"})",
       "When method is classify, key 'examples' is expected"},
      {kClassify, R"({"examples": {"x": [1, 2]}})",
       "Expecting 'examples' value to be an list/array"},
      {kClassify, R"({"examples": []})", "'examples' value is an empty array"},
      {kClassify, R"({"examples": [[1, 2]]})",
       "Example must be JSON object but got JSON Array"},
      {kClassify, R"({"context": 3, "examples": [{}]})",
       "Example must be JSON object but got JSON Number"},
      // An empty name is serving_default, a predict signature here.
      {kClassify, R"({"signature_name": "", "examples": [{"x": [1, 2]}]})",
       "Expected classification signature method_name to be "
       "tensorflow/serving/classify. Was: tensorflow/serving/predict"},
      {kClassify, R"({"signature_name": "nope", "examples": [{}]})",
       "No signature was found with the name: nope"},
      // serving_default here is a predict signature, as TF Serving answers.
      {kClassify, R"({"examples": [{"x": [1, 2]}]})",
       "Expected classification signature method_name to be "
       "tensorflow/serving/classify. Was: tensorflow/serving/predict"},
      {kRegress, R"({"signature_name": "classification", "examples": [{}]})",
       "Expected regression signature method_name to be "
       "tensorflow/serving/regress. Was: tensorflow/serving/classify"},
      {kClassify,
       R"({"signature_name": "classification", "examples": [{"x": [1, 2]}]})",
       "Feature: n (data type: int64) is required but could not be found."},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, 2], "n": 1}, {"x": [1, 2, 3], "n": 1}]})",
       "Key: x, Index: 1.  Number of float values != expected.  Values size: "
       "3 but output shape: [2]"},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, 2], "n": 1.5}]})",
       "Key: n, Index: 0.  Data types don't match. Data type: float but "
       "expected type: int64"},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, "b"], "n": 1}]})",
       "Key: x, Index: 0.  Data types don't match. Data type: bytes but "
       "expected type: float"},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [[1, 2]], "n": 1}]})",
       "Feature: x has element with unexpected JSON type: Array"},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, null], "n": 1}]})",
       "Feature: x has element with unexpected JSON type: Null"},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, 2], "n": 18446744073709551615}]})",
       "Feature: n has uint64_t element. Only int64_t is supported."},
      {kClassify,
       R"({"signature_name": "classification",
           "examples": [{"x": [1, 18446744073709551615], "n": 1}]})",
       "Feature: x has uint64_t element. Only int64_t is supported."},
      {kClassify,
       R"({"signature_name": "classification", "context": {"n": 1},
           "examples": [{"x": [1, 2]}, {"x": [1, 2], "n": 2}]})",
       "Feature: n is in both 'context' and example 1"},
  };
  for (const Case& c : cases) {
    auto request = Parse(c.body, c.method);
    ASSERT_FALSE(request.ok()) << c.body;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(request.status().message(), c.message))
        << c.body << "\n  got: " << request.status().message();
  }
}

// A context's list is every example's: a small body must not make an
// enormous tensor.
TEST(RestJsonExamples, AContextCopiedIntoManyExamplesIsBounded) {
  auto sigs = Signatures();
  sigs["classification"].inputs["x"] = Spec(DType::kFloat, TensorShape{-1, -1});
  std::string context = "[0";
  for (int i = 1; i < 100; ++i) context += ",0";
  context += "]";
  auto body = [&](int n) {
    std::string examples = R"({"n": 1})";
    for (int i = 1; i < n; ++i) examples += R"(,{"n": 1})";
    return absl::StrCat(
        R"({"signature_name": "classification", "context": {"x": )", context,
        R"(}, "examples": [)", examples, "]}");
  };
  // 100 values x 10 examples + 10 of "n": within a bound of 1,010.
  auto request =
      ParseExamplesRequest(body(10), ExamplesMethod::kClassify, sigs, 1010);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("x").shape().DebugString(), "[10,100]");
  // 11 examples: past it, whichever input comes first.
  request =
      ParseExamplesRequest(body(11), ExamplesMethod::kClassify, sigs, 1010);
  ASSERT_FALSE(request.ok());
  EXPECT_TRUE(absl::StrContains(request.status().message(),
                                "makes more values than the 1010 a request's "
                                "examples may make, over its 11 examples"))
      << request.status();
}

TEST(RestJsonExamples, ClassifyAnswersLabelScorePairsPerExample) {
  NamedTensors both{
      {"classes",
       Tensor::FromVector<int64_t>({0, 1, 2, 0, 1, 2}, TensorShape{2, 3})},
      {"scores", Tensor::FromVector<float>({0.25f, 0.5f, 0.25f, 1, 0, 0},
                                           TensorShape{2, 3})}};
  auto body = RenderExamplesResponse(ExamplesMethod::kClassify, both, 2);
  ASSERT_TRUE(body.ok()) << body.status();
  // TensorFlow Serving's layout: each example's pairs on one line.
  const std::string results = R"([[["0", 0.25], ["1", 0.5], ["2", 0.25]], )"
                              R"([["0", 1.0], ["1", 0.0], ["2", 0.0]])"
                              "\n    ]";
  EXPECT_EQ(*body, absl::StrCat("{\n    \"results\": ", results,
                                ",\n    \"result\": ", results, "\n}"));
  // Without "classes" the labels are empty strings; without "scores", 0.
  NamedTensors scores{{"scores", both.at("scores")}};
  body = RenderExamplesResponse(ExamplesMethod::kClassify, scores, 2);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(absl::StartsWith(
      *body, "{\n    \"results\": [[[\"\", 0.25], [\"\", 0.5], "))
      << *body;
  NamedTensors classes{{"classes", both.at("classes")}};
  body = RenderExamplesResponse(ExamplesMethod::kClassify, classes, 2);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(absl::StartsWith(
      *body, "{\n    \"results\": [[[\"0\", 0.0], [\"1\", 0.0], "))
      << *body;
}

TEST(RestJsonExamples, RegressAnswersOneValuePerExample) {
  for (TensorShape shape : {TensorShape{2}, TensorShape{2, 1}}) {
    NamedTensors out{
        {"outputs", Tensor::FromVector<float>({3.5f, 4.0f}, shape)}};
    auto body = RenderExamplesResponse(ExamplesMethod::kRegress, out, 2);
    ASSERT_TRUE(body.ok()) << body.status();
    // As TensorFlow Serving's documentation shows it.
    EXPECT_EQ(*body,
              "{\n    \"results\": [3.5, 4.0],\n    \"result\": [3.5, 4.0]\n}");
  }
}

TEST(RestJsonExamples,
     OutputsOfTheWrongShapeOrTypeAreTensorFlowServingsErrors) {
  struct Case {
    ExamplesMethod method;
    NamedTensors outputs;
    std::string message;
  };
  const std::vector<Case> cases = {
      {ExamplesMethod::kClassify,
       {{"scores", Tensor::FromVector<float>({1, 2, 3})}},
       "Expected scores Tensor of shape [batch_size, num_classes]. Got: [3]"},
      {ExamplesMethod::kClassify,
       {{"scores", Tensor::FromVector<float>({1, 2, 3}, TensorShape{3, 1})}},
       "Expected scores output batch size of 2. Got: 3"},
      {ExamplesMethod::kClassify,
       {{"scores", Tensor::FromVector<double>({1, 2}, TensorShape{2, 1})}},
       "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE"},
      {ExamplesMethod::kClassify,
       {{"classes", Tensor::FromVector<float>({1, 2}, TensorShape{2, 1})}},
       "Expected classes Tensor of integer labels"},
      {ExamplesMethod::kClassify,
       {{"classes", Tensor::FromVector<int64_t>({1, 2}, TensorShape{2, 1})},
        {"scores", Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2})}},
       "Tensors class and score should match in dim_size(1). Got 1 vs. 2"},
      {ExamplesMethod::kRegress,
       {{"outputs",
         Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2})}},
       "Expected output Tensor shape to be either [batch_size] or "
       "[batch_size, 1] but got [2,2]"},
      {ExamplesMethod::kRegress,
       {{"outputs", Tensor::FromVector<float>({1, 2, 3})}},
       "Input batch size did not match output batch size: 2 vs. 3"},
      {ExamplesMethod::kRegress,
       {{"outputs", Tensor::FromVector<int64_t>({1, 2})}},
       "Expected output Tensor of DT_FLOAT.  Got: DT_INT64"},
  };
  for (const Case& c : cases) {
    auto body = RenderExamplesResponse(c.method, c.outputs, 2);
    ASSERT_FALSE(body.ok()) << c.message;
    EXPECT_TRUE(absl::StrContains(body.status().message(), c.message))
        << "want: " << c.message << "\n  got: " << body.status().message();
  }
}

}  // namespace
}  // namespace cosession::rest_json_examples_test
