// The JSON bodies of TensorFlow Serving's REST predict API, to and from
// tensors: what `POST /v1/models/{name}:predict` reads and answers.
//
// Request (https://www.tensorflow.org/tfx/serving/api_rest):
//   {"signature_name": "serving_default",        (optional)
//    "instances": [<row>, <row>, ...]}           row format, or
//    "inputs": <tensor> | {"x": <tensor>, ...}}   columnar format
// With one signature input a row is that input's value for one item; with
// several, an object with exactly the signature's input names. Rows are
// stacked along a new first dimension. A tensor is a number, a bool or
// nested lists, its shape given by the first element at each level.
// Response: {"predictions": [...]} (one item per row; an object of the
// outputs per item when there are several) for the row format,
// {"outputs": <tensor> | {"name": <tensor>, ...}} for the columnar one.
// Floats are written in their shortest exact form, a whole number with
// ".0"; NaN and infinities as the bare tokens NaN, Infinity, -Infinity, as
// TensorFlow Serving writes them.
//
// Errors are InvalidArgument with TensorFlow Serving's messages (its
// util/json_tensor.cc), which clients match on: "JSON Parse error: ...",
// "Missing 'inputs' or 'instances' key", "Failed to process element: 2 of
// 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 2 but
// got: 3", "Missing named input: x in 'inputs' object.", ... As in
// TensorFlow Serving, the bare tokens NaN, Infinity and -Infinity are float
// values in requests too.
//
// The parser is Boost.JSON's (already part of the Boost the project uses;
// nesting is bounded at 64 levels). Thread safety: pure functions.
#ifndef COSESSION_SERVING_REST_JSON_H_
#define COSESSION_SERVING_REST_JSON_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/serving/batching_session.h"
#include "cosession/serving/saved_model.h"

namespace cosession {

enum class PredictFormat { kRow, kColumnar };

struct PredictRequest {
  std::string signature_name{};
  PredictFormat format = PredictFormat::kRow;
  NamedTensors inputs{};  // one per signature input, dtypes as it says
};

// Parses a predict body against the model's signatures. An unknown
// signature is InvalidArgument `Serving signature name: "s" not found in
// signature def`.
absl::StatusOr<PredictRequest> ParsePredictRequest(
    absl::string_view body, const std::map<std::string, Signature>& signatures);

// The response body for `outputs` in `format`. InvalidArgument for a row
// response whose outputs have no batch dimension or different ones.
absl::StatusOr<std::string> RenderPredictResponse(PredictFormat format,
                                                  const NamedTensors& outputs);

// {"error": "<message>"}.
std::string RenderErrorBody(absl::string_view message);

}  // namespace cosession

#endif  // COSESSION_SERVING_REST_JSON_H_
