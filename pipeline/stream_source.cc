#include "cosession/pipeline/stream_source.h"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/runtime.h"
#include "cosession/pipeline/detail/line_source.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

enum class Framing { kLines, kRecords };

// Splits a byte stream into lines or records. Holds at most one line or
// record plus one read's bytes.
class StreamFramer {
 public:
  StreamFramer(std::shared_ptr<ByteStream> stream, Framing framing,
               const StreamSourceOptions& options)
      : stream_(std::move(stream)),
        framing_(framing),
        options_(options),
        source_(std::make_shared<const std::string>(options.name)) {}

  // The next line or record from the bytes already read; nullopt when
  // more must be read (Read).
  std::optional<ElementIterator::Result> TryNext() {
    if (!failure_.ok()) return ElementIterator::Result(failure_);
    std::optional<ElementIterator::Result> framed;
    if (framing_ == Framing::kLines) {
      detail::LineSource::Line line;
      absl::StatusOr<detail::LineSource::Progress> progress = TryNextLine(line);
      if (!progress.ok()) return ElementIterator::Result(progress.status());
      if (*progress == detail::LineSource::Progress::kMustWait) {
        return std::nullopt;
      }
      if (*progress == detail::LineSource::Progress::kEnd) {
        return ElementIterator::Result(std::optional<Element>());
      }
      Element element;
      element.components.emplace_back(std::string(line.text));
      element.origin = OriginOf(line.index);
      return ElementIterator::Result(std::move(element));
    }
    framed = FrameRecord();
    if (framed.has_value()) {
      if (!framed->ok()) failure_ = framed->status();
      return framed;
    }
    if (ended_) return ElementIterator::Result(std::optional<Element>());
    return std::nullopt;
  }

  asio::awaitable<ElementIterator::Result> Next() {
    while (true) {
      if (std::optional<ElementIterator::Result> ready = TryNext()) {
        co_return *std::move(ready);
      }
      absl::Status read = co_await Read();
      if (!read.ok()) co_return read;
    }
  }

  // Lines as views into the buffer (detail::LineSource).
  absl::StatusOr<detail::LineSource::Progress> TryNextLine(
      detail::LineSource::Line& out) {
    using Progress = detail::LineSource::Progress;
    if (!failure_.ok()) return failure_;
    const size_t newline = buffer_.find('\n', start_);
    if (newline == std::string::npos) {
      const size_t pending = buffer_.size() - start_;
      if (pending > static_cast<size_t>(options_.max_line_bytes)) {
        return Fail(TooLong());
      }
      if (!ended_) return Progress::kMustWait;
      if (pending == 0) return Progress::kEnd;
      absl::string_view last(buffer_.data() + start_, pending);
      start_ = buffer_.size();
      if (last.back() == '\r') last.remove_suffix(1);
      out = {.text = last, .index = ++count_};
      return Progress::kLine;
    }
    size_t end = newline;
    if (end > start_ && buffer_[end - 1] == '\r') --end;
    if (end - start_ > static_cast<size_t>(options_.max_line_bytes)) {
      return Fail(TooLong());
    }
    out = {.text = absl::string_view(buffer_.data() + start_, end - start_),
           .index = ++count_};
    start_ = newline + 1;
    return Progress::kLine;
  }

  // Reads more bytes; an error stops the framer (every later call returns
  // it).
  asio::awaitable<absl::Status> Read() {
    if (!failure_.ok()) co_return failure_;
    if (ended_) co_return absl::OkStatus();
    absl::Status read = co_await ReadSome();
    if (!read.ok()) failure_ = read;
    co_return read;
  }

  ElementOrigin OriginOf(int64_t index) const {
    return {.kind = framing_ == Framing::kLines
                        ? ElementOrigin::Kind::kStreamLine
                        : ElementOrigin::Kind::kStreamRecord,
            .source = source_,
            .index = index};
  }

