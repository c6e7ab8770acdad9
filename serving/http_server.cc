#include "cosession/serving/http_server.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <tuple>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/maybe_gzip_file.h"
#include "cosession/serving/rest_json.h"

namespace cosession {
namespace detail {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

struct Connection {
  explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
  bool idle = true;  // waiting for a request's first byte
};

// Reads what the client sends while its request is handled (a pipelined
// request stays in `buffer` for the next parse), and returns when the
// client closed or reset the connection. Past `limit` buffered bytes it
// stops reading and only waits to be cancelled.
asio::awaitable<void> WatchForClose(std::shared_ptr<Connection> c,
                                    beast::flat_buffer* buffer, size_t limit) {
  for (;;) {
    if (buffer->size() >= limit) {
      asio::steady_timer forever(c->stream.get_executor(),
                                 asio::steady_timer::time_point::max());
      (void)co_await forever.async_wait(asio::as_tuple(asio::use_awaitable));
      co_return;
    }
    // The socket itself: its reads honour per-operation cancellation.
    auto [ec, n] = co_await c->stream.socket().async_read_some(
        buffer->prepare(4096), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    buffer->commit(n);
  }
}

// A request body sent with Content-Encoding: gzip (or x-gzip), uncompressed,
// as TensorFlow Serving takes it. InvalidArgument when it is not gzip data or
// is damaged, ResourceExhausted when it would be larger than `max_bytes` (a
// small body may inflate a thousandfold).
absl::StatusOr<std::string> GunzipBody(absl::string_view body,
                                       size_t max_bytes) {
  if (body.size() < 2 || static_cast<unsigned char>(body[0]) != 0x1f ||
      static_cast<unsigned char>(body[1]) != 0x8b) {
    return absl::InvalidArgumentError(
        "the request says Content-Encoding: gzip, but its body is not gzip "
        "data");
  }
  MaybeGzipFile reader =
      MaybeGzipFile::OpenBytes("the gzip request body", body);
  std::string plain;
  for (;;) {
    const size_t had = plain.size();
    const size_t chunk = std::min<size_t>(size_t{1} << 16, max_bytes + 1 - had);
    plain.resize(had + chunk);
    absl::StatusOr<size_t> n = reader.Read(plain.data() + had, chunk);
    if (!n.ok()) return absl::InvalidArgumentError(n.status().message());
    plain.resize(had + *n);
    if (*n == 0) return plain;
    if (plain.size() > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "request body larger than ", max_bytes, " bytes once uncompressed"));
    }
  }
}

// GunzipBody on another executor (HttpServerOptions::inflate_executor); the
// body by value, as it outlives the caller's frame there.
asio::awaitable<absl::StatusOr<std::string>> GunzipBodyThere(std::string body,
                                                             size_t max_bytes) {
  co_return GunzipBody(body, max_bytes);
}

// A header field's value, for Abseil's string functions.
absl::string_view FieldText(beast::string_view value) {
  return absl::string_view(value.data(), value.size());
}

// What a Content-Encoding header asks of the body: nothing (absent or
// identity), gunzip, or a coding this server does not know.
enum class BodyCoding { kIdentity, kGzip, kUnknown };
BodyCoding CodingOf(absl::string_view content_encoding) {
  const absl::string_view coding = absl::StripAsciiWhitespace(content_encoding);
  if (coding.empty() || absl::EqualsIgnoreCase(coding, "identity")) {
    return BodyCoding::kIdentity;
  }
  if (absl::EqualsIgnoreCase(coding, "gzip") ||
      absl::EqualsIgnoreCase(coding, "x-gzip")) {
    return BodyCoding::kGzip;
  }
  return BodyCoding::kUnknown;
}

http::response<http::string_body> Response(unsigned status, unsigned version,
                                           HttpReply reply, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status),
                                        version};
  res.set(http::field::server, "cosession_serve");
  res.set(http::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) res.set(name, value);
  res.keep_alive(keep_alive);
  res.body() = std::move(reply.body);
  res.prepare_payload();
  return res;
}

}  // namespace

struct HttpServerState : std::enable_shared_from_this<HttpServerState> {
  HttpServerState(asio::any_io_executor ex, HttpServerOptions o, HttpHandler h,
                  tcp::acceptor a)
      : executor(ex),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor(std::move(a)),
        drained(ex, asio::steady_timer::time_point::max()) {}

  asio::awaitable<void> Accept();
  asio::awaitable<void> Serve(std::shared_ptr<Connection> c);
  asio::awaitable<void> WriteError(std::shared_ptr<Connection> c,
                                   unsigned status, std::string message);
  void Closed(const std::shared_ptr<Connection>& c);

