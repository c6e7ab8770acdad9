// Cache to a file: tf.data's cache(filename). The first iterator that
// reads the input to its end writes every element it passes on to
// `filename`; every iterator made once that file exists -- the next pass
// of a Repeat, the next run of the program -- replays the file without
// touching the input: the same elements (tensors, strings and their
// origins, so that later errors still name the input's file and line), in
// the same order.
//
// The file is a TFRecord file (read back with Dataset::TFRecords): a
// header record ("cosession.Cache 1" and the dataset's ElementSpecString),
// then one record per element (pipeline/element_record.h). It appears
// whole or not at all: a filling iterator writes a temporary file beside
// it and commits it at the input's end (io/atomic_file.h's
// AtomicFileWriter); an iterator destroyed before the end, or whose input
// failed, removes its temporary file (tf.data: "the partially cached
// contents of the dataset will be discarded"), and its later calls read the
// input uncached. Several iterators filling at once each write their own
// file; the first to finish wins and the others' are dropped (tf.data
// refuses a second writer with a lock file instead).
//
// Replaying checks the header: a file of another format is DataLoss, one
// written for elements of another spec is FailedPrecondition naming both
// (delete the file to fill it again); a damaged record is DataLoss naming
// the file and the record.
//
// Memory: a filling iterator holds at most kWriteBytes of encoded
// elements before it writes them (on the pool: file I/O never runs on the
// consumer's thread); a replaying one, a TFRecords chunk and a record.
//
// Thread safety: iterators are single-consumer; the node is immutable.
// Whether the file exists is checked when an iterator is made.
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/record_writer.h"
#include "cosession/pipeline/detail/on_pool.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/element_record.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

constexpr absl::string_view kMagic = "cosession.Cache 1";
// Encoded elements gathered before one write on the pool.
constexpr size_t kWriteBytes = size_t{1} << 20;

// What the header names after kMagic: the elements' spec.
std::string SpecText(const std::optional<ElementSpec>& spec) {
  return spec ? ElementSpecString(*spec) : "(unknown spec)";
}

class FileFillingIterator : public ElementIterator {
 public:
  FileFillingIterator(std::unique_ptr<ElementIterator> input,
                      std::string filename, const std::string& spec_text,
                      Runtime::executor_type pool)
      : input_(std::move(input)),
        filename_(std::move(filename)),
        pending_(FrameRecord(absl::StrCat(kMagic, "\n", spec_text))),
        pool_(std::move(pool)) {}

  std::optional<Result> TryNext() override {
    if (!failure_.ok()) return Result(failure_);
    if (!filling_) return input_->TryNext();
    // Opening, writing and committing the file are I/O: Next does them.
    if (writer_ == nullptr || pending_.size() >= kWriteBytes || input_ended_) {
      return std::nullopt;
    }
    std::optional<Result> next = input_->TryNext();
    if (!next.has_value()) return std::nullopt;
    if (next->ok() && !(*next)->has_value()) {
      input_ended_ = true;  // Next commits the file, then ends
      return std::nullopt;
    }
    return Keep(*std::move(next));
  }

  asio::awaitable<Result> Next() override {
    while (true) {
      if (!failure_.ok()) co_return failure_;
      if (!filling_) co_return co_await NextOf(*input_);
      if (writer_ == nullptr) {
        absl::Status opened = co_await Open();
        if (!opened.ok()) co_return Fail(opened);
      }
      if (pending_.size() >= kWriteBytes || input_ended_) {
        absl::Status written = co_await Write(/*commit=*/input_ended_);
        if (!written.ok()) co_return Fail(written);
        if (input_ended_) {
          filling_ = false;
          writer_ = nullptr;
          co_return Result(std::optional<Element>());
        }
      }
      Result next = co_await NextOf(*input_);
      if (next.ok() && !next->has_value()) {
        input_ended_ = true;  // the file is committed on the next turn
        continue;
      }
      co_return Keep(std::move(next));
    }
  }

 private:
  using Writer = std::shared_ptr<AtomicFileWriter>;

  // Encodes an element passed on; an error of the input ends the filling
  // (the file written so far is removed with the writer).
  Result Keep(Result next) {
    if (!next.ok()) {
      StopFilling();
      return next;
    }
    std::string record;
    AppendElementRecord(**next, record);
    pending_ += FrameRecord(record);
    return next;
  }

  void StopFilling() {
    filling_ = false;
    writer_ = nullptr;
    std::string().swap(pending_);
  }

  // Stops the iterator with a file error, naming the cache.
  absl::Status Fail(const absl::Status& error) {
    StopFilling();
    failure_ = absl::Status(
        error.code(),
        absl::StrCat("Cache('", filename_, "'): ", error.message()));
    return failure_;
  }

  asio::awaitable<absl::Status> Open() {
    auto create = [path = filename_]() -> absl::StatusOr<Writer> {
      absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer =
          AtomicFileWriter::Create(path);
      if (!writer.ok()) return writer.status();
      return Writer(*std::move(writer));
    };
    std::string what =
        absl::StrCat("creating the cache file '", filename_, "' was cancelled");
    absl::StatusOr<Writer> writer =
        co_await AsyncOnPool<absl::StatusOr<Writer>>(
            pool_, std::move(create), std::move(what), asio::use_awaitable);
    if (!writer.ok()) co_return writer.status();
    writer_ = *std::move(writer);
    co_return absl::OkStatus();
  }

