// MaybeGzipFile: a file read as its bytes, gunzipped when they are a gzip
// stream (detected by content, not by name) -- the one place that opens
// such files and turns zlib's error state into statuses, for the whole-file
// reader (io/csv_reader.h) and the chunked line reader
// (io/line_file_reader.h).
//
//   absl::StatusOr<MaybeGzipFile> file = MaybeGzipFile::Open(path, 1 << 16);
//   absl::StatusOr<size_t> n = file->Read(buffer, size);  // 0 at the end
//
// Errors name the file: Open returns NotFound, PermissionDenied, ... (from
// errno) or ResourceExhausted; Read returns DataLoss "<file>: corrupt gzip
// data: ..." for a damaged or truncated stream (zlib reports a truncated
// one as an end with its error set, which Read checks), ResourceExhausted
// when zlib runs out of memory, and errno's status for an I/O error.
// Reads are blocking I/O.
//
// Thread safety: thread-compatible; movable, not copyable.
#ifndef COSESSION_IO_MAYBE_GZIP_FILE_H_
#define COSESSION_IO_MAYBE_GZIP_FILE_H_

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace cosession {

class MaybeGzipFile {
 public:
  // `buffer_bytes`: zlib's read buffer.
  static absl::StatusOr<MaybeGzipFile> Open(const std::string& path,
                                            size_t buffer_bytes);
  MaybeGzipFile(MaybeGzipFile&& other) noexcept;
  MaybeGzipFile& operator=(MaybeGzipFile&& other) noexcept;
  MaybeGzipFile(const MaybeGzipFile&) = delete;
  MaybeGzipFile& operator=(const MaybeGzipFile&) = delete;
  ~MaybeGzipFile();

  // Up to `size` bytes into `data`; 0 at the end of the file.
  absl::StatusOr<size_t> Read(char* data, size_t size);

  const std::string& path() const { return path_; }

 private:
  MaybeGzipFile(std::string path, void* file)
      : path_(std::move(path)), file_(file) {}
  std::string path_;
  void* file_ = nullptr;  // a gzFile
};

}  // namespace cosession

#endif  // COSESSION_IO_MAYBE_GZIP_FILE_H_
