#include "cosession/serving/predict_fast_path.h"

#include <boost/json/basic_parser_impl.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace cosession {
namespace {

namespace json = boost::json;

// Receives Boost.JSON's events for one body and keeps the one tensor the
// dense form carries. Every event outside that form makes it decline (an
// error stops the parser); the caller then takes the tree path.
class DenseRequestHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  explicit DenseRequestHandler(
      const std::map<std::string, Signature>* signatures)
      : signatures_(signatures) {}

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

  bool on_object_begin(json::error_code& ec) {
    if (Ignoring()) return Open();
    if (depth_ == 0) return Open();  // the document
    switch (TakeRole()) {
      case Role::kIgnore:
        ignore_below_ = depth_;
        return Open();
      case Role::kColumns:
        // {"inputs": {"<input>": <tensor>, ...}}
        if (!GuessSignature()) return Decline(ec);
        columns_object_depth_ = depth_ + 1;
        return Open();
      default:  // a string's place, or inside a tensor
        return Decline(ec);
    }
  }

  bool on_object_end(std::size_t, json::error_code&) {
    --depth_;
    if (ignore_below_ == depth_) ignore_below_ = -1;
    if (columns_object_depth_ == depth_ + 1) columns_object_depth_ = -1;
    return true;
  }

  bool on_array_begin(json::error_code& ec) {
    if (Ignoring()) return Open();
    if (depth_ == 0) return Decline(ec);  // the body is not an object
    if (tensor_base_ < 0) {
      const Role role = TakeRole();
      if (role == Role::kIgnore) {
        ignore_below_ = depth_;
        return Open();
      }
      if (!BeginTensor(role)) return Decline(ec);
    }
    // Lists may nest only above the level the leaves are at.
    const int level = depth_ + 1 - tensor_base_;
    if (leaf_level_ >= 0 && level > leaf_level_) return Decline(ec);
    return Open();
  }

  bool on_array_end(std::size_t n, json::error_code& ec) {
    if (Ignoring()) return Close();
    const int level = depth_ - tensor_base_;
    if (n == 0) return Decline(ec);
    if (static_cast<int>(dims_.size()) < level) dims_.resize(level, -1);
    int64_t& dim = dims_[level - 1];
    if (dim < 0) {
      dim = static_cast<int64_t>(n);
    } else if (dim != static_cast<int64_t>(n)) {
      return Decline(ec);  // ragged
    }
    Close();
    if (depth_ == tensor_base_) tensor_base_ = -1;
    return true;
  }

  bool on_key_part(json::string_view part, std::size_t, json::error_code&) {
    if (!Ignoring()) key_.append(part.data(), part.size());
    return true;
  }

  bool on_key(json::string_view part, std::size_t, json::error_code& ec) {
    if (Ignoring()) return true;
    key_.append(part.data(), part.size());
    role_ = Role::kIgnore;
    if (depth_ == 1) {
      if (key_ == "signature_name") {
        if (seen_signature_name_) return Decline(ec);
        seen_signature_name_ = true;
        role_ = Role::kSignatureName;
      } else if (key_ == "instances" || key_ == "inputs") {
        if (seen_tensor_key_) return Decline(ec);  // both, or twice
        seen_tensor_key_ = true;
        format_ = key_ == "instances" ? PredictFormat::kRow
                                      : PredictFormat::kColumnar;
        role_ = format_ == PredictFormat::kRow ? Role::kRows : Role::kColumns;
      }
    } else if (depth_ == columns_object_depth_ && key_ == input_name_) {
      if (has_tensor_) return Decline(ec);
      role_ = Role::kNamedColumn;
    }
    key_.clear();
    return true;
  }

  bool on_string_part(json::string_view part, std::size_t, json::error_code&) {
    if (!Ignoring() && role_ == Role::kSignatureName) {
      signature_name_.append(part.data(), part.size());
    }
    return true;
  }

