#include "cosession/serving/text_proto.h"

#include <cctype>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

class Reader {
 public:
  Reader(absl::string_view text, absl::string_view source)
      : text_(text), source_(source) {}

  // The fields up to `close` ('\0': the end of the text) of the message
  // in field `owner` ("" at the top).
  absl::Status Fields(TextProtoMessage& message, char close, int depth,
                      const std::string& owner) {
    if (depth > kMaxTextProtoDepth) {
      return Error(absl::StrCat("messages nested deeper than ",
                                kMaxTextProtoDepth, " levels"));
    }
    while (true) {
      SkipSpace();
      if (at_ >= text_.size()) {
        if (close == '\0') return absl::OkStatus();
        return Error(absl::StrCat("field '", owner, "': missing '",
                                  std::string(1, close), "'"));
      }
      if (text_[at_] == close) {
        ++at_;
        return absl::OkStatus();
      }
      const std::string name = Identifier();
      if (name.empty()) {
        return Error(absl::StrCat("expected a field name, got '",
                                  std::string(1, text_[at_]), "'"));
      }
      const int line = line_;
      SkipSpace();
      bool colon = false;
      if (Peek() == ':') {
        ++at_;
        colon = true;
        SkipSpace();
      }
      const char c = Peek();
      if (c == '{' || c == '<') {
        ++at_;
        auto nested = std::make_shared<TextProtoMessage>();
        COSESSION_RETURN_IF_ERROR(
            Fields(*nested, c == '{' ? '}' : '>', depth + 1, name));
        message.fields.push_back({.name = name,
                                  .line = line,
                                  .scalar = "",
                                  .quoted = false,
                                  .message = std::move(nested)});
        continue;
      }
      if (!colon) {
        return Error(absl::StrCat("field '", name, "' wants ':' or '{'"));
      }
      if (c == '[') {  // a list of scalars: one field per value
        ++at_;
        while (true) {
          SkipSpace();
          if (Peek() == ']') {
            ++at_;
            break;
          }
          TextProtoField field{.name = name, .line = line_};
          COSESSION_RETURN_IF_ERROR(Scalar(name, field));
          message.fields.push_back(std::move(field));
        }
        continue;
      }
      TextProtoField field{.name = name, .line = line};
      COSESSION_RETURN_IF_ERROR(Scalar(name, field));
      message.fields.push_back(std::move(field));
    }
  }

  absl::Status Error(absl::string_view what) const {
    return TextProtoError(source_, line_, what);
  }

 private:
  char Peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }

  void SkipSpace() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '\n') {
        ++line_;
        ++at_;
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else if (std::isspace(static_cast<unsigned char>(c)) || c == ',' ||
                 c == ';') {
        ++at_;
      } else {
        break;
      }
    }
  }

  // [A-Za-z0-9_.+-]*: a field name, a number or an enum value.
  std::string Identifier() {
    const size_t start = at_;
    while (at_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
            text_[at_] == '_' || text_[at_] == '-' || text_[at_] == '+' ||
            text_[at_] == '.')) {
      ++at_;
    }
    return std::string(text_.substr(start, at_ - start));
  }

  absl::Status Scalar(const std::string& name, TextProtoField& field) {
    const char quote = Peek();
    if (quote != '"' && quote != '\'') {
      field.scalar = Identifier();
      if (field.scalar.empty()) {
        return Error(absl::StrCat("field '", name, "' has no value"));
      }
      return absl::OkStatus();
    }
    ++at_;
    field.quoted = true;
    while (true) {
      if (at_ >= text_.size() || text_[at_] == '\n') {
        return Error(absl::StrCat("field '", name, "': unterminated string"));
      }
      char c = text_[at_++];
      if (c == quote) return absl::OkStatus();
      if (c == '\\' && at_ < text_.size()) {
        c = text_[at_++];
        if (c == 'n') c = '\n';
        if (c == 't') c = '\t';
      }
      field.scalar += c;
    }
  }

  absl::string_view text_;
  absl::string_view source_;
  size_t at_ = 0;
  int line_ = 1;
};

}  // namespace

absl::Status TextProtoError(absl::string_view source, int line,
                            absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", line, ": ", what));
}

absl::StatusOr<TextProtoMessage> ParseTextProto(absl::string_view text,
                                                absl::string_view source) {
  TextProtoMessage message;
  Reader reader(text, source);
  if (absl::Status s = reader.Fields(message, '\0', 0, ""); !s.ok()) {
    return s;
  }
  return message;
}

absl::StatusOr<int64_t> TextProtoInt(const TextProtoField& field, int64_t min,
                                     absl::string_view source) {
  int64_t v;
  if (field.message != nullptr || field.quoted ||
      !absl::SimpleAtoi(field.scalar, &v) || v < min) {
    return TextProtoError(
        source, field.line,
        absl::StrCat("field '", field.name, "' wants an integer >= ", min,
                     ", got '", field.scalar, "'"));
  }
  return v;
}

absl::StatusOr<std::string> TextProtoString(const TextProtoField& field,
                                            absl::string_view source) {
  if (field.message != nullptr) {
    return TextProtoError(
        source, field.line,
        absl::StrCat("field '", field.name, "' wants a value, not { ... }"));
  }
  return field.scalar;
}

absl::StatusOr<const TextProtoMessage*> TextProtoSubmessage(
    const TextProtoField& field, absl::string_view source) {
  if (field.message == nullptr) {
    return TextProtoError(
        source, field.line,
        absl::StrCat("field '", field.name, "' wants { ... }"));
  }
  return field.message.get();
}

absl::Status TextProtoUnknownField(const TextProtoField& field,
                                   absl::string_view message,
                                   absl::string_view source) {
  return TextProtoError(
      source, field.line,
      absl::StrCat("unknown field '", field.name, "' of ", message));
}

}  // namespace cosession
