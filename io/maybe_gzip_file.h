// MaybeGzipFile: a file read as its bytes, gunzipped when they are a gzip
// stream (detected by content, not by name, unless the caller names the
// compression) -- the one place that opens such files and turns the
// decoder's errors into statuses, for the whole-file reader
// (io/csv_reader.h), the chunked line reader (io/line_file_reader.h) and
// the input pipeline's TFRecord reader.
//
//   absl::StatusOr<MaybeGzipFile> file = MaybeGzipFile::Open(path, 1 << 16);
//   absl::StatusOr<size_t> n = file->Read(buffer, size);  // 0 at the end
//
// FileCompression (tf.data's compression_type, plus detection):
//   * kDetect (the default): a file whose first two bytes are gzip's magic
//     number is gzip, any other is plain. A caller whose plain files may
//     start with those two bytes says how to tell them (`PlainPrefix`):
//     a TFRecord file whose first record is 35,615 bytes long does.
//   * kNone: the bytes as they are.
//   * kGzip: one gzip member or several back to back (what `cat a.gz b.gz`
//     makes), each checked as zlib checks it (the method is deflate, no
//     reserved header flag is set, the header's own CRC when it has one,
//     the data's CRC-32 and length); bytes after the last member that do
//     not start another one are ignored, as zlib's gzread does. A file
//     that does not start with a member is DataLoss.
//   * kZlib: one zlib stream (RFC 1950) or several back to back, each
//     checked as zlib checks it (the method is deflate, the header's check
//     bits, no preset dictionary, the data's Adler-32); any bytes after a
//     stream must start another one.
//   An empty file is empty whatever the compression.
// The inflater is ISA-L's (igzip): on the digits file it gunzips in a
// sixth of zlib's time, and reading input is what a parallel CSV pipeline
// waits for (README, "Gunzip").
//
// OpenBytes reads bytes already in memory the same way (an HTTP request's
// gzip body), under a name of the caller's for its errors.
//
// Errors name the file: Open returns NotFound, PermissionDenied, ... (from
// errno); Read returns DataLoss "<file>: corrupt gzip data: <what>" (or
// "corrupt zlib data") for a damaged stream and "<file>: corrupt gzip data:
// the stream is truncated" for one that ends early, ResourceExhausted when the
// inflater's state cannot be allocated, and errno's status for an I/O error.
// Reads are blocking I/O.
//
// Thread safety: thread-compatible; movable, not copyable.
#ifndef COSESSION_IO_MAYBE_GZIP_FILE_H_
#define COSESSION_IO_MAYBE_GZIP_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/io/file_compression.h"

namespace cosession {

// With FileCompression::kDetect: a file whose first `bytes` bytes
// `matches` accepts is plain even if it starts with gzip's magic number
// (a file shorter than `bytes` is tested on what it has).
struct PlainPrefix {
  size_t bytes = 0;
  bool (*matches)(std::string_view prefix) = nullptr;
};

class MaybeGzipFile {
 public:
  // `buffer_bytes`: the compressed (or plain) input read per system call.
  static absl::StatusOr<MaybeGzipFile> Open(
      const std::string& path, size_t buffer_bytes,
      FileCompression compression = FileCompression::kDetect,
      PlainPrefix plain_prefix = {});
  // `bytes`, which must outlive the reader, read as a file called `name`
  // (compression detected).
  static MaybeGzipFile OpenBytes(std::string name, absl::string_view bytes);
  MaybeGzipFile(MaybeGzipFile&& other) noexcept;
  MaybeGzipFile& operator=(MaybeGzipFile&& other) noexcept;
  MaybeGzipFile(const MaybeGzipFile&) = delete;
  MaybeGzipFile& operator=(const MaybeGzipFile&) = delete;
  ~MaybeGzipFile();

  // Up to `size` bytes into `data`; 0 at the end of the file. After an
  // error every later call returns the same error: the reader's position
  // inside a damaged stream means nothing.
  absl::StatusOr<size_t> Read(char* data, size_t size);

  const std::string& path() const { return path_; }

 private:
  struct Reader;
  MaybeGzipFile(std::string path, std::unique_ptr<Reader> reader);
  // Read, without remembering its errors.
  absl::StatusOr<size_t> ReadOnce(char* data, size_t size);
  std::string path_;
  std::unique_ptr<Reader> reader_;
};

}  // namespace cosession

#endif  // COSESSION_IO_MAYBE_GZIP_FILE_H_
