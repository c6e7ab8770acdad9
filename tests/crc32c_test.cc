#include "cosession/io/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace cosession::crc32c_test {
namespace {

TEST(Crc32c, MatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
}

TEST(Crc32c, MatchesKnownVectorsOfZerosAndOnes) {
  // RFC 3720 (iSCSI) appendix B.4 test vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(Crc32c, MaskRoundTripsAndChangesTheValue) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    EXPECT_NE(MaskCrc32c(crc), crc);
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  }
}

}  // namespace
}  // namespace cosession::crc32c_test
