// libFuzzer target: the parser of TensorFlow Serving predict bodies
// (serving/rest_json.h) must never crash, hang or allocate beyond a small
// multiple of the input on any bytes, and answers OK or InvalidArgument;
// what it parses is rendered back in both response formats. Seeds:
// fuzz/corpus/rest_json/.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/string_view.h"
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
    (*s)["pair"].inputs["a"] = spec(DType::kInt32, TensorShape::Unknown());
    (*s)["pair"].inputs["b"] = spec(DType::kBool, TensorShape::Unknown());
    return s;
  }();
  return *sigs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
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
