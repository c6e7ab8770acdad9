// Element records: one Element as bytes and back -- what a dataset cached
// in a file (Dataset::Cache with a filename) keeps per element, so that a
// later process replays the same tensors, strings and origins.
//
//   std::string bytes;
//   AppendElementRecord(element, bytes);
//   ElementRecordDecoder decoder;
//   absl::StatusOr<Element> back = decoder.Decode(bytes);
//
// The bytes (integers little-endian, fixed width):
//   u32 component count
//   per component, u8 kind:
//     0 tensor: u8 dtype (DType's value), u32 rank, rank x i64 dimensions,
//               then the tensor's bytes (NumElements x DTypeSize)
//     1 string: u64 size, then the bytes
//   the origin: u8 kind (ElementOrigin::Kind's value), u64 size and bytes
//               of its source, i64 index
// It is the machine's own layout (little-endian, IEEE floats, bool one
// byte): a cache is read back where it was written.
//
// Decode trusts nothing: a kind, dtype or origin kind out of range, a
// negative dimension, a size beyond the bytes left (checked before any
// allocation), a bool byte other than 0 or 1, or bytes left over are
// InvalidArgument saying what (the caller names the file and the record).
// The decoder shares one origin source string among consecutive elements
// from the same source, as a file source does.
//
// Thread safety: AppendElementRecord is a pure function; a decoder is
// thread-compatible.
#ifndef COSESSION_PIPELINE_ELEMENT_RECORD_H_
#define COSESSION_PIPELINE_ELEMENT_RECORD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/pipeline/element.h"

namespace cosession {

// Appends `element`'s bytes to `out`.
void AppendElementRecord(const Element& element, std::string& out);

class ElementRecordDecoder {
 public:
  absl::StatusOr<Element> Decode(absl::string_view bytes);

 private:
  std::shared_ptr<const std::string> last_source_;
};

}  // namespace cosession

#endif  // COSESSION_PIPELINE_ELEMENT_RECORD_H_
