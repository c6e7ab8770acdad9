#include "cosession/serving/rest_json.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/status.h"
#include "cosession/io/json_string_state.h"
#include "cosession/serving/json_syntax.h"
#include "cosession/serving/json_value_text.h"
#include "cosession/serving/predict_fast_path.h"

namespace cosession {
namespace {

namespace json = boost::json;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// TensorFlow Serving's parser (RapidJSON with kParseNanAndInfFlag) takes
// the bare tokens NaN, Inf and Infinity, each also with a minus, as
// numbers; Boost.JSON 1.81 has no such option. A body that
// fails to parse is scanned once: outside strings, each such token becomes
// a string holding a NUL and the token, which no float leaf can otherwise
// receive from a valid document (a JSON string cannot start with a raw NUL
// unless escaped, and a client sending "\u0000NaN" for a float gets a
// NaN, harmlessly). Bodies without the tokens never pay for the scan.
// Longest first, so that "Infinity" is not read as "Inf" and "inity".
constexpr absl::string_view kNonFiniteTokens[] = {
    "-Infinity", "Infinity", "-Inf", "Inf", "-NaN", "NaN"};
constexpr char kNonFiniteMarker = '\0';

// The body with its non-finite tokens made marker strings; nullopt when it
// has none outside strings.
std::optional<std::string> WithNonFiniteTokensAsStrings(
    absl::string_view body) {
  std::string out;
  JsonStringState strings;
  bool rewrote = false;
  out.reserve(body.size() + 16);
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (strings.InString(c)) {
      out += c;
      continue;
    }
    bool matched = false;
    for (absl::string_view token : kNonFiniteTokens) {
      if (body.substr(i, token.size()) == token) {
        absl::StrAppend(&out, "\"\\u0000", token, "\"");
        i += token.size() - 1;
        matched = rewrote = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  if (!rewrote) return std::nullopt;
  return out;
}

// The float a marker string stands for, if `value` is one.
std::optional<double> NonFiniteMarker(const json::value& value) {
  if (!value.is_string()) return std::nullopt;
  const json::string& s = value.get_string();
  if (s.empty() || s[0] != kNonFiniteMarker) return std::nullopt;
  const absl::string_view token(s.data() + 1, s.size() - 1);
  if (token == "NaN" || token == "-NaN") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (token == "Infinity" || token == "Inf") {
    return std::numeric_limits<double>::infinity();
  }
  if (token == "-Infinity" || token == "-Inf") {
    return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

constexpr size_t kQuotedBytes = 256;

// A value as TensorFlow Serving quotes it in errors (json_tensor.cc's
// JsonValueToDebugString, json_value_text.h), bounded at 256 bytes as
// there so that an error never echoes a whole large body. A NaN or
// Infinity token is a double RapidJSON's writer refuses to write: the
// text ends before it.
std::string Quoted(const json::value& value) {
  return JsonValueText(
      value,
      [](const json::value& v) { return NonFiniteMarker(v).has_value(); },
      kQuotedBytes);
}

// The JSON type as TensorFlow Serving names it in its messages.
const char* JsonTypeName(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "Null";
    case json::kind::bool_:
      return v.get_bool() ? "True" : "False";
    case json::kind::object:
      return "Object";
    case json::kind::array:
      return "Array";
    case json::kind::string:
      return "String";
    default:
      return "Number";
  }
}

std::string ShapeText(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// The shape a JSON tensor has: the size of the first list at each level.
std::vector<int64_t> InferShape(const json::value& value) {
  std::vector<int64_t> dims;
  const json::value* v = &value;
  while (v->is_array()) {
    const json::array& a = v->get_array();
    dims.push_back(static_cast<int64_t>(a.size()));
    if (a.empty()) break;
    v = &a[0];
  }
  return dims;
}

// Appends the leaves of `value` (checked against `dims` from `level` on)
// to `out` as T.
template <typename T>
absl::Status AppendLeaves(const json::value& value,
                          const std::vector<int64_t>& dims, size_t level,
                          DType dtype, std::vector<T>& out) {
  if (value.is_array()) {
    const json::array& a = value.get_array();
    if (level >= dims.size()) {
      return Invalid(absl::StrCat("Encountered list at unexpected level: ",
                                  level, " expected < ", dims.size()));
    }
    if (static_cast<int64_t>(a.size()) != dims[level]) {
      return Invalid(
          absl::StrCat("Encountered list at unexpected size: ", a.size(),
                       " at level: ", level, " expected size: ", dims[level]));
    }
    for (const json::value& e : a) {
      if (absl::Status s = AppendLeaves(e, dims, level + 1, dtype, out);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (level != dims.size()) {
    return Invalid(absl::StrCat(
        "JSON Value: ", Quoted(value), " found at incorrect level: ", level + 1,
        " in the JSON DOM. Expected at level: ", dims.size()));
  }
  auto wrong = [&] {
    // A non-finite token is a number to TensorFlow Serving's parser.
    const char* type =
        NonFiniteMarker(value).has_value() ? "Number" : JsonTypeName(value);
    return Invalid(
        absl::StrCat("JSON Value: ", Quoted(value), " Type: ", type,
                     " is not of expected type: ", DTypeName(dtype)));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_bool()) return wrong();
    out.push_back(value.get_bool());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (value.is_double()) {
      out.push_back(JsonNumberAs<T>(value.get_double()));
    } else if (value.is_int64()) {
      out.push_back(JsonNumberAs<T>(value.get_int64()));
    } else if (value.is_uint64()) {
      out.push_back(JsonNumberAs<T>(value.get_uint64()));
    } else if (std::optional<double> special = NonFiniteMarker(value)) {
      out.push_back(static_cast<T>(*special));
    } else {
      return wrong();
    }
  } else {
    int64_t v;
    if (value.is_int64()) {
      v = value.get_int64();
    } else if (value.is_uint64() &&
               value.get_uint64() <=
                   static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      v = static_cast<int64_t>(value.get_uint64());
    } else {
      return wrong();
    }
    if (v < std::numeric_limits<T>::min() ||
        v > std::numeric_limits<T>::max()) {
      return wrong();
    }
    out.push_back(static_cast<T>(v));
  }
  return absl::OkStatus();
}

// The tensor a JSON value holds, of `dtype`; its shape in `dims`.
absl::StatusOr<Tensor> TensorFromJson(const json::value& value, DType dtype,
                                      std::vector<int64_t>& dims) {
  dims = InferShape(value);
  return VisitDType(dtype, [&]<typename T>() -> absl::StatusOr<Tensor> {
    std::vector<T> values;
    if (absl::Status s = AppendLeaves<T>(value, dims, 0, dtype, values);
        !s.ok()) {
      return s;
    }
    Tensor t = Tensor::Allocate(dtype, TensorShape(absl::MakeConstSpan(dims)));
    if (!values.empty()) {
      if constexpr (std::is_same_v<T, bool>) {
        auto flat = t.mutable_flat<bool>();
        for (size_t i = 0; i < values.size(); ++i) flat[i] = values[i];
      } else {
        std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
      }
    }
    return t;
  });
}

// Stacks same-shaped items along a new first dimension.
Tensor Stack(const std::vector<Tensor>& items, const std::vector<int64_t>& dims,
             DType dtype) {
  std::vector<int64_t> shape{static_cast<int64_t>(items.size())};
  shape.insert(shape.end(), dims.begin(), dims.end());
  Tensor t = Tensor::Allocate(dtype, TensorShape(absl::MakeConstSpan(shape)));
  char* out = static_cast<char*>(t.raw_data());
  for (const Tensor& item : items) {
    if (item.TotalBytes() > 0)
      std::memcpy(out, item.raw_data(), item.TotalBytes());
    out += item.TotalBytes();
  }
  return t;
}

// The items of one input gathered from the rows: each row's tensor, which
// must have the first row's size and shape (TensorFlow Serving's
// AddInstanceItem).
struct RowItems {
  std::vector<Tensor> items{};
  std::vector<int64_t> dims{};  // the first item's
};

absl::Status AddRowItem(const json::value& value, const std::string& name,
                        const Signature& sig,
                        std::map<std::string, RowItems>& inputs) {
  auto spec = sig.inputs.find(name);
  if (spec == sig.inputs.end()) {
    return Invalid(
        absl::StrCat("JSON object: does not have named input: ", name));
  }
  std::vector<int64_t> dims;
  COSESSION_ASSIGN_OR_RETURN(Tensor t,
                             TensorFromJson(value, spec->second.dtype, dims));
  RowItems& input = inputs[name];
  if (input.items.empty()) {
    input.dims = dims;
  } else {
    int64_t n_first = 1, n = 1;
    for (int64_t d : input.dims) n_first *= d;
    for (int64_t d : dims) n *= d;
    if (n != n_first) {
      return Invalid(
          absl::StrCat("Expecting tensor size: ", n_first, " but got: ", n));
    }
    if (dims != input.dims) {
      return Invalid(absl::StrCat("Expecting shape ", ShapeText(input.dims),
                                  " but got: ", ShapeText(dims)));
    }
  }
  input.items.push_back(std::move(t));
  return absl::OkStatus();
}

// {"b64": "<base64>"}, exactly: TensorFlow Serving's spelling of one
// binary string (json_tensor.cc's IsValBase64Object). It is a value, never
// an object of named inputs; cosession has no string tensors, so where a
// number belongs it is a type error naming it.
bool IsBase64Object(const json::value& v) {
  if (!v.is_object()) return false;
  const json::object& o = v.get_object();
  const json::value* b64 = o.if_contains("b64");
  return o.size() == 1 && b64 != nullptr && b64->is_string();
}

// An object of named inputs (TensorFlow Serving's IsElementObject).
bool IsNamedInputs(const json::value& v) {
  return v.is_object() && !IsBase64Object(v);
}

// The row format, as TensorFlow Serving reads it (its json_tensor.cc): the
// rows are all objects (one key per input, whatever the number of inputs)
// when the first one is, else all values of the one input. `doc` is the
// whole body, which TensorFlow Serving quotes in the first two messages.
absl::StatusOr<NamedTensors> ParseRows(const json::value& doc,
                                       const json::value& instances,
                                       const Signature& sig) {
  if (!instances.is_array()) {
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc),
                                " Expecting 'instances' to be an list/array"));
  }
  const json::array& rows = instances.get_array();
  if (rows.empty()) {
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc),
                                " No values in 'instances' array"));
  }
  const bool objects = IsNamedInputs(rows[0]);
  if (!objects && sig.inputs.empty()) {
    // (TensorFlow Serving would feed its first input, which is not there.)
    return Invalid(
        "instances is a plain list, but the signature has no input to feed "
        "it to");
  }
  if (!objects && sig.inputs.size() > 1) {
    return Invalid(
        "instances is a plain list, but expecting list of objects as "
        "multiple input tensors required as per tensorinfo_map");
  }
  std::vector<std::string> names;
  for (const auto& [name, spec] : sig.inputs) names.push_back(name);
  std::map<std::string, RowItems> inputs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json::value& row = rows[i];
    if (!objects) {
      if (IsNamedInputs(row)) {
        return Invalid(
            absl::StrCat("Expecting value/list but got object at item ", i,
                         " of input list"));
      }
      if (absl::Status s = AddRowItem(row, names[0], sig, inputs); !s.ok()) {
        return Invalid(
            absl::StrCat("Failed to process element: ", i,
                         " of 'instances' list. Error: ", s.ToString()));
      }
      continue;
    }
    if (!IsNamedInputs(row)) {
      return Invalid(absl::StrCat("Expecting object but got list at item ", i,
                                  " of input list"));
    }
    std::set<std::string> keys;
    for (const json::key_value_pair& kv : row.get_object()) {
      std::string key(kv.key());
      if (absl::Status s = AddRowItem(kv.value(), key, sig, inputs); !s.ok()) {
        return Invalid(
            absl::StrCat("Failed to process element: ", i, " key: ", key,
                         " of 'instances' list. Error: ", s.ToString()));
      }
      keys.insert(std::move(key));
    }
    if (keys != std::set<std::string>(names.begin(), names.end())) {
      return Invalid(
          absl::StrCat("Failed to process element: ", i,
                       " of 'instances' list. JSON object: ", Quoted(row),
                       " keys must be equal to: ", absl::StrJoin(names, ",")));
    }
  }
  NamedTensors stacked;
  for (const auto& [name, spec] : sig.inputs) {
    const RowItems& input = inputs[name];
    stacked.emplace(name, Stack(input.items, input.dims, spec.dtype));
  }
  return stacked;
}

absl::StatusOr<NamedTensors> ParseColumns(const json::value& columns,
                                          const Signature& sig) {
  NamedTensors inputs;
  const bool named = sig.inputs.size() > 1 || IsNamedInputs(columns);
  if (sig.inputs.size() > 1 && !IsNamedInputs(columns)) {
    return Invalid(
        "inputs is a plain value/list, but expecting an object as multiple "
        "input tensors required as per tensorinfo_map");
  }
  for (const auto& [name, spec] : sig.inputs) {
    const json::value* v = &columns;
    if (named) {
      const json::value* found = columns.get_object().if_contains(name);
      if (found == nullptr) {
        return Invalid(absl::StrCat("Missing named input: ", name,
                                    " in 'inputs' object."));
      }
      v = found;
    }
    std::vector<int64_t> dims;
    absl::StatusOr<Tensor> t = TensorFromJson(*v, spec.dtype, dims);
    if (!t.ok()) return t.status();
    inputs.emplace(name, *std::move(t));
  }
  return inputs;
}

// True when `value` holds a non-finite double. The bare non-finite tokens
// are marker strings at this point, so such a double came from a literal
// past the double range: an infinity, or NaN when its significand is zero
// (Boost.JSON 1.81 reads 0e400 as 0 times infinity). RapidJSON (TensorFlow
// Serving's parser) either refuses such a literal ("Number too big to be
// stored in double.") or reads it as infinity: json_syntax.h tells which.
// It refuses every one Boost.JSON reads as NaN: both go by the exponent
// less the fraction's digits being past 308. Recursion is bounded by the
// parse's max_depth.
bool HoldsNonFinite(const json::value& value) {
  switch (value.kind()) {
    case json::kind::double_:
      return !std::isfinite(value.get_double());
    case json::kind::array:
      for (const json::value& v : value.get_array()) {
        if (HoldsNonFinite(v)) return true;
      }
      return false;
    case json::kind::object:
      for (const auto& member : value.get_object()) {
        if (HoldsNonFinite(member.value())) return true;
      }
      return false;
    default:
      return false;
  }
}

// Boost.JSON's reading of one document, the bare non-finite tokens taken
// as floats.
json::value ParseDocument(absl::string_view text,
                          boost::system::error_code& ec) {
  json::parse_options options;
  options.max_depth = 64;
  // RapidJSON does not validate UTF-8 under TensorFlow Serving's flags.
  options.allow_invalid_utf8 = true;
  json::value doc =
      json::parse(json::string_view(text.data(), text.size()), ec, {}, options);
  if (ec) {
    if (std::optional<std::string> rewritten =
            WithNonFiniteTokensAsStrings(text)) {
      boost::system::error_code rewritten_ec;
      doc = json::parse(*rewritten, rewritten_ec, {}, options);
      if (!rewritten_ec) ec = {};
    }
  }
  return doc;
}

// A request body: a JSON object (nesting bounded at 64 levels), read as
// TensorFlow Serving reads it (json_syntax.h): bytes after the document
// ignored, a malformed body refused with RapidJSON's message and offset.
absl::StatusOr<json::value> ParseBody(absl::string_view body) {
  if (body.empty()) {
    return Invalid("JSON Parse error: The document is empty");
  }
  boost::system::error_code ec;
  json::value doc = ParseDocument(body, ec);
  if (ec || HoldsNonFinite(doc)) {
    const JsonSyntaxVerdict verdict = CheckJsonSyntax(body);
    if (!verdict.ok()) {
      return Invalid(absl::StrCat("JSON Parse error: ", verdict.error,
                                  " at offset: ", verdict.error_offset));
    }
    const absl::string_view document = body.substr(
        verdict.document_begin, verdict.document_end - verdict.document_begin);
    if (ec && document.size() != body.size()) {
      ec = {};
      doc = ParseDocument(document, ec);
    }
    // What Boost.JSON still refuses of a document RapidJSON takes is past
    // its nesting limit, or one of the odd spellings RapidJSON 1.1.0 also
    // takes as NaN or infinity ("NInf", "NaN.5"), which are not served.
    if (ec) return Invalid(absl::StrCat("JSON Parse error: ", ec.message()));
  }
  if (!doc.is_object()) {
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc), " Is not object"));
  }
  return doc;
}

