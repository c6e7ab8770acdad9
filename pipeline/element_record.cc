#include "cosession/pipeline/element_record.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

// The layout is the machine's own (the file comment says why).
static_assert(std::endian::native == std::endian::little);

enum ComponentKind : uint8_t { kTensor = 0, kString = 1 };

// Dimensions of a decoded tensor, as TensorShape's InlinedVector keeps
// them; more than any op makes, few enough that a corrupt rank cannot
// make the decoder loop for long.
constexpr uint32_t kMaxRank = 64;

template <typename T>
void AppendFixed(T value, std::string& out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void AppendBytes(absl::string_view bytes, std::string& out) {
  AppendFixed<uint64_t>(bytes.size(), out);
  out.append(bytes.data(), bytes.size());
}

// Reads the fields of one record in order; every read checks the bytes
// left first.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  absl::StatusOr<T> Fixed(absl::string_view what) {
    if (bytes_.size() < sizeof(T)) return Short(what, sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return value;
  }
  absl::StatusOr<absl::string_view> Bytes(uint64_t size,
                                          absl::string_view what) {
    if (bytes_.size() < size) return Short(what, size);
    absl::string_view taken = bytes_.substr(0, size);
    bytes_.remove_prefix(size);
    return taken;
  }
  size_t left() const { return bytes_.size(); }

 private:
  absl::Status Short(absl::string_view what, uint64_t size) const {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " needs ", size, " bytes, ", bytes_.size(), " are left"));
  }
  absl::string_view bytes_;
};

absl::StatusOr<Tensor> DecodeTensor(Reader& in, size_t c) {
  const std::string where = absl::StrCat("component ", c);
  absl::StatusOr<uint8_t> dtype = in.Fixed<uint8_t>(where + "'s dtype");
  if (!dtype.ok()) return dtype.status();
  if (*dtype > static_cast<uint8_t>(DType::kBool)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has dtype ", *dtype, ", which is none"));
  }
  absl::StatusOr<uint32_t> rank = in.Fixed<uint32_t>(where + "'s rank");
  if (!rank.ok()) return rank.status();
  if (*rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " has rank ", *rank, ", above the most, ", kMaxRank));
  }
  const DType type = static_cast<DType>(*dtype);
  const uint64_t element_bytes = DTypeSize(type);
  TensorShape shape;
  // The tensor's bytes must be left in the record: a bound on the
  // product of the dimensions read so far that cannot overflow.
  uint64_t elements = 1;
  for (uint32_t d = 0; d < *rank; ++d) {
    absl::StatusOr<int64_t> size = in.Fixed<int64_t>(where + "'s dimensions");
    if (!size.ok()) return size.status();
    if (*size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has dimension ", d, " of size ", *size));
    }
    shape.AddDim(*size);
    if (*size == 0) {
      elements = 0;
    } else if (elements != 0) {
      if (static_cast<uint64_t>(*size) > in.left() / element_bytes / elements) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "'s dimensions need more bytes than are left (",
                         in.left(), ")"));
      }
      elements *= static_cast<uint64_t>(*size);
    }
  }
  absl::StatusOr<absl::string_view> data =
      in.Bytes(elements * element_bytes, where + "'s data");
  if (!data.ok()) return data.status();
  if (type == DType::kBool) {
    for (char byte : *data) {
      if (byte != 0 && byte != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " is bool but holds the byte ",
                         static_cast<int>(static_cast<unsigned char>(byte))));
      }
    }
  }
  Tensor tensor = Tensor::Allocate(type, std::move(shape));
  if (!data->empty())
    std::memcpy(tensor.raw_data(), data->data(), data->size());
  return tensor;
}

}  // namespace

void AppendElementRecord(const Element& element, std::string& out) {
  AppendFixed<uint32_t>(static_cast<uint32_t>(element.components.size()), out);
  for (const Component& component : element.components) {
    if (const Tensor* t = std::get_if<Tensor>(&component)) {
      AppendFixed<uint8_t>(kTensor, out);
      AppendFixed<uint8_t>(static_cast<uint8_t>(t->dtype()), out);
      AppendFixed<uint32_t>(static_cast<uint32_t>(t->shape().dims()), out);
      for (int64_t size : t->shape().dim_sizes()) {
        AppendFixed<int64_t>(size, out);
      }
      out.append(static_cast<const char*>(t->raw_data()), t->TotalBytes());
    } else {
      AppendFixed<uint8_t>(kString, out);
      AppendBytes(std::get<std::string>(component), out);
    }
  }
  const ElementOrigin& origin = element.origin;
  AppendFixed<uint8_t>(static_cast<uint8_t>(origin.kind), out);
  AppendBytes(origin.source != nullptr ? *origin.source : std::string(), out);
  AppendFixed<int64_t>(origin.index, out);
}

absl::StatusOr<Element> ElementRecordDecoder::Decode(absl::string_view bytes) {
  Reader in(bytes);
  absl::StatusOr<uint32_t> count = in.Fixed<uint32_t>("the component count");
  if (!count.ok()) return count.status();
  // Each component takes at least its kind byte: a corrupt count cannot
  // make the element reserve more than the record's size.
  if (*count > in.left()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the record claims ", *count, " components in ", in.left(), " bytes"));
  }
  Element element;
  element.components.reserve(*count);
  for (uint32_t c = 0; c < *count; ++c) {
    absl::StatusOr<uint8_t> kind =
        in.Fixed<uint8_t>(absl::StrCat("component ", c, "'s kind"));
    if (!kind.ok()) return kind.status();
    if (*kind == kTensor) {
      absl::StatusOr<Tensor> tensor = DecodeTensor(in, c);
      if (!tensor.ok()) return tensor.status();
      element.components.emplace_back(*std::move(tensor));
    } else if (*kind == kString) {
      const std::string where = absl::StrCat("component ", c, "'s string");
      absl::StatusOr<uint64_t> size = in.Fixed<uint64_t>(where + " size");
      if (!size.ok()) return size.status();
      absl::StatusOr<absl::string_view> text = in.Bytes(*size, where);
      if (!text.ok()) return text.status();
      element.components.emplace_back(std::string(*text));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "component ", c, " has kind ", *kind, ", which is none"));
    }
  }
  absl::StatusOr<uint8_t> kind = in.Fixed<uint8_t>("the origin's kind");
  if (!kind.ok()) return kind.status();
  if (*kind > static_cast<uint8_t>(ElementOrigin::Kind::kStreamRecord)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the origin has kind ", *kind, ", which is none"));
  }
  absl::StatusOr<uint64_t> size =
      in.Fixed<uint64_t>("the origin's source size");
  if (!size.ok()) return size.status();
  absl::StatusOr<absl::string_view> source =
      in.Bytes(*size, "the origin's source");
  if (!source.ok()) return source.status();
  absl::StatusOr<int64_t> index = in.Fixed<int64_t>("the origin's index");
  if (!index.ok()) return index.status();
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.left(), " bytes follow the element"));
  }
  element.origin.kind = static_cast<ElementOrigin::Kind>(*kind);
  element.origin.index = *index;
  if (element.origin.kind != ElementOrigin::Kind::kNone) {
    if (last_source_ == nullptr || *last_source_ != *source) {
      last_source_ = std::make_shared<const std::string>(*source);
    }
    element.origin.source = last_source_;
  }
  return element;
}

}  // namespace cosession
