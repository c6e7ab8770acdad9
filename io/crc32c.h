// CRC-32C (Castagnoli), as checkpoints and TFRecord event files use it.
//
// Crc32c() is the plain checksum (Boost.CRC's table-driven crc_optimal with
// the Castagnoli polynomial, reflected, init and final xor 0xFFFFFFFF:
// Crc32c("123456789") == 0xE3069283). MaskCrc32c/UnmaskCrc32c are TFRecord's
// masking (rotate right by 15, add 0xa282ead8), which keeps a CRC of data
// that itself holds CRCs from being trivially zero. Pure functions; thread
// safe.
#ifndef COSESSION_IO_CRC32C_H_
#define COSESSION_IO_CRC32C_H_

#include <boost/crc.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cosession {

using Crc32cComputer =
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

inline uint32_t Crc32c(const void* data, size_t size) {
  Crc32cComputer crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

inline uint32_t Crc32c(std::string_view bytes) {
  return Crc32c(bytes.data(), bytes.size());
}

inline constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;

inline uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta;
}

inline uint32_t UnmaskCrc32c(uint32_t masked) {
  uint32_t rotated = masked - kCrc32cMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace cosession

#endif  // COSESSION_IO_CRC32C_H_