// The signature_name a body asks for: serving_default when it has none or
// an empty one, as TensorFlow Serving reads it (a client that echoes the
// metadata's model_spec.signature_name sends "").
absl::StatusOr<std::string> SignatureName(const json::value& doc) {
  const json::value* name = doc.get_object().if_contains("signature_name");
  if (name == nullptr) return std::string(kDefaultServingSignature);
  if (!name->is_string()) {
    return Invalid(absl::StrCat(
        "JSON Value: ", Quoted(doc),
        " not formatted correctly. 'signature_name' key must be a string "
        "value."));
  }
  if (name->get_string().empty()) return std::string(kDefaultServingSignature);
  return std::string(name->get_string().data(), name->get_string().size());
}

// ---- classify and regress: examples' features into the signature's inputs

// What TensorFlow Serving checks of a signature before running it for
// classify or regress (its classifier.cc and regressor.cc).
absl::Status CheckExamplesSignature(const std::string& name,
                                    const Signature& sig,
                                    ExamplesMethod method) {
  if (method == ExamplesMethod::kClassify) {
    if (sig.method_name != kClassifyMethodName) {
      return Invalid(
          absl::StrCat("Expected classification signature method_name to be ",
                       kClassifyMethodName, ". Was: ", sig.method_name));
    }
    if (sig.outputs.size() != 1 && sig.outputs.size() != 2) {
      return Invalid(absl::StrCat("Expected one or two output Tensors, found ",
                                  sig.outputs.size()));
    }
    if (!sig.outputs.contains("classes") && !sig.outputs.contains("scores")) {
      return Invalid(
          "Expected classification signature outputs to contain at least one "
          "of \"classes\" or \"scores\".");
    }
  } else {
    if (sig.method_name != kRegressMethodName) {
      return Invalid(
          absl::StrCat("Expected regression signature method_name to be ",
                       kRegressMethodName, ". Was: ", sig.method_name));
    }
    if (sig.outputs.size() != 1) return Invalid("Expected one output Tensor.");
    if (!sig.outputs.contains("outputs")) {
      std::vector<std::string> names;
      for (const auto& [key, t] : sig.outputs) names.push_back(key);
      return Invalid(
          absl::StrCat("No regression outputs found in signature. Outputs: ",
                       absl::StrJoin(names, ", ")));
    }
  }
  if (sig.inputs.empty()) {
    return Invalid(absl::StrCat("signature '", name,
                                "' has no inputs: its examples' features "
                                "must name its inputs"));
  }
  return absl::OkStatus();
}

