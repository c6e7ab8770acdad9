// HttpServer: HTTP/1.1 with Boost.Beast on one executor, a coroutine per
// connection, in front of an asynchronous handler (cosession_serve puts a
// ModelServer behind it).
//
//   auto server = HttpServer::Listen(io.get_executor(), {.port = 8501},
//                                    handler);   // handler:
//                                    awaitable<HttpReply>
//   (*server)->Start();
//   ...
//   (*server)->Stop();      // then co_await (*server)->Drained(...)
//
// What a client meets:
//   * keep-alive (HTTP/1.1's default; `Connection: close` honoured);
//   * a HEAD request is answered with the header alone, its
//     Content-Length that of what the handler answered (RFC 9110, 9.3.2);
//   * a request's headers and body must arrive within header_timeout, and
//     a kept-alive connection may stay idle for idle_timeout: a client
//     that is slower loses its connection;
//   * headers above max_header_bytes: 431; a body above max_body_bytes:
//     413 (both then close); a request Beast cannot parse: 400 and close;
//   * `Expect: 100-continue` (HTTP/1.1) is answered `100 Continue` before
//     the body is read; any other Expect is 417 and close;
//   * a body with `Content-Encoding: gzip` (or x-gzip) reaches the handler
//     uncompressed, as TensorFlow Serving takes it: a body that is not gzip
//     data or is damaged is 400, one that inflates past max_body_bytes is
//     413, another coding 415 (each then closes);
//   * at most max_connections at once: one more is answered 503 and
//     closed;
//   * a client that closes its connection while its request is handled
//     cancels the handler (per-operation cancellation, terminal): a
//     queued prediction is dropped, nothing waits for nobody.
// Stop() closes the listening socket and the idle connections; requests
// being handled finish and are answered (with `Connection: close`).
// Drained() completes once no connection is left.
//
// Thread safety: Start, Stop and Drained must be called on the executor
// given to Listen; the handler runs there too.
#ifndef COSESSION_SERVING_HTTP_SERVER_H_
#define COSESSION_SERVING_HTTP_SERVER_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cosession/serving/model_server.h"

namespace cosession {

struct HttpRequest {
  std::string method{};  // "GET", "POST", ...
  std::string target{};  // path and query, as sent
  std::string body{};
  std::string origin{};  // the Origin header ("" without one): for CORS
};

using HttpHandler =
    std::function<boost::asio::awaitable<HttpReply>(HttpRequest)>;

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  // 0 = any free port (see port()).
  uint16_t port = 8501;
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = 64 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};
  int max_connections = 1024;
  // Where a gzip body of inflate_inline_bytes or more is uncompressed, so
  // that the event loop goes on serving the other connections meanwhile (a
  // body may inflate to max_body_bytes); empty = on the connection's own
  // executor. cosession_serve gives the runtime's pool.
  boost::asio::any_io_executor inflate_executor{};
  size_t inflate_inline_bytes = 64 * 1024;
};

namespace detail {
struct HttpServerState;
}  // namespace detail

class HttpServer {
 public:
  // Binds and listens. InvalidArgument for a bad address; the bind's error
  // (e.g. "address already in use") naming the address and port.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Listen(
      boost::asio::any_io_executor executor, HttpServerOptions options,
      HttpHandler handler);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();

  uint16_t port() const;
  void Start();
  void Stop();
  // Completes when Stop was called and every connection closed.
  boost::asio::awaitable<void> Drained();
  int connections() const;

 private:
  explicit HttpServer(std::shared_ptr<detail::HttpServerState> state);
  std::shared_ptr<detail::HttpServerState> state_;
};

}  // namespace cosession

#endif  // COSESSION_SERVING_HTTP_SERVER_H_
