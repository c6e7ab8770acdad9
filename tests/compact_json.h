// A JSON text without the whitespace between its tokens: what a serving
// test compares an answer's content with, digits included, apart from the
// layout (which rest_json_test checks byte for byte).
#ifndef COSESSION_TESTS_COMPACT_JSON_H_
#define COSESSION_TESTS_COMPACT_JSON_H_

#include <string>
#include <string_view>

namespace cosession::testing {

inline std::string CompactJson(std::string_view text) {
  std::string out;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      out += c;
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    if (c == '"') in_string = true;
    out += c;
  }
  return out;
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_COMPACT_JSON_H_
