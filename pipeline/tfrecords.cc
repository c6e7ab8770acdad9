// TFRecords: one string element per record of each TFRecord file in turn
// (tf.data's TFRecordDataset): a little-endian 64-bit length, the masked
// CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data --
// the framing TensorFlow's TFRecordWriter and cosession's event files use
// (io/record_writer.h). A file may be gzip or zlib (TFRecordsOptions::
// compression; detected, gzip is told from plain by the record header's
// CRC as well as by gzip's magic number).
//
// The file is read chunk by chunk on the pool (opening and reading are
// blocking I/O); TryNext() frames the records of the bytes in memory. The
// memory held is the bytes of one record (at most max_record_bytes, checked
// against its length before its data is awaited) plus one chunk.
//
// Errors name the file, the record (numbered from 1) and its byte offset
// in the (uncompressed) file: DataLoss for a CRC mismatch, a length above
// max_record_bytes, or a file that ends inside a record; the open's
// NotFound, PermissionDenied...; DataLoss for corrupt gzip or zlib. After an
// error, or a cancelled wait, the iterator is stopped: every later Next()
// returns the same status (a read in flight finishes on the pool with the file
// it shares).
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/io/maybe_gzip_file.h"
#include "cosession/io/record_reader.h"
#include "cosession/io/record_writer.h"
#include "cosession/pipeline/detail/on_pool.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;