 private:
  absl::Status TooLong() const {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.name, ": line ", count_ + 1, " longer than ",
                     options_.max_line_bytes, " bytes"));
  }
  absl::Status Fail(absl::Status status) {
    failure_ = status;
    return status;
  }

  asio::awaitable<absl::Status> ReadSome() {
    // Keep what is not yet framed at the front of the buffer.
    buffer_.erase(0, start_);
    start_ = 0;
    const size_t old_size = buffer_.size();
    buffer_.resize(old_size + static_cast<size_t>(options_.read_bytes));
    absl::StatusOr<size_t> n = co_await stream_->ReadSome(
        buffer_.data() + old_size, static_cast<size_t>(options_.read_bytes));
    buffer_.resize(old_size + (n.ok() ? *n : 0));
    if (!n.ok()) co_return n.status();
    if (*n == 0) ended_ = true;
    co_return absl::OkStatus();
  }

  Element MakeText(std::string text, ElementOrigin::Kind kind) {
    Element element;
    element.components.emplace_back(std::move(text));
    element.origin = {.kind = kind, .source = source_, .index = ++count_};
    return element;
  }

  // A record from the buffer; nullopt when more bytes are needed.
  std::optional<ElementIterator::Result> FrameRecord() {
    const size_t pending = buffer_.size() - start_;
    if (pending < 4) {
      if (ended_ && pending > 0) {
        return ElementIterator::Result(absl::DataLossError(absl::StrCat(
            options_.name, ": record ", count_ + 1, " truncated: got ", pending,
            " of the 4 bytes of its length")));
      }
      return std::nullopt;
    }
    const auto* p =
        reinterpret_cast<const unsigned char*>(buffer_.data()) + start_;
    const uint64_t length = uint64_t{p[0]} | (uint64_t{p[1]} << 8) |
                            (uint64_t{p[2]} << 16) | (uint64_t{p[3]} << 24);
    if (length > static_cast<uint64_t>(options_.max_record_bytes)) {
      return ElementIterator::Result(absl::InvalidArgumentError(absl::StrCat(
          options_.name, ": record ", count_ + 1, ": length ", length,
          " exceeds max_record_bytes ", options_.max_record_bytes)));
    }
    if (pending - 4 < length) {
      if (ended_) {
        return ElementIterator::Result(absl::DataLossError(absl::StrCat(
            options_.name, ": record ", count_ + 1, " truncated: got ",
            pending - 4, " of ", length, " bytes")));
      }
      return std::nullopt;
    }
    std::string record = buffer_.substr(start_ + 4, length);
    start_ += 4 + length;
    return ElementIterator::Result(
        MakeText(std::move(record), ElementOrigin::Kind::kStreamRecord));
  }

  std::shared_ptr<ByteStream> stream_;
  Framing framing_;
  StreamSourceOptions options_;
  std::shared_ptr<const std::string> source_;
  std::string buffer_;
  size_t start_ = 0;
  bool ended_ = false;
  int64_t count_ = 0;  // lines or records framed
  absl::Status failure_;
};

class StreamIterator : public ElementIterator {
 public:
  explicit StreamIterator(StreamFramer framer) : framer_(std::move(framer)) {}
  std::optional<Result> TryNext() override { return framer_.TryNext(); }
  asio::awaitable<Result> Next() override { co_return co_await framer_.Next(); }

 protected:
  StreamFramer framer_;
};

// ReadLines' iterator is also a LineSource; ReadRecords' is not (a record
// is not split at newlines).
class StreamLineIterator : public StreamIterator, public detail::LineSource {
 public:
  using StreamIterator::StreamIterator;
  absl::StatusOr<Progress> TryNextLine(Line& line) override {
    return framer_.TryNextLine(line);
  }
  asio::awaitable<absl::Status> WaitForLines() override {
    co_return co_await framer_.Read();
  }
  ElementOrigin OriginOf(int64_t index) const override {
    return framer_.OriginOf(index);
  }
};

