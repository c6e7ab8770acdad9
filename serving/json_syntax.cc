#include "cosession/serving/json_syntax.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cosession {
namespace {

// RapidJSON's messages (its error/en.h), for the errors its reader can give
// under TensorFlow Serving's flags. TensorFlow Serving builds with RapidJSON
// 1.1.0, and its behaviour is what is written here.
constexpr char kDocumentEmpty[] = "The document is empty.";
constexpr char kValueInvalid[] = "Invalid value.";
constexpr char kMissName[] = "Missing a name for object member.";
constexpr char kMissColon[] = "Missing a colon after a name of object member.";
constexpr char kMissCommaOrCurly[] =
    "Missing a comma or '}' after an object member.";
constexpr char kMissCommaOrSquare[] =
    "Missing a comma or ']' after an array element.";
constexpr char kInvalidHex[] =
    "Incorrect hex digit after \\u escape in string.";
constexpr char kSurrogateInvalid[] = "The surrogate pair in string is invalid.";
constexpr char kEscapeInvalid[] = "Invalid escape character in string.";
constexpr char kMissQuotationMark[] =
    "Missing a closing quotation mark in string.";
constexpr char kNumberTooBig[] = "Number too big to be stored in double.";
constexpr char kMissFraction[] = "Miss fraction part in number.";
constexpr char kMissExponent[] = "Miss exponent in number.";

// Where the reader stands between tokens, as RapidJSON's iterative reader
// names its states.
enum class State {
  kStart,              // nothing read yet
  kFinish,             // the document is complete
  kObjectInitial,      // after '{'
  kMemberKey,          // after a member's name
  kKeyValueDelimiter,  // after ':'
  kMemberValue,        // after a member's value
  kMemberDelimiter,    // after ',' in an object
  kArrayInitial,       // after '['
  kElement,            // after an element
  kElementDelimiter,   // after ',' in an array
};

// What RapidJSON reports when the next token does not fit `state`, or the
// input ends there.
const char* ErrorIn(State state) {
  switch (state) {
    case State::kStart:
      // RapidJSON's choice: a document that starts with ']', '}', ',' or
      // ':' is reported as empty too.
      return kDocumentEmpty;
    case State::kObjectInitial:
    case State::kMemberDelimiter:
      return kMissName;
    case State::kMemberKey:
      return kMissColon;
    case State::kMemberValue:
      return kMissCommaOrCurly;
    case State::kElement:
      return kMissCommaOrSquare;
    case State::kKeyValueDelimiter:
    case State::kArrayInitial:
    case State::kElementDelimiter:
    case State::kFinish:
      break;
  }
  return kValueInvalid;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One walk over a text; Run() once.
class SyntaxWalk {
 public:
  explicit SyntaxWalk(absl::string_view text) : text_(text) {}

  JsonSyntaxVerdict Run() {
    // RapidJSON's UTF-8 memory stream drops each byte of a leading byte
    // order mark that is there, one after the other.
    for (char mark : {'\xEF', '\xBB', '\xBF'}) Consume(mark);
    verdict_.document_begin = pos_;
    State state = State::kStart;
    // For each open container, the state its closing bracket leads to.
    std::vector<State> after_close;
    SkipWhitespace();
    while (Peek() != '\0') {
      const std::optional<State> next = Step(state, after_close);
      if (!verdict_.ok()) return verdict_;
      if (!next.has_value()) {
        Fail(ErrorIn(state), pos_);
        return verdict_;
      }
      state = *next;
      if (state == State::kFinish) {
        verdict_.document_end = pos_;
        return verdict_;
      }
      SkipWhitespace();
    }
    Fail(ErrorIn(state), pos_);
    return verdict_;
  }

 private:
  // Reads the token at the read position in `state`: the state after it,
  // or nullopt when it does not fit there (nothing read). A malformed
  // scalar sets the verdict's error instead.
  std::optional<State> Step(State state, std::vector<State>& after_close) {
    const char c = Peek();
    switch (state) {
      case State::kStart:
      case State::kKeyValueDelimiter:
      case State::kArrayInitial:
      case State::kElementDelimiter: {
        // A value is due (or, after '[', the closing bracket).
        const State after_value = state == State::kStart ? State::kFinish
                                  : state == State::kKeyValueDelimiter
                                      ? State::kMemberValue
                                      : State::kElement;
        if (c == '[' || c == '{') {
          after_close.push_back(after_value);
          ++pos_;
          return c == '[' ? State::kArrayInitial : State::kObjectInitial;
        }
        if (c == ']' && state == State::kArrayInitial) {
          return Close(after_close);
        }
        if (c == ']' || c == '}' || c == ',' || c == ':') return std::nullopt;
        Scalar();
        return after_value;
      }
      case State::kObjectInitial:
      case State::kMemberDelimiter:
        if (c == '"') {
          String();
          return State::kMemberKey;
        }
        if (c == '}' && state == State::kObjectInitial) {
          return Close(after_close);
        }
        return std::nullopt;
      case State::kMemberKey:
        if (c != ':') return std::nullopt;
        ++pos_;
        return State::kKeyValueDelimiter;
      case State::kMemberValue:
      case State::kElement: {
        const bool in_object = state == State::kMemberValue;
        if (c == ',') {
          ++pos_;
          return in_object ? State::kMemberDelimiter : State::kElementDelimiter;
        }
        if (c == (in_object ? '}' : ']')) return Close(after_close);
        return std::nullopt;
      }
      case State::kFinish:
        break;
    }
    return std::nullopt;
  }

  // The byte at the read position; a NUL at the end, as RapidJSON's
  // memory stream gives.
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  void SkipWhitespace() {
    for (char c = Peek(); c == ' ' || c == '\n' || c == '\r' || c == '\t';
         c = Peek()) {
      ++pos_;
    }
  }

  // Records the first error; false, for the caller to return.
  bool Fail(const char* message, size_t offset) {
    if (verdict_.ok()) {
      verdict_.error = message;
      verdict_.error_offset = offset;
    }
    return false;
  }

  // Reads the innermost container's closing bracket.
  State Close(std::vector<State>& after_close) {
    ++pos_;
    const State next = after_close.back();
    after_close.pop_back();
    return next;
  }

  // A value that is not a container.
  bool Scalar() {
    switch (Peek()) {
      case 'n':
        return Literal("null");
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case '"':
        return String();
      default:
        return Number();
    }
  }

  // RapidJSON takes a literal's bytes while they match and reports the
  // first that does not.
  bool Literal(absl::string_view word) {
    for (char c : word) {
      if (!Consume(c)) return Fail(kValueInvalid, pos_);
    }
    return true;
  }

  bool String() {
    ++pos_;  // the opening quote
    for (;;) {
      const char c = Peek();
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\\') {
        if (!Escape()) return false;
        continue;
      }
      // A raw control character: RapidJSON 1.1.0 (the version TensorFlow
      // Serving builds with) calls it an invalid escape.
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail(c == '\0' ? kMissQuotationMark : kEscapeInvalid, pos_);
      }
      // RapidJSON does not validate UTF-8 under TensorFlow Serving's
      // flags: any other byte is taken as it is.
      ++pos_;
    }
  }