// One scalar of example `index`'s feature `key`, as T (the input's type).
template <typename T>
absl::Status AppendFeatureValue(const json::value& v, const std::string& key,
                                int64_t index, DType dtype,
                                std::vector<T>& out) {
  auto mismatch = [&](absl::string_view got) {
    return Invalid(absl::StrCat("Name: <unknown>, Key: ", key,
                                ", Index: ", index,
                                ".  Data types don't match. Data type: ", got,
                                " but expected type: ", DTypeName(dtype)));
  };
  const std::optional<double> special = NonFiniteMarker(v);
  if (v.is_null() || v.is_array() || v.is_object()) {
    return Invalid(absl::StrCat(
        "Feature: ", key,
        " has element with unexpected JSON type: ", JsonTypeName(v)));
  }
  if (v.is_string() && !special) return mismatch("bytes");
  auto uint64 = [&] {
    return Invalid(absl::StrCat("Feature: ", key,
                                " has uint64_t element. Only int64_t is "
                                "supported."));
  };
  if constexpr (std::is_floating_point_v<T>) {
    if (v.is_bool()) return mismatch("int64");
    if (v.is_uint64()) return uint64();
    // A decimal is a float_list's value to TensorFlow Serving (rounded to
    // a float, as any number its float inputs take); a whole number, which
    // cosession takes for a float input too, is rounded likewise.
    out.push_back(special         ? static_cast<T>(*special)
                  : v.is_double() ? JsonNumberAs<T>(v.get_double())
                                  : JsonNumberAs<T>(v.get_int64()));
    return absl::OkStatus();
  } else {
    if (special || v.is_double()) return mismatch("float");
    int64_t n;
    if (v.is_bool()) {
      n = v.get_bool() ? 1 : 0;
    } else if (v.is_int64()) {
      n = v.get_int64();
    } else {
      return uint64();
    }
    const int64_t lowest =
        std::is_same_v<T, bool> ? 0 : int64_t{std::numeric_limits<T>::min()};
    const int64_t highest =
        std::is_same_v<T, bool> ? 1 : int64_t{std::numeric_limits<T>::max()};
    if (n < lowest || n > highest) {
      return Invalid(absl::StrCat("Name: <unknown>, Key: ", key,
                                  ", Index: ", index, ".  Value ", n,
                                  " is out of range for ", DTypeName(dtype)));
    }
    out.push_back(static_cast<T>(n));
    return absl::OkStatus();
  }
}

