// The verdict TensorFlow Serving's JSON reader gives on a request body.
//
// TensorFlow Serving parses bodies with RapidJSON, iteratively, with NaN
// and Infinity allowed, and stopping after the first complete document
// (its util/json_tensor.cc). Its clients therefore see:
//   - a body with bytes after its document accepted (`{"instances": [1]} x`
//     predicts), and a leading UTF-8 byte order mark skipped;
//   - a malformed body refused with RapidJSON's English message and the
//     byte offset where RapidJSON stopped, e.g. "JSON Parse error: Invalid
//     value. at offset: 0" for `instances = [1, 2]`.
// Boost.JSON, the parser cosession reads bodies with (chosen by
// measurement: bench/rest_json_bench.cc), neither accepts the first nor
// reports the second. So when Boost.JSON refuses a body, or reads a number
// past the double range, the server asks this check, which walks the bytes
// with RapidJSON's grammar and error rules (its iterative reader's states
// and messages, written from its documentation and behaviour) and builds
// nothing: it says where the document ends, or why and where the body is
// malformed. Well-formed bodies never pay for it. (RapidJSON itself is not
// used: Debian's 1.1.0 does pointer arithmetic on null, which the
// sanitizer builds stop at.)
//
// A NUL byte ends the input, as it ends RapidJSON's memory stream. Nesting
// is not limited here (RapidJSON's iterative reader has no limit); the
// server's own depth limit is Boost.JSON's.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_JSON_SYNTAX_H_
#define COSESSION_SERVING_JSON_SYNTAX_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace cosession {

struct JsonSyntaxVerdict {
  // The first document's bytes, [document_begin, document_end): after a
  // byte order mark, up to and including its last byte. Meaningful when
  // `error` is empty.
  size_t document_begin = 0;
  size_t document_end = 0;
  // RapidJSON's message for the first error (GetParseError_En's wording,
  // e.g. "Invalid value."), empty when the document is well formed.
  std::string error;
  // The byte offset RapidJSON reports with `error`.
  size_t error_offset = 0;

  bool ok() const { return error.empty(); }
};

JsonSyntaxVerdict CheckJsonSyntax(absl::string_view text);

}  // namespace cosession

#endif  // COSESSION_SERVING_JSON_SYNTAX_H_
