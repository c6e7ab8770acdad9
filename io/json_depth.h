// JsonNestingDepth: how deeply a JSON text nests arrays and objects, found
// by a scan that understands strings, without parsing. Checked before a
// parse of untrusted input so that a deep nesting is refused with a clear
// error instead of costing the parser (and the document's destructor) one
// level of recursion per bracket.
//
// Thread safety: a pure function.
#ifndef COSESSION_IO_JSON_DEPTH_H_
#define COSESSION_IO_JSON_DEPTH_H_

#include "absl/strings/string_view.h"

namespace cosession {

// The deepest nesting of `text` outside strings; stops scanning once it
// exceeds `limit` (and then returns a value above `limit`).
int JsonNestingDepth(absl::string_view text, int limit);

}  // namespace cosession

#endif  // COSESSION_IO_JSON_DEPTH_H_