// The examples' feature `key` as one input of `spec`: a row per example.
absl::StatusOr<Tensor> FeatureTensor(const std::string& key,
                                     const SignatureTensor& spec,
                                     const json::array& examples,
                                     const json::object* context,
                                     int64_t max_values, int64_t& values_left) {
  // The row's shape: the input's dimensions after the first. An unknown
  // one (a [-1, -1] input) takes the first example's value count.
  std::vector<int64_t> row_dims;
  bool row_known = true;
  if (spec.shape.unknown_rank()) {
    row_known = false;
  } else {
    if (spec.shape.dims() < 1) {
      return Invalid(
          absl::StrCat("input '", key, "' has shape ", spec.shape.DebugString(),
                       ": a classify or regress input has a row per example"));
    }
    for (int i = 1; i < spec.shape.dims(); ++i) {
      row_dims.push_back(spec.shape.dim_size(i));
      row_known = row_known && spec.shape.dim_size(i) >= 0;
    }
    if (!row_known && row_dims.size() != 1) {
      return Invalid(absl::StrCat(
          "input '", key, "' has shape ", spec.shape.DebugString(),
          ": a classify or regress input needs its dimensions after the "
          "first known, or one unknown"));
    }
  }
  return VisitDType(spec.dtype, [&]<typename T>() -> absl::StatusOr<Tensor> {
    std::vector<T> values;
    int64_t per_row = -1;
    if (row_known) {
      per_row = 1;
      for (int64_t d : row_dims) per_row *= d;
    }
    for (size_t i = 0; i < examples.size(); ++i) {
      const json::value* value = examples[i].get_object().if_contains(key);
      if (value == nullptr && context != nullptr) {
        value = context->if_contains(key);
      }
      if (value == nullptr) {
        return Invalid(absl::StrCat("Name: <unknown>, Feature: ", key,
                                    " (data type: ", DTypeName(spec.dtype),
                                    ") is required but could not be found."));
      }
      // A context's list is copied into every example: bounded, so that a
      // small body cannot ask for an enormous tensor.
      if (per_row > 0 &&
          static_cast<int64_t>(values.size()) + per_row > values_left) {
        return Invalid(absl::StrCat(
            "Feature: ", key, " makes more values than the ", max_values,
            " a request's examples may make, over its ", examples.size(),
            " examples (with its other features)"));
      }
      const size_t before = values.size();
      if (value->is_array()) {
        for (const json::value& v : value->get_array()) {
          COSESSION_RETURN_IF_ERROR(
              AppendFeatureValue<T>(v, key, i, spec.dtype, values));
        }
      } else {
        COSESSION_RETURN_IF_ERROR(
            AppendFeatureValue<T>(*value, key, i, spec.dtype, values));
      }
      const int64_t count = static_cast<int64_t>(values.size() - before);
      if (per_row < 0) per_row = count;
      if (count != per_row) {
        return Invalid(absl::StrCat(
            "Name: <unknown>, Key: ", key, ", Index: ", i, ".  Number of ",
            DTypeName(spec.dtype), " values != expected.  Values size: ", count,
            " but output shape: ",
            ShapeText(row_known ? row_dims : std::vector<int64_t>{per_row})));
      }
    }
    values_left -= static_cast<int64_t>(values.size());
    std::vector<int64_t> dims{static_cast<int64_t>(examples.size())};
    if (row_known) {
      dims.insert(dims.end(), row_dims.begin(), row_dims.end());
    } else {
      dims.push_back(per_row);
    }
    Tensor t =
        Tensor::Allocate(spec.dtype, TensorShape(absl::MakeConstSpan(dims)));
    if constexpr (std::is_same_v<T, bool>) {
      auto flat = t.mutable_flat<bool>();
      for (size_t i = 0; i < values.size(); ++i) flat[i] = values[i];
    } else if (!values.empty()) {
      std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    }
    return t;
  });
}

