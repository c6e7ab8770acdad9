// A small HTTP/1.1 client for the serving tests (Boost.Beast, coroutines on
// the caller's executor): what curl or a TensorFlow Serving client sends.
#ifndef COSESSION_TESTS_HTTP_CLIENT_H_
#define COSESSION_TESTS_HTTP_CLIENT_H_

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace cosession::testing {

struct ClientReply {
  unsigned status = 0;
  std::string content_type{};
  std::string body{};
  bool keep_alive = false;
  std::map<std::string, std::string> headers{};  // every field, by name
};

using RequestHeaders = std::vector<std::pair<std::string, std::string>>;

// A connection to 127.0.0.1:port.
inline boost::asio::awaitable<absl::StatusOr<boost::beast::tcp_stream>>
HttpConnect(uint16_t port) {
  namespace asio = boost::asio;
  boost::beast::tcp_stream stream(co_await asio::this_coro::executor);
  const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"),
                                       port);
  auto [ec] = co_await stream.async_connect(
      server, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return absl::UnavailableError(ec.message());
  co_return std::move(stream);
}

// One request on `stream`, and its reply.
inline boost::asio::awaitable<absl::StatusOr<ClientReply>> HttpExchange(
    boost::beast::tcp_stream& stream, std::string method, std::string target,
    std::string body, RequestHeaders headers = {}) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  http::request<http::string_body> req{http::string_to_verb(method), target,
                                       11};
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = std::move(body);
  req.prepare_payload();
  auto [write_ec, written] = co_await http::async_write(
      stream, req, asio::as_tuple(asio::use_awaitable));
  if (write_ec) co_return absl::UnavailableError(write_ec.message());
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  auto [read_ec, read] = co_await http::async_read(
      stream, buffer, res, asio::as_tuple(asio::use_awaitable));
  if (read_ec) co_return absl::UnavailableError(read_ec.message());
  ClientReply reply;
  reply.status = res.result_int();
  reply.content_type = std::string(res[http::field::content_type]);
  reply.body = std::move(res.body());
  reply.keep_alive = res.keep_alive();
  for (const auto& field : res) {
    reply.headers[std::string(field.name_string())] =
        std::string(field.value());
  }
  co_return reply;
}

// One request on a new connection.
inline boost::asio::awaitable<absl::StatusOr<ClientReply>> HttpCall(
    uint16_t port, std::string method, std::string target, std::string body,
    RequestHeaders headers = {}) {
  absl::StatusOr<boost::beast::tcp_stream> stream = co_await HttpConnect(port);
  if (!stream.ok()) co_return stream.status();
  co_return co_await HttpExchange(*stream, std::move(method), std::move(target),
                                  std::move(body), std::move(headers));
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_HTTP_CLIENT_H_
