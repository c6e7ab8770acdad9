#include "cosession/serving/batching_parameters.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

// A protobuf text-format tokenizer, just enough for BatchingParameters.
class Tokens {
 public:
  Tokens(absl::string_view text, absl::string_view source)
      : text_(text), source_(source) {}

  // The next token ("" at the end): an identifier, a number, a quoted
  // string (with its quotes), or one of { } :
  std::string Next() {
    SkipSpace();
    if (at_ >= text_.size()) return "";
    const char c = text_[at_];
    if (c == '{' || c == '}' || c == ':') {
      ++at_;
      return std::string(1, c);
    }
    if (c == '"' || c == '\'') {
      const size_t end = text_.find(c, at_ + 1);
      const size_t stop =
          end == absl::string_view::npos ? text_.size() : end + 1;
      std::string token(text_.substr(at_, stop - at_));
      at_ = stop;
      return token;
    }
    const size_t start = at_;
    while (at_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
            text_[at_] == '_' || text_[at_] == '-' || text_[at_] == '+' ||
            text_[at_] == '.')) {
      ++at_;
    }
    if (at_ == start) {  // an unexpected character: a token of its own
      ++at_;
    }
    return std::string(text_.substr(start, at_ - start));
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", line_, ": ", what));
  }

 private:
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

  absl::string_view text_;
  absl::string_view source_;
  size_t at_ = 0;
  int line_ = 1;
};

// `{ value: <token> }` after a wrapper field's name; the token.
absl::StatusOr<std::string> WrapperValue(Tokens& t, const std::string& field) {
  std::string open = t.Next();
  if (open == ":") open = t.Next();  // "field: { value: 1 }" is valid too
  if (open != "{") {
    return t.Error(absl::StrCat("field '", field, "' wants { value: ... }"));
  }
  if (t.Next() != "value" || t.Next() != ":") {
    return t.Error(absl::StrCat("field '", field, "' wants { value: ... }"));
  }
  std::string value = t.Next();
  if (t.Next() != "}") {
    return t.Error(absl::StrCat("field '", field, "': missing '}'"));
  }
  return value;
}

absl::StatusOr<int64_t> Int(Tokens& t, const std::string& field,
                            const std::string& token, int64_t min) {
  int64_t v;
  if (!absl::SimpleAtoi(token, &v) || v < min) {
    return t.Error(absl::StrCat("field '", field, "' wants an integer >= ", min,
                                ", got '", token, "'"));
  }
  return v;
}

}  // namespace

BatchingOptions DefaultBatchingOptions() {
  BatchingOptions o;
  o.max_batch_size = 1000;
  o.batch_timeout = std::chrono::microseconds(0);
  o.max_enqueued_batches = 10;
  o.num_batch_threads =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return o;
}

absl::StatusOr<BatchingOptions> ParseBatchingParameters(
    absl::string_view text, absl::string_view source) {
  BatchingOptions o = DefaultBatchingOptions();
  Tokens t(text, source);
  for (std::string field = t.Next(); !field.empty(); field = t.Next()) {
    if (field == "max_batch_size" || field == "batch_timeout_micros" ||
        field == "max_enqueued_batches" || field == "num_batch_threads" ||
        field == "max_execution_batch_size") {
      absl::StatusOr<std::string> token = WrapperValue(t, field);
      if (!token.ok()) return token.status();
      const int64_t min = field == "batch_timeout_micros" ? 0 : 1;
      absl::StatusOr<int64_t> v = Int(t, field, *token, min);
      if (!v.ok()) return v.status();
      if (field == "max_batch_size") o.max_batch_size = *v;
      if (field == "batch_timeout_micros") {
        o.batch_timeout = std::chrono::microseconds(*v);
      }
      if (field == "max_enqueued_batches") o.max_enqueued_batches = *v;
      if (field == "num_batch_threads") {
        if (*v > 1024) return t.Error("num_batch_threads above 1024");
        o.num_batch_threads = static_cast<int>(*v);
      }
    } else if (field == "thread_pool_name" ||
               field == "enable_large_batch_splitting") {
      absl::StatusOr<std::string> token = WrapperValue(t, field);
      if (!token.ok()) return token.status();
    } else if (field == "allowed_batch_sizes") {
      if (t.Next() != ":") return t.Error("allowed_batch_sizes wants ':'");
      absl::StatusOr<int64_t> v = Int(t, field, t.Next(), 1);
      if (!v.ok()) return v.status();
      o.allowed_batch_sizes.push_back(*v);
    } else if (field == "pad_variable_length_inputs") {
      if (t.Next() != ":")
        return t.Error("pad_variable_length_inputs wants ':'");
      const std::string v = t.Next();
      if (v != "true" && v != "false") {
        return t.Error("pad_variable_length_inputs wants true or false");
      }
    } else {
      return t.Error(
          absl::StrCat("unknown field '", field, "' of BatchingParameters"));
    }
  }
  return o;
}

}  // namespace cosession
