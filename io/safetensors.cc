#include "cosession/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/crc32c.h"
#include "cosession/io/data_loss.h"
#include "cosession/io/json_depth.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cosession {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this host is not");

using Json = nlohmann::json;

constexpr absl::string_view kMetadataKey = "__metadata__";
// A valid header nests three levels deep ({ "t": { "shape": [ ). Deeper
// input is rejected before parsing, so a hostile header cannot build a
// deeply nested value.
constexpr int kMaxJsonDepth = 8;
constexpr size_t kMaxRank = 64;

// CRC-32C of a sequence of buffers. With SSE4.2 (every x86-64 machine of the
// last decade) the crc32 instruction does 8 bytes per cycle or so; Boost's
// table-driven loop does about one: the difference is most of a 64 MB save.
// Both give the same value as io/crc32c.h's Crc32c.
class Crc32cAccumulator {
 public:
  void Update(const void* data, size_t size) {
#if defined(__x86_64__)
    if (HasSse42()) {
      state_ =
          UpdateSse42(state_, static_cast<const unsigned char*>(data), size);
      return;
    }
#endif
    software_.process_bytes(data, size);
  }
  uint32_t Final() const {
#if defined(__x86_64__)
    if (HasSse42()) return ~state_;
#endif
    return software_.checksum();
  }

 private:
#if defined(__x86_64__)
  static bool HasSse42() {
    static const bool has = __builtin_cpu_supports("sse4.2");
    return has;
  }
  __attribute__((target("sse4.2"))) static uint32_t UpdateSse42(
      uint32_t crc, const unsigned char* p, size_t size) {
    uint64_t crc64 = crc;
    while (size >= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      crc64 = _mm_crc32_u64(crc64, word);
      p += 8;
      size -= 8;
    }
    uint32_t crc32 = static_cast<uint32_t>(crc64);
    while (size > 0) {
      crc32 = _mm_crc32_u8(crc32, *p++);
      --size;
    }
    return crc32;
  }
  uint32_t state_ = 0xFFFFFFFFu;
#endif
  Crc32cComputer software_;
};

std::optional<DType> DTypeFromSafetensorsName(absl::string_view name) {
  if (name == "F32") return DType::kFloat;
  if (name == "F64") return DType::kDouble;
  if (name == "I32") return DType::kInt32;
  if (name == "I64") return DType::kInt64;
  if (name == "BOOL") return DType::kBool;
  return std::nullopt;
}

// A non-negative JSON integer that fits in int64.
std::optional<int64_t> NonNegativeInt(const Json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

std::string Describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = absl::StrCat(text.substr(0, 40), "...");
  return text;
}

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;
  uint64_t begin = 0, end = 0;
};

