// MaybeGzipFile (io/maybe_gzip_file.h): plain files pass through, gzip
// streams (written by zlib, an encoder other than the reader's) come out
// whole -- across any read-buffer size, over several members, with
// trailing bytes ignored, whatever optional fields their headers carry --
// and every damage is DataLoss naming the file.
#include "cosession/io/maybe_gzip_file.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "tests/scratch_dir.h"
#include "tests/test_files.h"

namespace cosession::maybe_gzip_file_test {
namespace {

using testing::ReadBytes;
using testing::ScratchDir;
using testing::WriteFile;
using testing::WriteGzip;
using testing::ZlibBytes;

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

// The whole file through Read calls of `read_size` bytes.
absl::StatusOr<std::string> ReadAll(
    const std::string& path, size_t buffer_bytes, size_t read_size,
    FileCompression compression = FileCompression::kDetect,
    PlainPrefix plain_prefix = {}) {
  absl::StatusOr<MaybeGzipFile> file =
      MaybeGzipFile::Open(path, buffer_bytes, compression, plain_prefix);
  if (!file.ok()) return file.status();
  std::string all;
  std::string chunk(read_size, '\0');
  while (true) {
    absl::StatusOr<size_t> n = file->Read(chunk.data(), chunk.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return all;
    all.append(chunk.data(), *n);
  }
}

// Text that compresses into several deflate blocks.
std::string Rows(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text +=
        std::to_string(i * 7919 % 1000003) + "," + std::to_string(i) + ",0.5\n";
  }
  return text;
}

TEST(MaybeGzipFile, GzipComesOutWholeForEveryBufferAndReadSize) {
  ScratchDir dir;
  const std::string path = dir / "rows.gz";
  const std::string text = Rows(20000);
  WriteGzip(path, text);
  ASSERT_LT(ReadBytes(path).size(), text.size() / 2);
  for (size_t buffer : {64, 1000, 1 << 16}) {
    for (size_t read : {1, 777, 1 << 16, 1 << 20}) {
      absl::StatusOr<std::string> got = ReadAll(path, buffer, read);
      ASSERT_TRUE(got.ok()) << got.status() << " buffer " << buffer;
      EXPECT_TRUE(*got == text)
          << "buffer " << buffer << ", reads of " << read << ": " << got->size()
          << " of " << text.size() << " bytes";
    }
  }
}

TEST(MaybeGzipFile, PlainBytesPassThroughEvenWhenTheyStartLikeGzip) {
  ScratchDir dir;
  for (const std::string& text : {std::string(), std::string("\x1f"),
                                  std::string("\x1f\x8a rest"), Rows(3000)}) {
    WriteFile(dir / "plain", text);
    absl::StatusOr<std::string> got = ReadAll(dir / "plain", 64, 100);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, text);
  }
}

TEST(MaybeGzipFile, ConcatenatedMembersReadAsOneStream) {
  ScratchDir dir;
  WriteGzip(dir / "a.gz", Rows(500));
  WriteGzip(dir / "b.gz", "tail\n");
  WriteGzip(dir / "empty.gz", "");
  WriteFile(dir / "ab.gz", ReadBytes(dir / "a.gz") +
                               ReadBytes(dir / "empty.gz") +
                               ReadBytes(dir / "b.gz"));
  absl::StatusOr<std::string> got = ReadAll(dir / "ab.gz", 100, 4096);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == Rows(500) + "tail\n");
}

TEST(MaybeGzipFile, BytesAfterTheLastMemberAreIgnoredAsZlibDoes) {
  ScratchDir dir;
  WriteGzip(dir / "a.gz", "kept\n");
  WriteFile(dir / "padded.gz", ReadBytes(dir / "a.gz") + std::string(9, '\0'));
  absl::StatusOr<std::string> got = ReadAll(dir / "padded.gz", 64, 4096);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "kept\n");
}