  // Writes what is pending (and, with `commit`, puts the file in place).
  asio::awaitable<absl::Status> Write(bool commit) {
    auto write = [writer = writer_, bytes = std::exchange(pending_, {}),
                  commit]() -> absl::Status {
      if (absl::Status s = writer->Append(bytes); !s.ok()) return s;
      if (!commit) return absl::OkStatus();
      return writer->Commit(AtomicFileWriter::Existing::kKeepExisting);
    };
    std::string what =
        absl::StrCat("writing the cache file '", filename_, "' was cancelled");
    co_return co_await AsyncOnPool<absl::Status>(
        pool_, std::move(write), std::move(what), asio::use_awaitable);
  }

  std::unique_ptr<ElementIterator> input_;
  std::string filename_;
  // Framed records not yet written; the header first.
  std::string pending_;
  Runtime::executor_type pool_;
  Writer writer_;
  bool filling_ = true;
  bool input_ended_ = false;
  absl::Status failure_;
};

class FileReplayIterator : public ElementIterator {
 public:
  FileReplayIterator(std::unique_ptr<ElementIterator> records,
                     std::string filename, std::string spec_text)
      : records_(std::move(records)),
        filename_(std::move(filename)),
        spec_text_(std::move(spec_text)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      if (!failure_.ok()) return Result(failure_);
      std::optional<Result> record = records_->TryNext();
      if (!record.has_value()) return std::nullopt;
      if (std::optional<Result> out = Decoded(*std::move(record))) return out;
    }
  }

  asio::awaitable<Result> Next() override {
    while (true) {
      if (!failure_.ok()) co_return failure_;
      Result record = co_await NextOf(*records_);
      if (std::optional<Result> out = Decoded(std::move(record))) {
        co_return *std::move(out);
      }
    }
  }

 private:
  // The element of a record; nullopt for the header, once checked.
  std::optional<Result> Decoded(Result record) {
    if (!record.ok()) return Fail(record.status());
    if (!record->has_value()) {
      if (!header_checked_) {
        return Fail(absl::DataLossError(absl::StrCat(
            "'", filename_, "' is empty: not a cosession cache file")));
      }
      return record;
    }
    const std::string& bytes = (*record)->text(0);
    if (!header_checked_) {
      header_checked_ = true;
      if (absl::Status header = CheckHeader(bytes); !header.ok()) {
        return Fail(std::move(header));
      }
      return std::nullopt;
    }
    absl::StatusOr<Element> element = decoder_.Decode(bytes);
    if (!element.ok()) {
      return Fail(absl::DataLossError(
          (*record)->origin.Describe(element.status().message())));
    }
    return Result(*std::move(element));
  }

  absl::Status CheckHeader(const std::string& bytes) const {
    std::pair<std::string, std::string> got =
        absl::StrSplit(bytes, absl::MaxSplits('\n', 1));
    if (got.first != kMagic) {
      return absl::DataLossError(
          absl::StrCat("'", filename_,
                       "' is not a cosession cache file (its first record "
                       "does not start with \"",
                       kMagic, "\")"));
    }
    if (got.second != spec_text_) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", filename_, "' caches elements ", got.second,
                       "; this dataset's elements are ", spec_text_,
                       ": delete the file to cache the dataset again"));
    }
    return absl::OkStatus();
  }

  Result Fail(absl::Status status) {
    failure_ = status;
    return Result(std::move(status));
  }

  std::unique_ptr<ElementIterator> records_;
  std::string filename_;
  std::string spec_text_;
  ElementRecordDecoder decoder_;
  bool header_checked_ = false;
  absl::Status failure_;
};

class FileCacheDataset : public DatasetNode {
 public:
  FileCacheDataset(Node input, CacheOptions options)
      : input_(std::move(input)),
        options_(std::move(options)),
        spec_text_(SpecText(input_->spec())) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    struct stat st;
    if (::stat(options_.filename.c_str(), &st) == 0) {
      // No record is longer than the file: the bound on a length (checked
      // after its CRC) that lets every element written be read back, as
      // large as it is.
      TFRecordsOptions whole_file{.max_record_bytes =
                                      std::max<int64_t>(st.st_size, 0)};
      absl::StatusOr<std::unique_ptr<ElementIterator>> records =
          TFRecordsNode({options_.filename}, whole_file)->MakeIterator(context);
      if (!records.ok()) return records.status();
      return std::make_unique<FileReplayIterator>(
          *std::move(records), options_.filename, spec_text_);
    }
    absl::StatusOr<std::unique_ptr<ElementIterator>> input =
        input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<FileFillingIterator>(
        *std::move(input), options_.filename, spec_text_, context.pool);
  }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Cache(", options_.filename,
                        ")");
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  CacheOptions options_;
  std::string spec_text_;
};

}  // namespace

Node FileCacheNode(Node input, CacheOptions options) {
  return std::make_shared<FileCacheDataset>(std::move(input),
                                            std::move(options));
}

}  // namespace cosession::detail
