// libFuzzer target: the gzip-or-plain file reader (io/maybe_gzip_file.h)
// must never crash or hang on any bytes. Each input is a file read twice
// with the compression detected, and twice as zlib streams, each time in
// reads of two different sizes, through input buffers of two different
// sizes: both passes must end the same way (OK or the same DataLoss), agree
// on the bytes both read, and read the same bytes when they end OK; only
// OK or DataLoss may come out, and a file that does not start with gzip's
// magic number must come out unchanged when detected. Output is capped (a
// deflate stream expands up to 1032 times). And a round trip: the input cut
// in two (where its first byte says), each part compressed by zlib (an
// encoder other than the reader's), the two streams back to back must
// read as zlib into exactly the input, through both buffer sizes. Seeds:
// fuzz/corpus/maybe_gzip_file/ (gzip, zlib and plain files).
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/maybe_gzip_file.h"

namespace {

constexpr size_t kMaxOutput = 1 << 22;

// Says which property broke before stopping, so a crash file explains
// itself.
[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "maybe_gzip_file_fuzzer: %s\n", why.c_str());
  std::abort();
}

// The bytes read (up to kMaxOutput) and how the read ended.
std::pair<std::string, absl::Status> ReadAll(
    const std::string& path, size_t buffer_bytes, size_t read_bytes,
    cosession::FileCompression compression) {
  auto file = cosession::MaybeGzipFile::Open(path, buffer_bytes, compression);
  if (!file.ok()) Fail(file.status().ToString());  // the descriptor exists
  std::string out;
  std::string chunk(read_bytes, '\0');
  while (out.size() < kMaxOutput) {
    absl::StatusOr<size_t> n = file->Read(chunk.data(), chunk.size());
    if (!n.ok()) return {out, n.status()};
    if (*n == 0) break;
    if (*n > read_bytes) Fail("Read returned more than asked");
    out.append(chunk.data(), *n);
  }
  return {out, absl::OkStatus()};
}

// Writes `bytes` into a new memory file; returns its descriptor.
int MemoryFile(const uint8_t* bytes, size_t size) {
  const int fd = memfd_create("maybe_gzip_file_fuzzer", MFD_CLOEXEC);
  if (fd < 0) Fail("memfd_create failed");
  for (size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, bytes + written, size - written);
    if (n <= 0) Fail("write to the memfd failed");
    written += static_cast<size_t>(n);
  }
  return fd;
}

std::string ZlibStream(const std::string& text, int level) {
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::string out(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                reinterpret_cast<const Bytef*>(text.data()),
                static_cast<uLong>(text.size()), level) != Z_OK) {
    Fail("zlib's compress2 failed");
  }
  out.resize(size);
  return out;
}

// The input as two zlib streams back to back must read back whole.
void CheckZlibRoundTrip(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = text.empty() ? 0 : data[0] % (text.size() + 1);
  const int level = data[0] % 10;
  const std::string streams = ZlibStream(text.substr(0, cut), level) +
                              ZlibStream(text.substr(cut), level);
  const int fd = MemoryFile(reinterpret_cast<const uint8_t*>(streams.data()),
                            streams.size());
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  for (auto [buffer, read] : {std::pair<size_t, size_t>{64, 7},
                              std::pair<size_t, size_t>{1 << 16, 1 << 16}}) {
    auto [out, status] =
        ReadAll(path, buffer, read, cosession::FileCompression::kZlib);
    if (!status.ok() || out != text) {
      Fail(absl::StrCat("zlib round trip, buffer ", buffer, ": ",
                        status.ToString(), ", ", out.size(), " of ",
                        text.size(), " bytes"));
    }
  }
  ::close(fd);
}

// Reads the file twice as `compression` says (`what` names it in a
// failure) and checks that both passes agree; returns the second's bytes.
std::string ReadTwiceAlike(const std::string& path,
                           cosession::FileCompression compression,
                           const std::string& what) {
  auto [small, small_status] = ReadAll(path, 64, 7, compression);
  auto [large, large_status] = ReadAll(path, 1 << 16, 1 << 16, compression);
  for (const absl::Status& s : {small_status, large_status}) {
    if (!s.ok() && !absl::IsDataLoss(s))
      Fail(what + ": not OK or DataLoss: " + s.ToString());
  }
  // The capped pass may stop at different points; compare what both read.
  const size_t common = std::min(small.size(), large.size());
  if (small.compare(0, common, large, 0, common) != 0) {
    Fail(what + ": the two passes read different bytes");
  }
  // A damaged member is found at its end, after some of its bytes were
  // handed out: how many depends on the read size (as with zlib's gzread),
  // so only a clean end must give the same bytes.
  if (small.size() < kMaxOutput && large.size() < kMaxOutput &&
      (small_status != large_status || (small_status.ok() && small != large))) {
    Fail(absl::StrCat(what,
                      ": the two passes ended differently: ", small.size(),
                      " bytes, ", small_status.ToString(), " against ",
                      large.size(), " bytes, ", large_status.ToString()));
  }
  return large;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = MemoryFile(data, size);
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  const std::string detected =
      ReadTwiceAlike(path, cosession::FileCompression::kDetect, "detected");
  ReadTwiceAlike(path, cosession::FileCompression::kZlib, "zlib");
  ::close(fd);
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip && detected != std::string(reinterpret_cast<const char*>(data),
                                       std::min(size, kMaxOutput))) {
    Fail("a plain file did not come out unchanged");
  }
  if (size < kMaxOutput) CheckZlibRoundTrip(data, size);
  return 0;
}