  asio::any_io_executor executor;
  const HttpServerOptions options;
  const HttpHandler handler;
  tcp::acceptor acceptor;
  std::set<std::shared_ptr<Connection>> connections;
  bool stopping = false;
  asio::steady_timer drained;  // cancelled once stopped and empty
};

asio::awaitable<void> HttpServerState::WriteError(std::shared_ptr<Connection> c,
                                                  unsigned status,
                                                  std::string message) {
  HttpReply reply;
  reply.status = status;
  reply.body = RenderErrorBody(message);
  auto res = Response(status, 11, std::move(reply), /*keep_alive=*/false);
  c->stream.expires_after(options.header_timeout);
  (void)co_await http::async_write(c->stream, res,
                                   asio::as_tuple(asio::use_awaitable));
}

void HttpServerState::Closed(const std::shared_ptr<Connection>& c) {
  beast::error_code ignored;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  c->stream.close();
  connections.erase(c);
  if (stopping && connections.empty()) drained.cancel();
}

asio::awaitable<void> HttpServerState::Accept() {
  std::shared_ptr<HttpServerState> self = shared_from_this();
  asio::steady_timer backoff(executor);
  for (;;) {
    auto [ec, socket] =
        co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (stopping || ec == asio::error::operation_aborted) break;
    if (ec) {
      // Out of descriptors, or a connection reset before it was accepted:
      // try again shortly rather than spin.
      backoff.expires_after(std::chrono::milliseconds(10));
      (void)co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    auto c = std::make_shared<Connection>(std::move(socket));
    if (static_cast<int>(connections.size()) >= options.max_connections) {
      connections.insert(c);
      asio::co_spawn(
          executor, WriteError(c, 503, "too many connections; try again later"),
          [self, c](std::exception_ptr) { self->Closed(c); });
      continue;
    }
    connections.insert(c);
    asio::co_spawn(executor, Serve(c), [self, c](std::exception_ptr error) {
      if (error) std::fprintf(stderr, "cosession: a connection failed\n");
      self->Closed(c);
    });
  }
}

asio::awaitable<void> HttpServerState::Serve(std::shared_ptr<Connection> c) {
  std::shared_ptr<HttpServerState> self = shared_from_this();
  beast::flat_buffer buffer;
  bool first = true;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.body_limit(options.max_body_bytes);
    c->idle = buffer.size() == 0;
    c->stream.expires_after(first || buffer.size() > 0 ? options.header_timeout
                                                       : options.idle_timeout);
    auto [ec, n] = co_await http::async_read_header(
        c->stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    c->idle = false;
    if (ec == http::error::header_limit) {
      co_await WriteError(c, 431, "request headers too large");
      break;
    }
    if (ec == http::error::body_limit) {
      co_await WriteError(c, 413,
                          absl::StrCat("request body larger than ",
                                       options.max_body_bytes, " bytes"));
      break;
    }
    if (ec &&
        ec.category() ==
            http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      co_await WriteError(c, 400, absl::StrCat("bad request: ", ec.message()));
      break;
    }
    if (ec) break;  // closed, reset, or too slow
    // The body must follow within the same time as the headers.
    c->stream.expires_after(options.header_timeout);
    if (!parser.is_done() && parser.get().version() >= 11) {
      // A client that sent `Expect: 100-continue` waits for a go-ahead
      // before its body (curl does for bodies over 1 MiB), unless some of
      // the body came already. Other expectations are refused with 417, as
      // TensorFlow Serving's HTTP server (libevent) does.
      const absl::string_view expect =
          FieldText(parser.get()[http::field::expect]);
      if (!expect.empty()) {
        if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(expect),
                                    "100-continue")) {
          co_await WriteError(c, 417,
                              absl::StrCat("unsupported Expect: ", expect));
          break;
        }
        if (buffer.size() == 0) {
          http::response<http::empty_body> go_ahead{http::status::continue_,
                                                    11};
          auto [continue_ec, w] = co_await http::async_write(
              c->stream, go_ahead, asio::as_tuple(asio::use_awaitable));
          if (continue_ec) break;
        }
      }
    }
    if (!parser.is_done()) {
      auto [body_ec, m] = co_await http::async_read(
          c->stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
      if (body_ec == http::error::body_limit) {
        co_await WriteError(c, 413,
                            absl::StrCat("request body larger than ",
                                         options.max_body_bytes, " bytes"));
        break;
      }
      if (body_ec) break;
    }
    c->stream.expires_never();
    http::request<http::string_body> req = parser.release();
    std::string body = std::move(req.body());
    switch (CodingOf(FieldText(req[http::field::content_encoding]))) {
      case BodyCoding::kIdentity:
        break;
      case BodyCoding::kGzip: {
        // (An if, not a conditional around the co_await: g++ 12 mishandles
        // temporaries there.)
        absl::StatusOr<std::string> plain;
        if (options.inflate_executor &&
            body.size() >= options.inflate_inline_bytes) {
          plain = co_await asio::co_spawn(
              options.inflate_executor,
              GunzipBodyThere(std::move(body), options.max_body_bytes),
              asio::use_awaitable);
        } else {
          plain = GunzipBody(body, options.max_body_bytes);
        }
        if (!plain.ok()) {
          co_await WriteError(
              c,
              plain.status().code() == absl::StatusCode::kResourceExhausted
                  ? 413
                  : 400,
              std::string(plain.status().message()));
          co_return;
        }
        body = *std::move(plain);
        break;
      }
      case BodyCoding::kUnknown:
        co_await WriteError(
            c, 415,
            absl::StrCat("unsupported Content-Encoding: ",
                         FieldText(req[http::field::content_encoding]),
                         " (gzip and identity are)"));
        co_return;
    }
    HttpRequest request{.method = std::string(req.method_string()),
                        .target = std::string(req.target()),
                        .body = std::move(body),
                        .origin = std::string(req[http::field::origin])};
    asio::awaitable<HttpReply> handling = handler(std::move(request));
    asio::awaitable<void> watching =
        WatchForClose(c, &buffer, options.max_header_bytes);
    std::variant<HttpReply, std::monostate> done =
        co_await (std::move(handling) || std::move(watching));
    if (done.index() == 1) break;  // the client left; its handler was cancelled
    HttpReply reply = std::get<0>(std::move(done));
    const unsigned status = reply.status;
    const bool keep_alive =
        req.keep_alive() && !stopping && !reply.close_connection;
    auto res = Response(status, req.version(), std::move(reply), keep_alive);
    // A client that does not read its answer loses the connection too.
    c->stream.expires_after(options.idle_timeout);
    http::response_serializer<http::string_body> serializer(res);
    // A HEAD's answer is the header alone (RFC 9110, 9.3.2), its
    // Content-Length that of the content a GET would get: content after it
    // would be read as the next answer on this connection.
    boost::system::error_code write_ec;
    if (req.method() == http::verb::head) {
      std::tie(write_ec, std::ignore) = co_await http::async_write_header(
          c->stream, serializer, asio::as_tuple(asio::use_awaitable));
    } else {
      std::tie(write_ec, std::ignore) = co_await http::async_write(
          c->stream, serializer, asio::as_tuple(asio::use_awaitable));
    }
    if (write_ec || !res.keep_alive()) break;
    first = false;
  }
}

}  // namespace detail

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Listen(
    boost::asio::any_io_executor executor, HttpServerOptions options,
    HttpHandler handler) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", options.address, "' is not an IP address"));
  }
  const tcp::endpoint endpoint(address, options.port);
  tcp::acceptor acceptor(executor);
  auto failed = [&](const char* what) {
    return absl::Status(absl::ErrnoToStatus(ec.value(), "").code(),
                        absl::StrCat("cannot ", what, " ", options.address, ":",
                                     options.port, ": ", ec.message()));
  };
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return failed("open a socket for");
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return failed("configure");
  acceptor.bind(endpoint, ec);
  if (ec) return failed("bind to");
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return failed("listen on");
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::make_shared<detail::HttpServerState>(
          executor, std::move(options), std::move(handler),
          std::move(acceptor))));
}

