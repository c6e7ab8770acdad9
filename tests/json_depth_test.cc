// JsonNestingDepth and the JsonStringState it scans with: brackets inside
// strings (escaped quotes included) do not count, and the scan stops above
// its limit.
#include "cosession/io/json_depth.h"

#include <gtest/gtest.h>

#include <string>

#include "cosession/io/json_string_state.h"

namespace cosession::json_depth_test {
namespace {

TEST(JsonDepth, CountsNestingOutsideStringsOnly) {
  EXPECT_EQ(JsonNestingDepth(R"(1)", 8), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, [2]]})", 8), 3);
  EXPECT_EQ(JsonNestingDepth(R"({"[[[[": "{{{{"})", 8), 1);
  // An escaped quote does not end the string; an escaped backslash does not
  // escape the quote after it.
  EXPECT_EQ(JsonNestingDepth(R"(["\"[[[", "\\", [1]])", 8), 2);
}

TEST(JsonDepth, StopsAboveTheLimit) {
  const std::string deep(1000, '[');
  EXPECT_EQ(JsonNestingDepth(deep, 16), 17);
}

TEST(JsonStringState, MarksEveryCharacterOfAStringLiteral) {
  JsonStringState strings;
  const std::string text = R"(a"b\"c"d)";
  std::string inside;
  for (char c : text) inside += strings.InString(c) ? 'S' : '-';
  EXPECT_EQ(inside, "-SSSSSS-");
}

}  // namespace
}  // namespace cosession::json_depth_test