TEST(MaybeGzipFile, EveryTruncationIsDataLossNamingTheFile) {
  ScratchDir dir;
  WriteGzip(dir / "full.gz", Rows(300));
  const std::string bytes = ReadBytes(dir / "full.gz");
  const std::string path = dir / "cut.gz";
  // Cut inside the header, the deflate data and the 8-byte trailer.
  for (size_t keep : {size_t{2}, size_t{5}, size_t{12}, bytes.size() / 2,
                      bytes.size() - 8, bytes.size() - 1}) {
    WriteFile(path, bytes.substr(0, keep));
    absl::StatusOr<std::string> got = ReadAll(path, 64, 4096);
    ASSERT_FALSE(got.ok()) << "kept " << keep << " of " << bytes.size();
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
    EXPECT_NE(got.status().message().find(path), absl::string_view::npos)
        << got.status();
  }
}

TEST(MaybeGzipFile, AWrongChecksumOrLengthIsDataLoss) {
  ScratchDir dir;
  WriteGzip(dir / "full.gz", Rows(300));
  const std::string bytes = ReadBytes(dir / "full.gz");
  // The trailer: CRC-32 (4 bytes), then the length modulo 2^32 (4 bytes).
  for (size_t at : {bytes.size() - 8, bytes.size() - 1}) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x01);
    WriteFile(dir / "damaged.gz", damaged);
    absl::StatusOr<std::string> got =
        ReadAll(dir / "damaged.gz", 1 << 16, 4096);
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
    EXPECT_NE(got.status().message().find("damaged.gz: corrupt gzip data"),
              absl::string_view::npos)
        << got.status();
  }
}

// A member whose header carries every optional field of RFC 1952 -- an
// extra field of `extra_bytes`, a name, a comment, the header's CRC-16 --
// around the deflate data and trailer of `plain_member` (a member written
// by zlib with none of them), with `method` for the header's method and
// `extra_flags` set beside the optional fields' flags.
std::string MemberWithFullHeader(const std::string& plain_member,
                                 size_t extra_bytes, uint8_t method = 8,
                                 uint8_t extra_flags = 0) {
  std::string header = plain_member.substr(0, 10);
  header[2] = static_cast<char>(method);
  header[3] = static_cast<char>(0x02 | 0x04 | 0x08 | 0x10 | extra_flags);
  header += static_cast<char>(extra_bytes & 0xff);
  header += static_cast<char>(extra_bytes >> 8);
  header += std::string(extra_bytes, 'x');
  header += std::string(150, 'n') + '\0';  // longer than a 64-byte buffer
  header += std::string("a comment") + '\0';
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(header.data()),
                          static_cast<uInt>(header.size()));
  header += static_cast<char>(crc & 0xff);
  header += static_cast<char>((crc >> 8) & 0xff);
  return header + plain_member.substr(10);
}

// MemberWithFullHeader(plain_member, 300) with its header's CRC-16 wrong.
std::string MemberWithWrongHeaderCrc(const std::string& plain_member) {
  std::string member = MemberWithFullHeader(plain_member, 300);
  member[10 + 2 + 300 + 151 + 10] ^= 0x01;
  return member;
}

TEST(MaybeGzipFile, HeaderFieldsAreSkippedAcrossEveryBufferSize) {
  ScratchDir dir;
  WriteGzip(dir / "plain.gz", Rows(200));
  const std::string member = ReadBytes(dir / "plain.gz");
  // Two members, so that the second header starts mid-buffer.
  WriteFile(dir / "full.gz", MemberWithFullHeader(member, 700) +
                                 MemberWithFullHeader(member, 0));
  for (size_t buffer : {64, 1000, 1 << 16}) {
    for (size_t read : {1, 777, 1 << 16}) {
      absl::StatusOr<std::string> got = ReadAll(dir / "full.gz", buffer, read);
      ASSERT_TRUE(got.ok()) << got.status() << " buffer " << buffer;
      EXPECT_TRUE(*got == Rows(200) + Rows(200))
          << "buffer " << buffer << ", reads of " << read;
    }
  }
}

