// The JSON bodies of TensorFlow Serving's REST API, to and from tensors:
// what `POST /v1/models/{name}:predict`, `:classify` and `:regress` read
// and answer.
//
// Predict:
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
// Answers are laid out and their numbers written as TensorFlow Serving
// writes them (its util/json_tensor.cc, RapidJSON's PrettyWriter): four
// spaces a level; a row-format answer's rows, and a classify answer's
// examples, follow each other on the key's line, each on one line
// ("predictions": [[1.0, 2.0], [3.0, 4.0]), the array closed on a line of
// its own; a columnar answer has one value a line. A float has six
// significant digits, or max_digits10 when six do not read back as it, a
// whole number ".0"; NaN and infinities are the bare tokens NaN, Infinity,
// -Infinity.
//
// Errors are InvalidArgument with TensorFlow Serving's messages (its
// util/json_tensor.cc), which clients match on: "JSON Parse error: ...",
// "Missing 'inputs' or 'instances' key", "Failed to process element: 2 of
// 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 2 but
// got: 3", "Missing named input: x in 'inputs' object.", ... As in
// TensorFlow Serving, the bare tokens NaN, Infinity and -Infinity are float
// values in requests too.
//
// Classify and regress (TensorFlow Serving's tf.Example-based APIs):
//   {"signature_name": "...",                     (optional)
//    "context": {"<feature>": <value>|<list>},     (optional, every example's)
//    "examples": [{"<feature>": <value>|<list>, ...}, ...]}
// cosession has no string tensors, so no serialized tf.Example and no
// parsing op: a classify or regress signature's inputs are the features
// themselves. Each example's feature of an input's name becomes one row of
// that input, as tf.io.parse_example with a FixedLenFeature of the input's
// per-row shape would make it: a number or a flat list of as many numbers
// as a row holds. Whole numbers are taken for float inputs; a decimal for
// an integer input, a string, a nested list, null, or a feature missing
// from both the example and the context is InvalidArgument naming the
// feature and the example. Features the signature does not name are
// ignored, as parse_example ignores them; a feature in both the context and
// an example is an error (the API says it must not be). A context's values
// are copied into every example, so the values a request makes are
// bounded: kMaxExampleValues in all (InvalidArgument beyond, naming the
// feature).
// Responses: {"results": [[["<label>", <score>], ...], ...]} (one list of
// class label/score pairs per example) and {"results": [<value>, ...]}.
// TensorFlow Serving's server and its documentation's example answer
// "results", its documentation's format section says "result": the answer
// carries both keys, so that clients written from either work.
// Labels are the "classes" output's integers as decimal strings ("" when
// the signature has no "classes"); scores the "scores" output (0 when it
// has none).
//
// The parser is Boost.JSON's (already part of the Boost the project uses;
// nesting is bounded at 64 levels): its event parser for the common predict
// body, its tree for everything else. Thread safety: pure functions.
#ifndef COSESSION_SERVING_REST_JSON_H_
#define COSESSION_SERVING_REST_JSON_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>

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
// signature def`. The common body (one float input, a list of numbers) is
// read in one pass straight into its tensor (predict_fast_path.h); every
// other body, and every error, goes through Boost.JSON's tree.
absl::StatusOr<PredictRequest> ParsePredictRequest(
    absl::string_view body, const std::map<std::string, Signature>& signatures);

// ParsePredictRequest with every body through the tree: what the fast
// path's tests and the request fuzzer compare it with.
absl::StatusOr<PredictRequest> ParsePredictRequestThroughTree(
    absl::string_view body, const std::map<std::string, Signature>& signatures);

// The response body for `outputs` in `format`. InvalidArgument for a row
// response whose outputs have no batch dimension or different ones.
absl::StatusOr<std::string> RenderPredictResponse(PredictFormat format,
                                                  const NamedTensors& outputs);

enum class ExamplesMethod { kClassify, kRegress };

struct ExamplesRequest {
  std::string signature_name{};
  int64_t num_examples = 0;
  NamedTensors inputs{};  // one per signature input, a row per example
};

// Parses a classify or regress body against the model's signatures. The
// signature (default serving_default) must be of the method: otherwise
// InvalidArgument "Expected classification signature method_name to be
// tensorflow/serving/classify. Was: tensorflow/serving/predict", as
// TensorFlow Serving answers; an unknown one is "No signature was found
// with name: s".
// The most values a request's examples may make in all: 64 MiB of floats,
// the size of the largest body cosession_serve reads.
inline constexpr int64_t kMaxExampleValues = int64_t{1} << 24;

absl::StatusOr<ExamplesRequest> ParseExamplesRequest(
    absl::string_view body, ExamplesMethod method,
    const std::map<std::string, Signature>& signatures,
    int64_t max_values = kMaxExampleValues);

// The response body for a classify or regress signature's `outputs` over
// `num_examples` examples. InvalidArgument (TensorFlow Serving's messages)
// when the outputs do not have the dtypes and shapes the method needs.
absl::StatusOr<std::string> RenderExamplesResponse(ExamplesMethod method,
                                                   const NamedTensors& outputs,
                                                   int64_t num_examples);

// What TensorFlow Serving checks of a body before it looks the model up
// (its json_tensor.cc parses the request first): a JSON object, a string
// "signature_name" if any, and for classify and regress (`method` set) the
// examples and context as far as they can be checked without a signature.
// So a malformed body is 400 even for a model that does not exist.
absl::Status CheckBodyBeforeModelLookup(absl::string_view body,
                                        std::optional<ExamplesMethod> method);

// A JSON number, read as `Number` (int64_t or uint64_t for an integer
// literal, double for one with a fraction or an exponent), as TensorFlow
// Serving puts it into a float or double tensor (RapidJSON's GetFloat and
// GetDouble): through a double, then rounded to T. So a number T cannot
// hold exactly is rounded silently and one past a float's range is an
// infinity, as its REST API documentation says ("Floating Point
// Precision": 1435774380 sent for a float input becomes 1435774336).
template <typename T, typename Number>
T JsonNumberAs(Number v) {
  static_assert(std::is_floating_point_v<T>);
  return static_cast<T>(static_cast<double>(v));
}

// TensorFlow's name of a dtype, as its messages and metadata write it:
// DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BOOL.
std::string TfDTypeName(DType dtype);

// {"error": "<message>"}.
std::string RenderErrorBody(absl::string_view message);

}  // namespace cosession

#endif  // COSESSION_SERVING_REST_JSON_H_
