// TensorFlow Serving's predict bodies: both request formats into tensors,
// both response formats out of them, and the error messages its clients
// see (cases from TensorFlow Serving's REST API documentation).
#include "cosession/serving/rest_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "tests/signature_spec.h"

namespace cosession::rest_json_test {
namespace {

using testing::Spec;

// serving_default: x float [-1, 2]; "pair": a float [-1], b int64 [-1].
std::map<std::string, Signature> Signatures() {
  std::map<std::string, Signature> sigs;
  sigs[kDefaultServingSignature].inputs["x"] =
      Spec(DType::kFloat, TensorShape{-1, 2});
  sigs[kDefaultServingSignature].outputs["y"] =
      Spec(DType::kFloat, TensorShape{-1});
  sigs["pair"].inputs["a"] = Spec(DType::kFloat, TensorShape{-1});
  sigs["pair"].inputs["b"] = Spec(DType::kInt64, TensorShape{-1});
  sigs["none"].outputs["y"] = Spec(DType::kFloat, TensorShape{-1});
  return sigs;
}

absl::StatusOr<PredictRequest> Parse(absl::string_view body) {
  return ParsePredictRequest(body, Signatures());
}

TEST(RestJson, RowFormatStacksTheInstances) {
  auto request = Parse(R"({"instances": [[1, 2.5], [3, 4]]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->format, PredictFormat::kRow);
  EXPECT_EQ(request->signature_name, "serving_default");
  const Tensor& x = request->inputs.at("x");
  EXPECT_EQ(x.shape().DebugString(), "[2,2]");
  EXPECT_EQ(x.flat<float>()[1], 2.5f);
  EXPECT_EQ(x.flat<float>()[3], 4.0f);
}

// TensorFlow Serving reads an empty signature_name as serving_default (a
// client echoing the metadata's model_spec.signature_name sends "").
TEST(RestJson, AnEmptySignatureNameIsTheDefaultSignature) {
  for (absl::string_view body :
       {R"({"signature_name": "", "instances": [[1, 2]]})",
        R"({"signature_name": "", "inputs": [[1, 2]]})",
        R"({"inputs": {"x": [[1, 2]]}, "signature_name": ""})"}) {
    auto request = Parse(body);
    ASSERT_TRUE(request.ok()) << body << ": " << request.status();
    EXPECT_EQ(request->signature_name, "serving_default") << body;
    EXPECT_EQ(request->inputs.at("x").shape().DebugString(), "[1,2]") << body;
  }
}

TEST(RestJson, RowFormatWithSeveralInputsTakesObjects) {
  auto request = Parse(R"({"signature_name": "pair",
      "instances": [{"a": 1.5, "b": 7}, {"a": 2, "b": -3}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("a").shape().DebugString(), "[2]");
  EXPECT_EQ(request->inputs.at("b").flat<int64_t>()[1], -3);
}

// As TensorFlow Serving (its json_tensor.cc): rows are objects whenever
// the first one is, with one input as with several.
TEST(RestJson, RowObjectsNameTheInputsWhateverTheirNumber) {
  auto request = Parse(R"({"instances": [{"x": [1, 2]}, {"x": [3, 4.5]}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  const Tensor& x = request->inputs.at("x");
  EXPECT_EQ(x.shape().DebugString(), "[2,2]");
  EXPECT_EQ(x.flat<float>()[3], 4.5f);
  const struct {
    const char* body;
    const char* message;
  } cases[] = {
      {R"({"instances": [{"x": [1, 2]}, [3, 4]]})",
       "Expecting object but got list at item 1 of input list"},
      {R"({"instances": [[1, 2], {"x": [3, 4]}]})",
       "Expecting value/list but got object at item 1 of input list"},
      {R"({"instances": [{"x": [1, 2], "y": [1]}]})",
       "Failed to process element: 0 key: y of 'instances' list. Error: "
       "INVALID_ARGUMENT: JSON object: does not have named input: y"},
      {R"({"instances": [{"x": [1, 2]}, {"x": [1, 2, 3]}]})",
       "Failed to process element: 1 key: x of 'instances' list. Error: "
       "INVALID_ARGUMENT: Expecting tensor size: 2 but got: 3"},
      {R"({"instances": [{}]})",
       "Failed to process element: 0 of 'instances' list. JSON object: {} "
       "keys must be equal to: x"},
      {R"({"signature_name": "pair", "instances": [{"a": 1, "b": 2}, [1, 2]]})",
       "Expecting object but got list at item 1 of input list"},
      {R"({"signature_name": "none", "instances": [[1, 2]]})",
       "the signature has no input to feed it to"},
      {R"({"signature_name": "none", "instances": [{"x": 1}]})",
       "JSON object: does not have named input: x"},
      {R"({"signature_name": "pair", "instances": [{"a": 1, "b": true}]})",
       "Failed to process element: 0 key: b of 'instances' list. Error: "
       "INVALID_ARGUMENT: JSON Value: true Type: True is not of expected type: "
       "int64"},
  };
  for (const auto& c : cases) {
    auto bad = Parse(c.body);
    ASSERT_FALSE(bad.ok()) << c.body;
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << c.body;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), c.message))
        << c.body << "\n  got: " << bad.status().message();
  }
}

TEST(RestJson, ColumnarFormatTakesWholeTensors) {
  auto request = Parse(R"({"inputs": [[1, 2], [3, 4], [5, 6]]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->format, PredictFormat::kColumnar);
  EXPECT_EQ(request->inputs.at("x").shape().DebugString(), "[3,2]");
  request = Parse(R"({"signature_name": "pair",
                      "inputs": {"a": [1, 2, 3], "b": [4]}})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("a").shape().DebugString(), "[3]");
  EXPECT_EQ(request->inputs.at("b").shape().DebugString(), "[1]");
}

TEST(RestJson, BareNaNAndInfinityAreFloatsAsInTensorFlowServing) {
  auto request = Parse(
      R"({"signature_name": "pair", "instances": [{"a": NaN, "b": 1},
          {"a": Infinity, "b": 2}, {"a": -Infinity, "b": 3}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  const Tensor& a = request->inputs.at("a");
  ASSERT_EQ(a.shape().DebugString(), "[3]");
  EXPECT_TRUE(std::isnan(a.flat<float>()[0]));
  EXPECT_EQ(a.flat<float>()[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(a.flat<float>()[2], -std::numeric_limits<float>::infinity());
  // Columnar, and the tokens inside strings are left alone.
  auto columnar =
      Parse(R"({"inputs": [[NaN, 1]], "x-note": "NaN \" Infinity"})");
  ASSERT_TRUE(columnar.ok()) << columnar.status();
  EXPECT_TRUE(std::isnan(columnar->inputs.at("x").flat<float>()[0]));
  EXPECT_EQ(columnar->inputs.at("x").flat<float>()[1], 1.0f);
  // RapidJSON's kParseNanAndInfFlag also takes Inf, -Inf and -NaN.
  auto short_forms = Parse(R"({"inputs": [[Inf, -Inf], [-NaN, -Infinity]]})");
  ASSERT_TRUE(short_forms.ok()) << short_forms.status();
  const auto x = short_forms->inputs.at("x").flat<float>();
  EXPECT_EQ(x[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(x[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(x[2]));
  EXPECT_EQ(x[3], -std::numeric_limits<float>::infinity());
}

// TensorFlow Serving's reader stops after the first document and skips a
// byte order mark; it does not check strings' UTF-8.
TEST(RestJson, BodiesAreReadAsTensorFlowServingReadsThem) {
  const std::string nul_then_garbage("{\"instances\": [[1, 2]]}\0{", 25);
  for (const std::string& body :
       {std::string(R"({"instances": [[1, 2]]} trailing bytes)"),
        std::string(R"({"instances": [[1, 2]]}{"instances": [[3, 4]]})"),
        std::string(R"({"inputs": [[1, NaN]]}})"), nul_then_garbage,
        std::string("\xEF\xBB\xBF") + R"({"instances": [[1, 2]]})",
        std::string(R"({"note": ")") + "\xFF\xFE" +
            R"(", "instances": [[1, 2]]})"}) {
    auto request = Parse(body);
    ASSERT_TRUE(request.ok()) << body << ": " << request.status();
    const Tensor& x = request->inputs.at("x");
    EXPECT_EQ(x.shape().DebugString(), "[1,2]") << body;
    EXPECT_EQ(x.flat<float>()[0], 1.0f) << body;
  }
  // A literal past the double range that RapidJSON 1.1.0 does not refuse
  // (its exponent is within 308 plus the fraction's digits) is infinity.
  auto infinite = Parse(R"({"instances": [[1.5e309, -2.5e309]]})");
  ASSERT_TRUE(infinite.ok()) << infinite.status();
  EXPECT_EQ(infinite->inputs.at("x").flat<float>()[0],
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(infinite->inputs.at("x").flat<float>()[1],
            -std::numeric_limits<float>::infinity());
  // The trailing bytes are not read at all, not even for errors.
  auto two = Parse(R"({"instances": [[1, 2]]} [[[ "unclosed)");
  ASSERT_TRUE(two.ok()) << two.status();
}

TEST(RestJson, BadRequestsGetTensorFlowServingsMessages) {
  const std::map<std::string, std::string> cases = {
      {"", "JSON Parse error: The document is empty"},
      {"{\"instances\": [1,", "JSON Parse error: Invalid value. at offset: 17"},
      {"[1, 2]", "Is not object"},
      {R"({"signature_name": 3, "instances": [[1, 2]]})",
       "'signature_name' key must be a string value."},
      {R"({"signature_name": "nope", "instances": [[1, 2]]})",
       "Serving signature name: \"nope\" not found in signature def"},
      {R"({"instances": [[1, 2]], "inputs": [[1, 2]]})",
       "expecting only one of 'inputs' or 'instances' keys to exist"},
      {R"({"rows": [[1, 2]]})", "Missing 'inputs' or 'instances' key"},
      // TensorFlow Serving's words about the whole body.
      {R"({"instances": 5})",
       "JSON Value: {\n    \"instances\": 5\n} Expecting 'instances' to be "
       "an list/array"},
      // Its arrays on one line; a NaN, which its writer refuses, ends the
      // quoted text.
      {R"({"instances": {"a": [1, [2.5, {"b": []}]], "c": [NaN, 3]}})",
       "JSON Value: {\n    \"instances\": {\n        \"a\": [1, [2.5, {\n"
       "                    \"b\": []\n                }]],\n"
       "        \"c\": [ Expecting 'instances' to be an list/array"},
      {R"({"instances": []})",
       "JSON Value: {\n    \"instances\": []\n} No values in 'instances' "
       "array"},
      {R"({"instances": [[1, 2], [3, 4], [5, 6, 7]]})",
       "Failed to process element: 2 of 'instances' list. Error: "
       "INVALID_ARGUMENT: Expecting tensor size: 2 but got: 3"},
      {R"({"instances": [[1, 2], [[3, 4]]]})",
       "Expecting shape [2] but got: [1,2]"},
      {R"({"instances": [[1, "two"]]})",
       "JSON Value: \"two\" Type: String is not of expected type: float"},
      // A leaf where the first instance had a list; TensorFlow Serving
      // counts the leaf's level from 1 and the expected one from 0.
      {R"({"instances": [[[1], 2]]})",
       "JSON Value: 2 found at incorrect level: 2 in the JSON DOM. Expected "
       "at level: 2"},
      {R"({"inputs": [[1, 2], [3]]})",
       "Encountered list at unexpected size: 1 at level: 1 expected size: 2"},
      {R"({"signature_name": "pair", "instances": [1, 2]})",
       "instances is a plain list, but expecting list of objects"},
      {R"({"signature_name": "pair", "instances": [{"a": 1}]})",
       "keys must be equal to: a,b"},
      {R"({"signature_name": "pair", "inputs": {"a": [1]}})",
       "Missing named input: b in 'inputs' object."},
      {R"({"signature_name": "pair", "inputs": {"a": [1], "b": [true]}})",
       "JSON Value: true Type: True is not of expected type: int64"},
      // The non-finite tokens are floats only, and only bare.
      {R"({"signature_name": "pair", "inputs": {"a": [1], "b": [NaN]}})",
       "JSON Value:  Type: Number is not of expected type: int64"},
      {R"({"instances": [[1, "NaN"]]})",
       "JSON Value: \"NaN\" Type: String is not of expected type: float"},
      {R"({"instances": [[1, Nan]]})",
       "JSON Parse error: Invalid value. at offset: 21"},
      // RapidJSON's error for a literal past the double range (Boost.JSON
      // would read infinity), on the fast path's rows and the tree's.
      {R"({"instances": [[1e400, 2]]})",
       "JSON Parse error: Number too big to be stored in double. at "
       "offset: 16"},
      {R"({"inputs": {"x": [[-1e400, 2]]}, "other": 1})",
       "JSON Parse error: Number too big to be stored in double. at "
       "offset: 19"},
      // Boost.JSON reads 0e400 as NaN; RapidJSON refuses it as above.
      {R"({"instances": [[0e400, 2]]})",
       "JSON Parse error: Number too big to be stored in double. at "
       "offset: 16"},
      {R"({"inputs": {"x": [[1, -0.000e400]]}})",
       "JSON Parse error: Number too big to be stored in double. at "
       "offset: 22"},
      // TensorFlow Serving's binary string is a value, not named inputs:
      // where a float belongs, a type error.
      {R"({"instances": [{"b64": "aGk="}, {"b64": "aGk="}]})",
       "Failed to process element: 0 of 'instances' list. Error: "
       "INVALID_ARGUMENT: JSON Value: {\n    \"b64\": \"aGk=\"\n} Type: "
       "Object is not of expected type: float"},
      {R"({"inputs": {"b64": "aGk="}})",
       "JSON Value: {\n    \"b64\": \"aGk=\"\n} Type: Object is not of "
       "expected type: float"},
      // A decimal where an integer belongs, written as TensorFlow Serving
      // writes it (RapidJSON's dtoa, not Boost.JSON's 2.5E0).
      {R"({"signature_name": "pair", "inputs": {"a": [1], "b": [2.5]}})",
       "JSON Value: 2.5 Type: Number is not of expected type: int64"},
      {R"({"signature_name": "pair", "inputs": {"a": [1], "b": [1e39]}})",
       "JSON Value: 1e39 Type: Number is not of expected type: int64"},
      {R"({"instances": [[1, NaN]})",
       "JSON Parse error: Missing a comma or ']' after an array element. at "
       "offset: 23"},
      // RapidJSON's verdicts, offsets included, as TensorFlow Serving
      // reports them (its http_rest_api_handler_test.cc asks for "JSON
      // Parse error: Invalid value" on this body).
      {"instances = [1, 2]", "JSON Parse error: Invalid value. at offset: 0"},
      {"  \n ", "JSON Parse error: The document is empty. at offset: 4"},
      {R"({"instances" [[1, 2]]})",
       "JSON Parse error: Missing a colon after a name of object member. at "
       "offset: 13"},
      {R"({"instances": [[1, 2]] "x": 1})",
       "JSON Parse error: Missing a comma or '}' after an object member. at "
       "offset: 23"},
      {R"({instances: [[1, 2]]})",
       "JSON Parse error: Missing a name for object member. at offset: 1"},
      {R"({"instances": [[1, 2],]})",
       "JSON Parse error: Invalid value. at offset: 22"},
      {R"({"instances": [[1., 2]]})",
       "JSON Parse error: Miss fraction part in number. at offset: 18"},
      {R"({"instances": [[1e, 2]]})",
       "JSON Parse error: Miss exponent in number. at offset: 18"},
      {R"({"instances": [["a\qb"]]})",
       "JSON Parse error: Invalid escape character in string. at offset: 18"},
      {R"({"instances": [["a)",
       "JSON Parse error: Missing a closing quotation mark in string. at "
       "offset: 18"},
  };
  for (const auto& [body, message] : cases) {
    auto request = Parse(body);
    ASSERT_FALSE(request.ok()) << body;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(request.status().message(), message))
        << body << "\n  got: " << request.status().message();
  }
}

// A number a float (or a double) cannot hold exactly is rounded, and one
// past a float's range is an infinity, as TensorFlow Serving's REST API
// documentation says ("Floating Point Precision": 1435774380 sent for a
// float input is 1435774336), on the fast path and the tree's alike.
TEST(RestJson, NumbersAFloatCannotHoldAreRoundedAsTensorFlowServingDoes) {
  for (const std::string body :
       {R"({"instances": [[1435774380, 16777217], [1e39, -3.5e38], [0.1, 2]]})",
        // Named rows, which only the tree path reads.
        R"({"instances": [{"x": [1435774380, 16777217]}, {"x": [1e39,)"
        R"( -3.5e38]}, {"x": [0.1, 2]}]})"}) {
    SCOPED_TRACE(body);
    auto request = Parse(body);
    ASSERT_TRUE(request.ok()) << request.status();
    auto x = request->inputs.at("x").flat<float>();
    ASSERT_EQ(x.size(), 6u);
    EXPECT_EQ(x[0], 1435774336.0f);
    EXPECT_EQ(x[1], 16777216.0f);
    EXPECT_EQ(x[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(x[3], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(x[4], 0.1f);
  }
  std::map<std::string, Signature> wide;
  wide[kDefaultServingSignature].inputs["w"] =
      Spec(DType::kDouble, TensorShape{-1});
  auto request =
      ParsePredictRequest(R"({"instances": [9007199254740993]})", wide);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs.at("w").flat<double>()[0], 9007199254740992.0);
}

// The edges of what a float holds exactly are taken, and a literal
// RapidJSON reads as zero is zero, however Boost.JSON reads it.
TEST(RestJson, NumbersAFloatHoldsExactlyAreTaken) {
  auto request = Parse(
      R"({"inputs": [[16777215, -16777215], [3.4028234e38, -3.4028234e38],)"
      R"( [1e-400, 0.0e309]]})");
  ASSERT_TRUE(request.ok()) << request.status();
  auto x = request->inputs.at("x").flat<float>();
  ASSERT_EQ(x.size(), 6u);
  EXPECT_EQ(x[0], 16777215.0f);
  EXPECT_EQ(x[1], -16777215.0f);
  EXPECT_EQ(x[2], 3.4028234e38f);
  EXPECT_EQ(x[3], -3.4028234e38f);
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_EQ(x[5], 0.0f);
}

TEST(RestJson, RowResponsesHaveOneItemPerRow) {
  NamedTensors one{{"y", Tensor::FromVector<float>({3.5f, 4.0f, 0.1f})}};
  auto body = RenderPredictResponse(PredictFormat::kRow, one);
  ASSERT_TRUE(body.ok());
  // TensorFlow Serving's layout (RapidJSON's PrettyWriter as json_tensor.cc
  // drives it): the rows on the first line, the array closed on its own.
  EXPECT_EQ(*body, "{\n    \"predictions\": [3.5, 4.0, 0.1\n    ]\n}");
  NamedTensors two{
      {"classes", Tensor::FromVector<int64_t>({7, 1})},
      {"probabilities", Tensor::FromVector<float>({0.25f, 0.75f, 1.0f, 0.0f},
                                                  TensorShape{2, 2})}};
  body = RenderPredictResponse(PredictFormat::kRow, two);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            "{\n    \"predictions\": [\n        {\n"
            "            \"classes\": 7,\n"
            "            \"probabilities\": [0.25, 0.75]\n        },\n"
            "        {\n            \"classes\": 1,\n"
            "            \"probabilities\": [1.0, 0.0]\n        }\n    ]\n}");
  NamedTensors matrix{
      {"y", Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2})}};
  body = RenderPredictResponse(PredictFormat::kRow, matrix);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, "{\n    \"predictions\": [[1.0, 2.0], [3.0, 4.0]\n    ]\n}");
  NamedTensors none{{"y", Tensor::FromVector<float>({})}};
  body = RenderPredictResponse(PredictFormat::kRow, none);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, "{\n    \"predictions\": []\n}");
  NamedTensors ragged{{"a", Tensor::FromVector<float>({1, 2})},
                      {"b", Tensor::FromVector<float>({1, 2, 3})}};
  body = RenderPredictResponse(PredictFormat::kRow, ragged);
  EXPECT_TRUE(absl::StrContains(body.status().message(),
                                "has inconsistent batch size: 3 expecting: 2"))
      << body.status();
  NamedTensors scalar{{"s", Tensor::Scalar<float>(1)}};
  body = RenderPredictResponse(PredictFormat::kRow, scalar);
  EXPECT_TRUE(absl::StrContains(body.status().message(),
                                "Tensor name: s has no shape information"));
}

// Numbers come out with TensorFlow Serving's digits (json_tensor.cc's
// WriteDecimal): printf's %g, or max_digits10 when six significant digits
// do not read back as the value, and ".0" after whole numbers.
TEST(RestJson, NumbersHaveTensorFlowServingsDigits) {
  NamedTensors floats{{"y", Tensor::FromVector<float>(
                                {0.99999905f, 2.636792e-12f, 0.1f, 100000.0f,
                                 1e6f, 2.5e-5f, -0.0f, 123456.7f, 3.0f})}};
  auto body = RenderPredictResponse(PredictFormat::kRow, floats);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            "{\n    \"predictions\": [0.999999046, 2.63679204e-12, 0.1, "
            "100000.0, 1e+06, 2.5e-05, -0.0, 123456.703, 3.0\n    ]\n}");
  NamedTensors doubles{
      {"y", Tensor::FromVector<double>({1.0 / 3.0, 0.1, 1e-7, 2.0})}};
  body = RenderPredictResponse(PredictFormat::kRow, doubles);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            "{\n    \"predictions\": [0.33333333333333331, 0.1, 1e-07, 2.0"
            "\n    ]\n}");
}

TEST(RestJson, ColumnarResponsesAndSpecialValues) {
  NamedTensors one{{"y", Tensor::FromVector<double>(
                             {1e300, std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN(), -2})}};
  auto body = RenderPredictResponse(PredictFormat::kColumnar, one);
  ASSERT_TRUE(body.ok());
  // A columnar answer has one value a line, as TensorFlow Serving's.
  EXPECT_EQ(*body,
            "{\n    \"outputs\": [\n        1e+300,\n        Infinity,\n"
            "        NaN,\n        -2.0\n    ]\n}");
  Tensor yes(DType::kBool, TensorShape{1});
  yes.mutable_flat<bool>()[0] = true;
  NamedTensors two{{"a", yes}, {"b", Tensor::Scalar<int32_t>(-5)}};
  body = RenderPredictResponse(PredictFormat::kColumnar, two);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            "{\n    \"outputs\": {\n        \"a\": [\n            true\n"
            "        ],\n        \"b\": -5\n    }\n}");
  EXPECT_EQ(RenderErrorBody("bad \"x\"\n"),
            "{\n    \"error\": \"bad \\\"x\\\"\\n\"\n}");
}

}  // namespace
}  // namespace cosession::rest_json_test
