// Stream sources: a dataset read from any Asio AsyncReadStream -- a
// tcp::socket, a pipe's stream_descriptor, an ssl::stream -- as lines or as
// length-prefixed records, and TcpLines, which connects first.
//
//   auto socket = std::make_shared<tcp::socket>(std::move(accepted));
//   Dataset rows = ReadLines(socket, {.name = "tcp 10.0.0.7:5000"})
//                      .Map(ParseCsvRow({.num_columns = 65}))
//                      .Batch(32)
//                      .Prefetch(2);
//
// Elements have one string component: a line (without its '\n' and a '\r'
// before it) or a record's bytes. A record is a 4-byte little-endian
// length followed by that many bytes. Origins are "<name>: line <n>" and
// "<name>: record <n>", numbered from 1.
//
// The stream completes at the stream's end (EOF): a last line without
// '\n' counts; a record cut short is DataLoss ("<name>: record 12
// truncated: got 3 of 8 bytes"). A peer reset is Unavailable naming the
// source; any other read error is Unavailable with the stream's message.
// Nothing grows without bound: a line longer than max_line_bytes, or a
// record length above max_record_bytes, is InvalidArgument naming the line
// or record. A read in flight is cancelled with the Next() awaiting it
// (Cancelled); the stream is then in an unspecified state (as Asio's).
//
// A stream is read once: the dataset has one iterator (a second
// MakeIterator, e.g. a Repeat, is FailedPrecondition), and it is not
// deterministic (no exact resume: what was read is gone).
//
// Thread safety: the stream is used only by the iterator's Next(), one
// read at a time; the caller must not use it meanwhile. The stream may
// belong to any executor: its completions resume the awaiting coroutine on
// that coroutine's own executor.
#ifndef COSESSION_PIPELINE_STREAM_SOURCE_H_
#define COSESSION_PIPELINE_STREAM_SOURCE_H_

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

struct StreamSourceOptions {
  // Names the source in origins and messages ("tcp 10.0.0.7:5000").
  std::string name = "stream";
  // Bytes asked for per read.
  int64_t read_bytes = 1 << 16;
  int64_t max_line_bytes = 1 << 20;
  int64_t max_record_bytes = 64 << 20;
};

// Reads bytes: the type-erased side of a stream.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `size` bytes into `data`; 0 at the end of the stream; errors as
  // the file comment says.
  virtual boost::asio::awaitable<absl::StatusOr<size_t>> ReadSome(
      char* data, size_t size) = 0;
};

// A stream's read errors, as statuses naming `name`.
absl::Status StreamReadError(const boost::system::error_code& ec,
                             const std::string& name);

template <typename AsyncReadStream>
class AsioByteStream : public ByteStream {
 public:
  AsioByteStream(std::shared_ptr<AsyncReadStream> stream, std::string name)
      : stream_(std::move(stream)), name_(std::move(name)) {}
  boost::asio::awaitable<absl::StatusOr<size_t>> ReadSome(
      char* data, size_t size) override {
    auto [ec, n] = co_await stream_->async_read_some(
        boost::asio::buffer(data, size),
        boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec == boost::asio::error::eof) co_return size_t{0};
    if (ec) co_return StreamReadError(ec, name_);
    co_return n;
  }

 private:
  std::shared_ptr<AsyncReadStream> stream_;
  std::string name_;
};

// The sources over a type-erased stream (see the file comment).
Dataset ReadLinesFrom(std::shared_ptr<ByteStream> stream,
                      StreamSourceOptions options);
Dataset ReadRecordsFrom(std::shared_ptr<ByteStream> stream,
                        StreamSourceOptions options);

template <typename AsyncReadStream>
Dataset ReadLines(std::shared_ptr<AsyncReadStream> stream,
                  StreamSourceOptions options = {}) {
  // The name is copied before `options` is moved (argument order is
  // unspecified).
  auto bytes = std::make_shared<AsioByteStream<AsyncReadStream>>(
      std::move(stream), options.name);
  return ReadLinesFrom(std::move(bytes), std::move(options));
}

template <typename AsyncReadStream>
Dataset ReadRecords(std::shared_ptr<AsyncReadStream> stream,
                    StreamSourceOptions options = {}) {
  // The name is copied before `options` is moved (argument order is
  // unspecified).
  auto bytes = std::make_shared<AsioByteStream<AsyncReadStream>>(
      std::move(stream), options.name);
  return ReadRecordsFrom(std::move(bytes), std::move(options));
}

// Connects to host:port (resolved, each address tried in turn) when the
// iterator first asks, then reads lines as ReadLines; the socket lives on
// IteratorContext::io (the program's event loop under
// StartDatasetIterator), else on the pool. options.name defaults to "tcp
// host:port". A failed connect is Unavailable naming host:port. A new iterator
// (a Repeat) connects again, so TcpLines may be repeated.
Dataset TcpLines(std::string host, uint16_t port,
                 StreamSourceOptions options = {});

}  // namespace cosession

#endif  // COSESSION_PIPELINE_STREAM_SOURCE_H_