// ---- writing ----

template <typename T>
void AppendNumber(std::string& out, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) {
      out += "NaN";
    } else if (std::isinf(v)) {
      out += v > 0 ? "Infinity" : "-Infinity";
    } else {
      // TensorFlow Serving's digits (json_tensor.cc's WriteDecimal): six
      // significant ones as printf's %g writes them, or max_digits10 when
      // six do not read back as the same value; ".0" after a whole number
      // in fixed notation. Clients compare answers as text too (golden
      // files), so 0.999999046 must not come out as 0.99999905.
      char buffer[64];
      auto written = std::to_chars(buffer, buffer + sizeof(buffer), v,
                                   std::chars_format::general, 6);
      T back{};
      const auto read = std::from_chars(buffer, written.ptr, back);
      if (read.ec != std::errc() || back != v) {
        written = std::to_chars(buffer, buffer + sizeof(buffer), v,
                                std::chars_format::general,
                                std::numeric_limits<T>::max_digits10);
      }
      const std::string_view text(buffer, written.ptr - buffer);
      out += text;
      if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
    }
  } else {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
    (void)ec;
    out.append(buffer, end);
  }
}

// TensorFlow Serving lays its answers out with RapidJSON's PrettyWriter
// (json_tensor.cc): four spaces a level, each member of an object on a line
// of its own, and arrays either on one line ("[1.0, 2.0]", for a row of a
// row-format answer, an example of a classify answer and a regress answer)
// or one element a line (a columnar answer's tensors). The functions below
// write those same bytes, for clients that compare answers as text.
enum class ArrayLayout { kOneLine, kOneElementALine };

