// libFuzzer target: the TFRecord reader of event files on arbitrary bytes.
// It must never crash, read out of bounds or allocate without bound; every
// record it accepts must frame back to the exact bytes it was read from.
// And ParseRecordFrame, which readers that get their bytes piecewise use
// (the input pipeline's TFRecords), must never frame a record before all
// its bytes are there, and must ask for exactly its size once its header
// is.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cosession/io/record_reader.h"
#include "cosession/io/record_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // A small limit too, so the "length exceeds the limit" path is reachable.
  for (uint64_t limit : {uint64_t{64}, uint64_t{256} << 20}) {
    cosession::RecordReader reader(bytes, "fuzz", {.max_record_size = limit});
    size_t offset = 0;
    while (true) {
      auto record = reader.Next();
      if (!record.ok()) {
        // An error repeats; the offset stays at the bad record.
        if (reader.Next().status() != record.status()) std::abort();
        if (reader.offset() != offset) std::abort();
        break;
      }
      if (!record->has_value()) {
        if (offset != size) std::abort();
        break;
      }
      const std::string framed = cosession::FrameRecord(**record);
      if (bytes.substr(offset, framed.size()) != framed) std::abort();
      for (size_t cut : {size_t{0}, cosession::kRecordHeaderSize - 1,
                         cosession::kRecordHeaderSize, framed.size() - 1}) {
        auto partial =
            cosession::ParseRecordFrame(bytes.substr(offset, cut), limit);
        if (!partial.ok() ||
            partial->state != cosession::RecordFrame::State::kNeedsMore) {
          std::abort();
        }
        const size_t asked = cut < cosession::kRecordHeaderSize
                                 ? cosession::kRecordHeaderSize
                                 : framed.size();
        if (partial->size != asked) std::abort();
      }
      offset += framed.size();
      if (reader.offset() != offset) std::abort();
    }
  }
  return 0;
}
