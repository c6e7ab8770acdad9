// JsonStringState: whether a scan of JSON text, fed one character at a
// time, is inside a string literal -- for the scans that look at JSON's
// structure without parsing it (io/json_depth.h, the non-finite number
// tokens of serving/rest_json.cc), which must not see brackets or words
// inside strings.
//
// Thread safety: an object is used by one thread.
#ifndef COSESSION_IO_JSON_STRING_STATE_H_
#define COSESSION_IO_JSON_STRING_STATE_H_

namespace cosession {

class JsonStringState {
 public:
  // Takes the next character; true when it belongs to a string literal
  // (its quotes included).
  bool InString(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      return true;
    }
    in_string_ = c == '"';
    return in_string_;
  }

 private:
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace cosession

#endif  // COSESSION_IO_JSON_STRING_STATE_H_
