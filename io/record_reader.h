// RecordReader: reads TFRecord-framed records (see io/record_writer.h)
// from bytes in memory, validating everything before trusting it:
//
//   * a header cut short, a length whose CRC does not match, a length larger
//     than the bytes left or than max_record_size, data or a footer cut short,
//     data whose CRC does not match: DataLoss naming the file (the `name`
//     given) and the record's byte offset;
//   * never reads out of bounds, never allocates more than the input's size
//     (records are views into the input).
//
// After an error the reader stays at the bad record (Next() returns the same
// error again). Thread safety: none; the bytes must outlive the reader and
// the views it returns.
#ifndef COSESSION_IO_RECORD_READER_H_
#define COSESSION_IO_RECORD_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cosession {

struct RecordReaderOptions {
  // A record claiming more data than this is DataLoss (a corrupt length must
  // not make the reader trust it). TensorFlow's events are far smaller.
  uint64_t max_record_size = uint64_t{256} << 20;
};

class RecordReader {
 public:
  // `name` only labels errors (usually the file's path).
  RecordReader(std::string_view bytes, std::string name,
               RecordReaderOptions options = {});

  // The next record's data; nullopt at a clean end (no bytes left).
  absl::StatusOr<std::optional<std::string_view>> Next();

  // Byte offset of the next record.
  size_t offset() const { return offset_; }

 private:
  absl::Status Corrupt(const std::string& what) const;

  std::string_view bytes_;
  std::string name_;
  RecordReaderOptions options_;
  size_t offset_ = 0;
};

// The record at the start of `bytes`, for a reader that gets its bytes
// piece by piece (the input pipeline's TFRecords source; RecordReader
// frames with it too; io/record_writer.h's FrameRecord makes one):
//   * kRecord: `data` is the record's data (a view into `bytes`) and
//     `size` the bytes the record spans, its framing included;
//   * kNeedsMore: `bytes` hold only the start of a record; `size` is the
//     bytes it spans once known (its header was read), else
//     kRecordHeaderSize. Read more; at the end of the input, the record is
//     truncated.
// DataLoss, its message saying what and not where (the caller knows the
// file and the offset), for a length or data CRC mismatch and for a length
// above max_record_size -- checked before any data is awaited, so that a
// corrupt length never makes a reader buffer what it claims.
struct RecordFrame {
  enum class State { kRecord, kNeedsMore };
  State state = State::kNeedsMore;
  std::string_view data{};
  size_t size = 0;
};
absl::StatusOr<RecordFrame> ParseRecordFrame(std::string_view bytes,
                                             uint64_t max_record_size);

// True when `bytes` start with a record header whose length's CRC matches:
// how a reader that detects gzip by content tells a TFRecord file from a
// gzip stream when both start with gzip's magic number (a first record of
// 35,615 bytes does), with a 2^-32 chance of a gzip stream passing.
bool StartsWithRecordHeader(std::string_view bytes);

// Every record of `bytes` (copies), or the first error.
absl::StatusOr<std::vector<std::string>> ReadAllRecords(
    std::string_view bytes, std::string name, RecordReaderOptions options = {});

// Every record of the file at `path`; NotFound / DataLoss naming it.
absl::StatusOr<std::vector<std::string>> ReadRecordFile(
    const std::string& path, RecordReaderOptions options = {});

}  // namespace cosession

#endif  // COSESSION_IO_RECORD_READER_H_
