// JsonValueText: a JSON value as TensorFlow Serving quotes it in its error
// messages ("JSON Value: <value> ..."), which its clients match on.
//
// TensorFlow Serving (util/json_tensor.cc, JsonValueToString) writes the
// value with RapidJSON's PrettyWriter:
//   {
//       "instances": [
//           1,
//           2.5
//       ]
//   }
// four spaces a level, one member or element a line, `"key": value`, `[]`
// and `{}` when empty; strings with RapidJSON's escapes (\" \\ \b \f \n \r
// \t, \u00XX upper-case for other control characters, nothing else
// escaped); integers in decimal; a decimal with RapidJSON's shortest digits
// laid out as its dtoa does (1.5, 100.0, 0.001234, 1e30, 1.234e-7, -0.0).
// (RapidJSON's Grisu2 gives the shortest digits in all but rare cases;
// these are std::to_chars' shortest.) A scalar decimal on its own is not
// written here: JsonValueToString writes it as the answers write numbers
// (serving/rest_json.cc).
//
// `verbatim` may give the text of a value to write as it is (the request
// parser's stand-ins for the NaN and Infinity tokens), or nullopt. The text
// is cut at `max_bytes`, and the writing stops there: quoting a large body
// costs no more than its first bytes.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_JSON_VALUE_TEXT_H_
#define COSESSION_SERVING_JSON_VALUE_TEXT_H_

#include <boost/json/value.hpp>
#include <cstddef>
#include <optional>
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
    absl::FunctionRef<std::optional<std::string>(const boost::json::value&)>
        verbatim,
    size_t max_bytes = std::string::npos);

}  // namespace cosession

#endif  // COSESSION_SERVING_JSON_VALUE_TEXT_H_
