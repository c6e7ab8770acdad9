// JsonValueText (serving/json_value_text.h): a JSON value in the bytes
// TensorFlow Serving's error messages quote it with (RapidJSON's
// PrettyWriter and dtoa), expected texts worked out from RapidJSON's rules.
#include "cosession/serving/json_value_text.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cosession::json_value_text_test {
namespace {

namespace json = boost::json;

std::string TextOf(const std::string& json_text) {
  return JsonValueText(json::parse(json_text),
                       [](const json::value&) -> std::optional<std::string> {
                         return std::nullopt;
                       });
}

TEST(JsonValueText, LaysOutAsRapidJsonsPrettyWriter) {
  EXPECT_EQ(TextOf(R"({"a": [1, -2, [], {}], "b": {"c": null, "d": true}})"),
            "{\n"
            "    \"a\": [\n"
            "        1,\n"
            "        -2,\n"
            "        [],\n"
            "        {}\n"
            "    ],\n"
            "    \"b\": {\n"
            "        \"c\": null,\n"
            "        \"d\": true\n"
            "    }\n"
            "}");
  EXPECT_EQ(TextOf("[]"), "[]");
  EXPECT_EQ(TextOf("{}"), "{}");
  EXPECT_EQ(TextOf("18446744073709551615"), "18446744073709551615");
  // RapidJSON's escapes: named ones, \u00XX upper-case, '/' and non-ASCII
  // bytes as they are.
  EXPECT_EQ(TextOf(R"(["q\"b\\s/n\nt\tc\u001f\u00e9"])"),
            "[\n    \"q\\\"b\\\\s/n\\nt\\tc\\u001F\xC3\xA9\"\n]");
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
    // Inside a list: a decimal alone is written by the answers' rules.
    EXPECT_EQ(TextOf("[" + literal + "]"), "[\n    " + want + "\n]") << literal;
  }
}

// A large value is cut at max_bytes, and written no further than that:
// verbatim is asked about the values before the cut only.
TEST(JsonValueText, StopsAtMaxBytes) {
  json::array many;
  for (int i = 0; i < 100000; ++i) many.emplace_back(i);
  int asked = 0;
  const std::string text = JsonValueText(
      json::value(std::move(many)),
      [&asked](const json::value&) -> std::optional<std::string> {
        ++asked;
        return std::nullopt;
      },
      40);
  EXPECT_EQ(text,
            std::string("[\n    0,\n    1,\n    2,\n    3,\n    4,\n    5,\n")
                .substr(0, 40));
  EXPECT_LT(asked, 20);
}

TEST(JsonValueText, WritesWhatVerbatimGivesAsItIs) {
  const std::string text =
      JsonValueText(json::parse(R"({"x": ["NaN", 1]})"),
                    [](const json::value& v) -> std::optional<std::string> {
                      if (v.is_string() && v.get_string() == "NaN")
                        return "NaN";
                      return std::nullopt;
                    });
  EXPECT_EQ(text, "{\n    \"x\": [\n        NaN,\n        1\n    ]\n}");
}

}  // namespace
}  // namespace cosession::json_value_text_test
