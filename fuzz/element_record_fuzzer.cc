// libFuzzer target: the element records a file cache replays
// (pipeline/element_record.h) on arbitrary bytes. Decoding must never
// crash, read out of bounds or allocate beyond the record's size; an
// element it accepts must encode back to exactly the bytes it came from
// (the format has one spelling per element; an element without an origin
// drops the origin's source and index, so it is compared without them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cosession/pipeline/element_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  cosession::ElementRecordDecoder decoder;
  absl::StatusOr<cosession::Element> element = decoder.Decode(bytes);
  if (!element.ok()) {
    if (!absl::IsInvalidArgument(element.status())) std::abort();
    return 0;
  }
  if (element->origin.kind == cosession::ElementOrigin::Kind::kNone) return 0;
  std::string again;
  cosession::AppendElementRecord(*element, again);
  if (again != bytes) std::abort();
  return 0;
}
