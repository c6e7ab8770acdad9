// Safetensors: the checkpoint file format (https://github.com/huggingface/
// safetensors), written and read with full validation.
//
// Layout of a file:
//   bytes [0, 8)        N, the header length, uint64 little-endian
//   bytes [8, 8 + N)    the header: a JSON object, padded with spaces so that
//                       the data starts at a multiple of 8
//   bytes [8 + N, end)  the data section: every tensor's elements, row-major,
//                       little-endian, back to back
// The header maps each tensor name to
//   {"dtype": "F32"|"F64"|"I32"|"I64"|"BOOL", "shape": [d0, d1, ...],
//    "data_offsets": [begin, end]}      (offsets relative to the data section)
// and "__metadata__" to a string -> string map. cosession always writes
// "crc32c": the CRC-32C (io/crc32c.h) of the whole data section as an
// unsigned decimal string (e.g. "3808858755"), and the writer's caller adds
// its own entries (the Saver adds "global_step"). Python reads these files
// with `safetensors.numpy.load_file(path)`.
//
// ParseSafetensors() validates everything and reports DataLoss naming the
// source and what is wrong: a file shorter than 8 bytes; a header length
// above kMaxSafetensorsHeaderBytes or beyond the end of the file; JSON that
// does not parse, nests deeper than a header can, or is not an object of the
// shape above (unknown keys included); an unknown dtype; a negative
// dimension, a rank above 64, an element count or byte size that overflows;
// offsets out of order or out of bounds; gaps, overlaps or trailing bytes
// (the tensors must cover the data section exactly); a byte size that is not
// product(shape) * dtype size; a BOOL byte other than 0 or 1; a missing,
// malformed or mismatching "crc32c". It never crashes and allocates at most
// about the input's size (fuzzed by fuzz/checkpoint_reader_fuzzer.cc).
//
// The host must be little-endian (checked at compile time).
// Thread safety: pure functions; safe from any thread.
#ifndef COSESSION_IO_SAFETENSORS_H_
#define COSESSION_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/graph/tensor.h"

namespace cosession {

// Headers above this size are rejected as corrupt (safetensors' own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// The metadata key holding the data section's CRC-32C, in decimal.
inline constexpr absl::string_view kSafetensorsCrcKey = "crc32c";

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors{};
  std::map<std::string, std::string> metadata{};  // "crc32c" included
};

// "F32", "F64", "I32", "I64", "BOOL".
absl::string_view SafetensorsDTypeName(DType dtype);

// A tensor file ready to be written: the header block (length prefix and
// padded JSON) and the tensors whose buffers form the data section, in
// order. Writing `header` then each tensor's raw bytes gives the file; the
// tensors are shared, not copied.
struct SafetensorsFile {
  std::string header{};
  std::vector<Tensor> data{};
  uint64_t data_bytes = 0;
};

// Lays out `tensors` (unique, non-empty-string names; data in the given
// order) with `metadata` plus "crc32c". InvalidArgument for a duplicate or
// empty name, a "__metadata__" name, or a "crc32c" key in `metadata`.
absl::StatusOr<SafetensorsFile> BuildSafetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    std::map<std::string, std::string> metadata);

// The whole file in one string (for tests, seeds and small files).
std::string SerializeSafetensors(const SafetensorsFile& file);

// Parses and validates a file's bytes; `source` (a path, or a name for
// in-memory input) is named in every error.
absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes,
                                                     absl::string_view source);

// Reads and parses `path`. NotFound when it does not exist; other I/O
// errors with their errno's code; DataLoss as ParseSafetensors.
absl::StatusOr<SafetensorsContents> ReadSafetensorsFile(
    const std::string& path);

}  // namespace cosession

#endif  // COSESSION_IO_SAFETENSORS_H_
