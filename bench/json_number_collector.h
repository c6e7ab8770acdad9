// The least a JSON reader can do with a predict body: Boost.JSON's event
// parser with a handler that keeps every number as a float and nothing
// else (no structure, no checks). The hand-written baselines of
// rest_json_bench.cc and http_bench.cc read bodies with it, so that
// cosession's parser is compared with the fastest reading of the same
// library, not with its document tree.
//
//   std::vector<float> numbers;
//   bool ok = CollectJsonNumbers(body, numbers);  // false: not valid JSON
//
// Thread safety: a pure function (it appends to the caller's vector).
#ifndef COSESSION_BENCH_JSON_NUMBER_COLLECTOR_H_
#define COSESSION_BENCH_JSON_NUMBER_COLLECTOR_H_

#include <boost/json/basic_parser_impl.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace cosession::bench {

class JsonNumberCollector {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using error_code = boost::json::error_code;
  using string_view = boost::json::string_view;

  explicit JsonNumberCollector(std::vector<float>* out) : out_(out) {}

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return true; }
  bool on_object_end(std::size_t, error_code&) { return true; }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t, error_code&) { return true; }
  bool on_key_part(string_view, std::size_t, error_code&) { return true; }
  bool on_key(string_view, std::size_t, error_code&) { return true; }
  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return true; }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t v, string_view, error_code&) {
    out_->push_back(static_cast<float>(v));
    return true;
  }
  bool on_uint64(std::uint64_t v, string_view, error_code&) {
    out_->push_back(static_cast<float>(v));
    return true;
  }
  bool on_double(double v, string_view, error_code&) {
    out_->push_back(static_cast<float>(v));
    return true;
  }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  std::vector<float>* out_;
};

inline bool CollectJsonNumbers(std::string_view body, std::vector<float>& out) {
  boost::json::basic_parser<JsonNumberCollector> parser(
      boost::json::parse_options{}, &out);
  boost::json::error_code ec;
  const std::size_t consumed =
      parser.write_some(false, body.data(), body.size(), ec);
  return !ec && parser.done() && consumed == body.size();
}

}  // namespace cosession::bench

#endif  // COSESSION_BENCH_JSON_NUMBER_COLLECTOR_H_