TEST(MaybeGzipFile, AHeaderZlibRejectsIsDataLossForEveryBufferSize) {
  ScratchDir dir;
  WriteGzip(dir / "plain.gz", Rows(200));
  const std::string member = ReadBytes(dir / "plain.gz");
  const struct {
    std::string bytes;
    std::string message;
  } cases[] = {
      {MemberWithWrongHeaderCrc(member), "header CRC mismatch"},
      {MemberWithFullHeader(member, 300, 8, 0x20),
       "invalid gzip header: reserved flags set"},
      {MemberWithFullHeader(member, 300, 7), "unsupported compression method"},
      // An extra field longer than the file.
      {member.substr(0, 3) + '\x04' + member.substr(4, 6) + "\xff\xff" +
           member.substr(10),
       "the stream is truncated"},
  };
  for (const auto& c : cases) {
    WriteFile(dir / "bad.gz", c.bytes);
    for (size_t buffer : {64, 1 << 16}) {
      absl::StatusOr<std::string> got = ReadAll(dir / "bad.gz", buffer, 4096);
      EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
      EXPECT_NE(got.status().message().find("bad.gz: corrupt gzip data: " +
                                            c.message),
                absl::string_view::npos)
          << got.status() << ", buffer " << buffer;
    }
  }
}

TEST(MaybeGzipFile, AfterAnErrorEveryReadReturnsIt) {
  ScratchDir dir;
  WriteGzip(dir / "plain.gz", Rows(200));
  const std::string member = ReadBytes(dir / "plain.gz");
  // A good member, then one whose header's CRC is wrong, found when the
  // rest of the header was taken off the input: asked again, the reader
  // must neither inflate what follows nor report a clean end.
  WriteFile(dir / "bad.gz", member + MemberWithWrongHeaderCrc(member));
  absl::StatusOr<MaybeGzipFile> file = MaybeGzipFile::Open(dir / "bad.gz", 64);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string chunk(4096, '\0');
  absl::Status first;
  while (first.ok()) {
    absl::StatusOr<size_t> n = file->Read(chunk.data(), chunk.size());
    ASSERT_TRUE(!n.ok() || *n > 0) << "a clean end before the bad header";
    first = n.status();
  }
  EXPECT_TRUE(absl::IsDataLoss(first)) << first;
  for (int again = 0; again < 3; ++again) {
    absl::StatusOr<size_t> n = file->Read(chunk.data(), chunk.size());
    EXPECT_EQ(n.status(), first) << "read " << again << " after the error";
  }
}

TEST(MaybeGzipFile, ZlibStreamsComeOutWholeForEveryBufferAndReadSize) {
  ScratchDir dir;
  const std::string path = dir / "rows.zlib";
  // Two streams back to back, the second empty, then a third.
  WriteFile(path, ZlibBytes(Rows(20000)) + ZlibBytes("") + ZlibBytes("end\n"));
  for (size_t buffer : {64, 1000, 1 << 16}) {
    for (size_t read : {1, 777, 1 << 20}) {
      absl::StatusOr<std::string> got =
          ReadAll(path, buffer, read, FileCompression::kZlib);
      ASSERT_TRUE(got.ok()) << got.status() << " buffer " << buffer;
      EXPECT_TRUE(*got == Rows(20000) + "end\n")
          << "buffer " << buffer << ", reads of " << read;
    }
  }
  // An empty file is empty.
  WriteFile(path, "");
  absl::StatusOr<std::string> empty =
      ReadAll(path, 64, 100, FileCompression::kZlib);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
}

