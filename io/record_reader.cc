#include "cosession/io/record_reader.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cosession/io/crc32c.h"
#include "cosession/io/record_writer.h"

namespace cosession {
namespace {

uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  }
  return value;
}

}  // namespace

RecordReader::RecordReader(std::string_view bytes, std::string name,
                           RecordReaderOptions options)
    : bytes_(bytes), name_(std::move(name)), options_(options) {}

absl::Status RecordReader::Corrupt(const std::string& what) const {
  return absl::DataLossError(absl::StrCat("corrupt record in '", name_,
                                          "' at offset ", offset_, ": ", what));
}

bool StartsWithRecordHeader(std::string_view bytes) {
  if (bytes.size() < kRecordHeaderSize) return false;
  const uint32_t length_crc = static_cast<uint32_t>(
      LoadLittleEndian(bytes.data() + sizeof(uint64_t), sizeof(uint32_t)));
  return MaskCrc32c(Crc32c(bytes.data(), sizeof(uint64_t))) == length_crc;
}

absl::StatusOr<RecordFrame> ParseRecordFrame(std::string_view bytes,
                                             uint64_t max_record_size) {
  if (bytes.size() < kRecordHeaderSize) {
    return RecordFrame{.state = RecordFrame::State::kNeedsMore,
                       .size = kRecordHeaderSize};
  }
  if (!StartsWithRecordHeader(bytes)) {
    return absl::DataLossError("length CRC mismatch");
  }
  const char* header = bytes.data();
  const uint64_t length = LoadLittleEndian(header, sizeof(uint64_t));
  if (length > max_record_size) {
    return absl::DataLossError(absl::StrCat(
        "record length ", length, " exceeds the limit of ", max_record_size));
  }
  // No overflow: length <= max_record_size, far below SIZE_MAX.
  const size_t needed = kRecordHeaderSize + length + kRecordFooterSize;
  if (needed > bytes.size()) {
    return RecordFrame{.state = RecordFrame::State::kNeedsMore, .size = needed};
  }
  std::string_view data(header + kRecordHeaderSize, length);
  const uint32_t data_crc = static_cast<uint32_t>(
      LoadLittleEndian(header + kRecordHeaderSize + length, sizeof(uint32_t)));
  if (MaskCrc32c(Crc32c(data)) != data_crc) {
    return absl::DataLossError("data CRC mismatch");
  }
  return RecordFrame{
      .state = RecordFrame::State::kRecord, .data = data, .size = needed};
}

absl::StatusOr<std::optional<std::string_view>> RecordReader::Next() {
  const size_t left = bytes_.size() - offset_;
  if (left == 0) return std::nullopt;
  absl::StatusOr<RecordFrame> frame =
      ParseRecordFrame(bytes_.substr(offset_), options_.max_record_size);
  if (!frame.ok()) return Corrupt(std::string(frame.status().message()));
  if (frame->state == RecordFrame::State::kNeedsMore) {
    if (left < kRecordHeaderSize) {
      return Corrupt(absl::StrCat("header truncated (", left, " of ",
                                  kRecordHeaderSize, " bytes)"));
    }
    return Corrupt(absl::StrCat(
        "record of ", frame->size - kRecordHeaderSize - kRecordFooterSize,
        " bytes truncated (", left, " bytes left)"));
  }
  offset_ += frame->size;
  return frame->data;
}

absl::StatusOr<std::vector<std::string>> ReadAllRecords(
    std::string_view bytes, std::string name, RecordReaderOptions options) {
  RecordReader reader(bytes, std::move(name), options);
  std::vector<std::string> records;
  while (true) {
    auto record = reader.Next();
    if (!record.ok()) return record.status();
    if (!record->has_value()) return records;
    records.emplace_back(**record);
  }
}

absl::StatusOr<std::vector<std::string>> ReadRecordFile(
    const std::string& path, RecordReaderOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  }
  return ReadAllRecords(contents.str(), path, options);
}

}  // namespace cosession
