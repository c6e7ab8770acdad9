// JsonValueText: a JSON value as TensorFlow Serving quotes it in its error
// messages ("JSON Value: <value> ..."), which its clients match on.
//
// TensorFlow Serving (util/json_tensor.cc, JsonValueToDebugString) writes
// the value with RapidJSON's PrettyWriter set to single-line arrays:
//   {
//       "instances": [[1, 2.5], {
//               "x": 3
//           }]
//   }
// a member on a line of its own, indented four spaces for each container
// it is in (the arrays count); `"key": value`; an array's elements on its
// line, separated by ", "; `[]` and `{}` when empty; strings with
// RapidJSON's escapes (\" \\ \b \f \n \r \t, \u00XX upper-case for other
// control characters, nothing else escaped); integers in decimal; a
// decimal with RapidJSON's shortest digits laid out as its dtoa does (1.5,
// 100.0, 0.001234, 1e30, 1.234e-7, -0.0), a lone decimal too.
//
// What RapidJSON's writer refuses ends the text: for a value `refused`
// says it would refuse (a NaN or an infinity: TensorFlow Serving's writer
// is not given kWriteNanAndInfFlag), the separator before it is written,
// then nothing more.
//
// TensorFlow Serving bounds the text at 256 bytes (kMaxJsonDebugStringBytes)
// the way its JsonWriterWithLimit does, which JsonValueText does with
// `max_bytes`: each piece RapidJSON's writer is handed (a scalar, a key, a
// container's opening or closing, each with the separator and indentation
// before it) is written whole while fewer than `max_bytes` bytes were
// written, and once that many were, nothing more -- so the text may end a
// piece past `max_bytes`, inside a container, without its closing. Writing
// stops there too: quoting a large body costs no more than its first bytes.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_JSON_VALUE_TEXT_H_
#define COSESSION_SERVING_JSON_VALUE_TEXT_H_

#include <boost/json/value.hpp>
#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace cosession {

// The pieces, for writers of TensorFlow Serving's answers in the same
// layout (serving/rest_json.cc): `level` levels of indentation, and a
// string with RapidJSON's escapes, quoted.
void AppendPrettyIndent(std::string& out, int level);
void AppendRapidJsonString(std::string& out, absl::string_view s);

std::string JsonValueText(
    const boost::json::value& value,
    absl::FunctionRef<bool(const boost::json::value&)> refused,
    size_t max_bytes = std::string::npos);

}  // namespace cosession

#endif  // COSESSION_SERVING_JSON_VALUE_TEXT_H_
