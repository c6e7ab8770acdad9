#include "cosession/io/maybe_gzip_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<MaybeGzipFile> MaybeGzipFile::Open(const std::string& path,
                                                  size_t buffer_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  // gzdopen owns fd from here on (gzclose closes it); in transparent mode
  // it passes bytes that are not a gzip stream through unchanged.
  gzFile file = ::gzdopen(fd, "rb");
  if (file == nullptr) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate the gzip reader"));
  }
  ::gzbuffer(file, static_cast<unsigned>(buffer_bytes));
  return MaybeGzipFile(path, file);
}

MaybeGzipFile::MaybeGzipFile(MaybeGzipFile&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)) {}

MaybeGzipFile& MaybeGzipFile::operator=(MaybeGzipFile&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) ::gzclose_r(static_cast<gzFile>(file_));
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

MaybeGzipFile::~MaybeGzipFile() {
  if (file_ != nullptr) ::gzclose_r(static_cast<gzFile>(file_));
}

absl::StatusOr<size_t> MaybeGzipFile::Read(char* data, size_t size) {
  gzFile file = static_cast<gzFile>(file_);
  const unsigned ask = static_cast<unsigned>(
      std::min<size_t>(size, std::numeric_limits<int>::max()));
  const int n = ::gzread(file, data, ask);
  // A truncated stream reads as an end of file (0) with Z_BUF_ERROR set,
  // so the error state is checked at the end too.
  int code = Z_OK;
  const char* message = ::gzerror(file, &code);
  if (n < 0 || (n == 0 && code != Z_OK)) {
    if (code == Z_ERRNO) return absl::ErrnoToStatus(errno, path_);
    if (code == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path_, ": out of memory while decompressing"));
    }
    return absl::DataLossError(
        absl::StrCat(path_, ": corrupt gzip data: ", message));
  }
  return static_cast<size_t>(n);
}

}  // namespace cosession