class StreamDataset : public DatasetNode {
 public:
  StreamDataset(std::shared_ptr<ByteStream> stream, Framing framing,
                StreamSourceOptions options)
      : stream_(std::move(stream)),
        framing_(framing),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    if (taken_.exchange(true)) {
      return absl::FailedPreconditionError(
          absl::StrCat(DebugString(),
                       ": a stream is read once; it has an iterator "
                       "already (a Repeat or a second iterator)"));
    }
    StreamFramer framer(stream_, framing_, options_);
    if (framing_ == Framing::kLines) {
      return std::make_unique<StreamLineIterator>(std::move(framer));
    }
    return std::make_unique<StreamIterator>(std::move(framer));
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::String()};
  }
  bool deterministic() const override { return false; }
  std::string DebugString() const override {
    return absl::StrCat(
        framing_ == Framing::kLines ? "ReadLines(" : "ReadRecords(",
        options_.name, ")");
  }

 private:
  std::shared_ptr<ByteStream> stream_;
  Framing framing_;
  StreamSourceOptions options_;
  mutable std::atomic<bool> taken_{false};
};

// ReadLines' node: its iterators are LineSources.
class StreamLinesDataset : public StreamDataset, public detail::LineSourceNode {
 public:
  using StreamDataset::StreamDataset;
};

absl::Status CheckOptions(const StreamSourceOptions& options) {
  if (options.read_bytes < 1 || options.max_line_bytes < 1 ||
      options.max_record_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name,
                     ": read_bytes and max_line_bytes must be >= 1 and "
                     "max_record_bytes >= 0, got ",
                     options.read_bytes, ", ", options.max_line_bytes, " and ",
                     options.max_record_bytes));
  }
  return absl::OkStatus();
}

Dataset MakeStreamDataset(std::shared_ptr<ByteStream> stream, Framing framing,
                          StreamSourceOptions options) {
  if (stream == nullptr) {
    return Dataset::Failed(absl::InvalidArgumentError(
        absl::StrCat(options.name, ": the stream is null")));
  }
  if (absl::Status s = CheckOptions(options); !s.ok()) {
    return Dataset::Failed(s);
  }
  if (framing == Framing::kLines) {
    return Dataset::FromNode(std::make_shared<StreamLinesDataset>(
        std::move(stream), framing, std::move(options)));
  }
  return Dataset::FromNode(std::make_shared<StreamDataset>(
      std::move(stream), framing, std::move(options)));
}

// TcpLines' iterator: connects on the first Next() (or WaitForLines),
// then frames lines.
class TcpLinesIterator : public ElementIterator, public detail::LineSource {
 public:
  TcpLinesIterator(std::string host, uint16_t port, StreamSourceOptions options,
                   asio::any_io_executor io)
      : host_(std::move(host)),
        port_(port),
        options_(std::move(options)),
        io_(std::move(io)) {}

  asio::awaitable<Result> Next() override {
    if (!framer_.has_value()) {
      if (!connect_failure_.ok()) co_return connect_failure_;
      absl::Status connected = co_await Connect();
      if (!connected.ok()) {
        if (!absl::IsCancelled(connected)) connect_failure_ = connected;
        co_return connected;
      }
    }
    co_return co_await framer_->Next();
  }
  std::optional<Result> TryNext() override {
    if (!framer_.has_value()) {
      if (!connect_failure_.ok()) return Result(connect_failure_);
      return std::nullopt;
    }
    return framer_->TryNext();
  }