  bool on_string(json::string_view part, std::size_t, json::error_code& ec) {
    if (Ignoring()) return true;
    if (tensor_base_ >= 0) return Decline(ec);
    const Role role = TakeRole();
    if (role == Role::kIgnore) return true;
    if (role != Role::kSignatureName) return Decline(ec);
    signature_name_.append(part.data(), part.size());
    return true;
  }

  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t v, json::string_view, json::error_code& ec) {
    return Leaf(v, ec);
  }
  bool on_uint64(std::uint64_t v, json::string_view, json::error_code& ec) {
    return Leaf(v, ec);
  }
  bool on_double(double v, json::string_view, json::error_code& ec) {
    // A literal past the double range (1e400, or 0e400, which Boost.JSON
    // reads as NaN): the tree's parse reports it.
    if (!std::isfinite(v)) return Decline(ec);
    return Leaf(v, ec);
  }
  bool on_bool(bool, json::error_code& ec) { return NonNumber(ec); }
  bool on_null(json::error_code& ec) { return NonNumber(ec); }

  // The request, once the whole body was read; nullopt when it is not of
  // the dense form after all.
  std::optional<PredictRequest> TakeRequest() {
    if (!has_tensor_ || SignatureName() != guessed_signature_) {
      return std::nullopt;
    }
    int64_t count = 1;
    for (int64_t d : dims_) count *= d;
    if (static_cast<int>(dims_.size()) != leaf_level_ ||
        static_cast<size_t>(count) !=
            (dtype_ == DType::kFloat ? floats_.size() : doubles_.size())) {
      return std::nullopt;  // cannot happen: the events were checked
    }
    PredictRequest request;
    request.signature_name = std::move(guessed_signature_);
    request.format = format_;
    Tensor t = Tensor::Allocate(
        dtype_, TensorShape(absl::MakeConstSpan(dims_.data(), leaf_level_)));
    if (dtype_ == DType::kFloat) {
      std::memcpy(t.raw_data(), floats_.data(), floats_.size() * sizeof(float));
    } else {
      std::memcpy(t.raw_data(), doubles_.data(),
                  doubles_.size() * sizeof(double));
    }
    request.inputs.emplace(input_name_, std::move(t));
    return request;
  }

 private:
  // What the value after the current key is to the request.
  enum class Role {
    kIgnore,         // an unknown key's: skipped, whatever it holds
    kSignatureName,  // a string
    kRows,           // "instances"
    kColumns,        // "inputs": a tensor or an object of them
    kNamedColumn,    // the input's entry in the "inputs" object
  };

  bool Ignoring() const { return ignore_below_ >= 0; }
  bool Open() {
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    if (ignore_below_ == depth_) ignore_below_ = -1;
    return true;
  }
  static bool Decline(json::error_code& ec) {
    ec = json::error::exception;
    return false;
  }
  Role TakeRole() {
    const Role role = role_;
    role_ = Role::kIgnore;
    return role;
  }

  // The signature this body asks for, as far as it has been read: its
  // "signature_name" if one came before, otherwise the default. TakeRequest
  // checks the guess against the whole body.
  bool GuessSignature() {
    guessed_signature_ = SignatureName();
    auto sig = signatures_->find(guessed_signature_);
    if (sig == signatures_->end() || sig->second.inputs.size() != 1) {
      return false;
    }
    const auto& [name, spec] = *sig->second.inputs.begin();
    if (spec.dtype != DType::kFloat && spec.dtype != DType::kDouble) {
      return false;
    }
    input_name_ = name;
    dtype_ = spec.dtype;
    return true;
  }

  // The "signature_name" read so far, or the default (for an empty one too,
  // as in TensorFlow Serving).
  std::string SignatureName() const {
    return seen_signature_name_ && !signature_name_.empty()
               ? signature_name_
               : std::string(kDefaultServingSignature);
  }

  // A tensor's value starts here, in the place of `role`.
  bool BeginTensor(Role role) {
    if (role == Role::kRows || role == Role::kColumns) {
      if (!GuessSignature()) return false;
    } else if (role != Role::kNamedColumn) {
      return false;
    }
    if (has_tensor_) return false;
    has_tensor_ = true;
    tensor_base_ = depth_;
    return true;
  }

  // A number: a leaf of the tensor, a scalar tensor of the columnar
  // format, or part of a value ignored. The casts are the tree path's.
  template <typename Number>
  bool Leaf(Number number, json::error_code& ec) {
    if (Ignoring()) return true;
    if (tensor_base_ < 0) {
      const Role role = TakeRole();
      if (role == Role::kIgnore) return true;
      // The rows must be a list; a scalar input of the columnar format is
      // a tensor of shape [].
      if (role == Role::kRows || !BeginTensor(role)) return Decline(ec);
      leaf_level_ = 0;
      Append(number);
      tensor_base_ = -1;
      return true;
    }
    const int level = depth_ - tensor_base_;
    if (leaf_level_ < 0) {
      leaf_level_ = level;
    } else if (level != leaf_level_) {
      return Decline(ec);
    }
    Append(number);
    return true;
  }

  // Appends the number as the tree path does (rest_json.h's JsonNumberAs).
  template <typename Number>
  void Append(Number number) {
    if (dtype_ == DType::kFloat) {
      floats_.push_back(JsonNumberAs<float>(number));
    } else {
      doubles_.push_back(JsonNumberAs<double>(number));
    }
  }

  bool NonNumber(json::error_code& ec) {
    if (Ignoring()) return true;
    if (tensor_base_ >= 0) return Decline(ec);
    // In "signature_name"'s place or as the whole "inputs", not the dense
    // form; as an unknown key's value, ignored.
    return TakeRole() == Role::kIgnore ? true : Decline(ec);
  }

  const std::map<std::string, Signature>* signatures_;

  int depth_ = 0;                  // containers open
  int ignore_below_ = -1;          // >= 0: skipping a value opened here
  int columns_object_depth_ = -1;  // the "inputs" object's depth, if open
  Role role_ = Role::kIgnore;
  std::string key_;

  bool seen_signature_name_ = false;
  bool seen_tensor_key_ = false;
  std::string signature_name_;     // the body's "signature_name"
  std::string guessed_signature_;  // the one the tensor was read for
  PredictFormat format_ = PredictFormat::kRow;

  std::string input_name_;
  DType dtype_ = DType::kFloat;
  bool has_tensor_ = false;
  int tensor_base_ = -1;       // depth_ where the tensor's value started
  int leaf_level_ = -1;        // lists around each leaf
  std::vector<int64_t> dims_;  // per level, the length of its lists
  std::vector<float> floats_;
  std::vector<double> doubles_;
};

}  // namespace

std::optional<PredictRequest> TryParseDensePredictRequest(
    absl::string_view body,
    const std::map<std::string, Signature>& signatures) {
  json::parse_options options;
  options.max_depth = 64;  // as the tree path
  json::basic_parser<DenseRequestHandler> parser(options, &signatures);
  json::error_code ec;
  const std::size_t consumed =
      parser.write_some(false, body.data(), body.size(), ec);
  if (ec || !parser.done() || consumed != body.size()) return std::nullopt;
  return parser.handler().TakeRequest();
}

}  // namespace cosession
