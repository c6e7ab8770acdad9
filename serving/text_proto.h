// A protocol buffer message in text format, read without its schema:
// TensorFlow Serving's configuration files (--model_config_file,
// --batching_parameters_file) are such messages, and a generic tree plus a
// few lines of interpretation per file replaces protobuf here.
//
//   model_config_list {          # a nested message: name { ... } or
//     config {                   #   name: { ... } or name < ... >
//       name: 'digits'           # a scalar: name: value, the value a
//       base_path: "/models/d"   #   number, an identifier or a quoted
//       model_version_policy {   #   string (\' \" \\ \n escapes)
//         specific { versions: [1, 2] }   # a list: one field per value
//       }
//     }
//   }
//
// `#` starts a comment; fields may be separated by spaces, newlines,
// commas or semicolons. Nesting is bounded (kMaxTextProtoDepth).
// Errors: InvalidArgument "<source>:<line>: <what>".
// Thread safety: pure functions and plain values.
#ifndef COSESSION_SERVING_TEXT_PROTO_H_
#define COSESSION_SERVING_TEXT_PROTO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosession {

inline constexpr int kMaxTextProtoDepth = 32;

struct TextProtoField;

struct TextProtoMessage {
  std::vector<TextProtoField> fields{};
};

struct TextProtoField {
  std::string name{};
  int line = 0;                                 // where the field's name is
  std::string scalar{};                         // unquoted; "" for a message
  bool quoted = false;                          // the scalar was a string
  std::shared_ptr<TextProtoMessage> message{};  // null for a scalar
};

// Parses `text`; `source` names it in errors (e.g. the file's path).
absl::StatusOr<TextProtoMessage> ParseTextProto(absl::string_view text,
                                                absl::string_view source);

// "<source>:<line>: <what>" as InvalidArgument.
absl::Status TextProtoError(absl::string_view source, int line,
                            absl::string_view what);

// A field read as what its message's schema says it is; the errors name
// the source, the field's line and its name.
absl::StatusOr<int64_t> TextProtoInt(const TextProtoField& field, int64_t min,
                                     absl::string_view source);
absl::StatusOr<std::string> TextProtoString(const TextProtoField& field,
                                            absl::string_view source);
absl::StatusOr<const TextProtoMessage*> TextProtoSubmessage(
    const TextProtoField& field, absl::string_view source);
// "unknown field 'f' of <message>".
absl::Status TextProtoUnknownField(const TextProtoField& field,
                                   absl::string_view message,
                                   absl::string_view source);

}  // namespace cosession

#endif  // COSESSION_SERVING_TEXT_PROTO_H_