HttpServer::HttpServer(std::shared_ptr<detail::HttpServerState> state)
    : state_(std::move(state)) {}

HttpServer::~HttpServer() = default;

uint16_t HttpServer::port() const {
  boost::system::error_code ec;
  return state_->acceptor.local_endpoint(ec).port();
}

void HttpServer::Start() {
  boost::asio::co_spawn(
      state_->executor, state_->Accept(), [](std::exception_ptr error) {
        if (error) {
          std::fprintf(stderr, "cosession: the accept loop failed\n");
        }
      });
}

void HttpServer::Stop() {
  detail::HttpServerState& s = *state_;
  s.stopping = true;
  boost::system::error_code ignored;
  s.acceptor.close(ignored);
  for (const auto& c : s.connections) {
    if (c->idle) c->stream.socket().cancel(ignored);
  }
  if (s.connections.empty()) s.drained.cancel();
}

boost::asio::awaitable<void> HttpServer::Drained() {
  std::shared_ptr<detail::HttpServerState> s = state_;
  if (s->stopping && s->connections.empty()) co_return;
  (void)co_await s->drained.async_wait(
      boost::asio::as_tuple(boost::asio::use_awaitable));
}

int HttpServer::connections() const {
  return static_cast<int>(state_->connections.size());
}

}  // namespace cosession
