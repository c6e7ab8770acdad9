// libFuzzer target: the gzip-or-plain file reader (io/maybe_gzip_file.h)
// must never crash or hang on any bytes. Each input is a file read twice,
// in reads of two different sizes, through input buffers of two different
// sizes: both passes must end the same way (OK or the same DataLoss), agree
// on the bytes both read, and read the same bytes when they end OK; only
// OK or DataLoss may come out, and a file that does not start with gzip's
// magic number must come out unchanged. Output is capped (a deflate stream
// expands up to 1032 times). Seeds: fuzz/corpus/maybe_gzip_file/.
#include <sys/mman.h>
#include <unistd.h>

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
std::pair<std::string, absl::Status> ReadAll(const std::string& path,
                                             size_t buffer_bytes,
                                             size_t read_bytes) {
  auto file = cosession::MaybeGzipFile::Open(path, buffer_bytes);
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("maybe_gzip_file_fuzzer", MFD_CLOEXEC);
  if (fd < 0) Fail("memfd_create failed");
  for (size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) Fail("write to the memfd failed");
    written += static_cast<size_t>(n);
  }
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  auto [small, small_status] = ReadAll(path, 64, 7);
  auto [large, large_status] = ReadAll(path, 1 << 16, 1 << 16);
  ::close(fd);
  for (const absl::Status& s : {small_status, large_status}) {
    if (!s.ok() && !absl::IsDataLoss(s))
      Fail("not OK or DataLoss: " + s.ToString());
  }
  // The capped pass may stop at different points; compare what both read.
  const size_t common = std::min(small.size(), large.size());
  if (small.compare(0, common, large, 0, common) != 0) {
    Fail("the two passes read different bytes");
  }
  // A damaged member is found at its end, after some of its bytes were
  // handed out: how many depends on the read size (as with zlib's gzread),
  // so only a clean end must give the same bytes.
  if (small.size() < kMaxOutput && large.size() < kMaxOutput &&
      (small_status != large_status || (small_status.ok() && small != large))) {
    Fail(absl::StrCat("the two passes ended differently: ", small.size(),
                      " bytes, ", small_status.ToString(), " against ",
                      large.size(), " bytes, ", large_status.ToString()));
  }
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip && large != std::string(reinterpret_cast<const char*>(data),
                                    std::min(size, kMaxOutput))) {
    Fail("a plain file did not come out unchanged");
  }
  return 0;
}
