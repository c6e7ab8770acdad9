#include "cosession/serving/json_value_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

namespace json = boost::json;

using Refused = absl::FunctionRef<bool(const json::value&)>;

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

// Writes a value the way RapidJSON's PrettyWriter, set to single-line
// arrays, writes it when handed the value's pieces one by one, each piece
// refused once `max_bytes` were written (json_value_text.h).
class PrettyText {
 public:
  PrettyText(Refused refused, size_t max_bytes)
      : refused_(refused), max_bytes_(max_bytes) {}

  // `value`, inside `depth` containers, after `separator` (", " between
  // array elements, ": " after a key, nothing at the root). False once
  // the writing stopped.
  bool Value(const json::value& value, int depth, const char* separator) {
    if (!Open()) return false;
    out_ += separator;
    if (refused_(value) ||
        (value.is_double() && !std::isfinite(value.get_double()))) {
      return false;  // RapidJSON's writer fails after the separator
    }
    switch (value.kind()) {
      case json::kind::null:
        out_ += "null";
        return true;
      case json::kind::bool_:
        out_ += value.get_bool() ? "true" : "false";
        return true;
      case json::kind::int64:
        absl::StrAppend(&out_, value.get_int64());
        return true;
      case json::kind::uint64:
        absl::StrAppend(&out_, value.get_uint64());
        return true;
      case json::kind::double_:
        AppendRapidJsonDecimal(out_, value.get_double());
        return true;
      case json::kind::string:
        AppendRapidJsonString(out_,
                              absl::string_view(value.get_string().data(),
                                                value.get_string().size()));
        return true;
      case json::kind::array: {
        out_ += '[';
        bool first = true;
        for (const json::value& element : value.get_array()) {
          if (!Value(element, depth + 1, first ? "" : ", ")) return false;
          first = false;
        }
        if (!Open()) return false;
        out_ += ']';
        return true;
      }
      case json::kind::object: {
        out_ += '{';
        bool first = true;
        for (const json::key_value_pair& member : value.get_object()) {
          if (!Open()) return false;
          out_ += first ? "\n" : ",\n";
          first = false;
          AppendPrettyIndent(out_, depth + 1);
          AppendRapidJsonString(out_, absl::string_view(member.key().data(),
                                                        member.key().size()));
          if (!Value(member.value(), depth + 1, ": ")) return false;
        }
        if (!Open()) return false;
        if (!first) {
          out_ += '\n';
          AppendPrettyIndent(out_, depth);
        }
        out_ += '}';
        return true;
      }
    }
    return true;
  }

  std::string Take() && { return std::move(out_); }

 private:
  // Whether the next piece may be written: TensorFlow Serving's
  // JsonWriterWithLimit asks before each piece whether fewer than its limit
  // were written.
  bool Open() const { return out_.size() < max_bytes_; }

  Refused refused_;
  size_t max_bytes_;
  std::string out_;
};

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

std::string JsonValueText(const json::value& value, Refused refused,
                          size_t max_bytes) {
  PrettyText text(refused, max_bytes);
  text.Value(value, 0, "");
  return std::move(text).Take();
}

}  // namespace cosession
