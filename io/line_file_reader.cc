#include "cosession/io/line_file_reader.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<std::unique_ptr<LineFileReader>> LineFileReader::Open(
    const std::string& path, LineFileReaderOptions options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  // gzdopen owns fd from here on; in transparent mode it passes bytes that
  // are not a gzip stream through unchanged.
  gzFile file = ::gzdopen(fd, "rb");
  if (file == nullptr) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate the gzip reader"));
  }
  ::gzbuffer(file, static_cast<unsigned>(options.chunk_bytes));
  return std::unique_ptr<LineFileReader>(
      new LineFileReader(path, file, options));
}

LineFileReader::LineFileReader(std::string path, void* file,
                               LineFileReaderOptions options)
    : path_(std::move(path)), file_(file), options_(options) {}

LineFileReader::~LineFileReader() { ::gzclose_r(static_cast<gzFile>(file_)); }

absl::Status LineFileReader::ReadChunk() {
  if (eof_) return absl::OkStatus();
  // What is left of the chunk is an unterminated line: keep it.
  partial_.append(chunk_, chunk_pos_);
  chunk_pos_ = 0;
  chunk_.resize(static_cast<size_t>(options_.chunk_bytes));
  gzFile file = static_cast<gzFile>(file_);
  const int n = ::gzread(file, chunk_.data(),
                         static_cast<unsigned>(chunk_.size()));
  // A truncated stream reads as an end of file (0) with Z_BUF_ERROR set.
  int code = Z_OK;
  const char* message = ::gzerror(file, &code);
  if (n < 0 || (n == 0 && code != Z_OK)) {
    chunk_.clear();
    if (code == Z_ERRNO) return absl::ErrnoToStatus(errno, path_);
    if (code == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path_, ": out of memory while decompressing"));
    }
    return absl::DataLossError(
        absl::StrCat(path_, ": corrupt gzip data: ", message));
  }
  chunk_.resize(static_cast<size_t>(n));
  if (n == 0) eof_ = true;
  return absl::OkStatus();
}

absl::StatusOr<LineFileReader::Line> LineFileReader::NextBuffered() {
  auto too_long = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ":", line_number_ + 1, ": line longer than ",
                     options_.max_line_bytes, " bytes"));
  };
  const absl::string_view rest =
      absl::string_view(chunk_).substr(chunk_pos_);
  const size_t eol = rest.find('\n');
  if (eol == absl::string_view::npos) {
    if (partial_.size() + rest.size() >
        static_cast<size_t>(options_.max_line_bytes)) {
      return too_long();
    }
    if (!eof_) return Line{.state = State::kNeedsRead};
    // The end of the file: a last line without '\n', if any.
    if (partial_.empty() && rest.empty()) return Line{.state = State::kEnd};
    line_ = partial_;
    line_.append(rest.data(), rest.size());
    partial_.clear();
    chunk_pos_ = chunk_.size();
  } else if (partial_.empty()) {
    chunk_pos_ += eol + 1;
    absl::string_view text = rest.substr(0, eol);
    if (text.size() > static_cast<size_t>(options_.max_line_bytes)) {
      return too_long();
    }
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    return Line{.state = State::kLine, .text = text, .number = ++line_number_};
  } else {
    line_ = partial_;
    line_.append(rest.data(), eol);
    partial_.clear();
    chunk_pos_ += eol + 1;
  }
  if (line_.size() > static_cast<size_t>(options_.max_line_bytes)) {
    return too_long();
  }
  absl::string_view text = line_;
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return Line{.state = State::kLine, .text = text, .number = ++line_number_};
}

}  // namespace cosession
