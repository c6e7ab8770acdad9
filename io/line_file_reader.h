// LineFileReader: the lines of a text file, plain, gzip or zlib
// (MaybeGzipFile's FileCompression; gzip detected by content unless told),
// read chunk by chunk -- never the whole file in memory.
//
//   auto reader = LineFileReader::Open("digits.csv.gz", {});
//   while (true) {
//     absl::StatusOr<LineFileReader::Line> line = (*reader)->NextBuffered();
//     ... kNeedsRead: (*reader)->ReadChunk() (blocking) and retry ...
//   }
//
// Lines end at '\n'; a '\r' right before it is dropped; a last line without
// '\n' counts; an empty line is a line. Line numbers start at 1.
// NextBuffered never blocks: it serves lines from the chunk in memory and
// says when the next needs a ReadChunk, which is blocking I/O (call it on a
// thread that may block: the pipeline runs it on the pool). The memory
// held is two chunks (the one served, and ReadChunk's next) plus at most
// one line being assembled.
//
// Reading ahead: ReadChunk is FillChunk (the blocking read into a buffer of
// the caller's) then AdoptChunk (serve those bytes next). FillChunk
// touches only the file, NextBuffered and AdoptChunk only what is in
// memory, so the next chunk can be read on another thread while this
// one's lines are served -- one call of each kind at a time; AdoptChunk
// once NextBuffered said kNeedsRead.
//
// Errors: Open returns NotFound, PermissionDenied, ... naming the file;
// ReadChunk returns DataLoss "<file>: corrupt gzip data: ..." (or zlib) and I/O
// errors naming the file; NextBuffered returns InvalidArgument
// "<file>:<line>: line longer than N bytes".
//
// Thread safety: thread-compatible (one reader, one thread at a time).
#ifndef COSESSION_IO_LINE_FILE_READER_H_
#define COSESSION_IO_LINE_FILE_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/io/maybe_gzip_file.h"

namespace cosession {

struct LineFileReaderOptions {
  int64_t chunk_bytes = 1 << 16;
  int64_t max_line_bytes = 1 << 20;
  FileCompression compression = FileCompression::kDetect;
};

class LineFileReader {
 public:
  static absl::StatusOr<std::unique_ptr<LineFileReader>> Open(
      const std::string& path, LineFileReaderOptions options = {});
  ~LineFileReader();
  LineFileReader(const LineFileReader&) = delete;
  LineFileReader& operator=(const LineFileReader&) = delete;

  enum class State { kLine, kNeedsRead, kEnd };
  struct Line {
    State state = State::kEnd;
    // With kLine: valid until the next call.
    absl::string_view text{};
    int64_t number = 0;
  };

  // The next line from memory, or kNeedsRead, or kEnd once the file is
  // read to its end and every line served.
  absl::StatusOr<Line> NextBuffered();
  // Reads the next chunk (blocking). After kEnd, a no-op.
  absl::Status ReadChunk();
  // The next chunk's bytes into `chunk` (resized to them; empty at the end
  // of the file). Blocking; touches only the file.
  absl::Status FillChunk(std::string& chunk);
  // Serves `chunk` (from FillChunk) next; an empty one is the end of the
  // file. Swaps it with the chunk served until now, whose buffer the
  // caller may reuse.
  void AdoptChunk(std::string& chunk);

  const std::string& path() const { return file_.path(); }
  // True once an empty chunk (the end of the file) was taken into use.
  bool at_end() const { return eof_; }

 private:
  LineFileReader(MaybeGzipFile file, LineFileReaderOptions options);
  MaybeGzipFile file_;
  LineFileReaderOptions options_;
  std::string chunk_;  // bytes read and not yet served
  std::string spare_;  // ReadChunk's buffer for the next chunk
  size_t chunk_pos_ = 0;
  std::string partial_;  // a line split across chunks
  std::string line_;     // the line served last, when it was assembled
  bool eof_ = false;
  int64_t line_number_ = 0;
};

}  // namespace cosession

#endif  // COSESSION_IO_LINE_FILE_READER_H_
