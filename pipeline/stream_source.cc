#include "cosession/pipeline/stream_source.h"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/runtime.h"

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

  asio::awaitable<ElementIterator::Result> Next() {
    if (!failure_.ok()) co_return failure_;
    while (true) {
      std::optional<ElementIterator::Result> framed =
          framing_ == Framing::kLines ? FrameLine() : FrameRecord();
      if (framed.has_value()) {
        if (!framed->ok()) failure_ = framed->status();
        co_return *std::move(framed);
      }
      if (ended_) co_return std::optional<Element>();
      absl::Status read = co_await Read();
      if (!read.ok()) {
        failure_ = read;
        co_return read;
      }
    }
  }

 private:
  asio::awaitable<absl::Status> Read() {
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

  // A line from the buffer; nullopt when more bytes are needed.
  std::optional<ElementIterator::Result> FrameLine() {
    const size_t newline = buffer_.find('\n', start_);
    if (newline == std::string::npos) {
      const size_t pending = buffer_.size() - start_;
      if (pending > static_cast<size_t>(options_.max_line_bytes)) {
        return ElementIterator::Result(absl::InvalidArgumentError(
            absl::StrCat(options_.name, ": line ", count_ + 1, " longer than ",
                         options_.max_line_bytes, " bytes")));
      }
      if (!ended_ || pending == 0) return std::nullopt;
      std::string last = buffer_.substr(start_);
      start_ = buffer_.size();
      if (!last.empty() && last.back() == '\r') last.pop_back();
      return ElementIterator::Result(
          MakeText(std::move(last), ElementOrigin::Kind::kStreamLine));
    }
    size_t end = newline;
    if (end > start_ && buffer_[end - 1] == '\r') --end;
    if (end - start_ > static_cast<size_t>(options_.max_line_bytes)) {
      return ElementIterator::Result(absl::InvalidArgumentError(
          absl::StrCat(options_.name, ": line ", count_ + 1, " longer than ",
                       options_.max_line_bytes, " bytes")));
    }
    std::string line = buffer_.substr(start_, end - start_);
    start_ = newline + 1;
    return ElementIterator::Result(
        MakeText(std::move(line), ElementOrigin::Kind::kStreamLine));
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
  asio::awaitable<Result> Next() override { co_return co_await framer_.Next(); }

 private:
  StreamFramer framer_;
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
    return std::make_unique<StreamIterator>(
        StreamFramer(stream_, framing_, options_));
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
  return Dataset::FromNode(std::make_shared<StreamDataset>(
      std::move(stream), framing, std::move(options)));
}

// TcpLines' iterator: connects on the first Next(), then frames lines.
class TcpLinesIterator : public ElementIterator {
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

class TcpLinesDataset : public DatasetNode {
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
