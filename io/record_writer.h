// TFRecord framing, as TensorFlow's event files (and tf.data's TFRecord
// files) store records:
//
//   uint64  length            little-endian
//   uint32  masked CRC-32C of the 8 length bytes
//   byte    data[length]
//   uint32  masked CRC-32C of the data
//
// (the mask is io/crc32c.h's MaskCrc32c). AppendRecord only builds bytes;
// who writes them to a file (and when) is the caller's business -- see
// io/summary_writer.h. Pure functions; thread safe.
#ifndef COSESSION_IO_RECORD_WRITER_H_
#define COSESSION_IO_RECORD_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cosession {

// Bytes of framing around each record's data.
inline constexpr size_t kRecordHeaderSize = sizeof(uint64_t) + sizeof(uint32_t);
inline constexpr size_t kRecordFooterSize = sizeof(uint32_t);

// Appends one framed record holding `data` to `out`.
void AppendRecord(std::string& out, std::string_view data);

// One framed record holding `data`.
std::string FrameRecord(std::string_view data);

}  // namespace cosession

#endif  // COSESSION_IO_RECORD_WRITER_H_
