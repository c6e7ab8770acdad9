#include "cosession/io/record_writer.h"

#include "cosession/io/crc32c.h"

namespace cosession {
namespace {

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

}  // namespace

void AppendRecord(std::string& out, std::string_view data) {
  out.reserve(out.size() + kRecordHeaderSize + data.size() + kRecordFooterSize);
  const size_t length_at = out.size();
  AppendLittleEndian(out, data.size(), sizeof(uint64_t));
  const uint32_t length_crc =
      MaskCrc32c(Crc32c(out.data() + length_at, sizeof(uint64_t)));
  AppendLittleEndian(out, length_crc, sizeof(uint32_t));
  out.append(data);
  AppendLittleEndian(out, MaskCrc32c(Crc32c(data)), sizeof(uint32_t));
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  AppendRecord(out, data);
  return out;
}

}  // namespace cosession
