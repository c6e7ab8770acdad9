#include "cosession/io/line_file_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<std::unique_ptr<LineFileReader>> LineFileReader::Open(
    const std::string& path, LineFileReaderOptions options) {
  absl::StatusOr<MaybeGzipFile> file = MaybeGzipFile::Open(
      path, static_cast<size_t>(options.chunk_bytes), options.compression);
  if (!file.ok()) return file.status();
  return std::unique_ptr<LineFileReader>(
      new LineFileReader(*std::move(file), options));
}

LineFileReader::LineFileReader(MaybeGzipFile file,
                               LineFileReaderOptions options)
    : file_(std::move(file)), options_(options) {}

LineFileReader::~LineFileReader() = default;

absl::Status LineFileReader::ReadChunk() {
  if (eof_) return absl::OkStatus();
  std::string chunk = std::move(spare_);
  absl::Status read = FillChunk(chunk);
  if (!read.ok()) {
    partial_.append(chunk_, chunk_pos_);
    chunk_.clear();
    chunk_pos_ = 0;
    return read;
  }
  AdoptChunk(chunk);
  spare_ = std::move(chunk);
  return absl::OkStatus();
}

absl::Status LineFileReader::FillChunk(std::string& chunk) {
  chunk.resize(static_cast<size_t>(options_.chunk_bytes));
  absl::StatusOr<size_t> n = file_.Read(chunk.data(), chunk.size());
  if (!n.ok()) {
    chunk.clear();
    return n.status();
  }
  chunk.resize(*n);
  return absl::OkStatus();
}

void LineFileReader::AdoptChunk(std::string& chunk) {
  if (eof_) return;
  // What is left of the chunk is an unterminated line: keep it.
  partial_.append(chunk_, chunk_pos_);
  chunk_pos_ = 0;
  chunk_.swap(chunk);
  if (chunk_.empty()) eof_ = true;
}

absl::StatusOr<LineFileReader::Line> LineFileReader::NextBuffered() {
  auto too_long = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ":", line_number_ + 1, ": line longer than ",
                     options_.max_line_bytes, " bytes"));
  };
  const absl::string_view rest = absl::string_view(chunk_).substr(chunk_pos_);
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