class TFRecordsIterator : public ElementIterator {
 public:
  TFRecordsIterator(std::shared_ptr<const std::vector<std::string>> files,
                    TFRecordsOptions options, Runtime::executor_type pool)
      : files_(std::move(files)), options_(options), pool_(std::move(pool)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      if (!failure_.ok()) return Result(failure_);
      if (file_ == nullptr) {
        if (next_file_ >= files_->size())
          return Result(std::optional<Element>());
        return std::nullopt;  // opening the next file is I/O
      }
      const std::string_view rest(buffer_.data() + start_,
                                  buffer_.size() - start_);
      if (rest.empty() && at_eof_) {
        file_ = nullptr;
        continue;
      }
      absl::StatusOr<RecordFrame> frame = ParseRecordFrame(
          rest, static_cast<uint64_t>(options_.max_record_bytes));
      if (!frame.ok()) {
        return Result(Fail(Corrupt(frame.status().message())));
      }
      if (frame->state == RecordFrame::State::kNeedsMore) {
        if (!at_eof_) {
          wanted_ = frame->size - rest.size();
          return std::nullopt;
        }
        return Result(Fail(Corrupt(
            absl::StrCat("truncated record: the file ends after ", rest.size(),
                         " of its ", frame->size, " bytes"))));
      }
      Element element;
      element.components.emplace_back(std::string(frame->data));
      element.origin = {.kind = ElementOrigin::Kind::kStreamRecord,
                        .source = source_,
                        .index = ++records_};
      start_ += frame->size;
      offset_ += frame->size;
      return Result(std::move(element));
    }
  }

  asio::awaitable<Result> Next() override {
    while (true) {
      if (std::optional<Result> ready = TryNext()) co_return *std::move(ready);
      if (absl::Status read = co_await Read(); !read.ok()) co_return read;
    }
  }

 private:
  using File = std::shared_ptr<MaybeGzipFile>;

  // Opens the next file, or reads the current one's next chunk, on the
  // pool.
  asio::awaitable<absl::Status> Read() {
    if (file_ == nullptr) {
      const std::string path = (*files_)[next_file_++];
      const size_t buffer_bytes = static_cast<size_t>(options_.chunk_bytes);
      const FileCompression compression = options_.compression;
      // Named first: a capturing lambda temporary inside co_await is freed
      // too early by g++ 12 (docs/async_pitfalls.md, item 4).
      auto open = [path, buffer_bytes, compression]() -> absl::StatusOr<File> {
        // Detecting, a file that starts with a valid record header is
        // plain even when its first bytes are gzip's magic number.
        const PlainPrefix record_header{.bytes = kRecordHeaderSize,
                                        .matches = StartsWithRecordHeader};
        absl::StatusOr<MaybeGzipFile> file =
            MaybeGzipFile::Open(path, buffer_bytes, compression, record_header);
        if (!file.ok()) return file.status();
        return std::make_shared<MaybeGzipFile>(*std::move(file));
      };
      std::string what = absl::StrCat("opening '", path, "' was cancelled");
      absl::StatusOr<File> opened = co_await AsyncOnPool<absl::StatusOr<File>>(
          pool_, std::move(open), std::move(what), asio::use_awaitable);
      if (!opened.ok()) co_return Fail(opened.status());
      file_ = *std::move(opened);
      source_ = std::make_shared<const std::string>(path);
      buffer_.clear();
      start_ = 0;
      offset_ = 0;
      records_ = 0;
      wanted_ = 0;
      at_eof_ = false;
      co_return absl::OkStatus();
    }
    buffer_.erase(0, start_);
    start_ = 0;
    // At least a chunk, and at once the rest of a record longer than one.
    const size_t size =
        std::max(static_cast<size_t>(options_.chunk_bytes), wanted_);
    auto read = [file = file_, size]() -> absl::StatusOr<std::string> {
      std::string chunk(size, '\0');
      size_t filled = 0;
      while (filled < size) {
        absl::StatusOr<size_t> n =
            file->Read(chunk.data() + filled, size - filled);
        if (!n.ok()) return n.status();
        if (*n == 0) break;
        filled += *n;
      }
      chunk.resize(filled);
      return chunk;
    };
    std::string what = absl::StrCat("reading '", *source_, "' was cancelled");
    absl::StatusOr<std::string> chunk =
        co_await AsyncOnPool<absl::StatusOr<std::string>>(
            pool_, std::move(read), std::move(what), asio::use_awaitable);
    if (!chunk.ok()) co_return Fail(chunk.status());
    // A short read is the end of the file: Read fills up to `size` unless
    // the file ends.
    if (chunk->size() < size) at_eof_ = true;
    buffer_.append(*chunk);
    co_return absl::OkStatus();
  }

  absl::Status Corrupt(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(*source_, ": record ", records_ + 1,
                                            " at byte offset ", offset_, ": ",
                                            what));
  }

  // Stops the iterator: every later call returns `status`.
  absl::Status Fail(absl::Status status) {
    failure_ = status;
    file_ = nullptr;  // a read in flight holds its own reference
    buffer_.clear();
    buffer_.shrink_to_fit();
    return status;
  }

  std::shared_ptr<const std::vector<std::string>> files_;
  TFRecordsOptions options_;
  Runtime::executor_type pool_;
  size_t next_file_ = 0;
  File file_;
  std::shared_ptr<const std::string> source_;
  // The file's bytes read and not yet framed: buffer_[start_, end).
  std::string buffer_;
  size_t start_ = 0;
  bool at_eof_ = false;
  // Of the record being framed: its offset in the file, its number less
  // one, and the bytes it still needs once its length is known.
  uint64_t offset_ = 0;
  int64_t records_ = 0;
  size_t wanted_ = 0;
  absl::Status failure_;
};

class TFRecordsDataset : public DatasetNode {
 public:
  TFRecordsDataset(std::vector<std::string> files, TFRecordsOptions options)
      : files_(
            std::make_shared<const std::vector<std::string>>(std::move(files))),
        options_(options) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<TFRecordsIterator>(files_, options_, context.pool);
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::String()};
  }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("TFRecords(", absl::StrJoin(*files_, ", "), ")");
  }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  TFRecordsOptions options_;
};

}  // namespace

Node TFRecordsNode(std::vector<std::string> files, TFRecordsOptions options) {
  return std::make_shared<TFRecordsDataset>(std::move(files), options);
}

}  // namespace cosession::detail
