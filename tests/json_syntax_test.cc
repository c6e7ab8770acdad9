// The verdicts of serving/json_syntax.h: RapidJSON 1.1.0's, under
// TensorFlow Serving's flags. Each expectation was derived from RapidJSON's
// reader by hand and agrees with RapidJSON 1.1.0 itself (Debian's
// rapidjson-dev), which also agreed with the check on a million mutated
// request bodies and two million number literals.
#include "cosession/serving/json_syntax.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cosession::json_syntax_test {
namespace {

struct Refused {
  std::string text;
  std::string error;
  size_t offset;
};

TEST(JsonSyntax, MalformedTextGetsRapidJsonsMessageAndOffset) {
  const std::vector<Refused> cases = {
      {"", "The document is empty.", 0},
      {" \t\r\n", "The document is empty.", 4},
      // RapidJSON reports a document that opens with a closing token as
      // empty too.
      {"]", "The document is empty.", 0},
      {"instances = [1, 2]", "Invalid value.", 0},
      {"[1, 2", "Missing a comma or ']' after an array element.", 5},
      {"[1 2]", "Missing a comma or ']' after an array element.", 3},
      {"[1,]", "Invalid value.", 3},
      {"[1,", "Invalid value.", 3},
      {"{", "Missing a name for object member.", 1},
      {"{a: 1}", "Missing a name for object member.", 1},
      {R"({"a": 1,})", "Missing a name for object member.", 8},
      {R"({"a" 1})", "Missing a colon after a name of object member.", 5},
      {R"({"a": 1 "b": 2})", "Missing a comma or '}' after an object member.",
       8},
      {R"({"a": [1}])", "Missing a comma or ']' after an array element.", 8},
      {R"({"a": })", "Invalid value.", 6},
      // Literals: the error is at the first byte that breaks the spelling.
      {R"({"a": nul})", "Invalid value.", 9},
      {R"({"a": tru })", "Invalid value.", 9},
      {R"({"a": fals})", "Invalid value.", 10},
      {R"({"a": -x})", "Invalid value.", 7},
      {R"({"a": Nan})", "Invalid value.", 8},
      {R"({"a": Infinit})", "Invalid value.", 13},
      // Strings: escapes are reported at their backslash.
      {R"({"a": "x\q"})", "Invalid escape character in string.", 8},
      {R"({"a": "x\u12G4"})", "Incorrect hex digit after \\u escape in string.",
       8},
      {R"({"a": "\uD800x"})", "The surrogate pair in string is invalid.", 7},
      {R"({"a": "\uD800\u0041"})", "The surrogate pair in string is invalid.",
       7},
      {R"({"a": "abc)", "Missing a closing quotation mark in string.", 10},
      // A raw control character: 1.1.0's message is the escape one.
      {"{\"a\": \"x\ty\"}", "Invalid escape character in string.", 8},
      // Numbers.
      {R"({"a": 1.})", "Miss fraction part in number.", 8},
      {R"({"a": 1.e5})", "Miss fraction part in number.", 8},
      {R"({"a": 1e})", "Miss exponent in number.", 8},
      {R"({"a": 1e+})", "Miss exponent in number.", 9},
      {R"({"a": 01})", "Missing a comma or '}' after an object member.", 7},
      {R"({"a": 1e400})", "Number too big to be stored in double.", 6},
      {R"({"a": -1e309})", "Number too big to be stored in double.", 6},
      // The exponent alone decides, whatever the significand.
      {R"({"a": 0e400})", "Number too big to be stored in double.", 6},
      {R"({"a": 0.5e310})", "Number too big to be stored in double.", 6},
      // An integer part that reaches DBL_MAX / 10 before its last digit.
      {R"({"a": 1)" + std::string(309, '0') + "}",
       "Number too big to be stored in double.", 6},
      // A NUL ends the input, inside a document too.
      {std::string("{\"a\": 1\0}", 9),
       "Missing a comma or '}' after an object member.", 7},
      // After NaN or Infinity, 1.1.0 reads a fraction and an exponent.
      {R"({"a": NaN.})", "Miss fraction part in number.", 10},
      {R"({"a": Infe})", "Miss exponent in number.", 10},
  };
  for (const Refused& c : cases) {
    const JsonSyntaxVerdict verdict = CheckJsonSyntax(c.text);
    EXPECT_EQ(verdict.error, c.error) << c.text;
    EXPECT_EQ(verdict.error_offset, c.offset) << c.text;
    EXPECT_FALSE(verdict.ok()) << c.text;
  }
}

struct Taken {
  std::string text;
  size_t begin;
  size_t end;
};

TEST(JsonSyntax, WellFormedTextEndsWithItsFirstDocument) {
  const std::vector<Taken> cases = {
      {R"({"a": [1, 2.5e-3, -0, true, false, null, "s\"\u00e9"]})", 0, 54},
      {R"( {"a": 1}  trailing ] bytes)", 0, 9},
      {R"({"a": 1}{"b": 2})", 0, 8},
      {"[[[]]] x", 0, 6},
      {"5 6", 0, 1},
      {"\"s\" x", 0, 3},
      {std::string("{\"a\": 1}\0{", 10), 0, 8},
      // The byte order mark is skipped; its bytes are not the document's.
      {"\xEF\xBB\xBF{\"a\": 1}", 3, 11},
      // Strings are not checked for UTF-8, and 1.1.0 lets a lone low
      // surrogate through.
      {R"({"a": "\uDC00"})", 0, 15},
      {"{\"a\": \"\xFF\xFE\"}", 0, 11},
      // The non-finite spellings 1.1.0 takes, and a number it reads as
      // infinity rather than refusing (its exponent is within 308 plus the
      // fraction's digits).
      {R"([NaN, -NaN, Inf, -Infinity, NInf, 1.5e309, 1e-400])", 0, 50},
      {R"([)" + std::string(308, '9') + "]", 0, 310},
  };
  for (const Taken& c : cases) {
    const JsonSyntaxVerdict verdict = CheckJsonSyntax(c.text);
    EXPECT_TRUE(verdict.ok())
        << c.text << ": " << verdict.error << " at " << verdict.error_offset;
    EXPECT_EQ(verdict.document_begin, c.begin) << c.text;
    EXPECT_EQ(verdict.document_end, c.end) << c.text;
  }
}

}  // namespace
}  // namespace cosession::json_syntax_test