absl::Status ParseTensorEntry(const std::string& name, const Json& spec,
                              const DataLossNaming& corrupt,
                              TensorEntry& entry) {
  entry.name = name;
  if (!spec.is_object()) {
    return corrupt("tensor '", name, "' is not a JSON object");
  }
  for (const auto& [key, value] : spec.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return corrupt("tensor '", name, "' has an unknown field '", key, "'");
    }
  }
  auto dtype = spec.find("dtype");
  if (dtype == spec.end() || !dtype->is_string()) {
    return corrupt("tensor '", name, "' has no dtype string");
  }
  std::optional<DType> dt =
      DTypeFromSafetensorsName(dtype->get_ref<const std::string&>());
  if (!dt) {
    return corrupt("tensor '", name, "' has an unknown dtype ",
                   Describe(*dtype), " (expected F32, F64, I32, I64 or BOOL)");
  }
  entry.dtype = *dt;

  auto shape = spec.find("shape");
  if (shape == spec.end() || !shape->is_array()) {
    return corrupt("tensor '", name, "' has no shape array");
  }
  if (shape->size() > kMaxRank) {
    return corrupt("tensor '", name, "' has rank ", shape->size(),
                   ", above the limit of ", kMaxRank);
  }
  // The element count of the non-zero dimensions must fit in int64, so that
  // no product overflows later, even for a tensor with a zero dimension.
  int64_t product = 1;
  for (const Json& dim : *shape) {
    std::optional<int64_t> d = NonNegativeInt(dim);
    if (!d) {
      return corrupt("tensor '", name, "' has an invalid dimension ",
                     Describe(dim), " (must be an integer >= 0)");
    }
    if (*d > 0 && __builtin_mul_overflow(product, *d, &product)) {
      return corrupt("tensor '", name, "' has a shape ", Describe(*shape),
                     " whose element count overflows");
    }
    entry.dims.push_back(*d);
  }

  auto offsets = spec.find("data_offsets");
  if (offsets == spec.end() || !offsets->is_array() || offsets->size() != 2) {
    return corrupt("tensor '", name,
                   "' has no data_offsets array of two integers");
  }
  std::optional<int64_t> begin = NonNegativeInt((*offsets)[0]);
  std::optional<int64_t> end = NonNegativeInt((*offsets)[1]);
  if (!begin || !end) {
    return corrupt("tensor '", name, "' has invalid data_offsets ",
                   Describe(*offsets));
  }
  if (*begin > *end) {
    return corrupt("tensor '", name, "' has data_offsets ", Describe(*offsets),
                   " that end before they begin");
  }
  entry.begin = static_cast<uint64_t>(*begin);
  entry.end = static_cast<uint64_t>(*end);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ParseCrc(const std::string& text,
                                  const DataLossNaming& corrupt) {
  uint64_t value = 0;
  bool digits_only = !text.empty() && text.size() <= 10 &&
                     std::all_of(text.begin(), text.end(),
                                 [](char c) { return c >= '0' && c <= '9'; });
  if (!digits_only || !absl::SimpleAtoi(text, &value) ||
      value > std::numeric_limits<uint32_t>::max()) {
    return corrupt("the __metadata__ crc32c '", text,
                   "' is not an unsigned 32-bit decimal number");
  }
  return static_cast<uint32_t>(value);
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "F32";
    case DType::kDouble:
      return "F64";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

absl::StatusOr<SafetensorsFile> BuildSafetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    std::map<std::string, std::string> metadata) {
  if (metadata.count(std::string(kSafetensorsCrcKey)) > 0) {
    return absl::InvalidArgumentError(
        "safetensors metadata must not set 'crc32c': the writer computes it");
  }
  SafetensorsFile file;
  Json header = Json::object();
  Crc32cAccumulator crc;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == kMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid safetensors tensor name '", name, "'"));
    }
    if (header.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate safetensors tensor name '", name, "'"));
    }
    const uint64_t bytes = tensor.TotalBytes();
    Json dims = Json::array();
    for (int64_t d : tensor.shape().dim_sizes()) dims.push_back(d);
    header[name] = {
        {"dtype", SafetensorsDTypeName(tensor.dtype())},
        {"shape", std::move(dims)},
        {"data_offsets", {file.data_bytes, file.data_bytes + bytes}}};
    if (bytes > 0) crc.Update(tensor.raw_data(), bytes);
    file.data_bytes += bytes;
    file.data.push_back(tensor);
  }
  metadata[std::string(kSafetensorsCrcKey)] = absl::StrCat(crc.Final());
  header[std::string(kMetadataKey)] = metadata;

  std::string json;
  try {
    json = header.dump();
  } catch (const std::exception& e) {
    // Names or metadata that are not valid UTF-8.
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the safetensors header: ", e.what()));
  }
  // Pad with spaces so that the data section starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();
  file.header.resize(8);
  std::memcpy(file.header.data(), &n, 8);  // little-endian host
  file.header += json;
  return file;
}

std::string SerializeSafetensors(const SafetensorsFile& file) {
  std::string bytes = file.header;
  bytes.reserve(file.header.size() + file.data_bytes);
  for (const Tensor& t : file.data) {
    if (t.TotalBytes() > 0) {
      bytes.append(static_cast<const char*>(t.raw_data()), t.TotalBytes());
    }
  }
  return bytes;
}

absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes,
                                                     absl::string_view source) {
  const DataLossNaming corrupt("corrupt checkpoint file", source);
  if (bytes.size() < 8) {
    return corrupt("the file has ", bytes.size(),
                   " bytes, fewer than the 8-byte header length");
  }
  uint64_t header_bytes;
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return corrupt("the header length ", header_bytes,
                   " is above the limit of ", kMaxSafetensorsHeaderBytes,
                   " bytes");
  }
  if (header_bytes > bytes.size() - 8) {
    return corrupt("the header length ", header_bytes,
                   " runs past the end of the file (", bytes.size(), " bytes)");
  }
  const absl::string_view header_text = bytes.substr(8, header_bytes);
  const absl::string_view data = bytes.substr(8 + header_bytes);
  if (header_text.empty() || header_text.front() != '{') {
    return corrupt("the header does not start with '{'");
  }
  if (JsonNestingDepth(header_text, kMaxJsonDepth) > kMaxJsonDepth) {
    return corrupt("the header nests deeper than ", kMaxJsonDepth, " levels");
  }
  Json header;
  try {
    header = Json::parse(header_text.begin(), header_text.end());
  } catch (const Json::exception& e) {
    return corrupt("the header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) return corrupt("the header is not a JSON object");

  SafetensorsContents contents;
  std::vector<TensorEntry> entries;
  std::optional<uint32_t> stored_crc;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) return corrupt("__metadata__ is not an object");
      for (const auto& [key, entry] : value.items()) {
        if (!entry.is_string()) {
          return corrupt("__metadata__ '", key, "' is not a string");
        }
        contents.metadata[key] = entry.get<std::string>();
      }
      continue;
    }
    TensorEntry entry;
    if (absl::Status s = ParseTensorEntry(name, value, corrupt, entry);
        !s.ok()) {
      return s;
    }
    entries.push_back(std::move(entry));
  }
  auto crc_entry = contents.metadata.find(std::string(kSafetensorsCrcKey));
  if (crc_entry == contents.metadata.end()) {
    return corrupt("__metadata__ has no crc32c");
  }
  {
    absl::StatusOr<uint32_t> crc = ParseCrc(crc_entry->second, corrupt);
    if (!crc.ok()) return crc.status();
    stored_crc = *crc;
  }

  // Offsets: in bounds, sizes exact, and the tensors tile the data section.
  for (const TensorEntry& e : entries) {
    if (e.end > data.size()) {
      return corrupt("tensor '", e.name, "' has data_offsets [", e.begin, ", ",
                     e.end, "] beyond the data section's ", data.size(),
                     " bytes");
    }
    int64_t elements = 1;
    for (int64_t d : e.dims) elements *= d;  // cannot overflow: checked above
    const uint64_t want =
        static_cast<uint64_t>(elements) * DTypeSize(e.dtype);  // <= data size
    if (e.end - e.begin != want ||
        (elements > 0 && want / elements != DTypeSize(e.dtype))) {
      return corrupt("tensor '", e.name, "' has ", e.end - e.begin,
                     " bytes of data; its shape and dtype need ", want);
    }
  }
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) {
              return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
            });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry* e : by_offset) {
    if (e->begin < covered) {
      return corrupt("tensors '", previous->name, "' and '", e->name,
                     "' overlap at byte ", e->begin);
    }
    if (e->begin > covered) {
      return corrupt("a gap of ", e->begin - covered,
                     " bytes in the data section before tensor '", e->name,
                     "'");
    }
    covered = e->end;
    previous = e;
  }
  if (covered != data.size()) {
    return corrupt(data.size() - covered,
                   " trailing bytes after the last tensor");
  }

  Crc32cAccumulator crc;
  crc.Update(data.data(), data.size());
  if (crc.Final() != *stored_crc) {
    return corrupt("the data section's CRC-32C is ", crc.Final(),
                   ", the header says ", *stored_crc);
  }

  for (const TensorEntry& e : entries) {
    const absl::string_view raw = data.substr(e.begin, e.end - e.begin);
    if (e.dtype == DType::kBool) {
      // Any byte but 0 or 1 is not a bool: reading it would be undefined.
      auto bad = std::find_if(raw.begin(), raw.end(),
                              [](char c) { return c != 0 && c != 1; });
      if (bad != raw.end()) {
        return corrupt("tensor '", e.name, "' holds a BOOL byte ",
                       static_cast<int>(static_cast<unsigned char>(*bad)),
                       " at offset ", e.begin + (bad - raw.begin()));
      }
    }
    try {
      Tensor tensor =
          Tensor::Allocate(e.dtype, TensorShape(absl::MakeConstSpan(e.dims)));
      if (!raw.empty()) std::memcpy(tensor.raw_data(), raw.data(), raw.size());
      contents.tensors.emplace(e.name, std::move(tensor));
    } catch (const std::exception& ex) {
      return corrupt("tensor '", e.name, "' cannot be built: ", ex.what());
    }
  }
  return contents;
}

absl::StatusOr<SafetensorsContents> ReadSafetensorsFile(
    const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSafetensors(*bytes, path);
}

}  // namespace cosession
