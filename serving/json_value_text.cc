#include "cosession/serving/json_value_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

namespace json = boost::json;

using Verbatim =
    absl::FunctionRef<std::optional<std::string>(const json::value&)>;

// RapidJSON's exponent: no '+', no leading zeros.
void AppendRapidJsonExponent(std::string& out, int exponent) {
  out += 'e';
  absl::StrAppend(&out, exponent);
}

// RapidJSON's dtoa (internal/dtoa.h, Prettify) of a finite double: the
// shortest digits d1 d2 ... dn of value = 0.d1...dn x 10^kk, laid out by
// where the decimal point falls.
void AppendRapidJsonDecimal(std::string& out, double value) {
  if (value == 0) {
    out += std::signbit(value) ? "-0.0" : "0.0";
    return;
  }
  if (value < 0) {
    out += '-';
    value = -value;
  }
  char buffer[64];
  const auto written = std::to_chars(buffer, buffer + sizeof(buffer), value,
                                     std::chars_format::scientific);
  const std::string_view text(buffer, written.ptr - buffer);
  const size_t e = text.find('e');
  std::string digits(text.substr(0, 1));
  if (e > 1) digits.append(text.substr(2, e - 2));  // after the '.'
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  const int length = static_cast<int>(digits.size());
  const int kk = exponent + 1;  // 10^(kk-1) <= value < 10^kk
  const int k = kk - length;
  if (k >= 0 && kk <= 21) {
    out += digits;  // 1234e7 -> 12340000000.0
    out.append(static_cast<size_t>(k), '0');
    out += ".0";
  } else if (kk > 0 && kk <= 21) {
    out.append(digits, 0, static_cast<size_t>(kk));  // 1234e-2 -> 12.34
    out += '.';
    out.append(digits, static_cast<size_t>(kk));
  } else if (kk > -6 && kk <= 0) {
    out += "0.";  // 1234e-6 -> 0.001234
    out.append(static_cast<size_t>(-kk), '0');
    out += digits;
  } else if (length == 1) {
    out += digits;  // 1e30
    AppendRapidJsonExponent(out, kk - 1);
  } else {
    out += digits[0];  // 1234e30 -> 1.234e33
    out += '.';
    out.append(digits, 1);
    AppendRapidJsonExponent(out, kk - 1);
  }
}

// `open`, each item on a line of its own one level in (`write_item`
// writes it), then `close` on a line at `level`; "[]" or "{}" when there is
// no item. Stops once `out` holds `max_bytes`.
template <typename Items, typename WriteItem>
void AppendPrettyContainer(std::string& out, char open, char close,
                           const Items& items, int level, size_t max_bytes,
                           WriteItem write_item) {
  out += open;
  bool first = true;
  for (const auto& item : items) {
    out += first ? "\n" : ",\n";
    first = false;
    AppendPrettyIndent(out, level + 1);
    write_item(item);
    if (out.size() >= max_bytes) return;
  }
  if (!first) {
    out += '\n';
    AppendPrettyIndent(out, level);
  }
  out += close;
}

// Stops once `out` holds `max_bytes`: the caller cuts there anyway.
void AppendPrettyValue(std::string& out, const json::value& value, int level,
                       Verbatim verbatim, size_t max_bytes) {
  if (out.size() >= max_bytes) return;
  if (std::optional<std::string> text = verbatim(value)) {
    out += *text;
    return;
  }
  switch (value.kind()) {
    case json::kind::null:
      out += "null";
      return;
    case json::kind::bool_:
      out += value.get_bool() ? "true" : "false";
      return;
    case json::kind::int64:
      absl::StrAppend(&out, value.get_int64());
      return;
    case json::kind::uint64:
      absl::StrAppend(&out, value.get_uint64());
      return;
    case json::kind::double_:
      AppendRapidJsonDecimal(out, value.get_double());
      return;
    case json::kind::string:
      AppendRapidJsonString(out, absl::string_view(value.get_string().data(),
                                                   value.get_string().size()));
      return;
    case json::kind::array:
      AppendPrettyContainer(out, '[', ']', value.get_array(), level, max_bytes,
                            [&](const json::value& element) {
                              AppendPrettyValue(out, element, level + 1,
                                                verbatim, max_bytes);
                            });
      return;
    case json::kind::object:
      AppendPrettyContainer(out, '{', '}', value.get_object(), level, max_bytes,
                            [&](const json::key_value_pair& member) {
                              AppendRapidJsonString(
                                  out, absl::string_view(member.key().data(),
                                                         member.key().size()));
                              out += ": ";
                              AppendPrettyValue(out, member.value(), level + 1,
                                                verbatim, max_bytes);
                            });
      return;
  }
}

}  // namespace

void AppendPrettyIndent(std::string& out, int level) {
  out.append(4 * static_cast<size_t>(level), ' ');
}

void AppendRapidJsonString(std::string& out, absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string JsonValueText(const json::value& value, Verbatim verbatim,
                          size_t max_bytes) {
  std::string out;
  AppendPrettyValue(out, value, 0, verbatim, max_bytes);
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

}  // namespace cosession
