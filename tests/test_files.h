// Files a test writes and reads back whole: plain text, gzip, bytes; and
// gzip bytes in memory (a compressed HTTP body).
// Failures are GoogleTest failures of the calling test.
#ifndef COSESSION_TESTS_TEST_FILES_H_
#define COSESSION_TESTS_TEST_FILES_H_

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <string>

namespace cosession::testing {

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

inline void WriteGzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// `text` as one gzip member, made by zlib (not by the code under test).
inline std::string GzipBytes(const std::string& text) {
  z_stream z{};
  // 15 window bits, +16: a gzip header and trailer rather than zlib's.
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// `text` as one zlib stream (RFC 1950), made by zlib.
inline std::string ZlibBytes(const std::string& text) {
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::string out(size, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                      reinterpret_cast<const Bytef*>(text.data()),
                      static_cast<uLong>(text.size()), Z_DEFAULT_COMPRESSION),
            Z_OK);
  out.resize(size);
  return out;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_TEST_FILES_H_