  absl::StatusOr<Progress> TryNextLine(Line& line) override {
    if (!framer_.has_value()) {
      if (!connect_failure_.ok()) return connect_failure_;
      return Progress::kMustWait;
    }
    return framer_->TryNextLine(line);
  }
  asio::awaitable<absl::Status> WaitForLines() override {
    if (framer_.has_value()) co_return co_await framer_->Read();
    if (!connect_failure_.ok()) co_return connect_failure_;
    absl::Status connected = co_await Connect();
    if (!connected.ok() && !absl::IsCancelled(connected)) {
      connect_failure_ = connected;
    }
    co_return connected;
  }
  ElementOrigin OriginOf(int64_t index) const override {
    if (!framer_.has_value()) return {};
    return framer_->OriginOf(index);
  }

 private:
  asio::awaitable<absl::Status> Connect() {
    using asio::ip::tcp;
    tcp::resolver resolver(io_);
    auto [resolve_ec, endpoints] = co_await resolver.async_resolve(
        host_, std::to_string(port_), asio::as_tuple(asio::use_awaitable));
    if (resolve_ec) co_return ConnectError("resolve", resolve_ec);
    auto socket = std::make_shared<tcp::socket>(io_);
    auto [connect_ec, endpoint] = co_await asio::async_connect(
        *socket, endpoints, asio::as_tuple(asio::use_awaitable));
    if (connect_ec) co_return ConnectError("connect", connect_ec);
    framer_.emplace(std::make_shared<AsioByteStream<tcp::socket>>(
                        std::move(socket), options_.name),
                    Framing::kLines, options_);
    co_return absl::OkStatus();
  }

  absl::Status ConnectError(const char* what,
                            const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) {
      return absl::CancelledError(
          absl::StrCat(options_.name, ": ", what, " was cancelled"));
    }
    return absl::UnavailableError(
        absl::StrCat(options_.name, ": ", what, ": ", ec.message()));
  }

  std::string host_;
  uint16_t port_;
  StreamSourceOptions options_;
  asio::any_io_executor io_;
  std::optional<StreamFramer> framer_;
  absl::Status connect_failure_;
};

class TcpLinesDataset : public DatasetNode, public detail::LineSourceNode {
 public:
  TcpLinesDataset(std::string host, uint16_t port, StreamSourceOptions options)
      : host_(std::move(host)), port_(port), options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    asio::any_io_executor io = context.io;
    if (!io) io = context.pool;
    return std::make_unique<TcpLinesIterator>(host_, port_, options_,
                                              std::move(io));
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{ComponentSpec::String()};
  }
  bool deterministic() const override { return false; }
  std::string DebugString() const override {
    return absl::StrCat("TcpLines(", host_, ":", port_, ")");
  }

 private:
  std::string host_;
  uint16_t port_;
  StreamSourceOptions options_;
};

}  // namespace

absl::Status StreamReadError(const boost::system::error_code& ec,
                             const std::string& name) {
  if (ec == asio::error::operation_aborted) {
    return absl::CancelledError(absl::StrCat(name, ": the read was cancelled"));
  }
  if (ec == asio::error::connection_reset) {
    return absl::UnavailableError(
        absl::StrCat(name, ": connection reset by peer"));
  }
  return absl::UnavailableError(absl::StrCat(name, ": read: ", ec.message()));
}

Dataset ReadLinesFrom(std::shared_ptr<ByteStream> stream,
                      StreamSourceOptions options) {
  return MakeStreamDataset(std::move(stream), Framing::kLines,
                           std::move(options));
}

Dataset ReadRecordsFrom(std::shared_ptr<ByteStream> stream,
                        StreamSourceOptions options) {
  return MakeStreamDataset(std::move(stream), Framing::kRecords,
                           std::move(options));
}

Dataset TcpLines(std::string host, uint16_t port, StreamSourceOptions options) {
  if (options.name == StreamSourceOptions{}.name) {
    options.name = absl::StrCat("tcp ", host, ":", port);
  }
  if (absl::Status s = CheckOptions(options); !s.ok())
    return Dataset::Failed(s);
  return Dataset::FromNode(std::make_shared<TcpLinesDataset>(
      std::move(host), port, std::move(options)));
}

}  // namespace cosession
