// The fast path of a predict body: the common request -- one float or
// double input, its values a rectangular nested list of numbers -- read in
// one pass of Boost.JSON's event parser straight into the tensor, with no
// document tree in between.
//
// A predict body is mostly numbers (an image is hundreds of them), and
// building Boost.JSON's tree for them costs several times the parse itself
// (bench/rest_json_bench.cc measures both). ParsePredictRequest
// (rest_json.h) tries this path first and, when it declines, parses the body
// again through the tree, which covers every form and writes TensorFlow
// Serving's error messages. So this path only ever accepts, never explains:
//
//   * It returns a request only for bodies that ParsePredictRequest's tree
//     path accepts too, and then exactly the request that path returns
//     (the same signature name, format, shape and values, bit for bit).
//     tests/predict_fast_path_test.cc and the request fuzzer check this.
//   * It returns nullopt for anything else: invalid JSON, the bare NaN and
//     Infinity tokens, a signature with several inputs or of another
//     dtype, named rows, ragged or empty lists, non-numbers, duplicate
//     keys. Numbers are converted as the tree path converts them
//     (rest_json.h's JsonNumberAs: 16777217 is 16777216 in a float).
//
// Accepted forms (the signature named by "signature_name", default
// serving_default, has exactly one input, of dtype float or double):
//   {"instances": <list>}            row format
//   {"inputs": <tensor>}             columnar format
//   {"inputs": {"<input>": <tensor>, ...}}
// with "signature_name" anywhere among the keys and other keys ignored, as
// the tree path ignores them.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_PREDICT_FAST_PATH_H_
#define COSESSION_SERVING_PREDICT_FAST_PATH_H_

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "cosession/serving/rest_json.h"
#include "cosession/serving/saved_model.h"

namespace cosession {

std::optional<PredictRequest> TryParseDensePredictRequest(
    absl::string_view body, const std::map<std::string, Signature>& signatures);

}  // namespace cosession

#endif  // COSESSION_SERVING_PREDICT_FAST_PATH_H_
