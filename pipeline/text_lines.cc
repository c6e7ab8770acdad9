// TextLines: one string element per line of each file in turn, read chunk
// by chunk (io/line_file_reader.h). Opening a file and reading a chunk are
// blocking I/O, so Next() runs them on the pool and awaits them; TryNext()
// serves the lines of the chunk in memory. The iterator is also a
// LineSource (pipeline/detail/line_source.h): the same lines as views.
//
// Reading ahead: as soon as a file is open, its next chunks are read on
// the pool, up to kChunksReadAhead ahead of the one served
// (pipeline/detail/chunk_read_ahead.h), so that a consumer slower than the
// disk and the gunzip seldom waits for them. The memory held is a few
// chunks plus a line.
//
// A cancelled wait leaves the iterator stopped: the read finishes on the
// pool with the reader it owns, and every later Next() is Cancelled.
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/completion.h"
#include "cosession/io/line_file_reader.h"
#include "cosession/pipeline/detail/chunk_read_ahead.h"
#include "cosession/pipeline/detail/line_source.h"
#include "cosession/pipeline/detail/on_pool.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;

class TextLinesIterator : public ElementIterator, public LineSource {
 public:
  TextLinesIterator(std::shared_ptr<const std::vector<std::string>> files,
                    TextLinesOptions options, Runtime::executor_type pool)
      : files_(std::move(files)), options_(options), pool_(std::move(pool)) {}

  std::optional<Result> TryNext() override {
    Line line;
    absl::StatusOr<Progress> progress = TryNextLine(line);
    if (!progress.ok()) return Result(progress.status());
    switch (*progress) {
      case Progress::kMustWait:
        return std::nullopt;
      case Progress::kEnd:
        return Result(std::optional<Element>());
      case Progress::kLine:
        break;
    }
    Element element;
    element.components.emplace_back(std::string(line.text));
    element.origin = OriginOf(line.index);
    return Result(std::move(element));
  }

  asio::awaitable<Result> Next() override {
    while (true) {
      if (std::optional<Result> ready = TryNext()) co_return *std::move(ready);
      if (absl::Status waited = co_await WaitForLines(); !waited.ok()) {
        co_return waited;
      }
    }
  }

  absl::StatusOr<Progress> TryNextLine(Line& out) override {
    while (true) {
      if (!failure_.ok()) return failure_;
      if (next_file_ >= files_->size() && reader_ == nullptr) {
        return Progress::kEnd;
      }
      if (reader_ == nullptr) return Progress::kMustWait;  // open: I/O
      absl::StatusOr<LineFileReader::Line> line = reader_->NextBuffered();
      if (!line.ok()) return Fail(line.status());
      switch (line->state) {
        case LineFileReader::State::kNeedsRead:
          return Progress::kMustWait;
        case LineFileReader::State::kEnd:
          reader_ = nullptr;
          ahead_ = nullptr;  // its reads ended with the file
          continue;
        case LineFileReader::State::kLine:
          if (line->number <= options_.skip_lines) continue;
          out = Line{.text = line->text, .index = line->number};
          return Progress::kLine;
      }
    }
  }

  asio::awaitable<absl::Status> WaitForLines() override {
    if (!failure_.ok()) co_return failure_;
    if (reader_ == nullptr) {
      if (next_file_ >= files_->size()) co_return absl::OkStatus();
      const std::string path = (*files_)[next_file_++];
      LineFileReaderOptions options{.chunk_bytes = options_.chunk_bytes,
                                    .max_line_bytes = options_.max_line_bytes,
                                    .compression = options_.compression};
      using Opened = absl::StatusOr<std::shared_ptr<ChunkReadAhead>>;
      // Opens the file and starts its reads, in one task on the pool.
      // Named first: a capturing lambda temporary inside co_await is
      // freed too early by g++ 12 (docs/async_pitfalls.md, item 4).
      auto open = [path, options, pool = pool_]() -> Opened {
        auto reader = LineFileReader::Open(path, options);
        if (!reader.ok()) return reader.status();
        auto ahead = std::make_shared<ChunkReadAhead>(
            std::shared_ptr<LineFileReader>(*std::move(reader)), pool,
            kChunksReadAhead);
        ahead->Start();
        return ahead;
      };
      std::string what = absl::StrCat("reading '", path, "' was cancelled");
      Opened opened = co_await AsyncOnPool<Opened>(
          pool_, std::move(open), std::move(what), asio::use_awaitable);
      if (!opened.ok()) co_return Fail(opened.status());
      ahead_ = *std::move(opened);
      reader_ = ahead_->reader();
      source_ = std::make_shared<const std::string>(path);
      co_return absl::OkStatus();
    }
    std::optional<absl::Status> taken = ahead_->TryTake(chunk_);
    if (!taken.has_value()) {
      absl::Status waited = co_await ahead_->AsyncWaitReady(
          absl::StrCat("reading '", reader_->path(), "' was cancelled"),
          asio::use_awaitable);
      if (!waited.ok()) co_return Fail(waited);
      taken = ahead_->TryTake(chunk_);
    }
    if (!taken->ok()) co_return Fail(*taken);
    // chunk_ now holds the chunk served until now: its buffer is given
    // back at the next take.
    reader_->AdoptChunk(chunk_);
    co_return absl::OkStatus();
  }

  ElementOrigin OriginOf(int64_t index) const override {
    return {.kind = ElementOrigin::Kind::kFileLine,
            .source = source_,
            .index = index};
  }

 private:
  // Chunks read ahead of the one served: enough for the reads to run ahead
  // of a consumer as fast as the gunzip, little memory.
  static constexpr size_t kChunksReadAhead = 3;

  // Stops the iterator: every later call returns `status`.
  absl::Status Fail(absl::Status status) {
    failure_ = status;
    // A read in flight still holds its own references.
    reader_ = nullptr;
    if (ahead_ != nullptr) ahead_->Stop();
    ahead_ = nullptr;
    return status;
  }

  std::shared_ptr<const std::vector<std::string>> files_;
  TextLinesOptions options_;
  Runtime::executor_type pool_;
  size_t next_file_ = 0;
  std::shared_ptr<LineFileReader> reader_;
  std::shared_ptr<const std::string> source_;
  absl::Status failure_;
  // reader_'s next chunks, read on the pool; the buffer handed over last.
  std::shared_ptr<ChunkReadAhead> ahead_;
  std::string chunk_;
};

class TextLinesDataset : public DatasetNode, public LineSourceNode {
 public:
  TextLinesDataset(std::vector<std::string> files, TextLinesOptions options)
      : files_(
            std::make_shared<const std::vector<std::string>>(std::move(files))),
        options_(options) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return std::make_unique<TextLinesIterator>(files_, options_, context.pool);
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::String()};
  }
  bool deterministic() const override { return true; }
  std::string DebugString() const override {
    return absl::StrCat("TextLines(", absl::StrJoin(*files_, ", "), ")");
  }

 private:
  std::shared_ptr<const std::vector<std::string>> files_;
  TextLinesOptions options_;
};

}  // namespace

Node TextLinesNode(std::vector<std::string> files, TextLinesOptions options) {
  return std::make_shared<TextLinesDataset>(std::move(files), options);
}

}  // namespace cosession::detail