TEST(MaybeGzipFile, EveryDamageToAZlibStreamIsDataLossSayingWhat) {
  ScratchDir dir;
  const std::string good = ZlibBytes(Rows(300));
  const std::string path = dir / "bad.zlib";
  auto read_damaged = [&](const std::string& bytes) {
    WriteFile(path, bytes);
    absl::StatusOr<std::string> got =
        ReadAll(path, 64, 4096, FileCompression::kZlib);
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
    EXPECT_TRUE(Contains(got.status(), path + ": corrupt zlib data: "))
        << got.status();
    return got.status();
  };
  std::string bytes = good;
  bytes.back() = static_cast<char>(bytes.back() ^ 1);  // the Adler-32
  EXPECT_TRUE(Contains(read_damaged(bytes), "Adler-32 mismatch"));
  bytes = good;
  bytes[1] = static_cast<char>(bytes[1] ^ 1);  // the header's check bits
  EXPECT_TRUE(Contains(read_damaged(bytes), "incorrect header check"));
  EXPECT_TRUE(Contains(read_damaged("\x79\x9c"), "compression method 9"));
  EXPECT_TRUE(Contains(read_damaged("\x88\x98"), "invalid window size"));
  EXPECT_TRUE(Contains(read_damaged("\x78\xbb"), "preset dictionary"));
  for (size_t keep : {size_t{1}, size_t{2}, good.size() / 2, good.size() - 1}) {
    EXPECT_TRUE(Contains(read_damaged(good.substr(0, keep)), "truncated"))
        << "kept " << keep;
  }
  // Bytes after a stream must start another: none are silently dropped.
  EXPECT_TRUE(Contains(read_damaged(good + std::string("\x78\x00junk", 6)),
                       "incorrect header check"));
}

TEST(MaybeGzipFile, ANamedCompressionIsReadAsNamed) {
  ScratchDir dir;
  WriteGzip(dir / "a.gz", "text\n");
  const std::string gzip = ReadBytes(dir / "a.gz");
  // kNone: the bytes as they are, gzip or not.
  absl::StatusOr<std::string> got =
      ReadAll(dir / "a.gz", 64, 100, FileCompression::kNone);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, gzip);
  got = ReadAll(dir / "a.gz", 64, 100, FileCompression::kGzip);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "text\n");
  // kGzip of a file that is not gzip says so; detecting, it is plain.
  WriteFile(dir / "plain", "text\n");
  got = ReadAll(dir / "plain", 64, 100, FileCompression::kGzip);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_TRUE(Contains(got.status(), "plain: corrupt gzip data: not a gzip"))
      << got.status();
  // A zlib stream is not detected: it is read as plain bytes.
  WriteFile(dir / "z", ZlibBytes("text\n"));
  got = ReadAll(dir / "z", 64, 100);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, ZlibBytes("text\n"));
}

// What TFRecords detection relies on: a prefix the caller recognises keeps
// a file plain although it starts with gzip's magic number.
TEST(MaybeGzipFile, APlainPrefixKeepsAFileThatStartsLikeGzipPlain) {
  ScratchDir dir;
  const std::string plain = "\x1f\x8b\x08\x01MARK and more";
  WriteFile(dir / "marked", plain);
  const PlainPrefix marked{.bytes = 8, .matches = [](std::string_view prefix) {
                             return prefix.substr(4) == "MARK";
                           }};
  absl::StatusOr<std::string> got =
      ReadAll(dir / "marked", 64, 100, FileCompression::kDetect, marked);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, plain);
  // A gzip file the prefix does not match is still gzip.
  WriteGzip(dir / "a.gz", Rows(100));
  got = ReadAll(dir / "a.gz", 64, 100, FileCompression::kDetect, marked);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == Rows(100));
  // Without the prefix the marked file is (damaged) gzip.
  got = ReadAll(dir / "marked", 64, 100);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
}

TEST(MaybeGzipFile, AMissingFileIsNotFoundNamingIt) {
  ScratchDir dir;
  absl::StatusOr<MaybeGzipFile> file =
      MaybeGzipFile::Open(dir / "absent.gz", 1 << 16);
  EXPECT_TRUE(absl::IsNotFound(file.status())) << file.status();
  EXPECT_NE(file.status().message().find("absent.gz"), absl::string_view::npos);
}

}  // namespace
}  // namespace cosession::maybe_gzip_file_test