// Elements [offset, offset + count of dims[d..]) of `values`, nested;
// `level` counts the arrays and objects open around them.
template <typename T>
void AppendNested(std::string& out, absl::Span<const T> values,
                  absl::Span<const int64_t> dims, size_t d, int64_t& offset,
                  ArrayLayout layout, int level) {
  if (d == dims.size()) {
    AppendNumber(out, values[offset++]);
    return;
  }
  out += '[';
  for (int64_t i = 0; i < dims[d]; ++i) {
    if (layout == ArrayLayout::kOneLine) {
      if (i > 0) out += ", ";
    } else {
      if (i > 0) out += ',';
      out += '\n';
      AppendPrettyIndent(out, level + 1);
    }
    AppendNested(out, values, dims, d + 1, offset, layout, level + 1);
  }
  if (layout == ArrayLayout::kOneElementALine && dims[d] > 0) {
    out += '\n';
    AppendPrettyIndent(out, level);
  }
  out += ']';
}

// Row `row` of `t` (or the whole tensor when row < 0).
void AppendTensor(std::string& out, const Tensor& t, int64_t row,
                  ArrayLayout layout, int level) {
  VisitDType(t.dtype(), [&]<typename T>() {
    absl::Span<const int64_t> dims = t.shape().dim_sizes();
    int64_t offset = 0;
    if (row >= 0) {
      int64_t per_row = 1;
      for (size_t i = 1; i < dims.size(); ++i) per_row *= dims[i];
      offset = row * per_row;
      dims = dims.subspan(1);
    }
    AppendNested<T>(out, t.flat<T>(), dims, 0, offset, layout, level);
  });
}

// `"key": ` as the member of an object at `level` (the object's own level
// plus one), after `first` members.
void AppendKey(std::string& out, absl::string_view key, bool first, int level) {
  if (!first) out += ',';
  out += '\n';
  AppendPrettyIndent(out, level);
  AppendRapidJsonString(out, key);
  out += ": ";
}

// {"name": <row `row` of the tensor (all of it when row < 0)>, ...} as an
// object at `level`.
void AppendNamedTensors(std::string& out, const NamedTensors& tensors,
                        int64_t row, ArrayLayout layout, int level) {
  out += '{';
  bool first = true;
  for (const auto& [name, t] : tensors) {
    AppendKey(out, name, first, level + 1);
    first = false;
    AppendTensor(out, t, row, layout, level + 1);
  }
  out += '\n';
  AppendPrettyIndent(out, level);
  out += '}';
}

}  // namespace

std::string TfDTypeName(DType dtype) {
  return absl::StrCat("DT_", absl::AsciiStrToUpper(DTypeName(dtype)));
}

absl::StatusOr<PredictRequest> ParsePredictRequest(
    absl::string_view body,
    const std::map<std::string, Signature>& signatures) {
  if (std::optional<PredictRequest> dense =
          TryParseDensePredictRequest(body, signatures)) {
    return *std::move(dense);
  }
  return ParsePredictRequestThroughTree(body, signatures);
}

absl::StatusOr<PredictRequest> ParsePredictRequestThroughTree(
    absl::string_view body,
    const std::map<std::string, Signature>& signatures) {
  COSESSION_ASSIGN_OR_RETURN(const json::value doc, ParseBody(body));
  const json::object& o = doc.get_object();
  PredictRequest request;
  COSESSION_ASSIGN_OR_RETURN(request.signature_name, SignatureName(doc));
  auto sig = signatures.find(request.signature_name);
  if (sig == signatures.end()) {
    return Invalid(absl::StrCat("Serving signature name: \"",
                                request.signature_name,
                                "\" not found in signature def"));
  }
  const json::value* instances = o.if_contains("instances");
  const json::value* columns = o.if_contains("inputs");
  if (instances != nullptr && columns != nullptr) {
    return Invalid(absl::StrCat(
        "JSON Value: ", Quoted(doc),
        " Not formatted correctly expecting only one of 'inputs' or "
        "'instances' keys to exist "));
  }
  if (instances == nullptr && columns == nullptr) {
    return Invalid("Missing 'inputs' or 'instances' key");
  }
  absl::StatusOr<NamedTensors> inputs =
      instances != nullptr ? ParseRows(doc, *instances, sig->second)
                           : ParseColumns(*columns, sig->second);
  if (!inputs.ok()) return inputs.status();
  request.format =
      instances != nullptr ? PredictFormat::kRow : PredictFormat::kColumnar;
  request.inputs = *std::move(inputs);
  return request;
}