  // An escape in a string; its errors point at the backslash.
  bool Escape() {
    const size_t backslash = pos_++;
    const char e = Peek();
    if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
        e == 'r' || e == 't') {
      ++pos_;
      return true;
    }
    if (!Consume('u')) return Fail(kEscapeInvalid, backslash);
    unsigned code = 0;
    if (!Hex4(backslash, code)) return false;
    // A high surrogate must be followed by an escaped low one; RapidJSON
    // 1.1.0 takes a lone low surrogate as it is.
    if (code < 0xD800 || code > 0xDBFF) return true;
    if (!Consume('\\') || !Consume('u')) {
      return Fail(kSurrogateInvalid, backslash);
    }
    unsigned low = 0;
    if (!Hex4(backslash, low)) return false;
    if (low < 0xDC00 || low > 0xDFFF) {
      return Fail(kSurrogateInvalid, backslash);
    }
    return true;
  }

  bool Hex4(size_t backslash, unsigned& code) {
    for (int i = 0; i < 4; ++i) {
      const int digit = HexValue(Peek());
      if (digit < 0) return Fail(kInvalidHex, backslash);
      code = code * 16 + static_cast<unsigned>(digit);
      ++pos_;
    }
    return true;
  }

  // A number, as RapidJSON 1.1.0 reads it. Whether it is "too big" is not
  // whether it overflows a double (1.5e309 is read as infinity): RapidJSON
  // refuses an integer part that reaches DBL_MAX / 10 before its last
  // digit, and a positive exponent past 308 plus the fraction digits it
  // counted into the significand. So the significand is kept here as it
  // keeps it.
  bool Number() {
    const size_t start = pos_;
    const bool minus = Consume('-');
    // Exactly while the integer part fits: 2^63 with a minus, else 2^64-1.
    const uint64_t limit = minus ? uint64_t{1} << 63 : ~uint64_t{0};
    uint64_t significand = 0;
    bool as_double = false;
    double value = 0;
    int significant_digits = 0;
    if (Peek() == 'N' || Peek() == 'I') {
      if (!NonFinite()) return false;
      // RapidJSON 1.1.0 goes on to read a fraction and an exponent after
      // NaN or Infinity, as after a zero.
    } else if (!Consume('0')) {
      if (Peek() < '1' || Peek() > '9') return Fail(kValueInvalid, pos_);
      significand = static_cast<uint64_t>(Peek() - '0');
      for (++pos_; IsDigit(Peek()); ++pos_) {
        const unsigned digit = static_cast<unsigned>(Peek() - '0');
        if (!as_double && significand <= (limit - digit) / 10) {
          significand = significand * 10 + digit;
          ++significant_digits;
          continue;
        }
        if (!as_double) value = static_cast<double>(significand);
        as_double = true;
        if (value >= 1.7976931348623157e307) return Fail(kNumberTooBig, start);
        value = value * 10 + digit;
      }
    }
    int fraction_exponent = 0;
    if (Consume('.')) {
      if (!IsDigit(Peek())) return Fail(kMissFraction, pos_);
      if (!as_double) {
        // Exact while the significand fits 53 bits.
        for (; IsDigit(Peek()) && significand <= (uint64_t{1} << 53) - 1;
             ++pos_) {
          significand = significand * 10 + static_cast<uint64_t>(Peek() - '0');
          --fraction_exponent;
          if (significand != 0) ++significant_digits;
        }
        value = static_cast<double>(significand);
        as_double = true;
      }
      for (; IsDigit(Peek()); ++pos_) {
        if (significant_digits >= 17) continue;
        value = value * 10 + (Peek() - '0');
        --fraction_exponent;
        if (value > 0) ++significant_digits;
      }
    }
    if (Consume('e') || Consume('E')) {
      const bool negative = Consume('-');
      if (!negative) Consume('+');
      if (!IsDigit(Peek())) return Fail(kMissExponent, pos_);
      const int64_t max_exponent = 308 - fraction_exponent;
      int64_t exponent = 0;
      for (; IsDigit(Peek()); ++pos_) {
        // Capped: a negative exponent's digits are only skipped past.
        if (exponent <= max_exponent) exponent = exponent * 10 + (Peek() - '0');
        if (!negative && exponent > max_exponent) {
          return Fail(kNumberTooBig, start);
        }
      }
    }
    return true;
  }

  // NaN, Inf or Infinity (kParseNanAndInfFlag), after an optional minus.
  // RapidJSON 1.1.0 tries "NaN", then "Inf" from where that attempt broke
  // off (so "NInf" reads as infinity), and then wants the whole "Infinity"
  // once an 'i' follows "Inf"; the error is where the spelling breaks off.
  bool NonFinite() {
    if (Consume('N') && Consume('a') && Consume('N')) return true;
    if (Consume('I') && Consume('n') && Consume('f')) {
      if (Peek() != 'i') return true;
      if (Consume('i') && Consume('n') && Consume('i') && Consume('t') &&
          Consume('y')) {
        return true;
      }
    }
    return Fail(kValueInvalid, pos_);
  }

  absl::string_view text_;
  size_t pos_ = 0;
  JsonSyntaxVerdict verdict_;
};

}  // namespace

JsonSyntaxVerdict CheckJsonSyntax(absl::string_view text) {
  return SyntaxWalk(text).Run();
}

}  // namespace cosession
