// JsonValueText (serving/json_value_text.h): a JSON value in the bytes
// TensorFlow Serving's error messages quote it with (RapidJSON's
// PrettyWriter with single-line arrays, its dtoa, and json_tensor.cc's
// JsonWriterWithLimit), expected texts worked out from their rules.
#include "cosession/serving/json_value_text.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <string>
#include <utility>
#include <vector>

namespace cosession::json_value_text_test {
namespace {

namespace json = boost::json;

std::string TextOf(const std::string& json_text) {
  return JsonValueText(json::parse(json_text),
                       [](const json::value&) { return false; });
}

TEST(JsonValueText, LaysOutAsRapidJsonsPrettyWriterWithSingleLineArrays) {
  // A member on a line of its own, indented by the containers it is in,
  // arrays included; an array's elements on its line.
  EXPECT_EQ(TextOf(R"({"a": [1, -2, [], {}], "b": {"c": null, "d": true},)"
                   R"( "e": [[1, {"f": [2]}], 3]})"),
            "{\n"
            "    \"a\": [1, -2, [], {}],\n"
            "    \"b\": {\n"
            "        \"c\": null,\n"
            "        \"d\": true\n"
            "    },\n"
            "    \"e\": [[1, {\n"
            "                \"f\": [2]\n"
            "            }], 3]\n"
            "}");
  EXPECT_EQ(TextOf("[]"), "[]");
  EXPECT_EQ(TextOf("{}"), "{}");
  EXPECT_EQ(TextOf("18446744073709551615"), "18446744073709551615");
  // RapidJSON's escapes: named ones, \u00XX upper-case, '/' and non-ASCII
  // bytes as they are.
  EXPECT_EQ(TextOf(R"(["q\"b\\s/n\nt\tc\u001f\u00e9"])"),
            "[\"q\\\"b\\\\s/n\\nt\\tc\\u001F\xC3\xA9\"]");
}

TEST(JsonValueText, WritesDecimalsAsRapidJsonsDtoa) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"100.0", "100.0"},
      {"1e2", "100.0"},
      {"12.34", "12.34"},
      {"0.1", "0.1"},
      {"0.001234", "0.001234"},
      {"1e-6", "0.000001"},
      {"1e-7", "1e-7"},
      {"1.234e-7", "1.234e-7"},
      {"1e20", "100000000000000000000.0"},
      {"1e21", "1e21"},
      {"1.5e300", "1.5e300"},
      {"-2.5", "-2.5"},
      {"-0.0", "-0.0"},
      {"0.0", "0.0"},
      {"5e-324", "5e-324"},
      {"1.7976931348623157e308", "1.7976931348623157e308"},
  };
  for (const auto& [literal, want] : cases) {
    EXPECT_EQ(TextOf(literal), want) << literal;
    EXPECT_EQ(TextOf("[" + literal + "]"), "[" + want + "]") << literal;
  }
}

// Past max_bytes nothing more is written, but a piece begun before it is
// written whole (TensorFlow Serving's JsonWriterWithLimit asks before each
// piece); `refused` is asked about the values before the limit only.
TEST(JsonValueText, WritesNoPieceOnceMaxBytesWereWritten) {
  json::array many;
  for (int i = 0; i < 100000; ++i) many.emplace_back(i);
  int asked = 0;
  const std::string text = JsonValueText(
      json::value(std::move(many)),
      [&asked](const json::value&) {
        ++asked;
        return false;
      },
      10);
  // ", 3" was begun at 8 bytes, ", 4" would begin at 11.
  EXPECT_EQ(text, "[0, 1, 2, 3");
  EXPECT_EQ(asked, 5);  // the list and its first four elements
  // A key is a piece of its own: the text may end before its value.
  EXPECT_EQ(JsonValueText(
                json::parse(R"({"abc": 1, "d": 2})"),
                [](const json::value&) { return false; }, 8),
            "{\n    \"abc\"");
  // A container's closing is a piece too.
  EXPECT_EQ(JsonValueText(
                json::parse("[[1, 2], 3]"),
                [](const json::value&) { return false; }, 6),
            "[[1, 2");
}

// What `refused` names (the NaN and Infinity tokens RapidJSON's writer will
// not write) ends the text after the separator before it.
TEST(JsonValueText, ARefusedValueEndsTheText) {
  auto nan = [](const json::value& v) {
    return v.is_string() && v.get_string() == "NaN";
  };
  EXPECT_EQ(JsonValueText(json::parse(R"({"x": [1, "NaN", 2], "y": 3})"), nan),
            "{\n    \"x\": [1, ");
  EXPECT_EQ(JsonValueText(json::parse(R"({"x": "NaN"})"), nan),
            "{\n    \"x\": ");
  EXPECT_EQ(JsonValueText(json::parse(R"("NaN")"), nan), "");
}

}  // namespace
}  // namespace cosession::json_value_text_test