absl::StatusOr<std::string> RenderPredictResponse(PredictFormat format,
                                                  const NamedTensors& outputs) {
  std::string out = "{";
  if (format == PredictFormat::kColumnar) {
    AppendKey(out, "outputs", /*first=*/true, 1);
    if (outputs.size() == 1) {
      AppendTensor(out, outputs.begin()->second, -1,
                   ArrayLayout::kOneElementALine, 1);
    } else {
      AppendNamedTensors(out, outputs, -1, ArrayLayout::kOneElementALine, 1);
    }
    out += "\n}";
    return out;
  }
  int64_t rows = -1;
  for (const auto& [name, t] : outputs) {
    if (t.shape().dims() < 1) {
      return Invalid(
          absl::StrCat("Tensor name: ", name, " has no shape information "));
    }
    const int64_t n = t.shape().dim_size(0);
    if (rows >= 0 && n != rows) {
      return Invalid(absl::StrCat("Tensor name: ", name,
                                  " has inconsistent batch size: ", n,
                                  " expecting: ", rows));
    }
    rows = n;
  }
  AppendKey(out, "predictions", /*first=*/true, 1);
  out += '[';
  for (int64_t r = 0; r < rows; ++r) {
    if (outputs.size() == 1) {
      // Rows follow each other on the first line, as TensorFlow Serving
      // writes them: [[1.0, 2.0], [3.0, 4.0]
      if (r > 0) out += ", ";
      AppendTensor(out, outputs.begin()->second, r, ArrayLayout::kOneLine, 2);
    } else {
      if (r > 0) out += ',';
      out += '\n';
      AppendPrettyIndent(out, 2);
      AppendNamedTensors(out, outputs, r, ArrayLayout::kOneLine, 2);
    }
  }
  if (rows > 0) {
    out += '\n';
    AppendPrettyIndent(out, 1);
  }
  out += "]\n}";
  return out;
}

namespace {

// A classify or regress body's examples and context, checked as far as
// they can be without the model's signature.
struct ExamplesBody {
  const json::array* examples = nullptr;
  const json::object* context = nullptr;
};

absl::StatusOr<ExamplesBody> ReadExamplesBody(const json::value& doc) {
  const json::object& o = doc.get_object();
  const json::object* context = nullptr;
  if (const json::value* c = o.if_contains("context")) {
    if (!c->is_object()) {
      return Invalid(absl::StrCat("Example must be JSON object but got JSON ",
                                  JsonTypeName(*c)));
    }
    context = &c->get_object();
  }
  const json::value* examples = o.if_contains("examples");
  if (examples == nullptr) {
    // TensorFlow Serving says "classify" for :regress too.
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc),
                                " When method is classify, key 'examples' is "
                                "expected and was not found"));
  }
  if (!examples->is_array()) {
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc),
                                " Expecting 'examples' value to be an "
                                "list/array"));
  }
  const json::array& list = examples->get_array();
  if (list.empty()) {
    return Invalid(absl::StrCat("JSON Value: ", Quoted(doc),
                                " 'examples' value is an empty array"));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_object()) {
      return Invalid(absl::StrCat("Example must be JSON object but got JSON ",
                                  JsonTypeName(list[i])));
    }
    if (context == nullptr) continue;
    for (const auto& feature : list[i].get_object()) {
      if (context->contains(feature.key())) {
        return Invalid(absl::StrCat(
            "Feature: ",
            absl::string_view(feature.key().data(), feature.key().size()),
            " is in both 'context' and example ", i,
            ": a context's features must not appear in the examples"));
      }
    }
  }

  return ExamplesBody{&list, context};
}

}  // namespace

