// libFuzzer target: the parsers of TensorFlow Serving's predict, classify
// and regress bodies (serving/rest_json.h) must never crash, hang or
// allocate beyond a small multiple of the input on any bytes, and answer
// OK or InvalidArgument; what they parse is rendered back (predict's in
// both response formats; an example's features as classify's scores and
// regress's values). Whenever the predict body's fast path
// (serving/predict_fast_path.h) takes a body, the tree path must accept it
// too and give the same request, byte for byte. Seeds:
// fuzz/corpus/rest_json/.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "cosession/serving/predict_fast_path.h"
#include "cosession/serving/rest_json.h"

namespace {

const std::map<std::string, cosession::Signature>& Signatures() {
  static const auto* sigs = [] {
    using cosession::DType;
    using cosession::TensorShape;
    auto* s = new std::map<std::string, cosession::Signature>;
    auto spec = [](DType d, TensorShape shape) {
      return cosession::SignatureTensor{
          .tensor = cosession::Output(), .dtype = d, .shape = shape};
    };
    (*s)["serving_default"].inputs["x"] =
        spec(DType::kFloat, TensorShape{-1, 2});
    (*s)["wide"].inputs["w"] = spec(DType::kDouble, TensorShape::Unknown());
    (*s)["pair"].inputs["a"] = spec(DType::kInt32, TensorShape::Unknown());
    (*s)["pair"].inputs["b"] = spec(DType::kBool, TensorShape::Unknown());
    // Examples' features: a row of any length, an integer, a bool.
    cosession::Signature& c = (*s)["classification"];
    c.method_name = cosession::kClassifyMethodName;
    c.inputs["x"] = spec(DType::kFloat, TensorShape{-1, -1});
    c.inputs["n"] = spec(DType::kInt64, TensorShape{-1});
    c.inputs["b"] = spec(DType::kBool, TensorShape{-1, 2});
    c.outputs["scores"] = spec(DType::kFloat, TensorShape{-1, -1});
    cosession::Signature& r = (*s)["regression"];
    r.method_name = cosession::kRegressMethodName;
    r.inputs["x"] = spec(DType::kFloat, TensorShape{-1, 1});
    r.outputs["outputs"] = spec(DType::kFloat, TensorShape{-1, 1});
    return s;
  }();
  return *sigs;
}

}  // namespace

// The examples parsers, and their features rendered as the method's answer.
void FuzzExamples(absl::string_view body) {
  using cosession::ExamplesMethod;
  for (ExamplesMethod method :
       {ExamplesMethod::kClassify, ExamplesMethod::kRegress}) {
    auto request = cosession::ParseExamplesRequest(body, method, Signatures());
    if (!request.ok()) {
      if (!absl::IsInvalidArgument(request.status())) __builtin_trap();
      continue;
    }
    cosession::NamedTensors outputs{
        {method == ExamplesMethod::kClassify ? "scores" : "outputs",
         request->inputs.at("x")}};
    auto rendered = cosession::RenderExamplesResponse(method, outputs,
                                                      request->num_examples);
    if (!rendered.ok() && !absl::IsInvalidArgument(rendered.status())) {
      __builtin_trap();
    }
  }
}

// The fast path's request, if it takes the body, is the tree path's.
void FuzzPredictFastPath(absl::string_view body) {
  std::optional<cosession::PredictRequest> dense =
      cosession::TryParseDensePredictRequest(body, Signatures());
  if (!dense.has_value()) return;
  auto tree = cosession::ParsePredictRequestThroughTree(body, Signatures());
  if (!tree.ok() || tree->signature_name != dense->signature_name ||
      tree->format != dense->format ||
      tree->inputs.size() != dense->inputs.size()) {
    __builtin_trap();
  }
  for (const auto& [name, t] : dense->inputs) {
    auto other = tree->inputs.find(name);
    if (other == tree->inputs.end() || other->second.dtype() != t.dtype() ||
        other->second.shape() != t.shape() ||
        other->second.TotalBytes() != t.TotalBytes() ||
        (t.TotalBytes() > 0 &&
         std::memcmp(other->second.raw_data(), t.raw_data(), t.TotalBytes()) !=
             0)) {
      __builtin_trap();
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  FuzzExamples(body);
  FuzzPredictFastPath(body);
  auto request = cosession::ParsePredictRequest(body, Signatures());
  if (!request.ok()) {
    if (!absl::IsInvalidArgument(request.status())) __builtin_trap();
    return 0;
  }
  for (auto format :
       {cosession::PredictFormat::kRow, cosession::PredictFormat::kColumnar}) {
    auto rendered = cosession::RenderPredictResponse(format, request->inputs);
    if (!rendered.ok() && !absl::IsInvalidArgument(rendered.status())) {
      __builtin_trap();
    }
  }
  return 0;
}