absl::Status CheckBodyBeforeModelLookup(absl::string_view body,
                                        std::optional<ExamplesMethod> method) {
  COSESSION_ASSIGN_OR_RETURN(const json::value doc, ParseBody(body));
  COSESSION_RETURN_IF_ERROR(SignatureName(doc).status());
  if (method.has_value()) {
    COSESSION_RETURN_IF_ERROR(ReadExamplesBody(doc).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<ExamplesRequest> ParseExamplesRequest(
    absl::string_view body, ExamplesMethod method,
    const std::map<std::string, Signature>& signatures, int64_t max_values) {
  COSESSION_ASSIGN_OR_RETURN(const json::value doc, ParseBody(body));
  ExamplesRequest request;
  COSESSION_ASSIGN_OR_RETURN(request.signature_name, SignatureName(doc));
  COSESSION_ASSIGN_OR_RETURN(const ExamplesBody examples,
                             ReadExamplesBody(doc));
  const json::array& list = *examples.examples;
  const json::object* context = examples.context;

  auto sig = signatures.find(request.signature_name);
  if (sig == signatures.end()) {
    return Invalid(absl::StrCat("No signature was found with the name: ",
                                request.signature_name));
  }
  COSESSION_RETURN_IF_ERROR(
      CheckExamplesSignature(sig->first, sig->second, method));
  int64_t values_left = max_values;
  for (const auto& [key, spec] : sig->second.inputs) {
    absl::StatusOr<Tensor> t =
        FeatureTensor(key, spec, list, context, max_values, values_left);
    if (!t.ok()) return t.status();
    request.inputs.emplace(key, *std::move(t));
  }
  request.num_examples = static_cast<int64_t>(list.size());
  return request;
}

absl::StatusOr<std::string> RenderExamplesResponse(ExamplesMethod method,
                                                   const NamedTensors& outputs,
                                                   int64_t num_examples) {
  // A [batch, k] output of the run, checked as TensorFlow Serving checks it.
  auto matrix = [&](const char* key, const char* what,
                    std::initializer_list<DType> dtypes,
                    const char* wanted) -> absl::StatusOr<const Tensor*> {
    auto it = outputs.find(key);
    if (it == outputs.end()) return nullptr;
    const Tensor& t = it->second;
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) {
      return Invalid(absl::StrCat("Expected ", what, " Tensor of ", wanted,
                                  ". Got: ", TfDTypeName(t.dtype())));
    }
    if (t.shape().dims() != 2) {
      return Invalid(absl::StrCat("Expected ", what,
                                  " Tensor of shape [batch_size, "
                                  "num_classes]. Got: ",
                                  t.shape().DebugString()));
    }
    if (t.shape().dim_size(0) != num_examples) {
      return Invalid(absl::StrCat("Expected ", what, " output batch size of ",
                                  num_examples,
                                  ". Got: ", t.shape().dim_size(0)));
    }
    return &t;
  };
  std::string results;
  if (method == ExamplesMethod::kClassify) {
    absl::StatusOr<const Tensor*> classes =
        matrix("classes", "classes", {DType::kInt64, DType::kInt32},
               "integer labels (DT_INT64 or DT_INT32: cosession has no "
               "DT_STRING)");
    if (!classes.ok()) return classes.status();
    absl::StatusOr<const Tensor*> scores =
        matrix("scores", "scores", {DType::kFloat}, "DT_FLOAT");
    if (!scores.ok()) return scores.status();
    if (*classes == nullptr && *scores == nullptr) {
      return Invalid(
          "Expected classification signature outputs to contain at least one "
          "of \"classes\" or \"scores\".");
    }
    if (*classes != nullptr && *scores != nullptr &&
        (*classes)->shape().dim_size(1) != (*scores)->shape().dim_size(1)) {
      return Invalid(absl::StrCat(
          "Tensors class and score should match in dim_size(1). Got ",
          (*classes)->shape().dim_size(1), " vs. ",
          (*scores)->shape().dim_size(1)));
    }
    const int64_t k =
        (*classes != nullptr ? *classes : *scores)->shape().dim_size(1);
    // TensorFlow Serving's layout: the examples on the first line, each on
    // one line, the array closed on a line of its own.
    results += '[';
    for (int64_t i = 0; i < num_examples; ++i) {
      if (i > 0) results += ", ";
      results += '[';
      for (int64_t c = 0; c < k; ++c) {
        if (c > 0) results += ", ";
        results += "[\"";
        if (*classes != nullptr) {
          VisitDType((*classes)->dtype(), [&]<typename T>() {
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
              AppendNumber(results, (*classes)->flat<T>()[i * k + c]);
            }
          });
        }
        results += "\", ";
        AppendNumber(results, *scores != nullptr
                                  ? (*scores)->flat<float>()[i * k + c]
                                  : 0.0f);
        results += ']';
      }
      results += ']';
    }
    if (num_examples > 0) {
      results += '\n';
      AppendPrettyIndent(results, 1);
    }
    results += ']';
  } else {
    auto it = outputs.find("outputs");
    if (it == outputs.end()) {
      return Invalid("No regression outputs found in the run's results");
    }
    const Tensor& t = it->second;
    if (t.dtype() != DType::kFloat) {
      return Invalid(absl::StrCat("Expected output Tensor of DT_FLOAT.  Got: ",
                                  TfDTypeName(t.dtype())));
    }
    if (t.shape().dims() < 1 || t.shape().dim_size(0) != num_examples) {
      return Invalid(absl::StrCat(
          "Input batch size did not match output batch size: ", num_examples,
          " vs. ", t.shape().dims() < 1 ? 0 : t.shape().dim_size(0)));
    }
    if (t.NumElements() != num_examples) {
      return Invalid(absl::StrCat(
          "Expected output Tensor shape to be either [batch_size] or "
          "[batch_size, 1] but got ",
          t.shape().DebugString()));
    }
    results += '[';
    for (int64_t i = 0; i < num_examples; ++i) {
      if (i > 0) results += ", ";
      AppendNumber(results, t.flat<float>()[i]);
    }
    results += ']';
  }
  std::string out = "{";
  AppendKey(out, "results", /*first=*/true, 1);
  out += results;
  AppendKey(out, "result", /*first=*/false, 1);
  out += results;
  out += "\n}";
  return out;
}

std::string RenderErrorBody(absl::string_view message) {
  std::string out = "{";
  AppendKey(out, "error", /*first=*/true, 1);
  AppendRapidJsonString(out, message);
  out += "\n}";
  return out;
}

}  // namespace cosession
