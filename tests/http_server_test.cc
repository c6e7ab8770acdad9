// HttpServer on loopback, with handlers the tests control: keep-alive, HEAD
// answers without content, the body limit (413), gzip bodies,
// `Expect: 100-continue`, headers trickling in too slowly, idle
// connections, the connection bound (503), a client leaving mid-request
// (its handler is cancelled), and Stop draining the request in flight. Waits
// are on channels and on the server closing connections, never sleeps; each
// test is bounded by CO_TEST's limit.
#include "cosession/serving/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/co_test.h"
#include "tests/http_client.h"
#include "tests/test_files.h"

namespace cosession::http_server_test {
namespace {

namespace asio = boost::asio;
using testing::ClientReply;
using testing::HttpCall;
using testing::HttpConnect;
using testing::HttpExchange;
using Signal = asio::experimental::channel<void(boost::system::error_code)>;

HttpHandler Echo() {
  return [](HttpRequest r) -> asio::awaitable<HttpReply> {
    HttpReply reply;
    reply.body = absl::StrCat(r.method, " ", r.target, " ", r.body.size());
    co_return reply;
  };
}

// Answers with the body it was given.
HttpHandler Mirror() {
  return [](HttpRequest r) -> asio::awaitable<HttpReply> {
    HttpReply reply;
    reply.body = std::move(r.body);
    co_return reply;
  };
}

std::unique_ptr<HttpServer> Listening(HttpServerOptions o, HttpHandler h) {
  o.address = "127.0.0.1";
  o.port = 0;
  auto server =
      HttpServer::Listen(co_test::Io().get_executor(), o, std::move(h));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  (*server)->Start();
  return *std::move(server);
}

// Reads until the server closes the connection; what it sent.
asio::awaitable<std::string> ReadUntilClosed(boost::beast::tcp_stream& stream) {
  std::string got;
  char buffer[4096];
  for (;;) {
    auto [ec, n] = co_await stream.socket().async_read_some(
        asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
    got.append(buffer, n);
    if (ec) co_return got;
  }
}

CO_TEST(HttpServer, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = Listening({}, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  for (int i = 0; i < 3; ++i) {
    auto reply = co_await HttpExchange(*stream, "POST", "/v1/x", "abcd");
    CO_ASSERT_OK(reply.status());
    EXPECT_EQ(reply->status, 200u);
    EXPECT_EQ(reply->body, "POST /v1/x 4");
    EXPECT_TRUE(reply->keep_alive);
  }
  EXPECT_EQ(server->connections(), 1);
  server->Stop();
  co_await server->Drained();
}

// A reply that asks for it closes its connection after it is written, even
// when the client asked to keep it alive; other replies keep it.
CO_TEST(HttpServer, AReplyThatClosesItsConnectionClosesIt) {
  HttpHandler handler = [](HttpRequest r) -> asio::awaitable<HttpReply> {
    HttpReply reply;
    reply.body = r.target;
    reply.close_connection = r.target == "/close";
    co_return reply;
  };
  auto server = Listening({}, handler);
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  auto kept = co_await HttpExchange(*stream, "GET", "/keep", "");
  CO_ASSERT_OK(kept.status());
  EXPECT_TRUE(kept->keep_alive);
  const std::string request =
      "GET /close HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n";
  co_await asio::async_write(stream->socket(), asio::buffer(request),
                             asio::use_awaitable);
  const std::string answer = co_await ReadUntilClosed(*stream);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Connection: close")) << answer;
  EXPECT_TRUE(absl::EndsWith(answer, "/close")) << answer;
  server->Stop();
  co_await server->Drained();
}

// A HEAD request's answer is the header a GET would get (its
// Content-Length included) and no content (RFC 9110, 9.3.2): bytes after
// the header would be read as the start of the next answer on the same
// connection.
CO_TEST(HttpServer, AHeadAnswerHasNoContent) {
  auto server = Listening({}, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  const std::string requests =
      "HEAD /v1/a HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /v1/b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  co_await asio::async_write(stream->socket(), asio::buffer(requests),
                             asio::use_awaitable);
  const std::string answers = co_await ReadUntilClosed(*stream);
  // The HEAD's header says how long Echo's "HEAD /v1/a 0" would be; the
  // next bytes are the GET's answer.
  const size_t head_end = answers.find("\r\n\r\n");
  CO_ASSERT_TRUE(head_end != std::string::npos);
  const std::string head = answers.substr(0, head_end);
  EXPECT_TRUE(absl::StartsWith(head, "HTTP/1.1 200")) << answers;
  EXPECT_TRUE(absl::StrContains(head, "Content-Length: 12")) << answers;
  const std::string rest = answers.substr(head_end + 4);
  EXPECT_TRUE(absl::StartsWith(rest, "HTTP/1.1 200")) << answers;
  EXPECT_TRUE(absl::EndsWith(rest, "\r\n\r\nGET /v1/b 0")) << answers;
  server->Stop();
  co_await server->Drained();
}

CO_TEST(HttpServer, ABodyAboveTheLimitIs413) {
  HttpServerOptions o;
  o.max_body_bytes = 100;
  auto server = Listening(o, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto reply = co_await HttpCall(server->port(), "POST", "/v1/x",
                                 std::string(1000, 'x'));
  CO_ASSERT_OK(reply.status());
  EXPECT_EQ(reply->status, 413u);
  EXPECT_TRUE(absl::StrContains(reply->body, "larger than 100 bytes"));
  EXPECT_FALSE(reply->keep_alive);
  server->Stop();
  co_await server->Drained();
}

// As TensorFlow Serving: a client may gzip its body (Content-Encoding:
// gzip); the handler sees it uncompressed, and the connection stays usable.
CO_TEST(HttpServer, AGzipBodyReachesTheHandlerUncompressed) {
  auto server = Listening({}, Mirror());
  CO_ASSERT_TRUE(server != nullptr);
  std::string text = R"({"instances": [)";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, i, ", ");
  text += "0]}";
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  const std::vector<std::string> codings = {"gzip", "x-gzip", "GZip"};
  for (const std::string& coding : codings) {
    // (Named: g++ 12 mishandles a braced list inside a co_await.)
    testing::RequestHeaders headers{{"Content-Encoding", coding}};
    auto reply = co_await HttpExchange(*stream, "POST", "/v1/x",
                                       testing::GzipBytes(text), headers);
    CO_ASSERT_OK(reply.status());
    EXPECT_EQ(reply->status, 200u) << coding;
    EXPECT_EQ(reply->body, text) << coding;
    EXPECT_TRUE(reply->keep_alive) << coding;
  }
  server->Stop();
  co_await server->Drained();
}

// With an inflate_executor, a big gzip body is uncompressed there (off the
// event loop), with the same results: the body, and a damaged one's 400.
CO_TEST(HttpServer, ABigGzipBodyIsUncompressedOnTheInflateExecutor) {
  asio::io_context inflater;
  auto work = asio::make_work_guard(inflater);
  std::atomic<size_t> ran{0};
  std::thread inflating([&] { ran = inflater.run(); });
  HttpServerOptions o;
  o.inflate_executor = inflater.get_executor();
  o.inflate_inline_bytes = 16;
  auto server = Listening(o, Mirror());
  CO_ASSERT_TRUE(server != nullptr);
  const std::string text(5000, 'x');
  // (Named: g++ 12 mishandles a braced list inside a co_await.)
  const testing::RequestHeaders gzip{{"Content-Encoding", "gzip"}};
  auto reply = co_await HttpCall(server->port(), "POST", "/v1/x",
                                 testing::GzipBytes(text), gzip);
  CO_ASSERT_OK(reply.status());
  EXPECT_EQ(reply->status, 200u);
  EXPECT_EQ(reply->body, text);
  std::string damaged = testing::GzipBytes(text);
  damaged[damaged.size() - 6] ^= 0x55;  // the trailer's CRC-32
  auto corrupt =
      co_await HttpCall(server->port(), "POST", "/v1/x", damaged, gzip);
  CO_ASSERT_OK(corrupt.status());
  EXPECT_EQ(corrupt->status, 400u);
  server->Stop();
  co_await server->Drained();
  work.reset();
  inflating.join();
  EXPECT_GE(ran.load(), 2u);  // each request's inflation ran there
}

// A gzip body is bounded by what it inflates to, not by its own size; a
// body that is not gzip data, a damaged one, or another coding get clear
// errors instead of a JSON parser's.
CO_TEST(HttpServer, BadOrTooLargeGzipBodiesAreRefused) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  auto server = Listening(o, Mirror());
  CO_ASSERT_TRUE(server != nullptr);
  const uint16_t port = server->port();
  // (Named: g++ 12 mishandles a braced list inside a co_await.)
  const testing::RequestHeaders gzip{{"Content-Encoding", "gzip"}};
  const testing::RequestHeaders brotli_coding{{"Content-Encoding", "br"}};
  const std::string bomb = testing::GzipBytes(std::string(100000, ' '));
  CO_ASSERT_TRUE(bomb.size() < 1000);
  auto big = co_await HttpCall(port, "POST", "/v1/x", bomb, gzip);
  CO_ASSERT_OK(big.status());
  EXPECT_EQ(big->status, 413u);
  EXPECT_TRUE(absl::StrContains(big->body,
                                "larger than 1000 bytes once "
                                "uncompressed"))
      << big->body;
  EXPECT_FALSE(big->keep_alive);

  auto plain =
      co_await HttpCall(port, "POST", "/v1/x", R"({"inputs": 1})", gzip);
  CO_ASSERT_OK(plain.status());
  EXPECT_EQ(plain->status, 400u);
  EXPECT_TRUE(absl::StrContains(plain->body, "is not gzip data"))
      << plain->body;

  std::string damaged = testing::GzipBytes("{\"inputs\": [1, 2, 3]}");
  damaged[damaged.size() - 6] ^= 0x55;  // the trailer's CRC-32
  auto corrupt = co_await HttpCall(port, "POST", "/v1/x", damaged, gzip);
  CO_ASSERT_OK(corrupt.status());
  EXPECT_EQ(corrupt->status, 400u);
  EXPECT_TRUE(absl::StrContains(corrupt->body,
                                "the gzip request body: corrupt gzip data"))
      << corrupt->body;

  auto brotli = co_await HttpCall(port, "POST", "/v1/x", "abc", brotli_coding);
  CO_ASSERT_OK(brotli.status());
  EXPECT_EQ(brotli->status, 415u);
  EXPECT_TRUE(absl::StrContains(brotli->body, "Content-Encoding: br"))
      << brotli->body;
  server->Stop();
  co_await server->Drained();
}

// A client that sends `Expect: 100-continue` (curl does, for bodies over
// 1 MiB) waits for `100 Continue` before its body. Without it the client
// would wait here until the header timeout closed the connection.
CO_TEST(HttpServer, Expect100ContinueIsAnsweredBeforeTheBody) {
  auto server = Listening({}, Mirror());
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  const std::string head =
      "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
      "Expect: 100-continue\r\n\r\n";
  co_await asio::async_write(stream->socket(), asio::buffer(head),
                             asio::use_awaitable);
  std::string interim;
  auto [interim_ec, n] = co_await asio::async_read_until(
      stream->socket(), asio::dynamic_buffer(interim), "\r\n\r\n",
      asio::as_tuple(asio::use_awaitable));
  EXPECT_FALSE(interim_ec) << "no 100 Continue: " << interim_ec.message();
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  if (!interim_ec) {
    co_await asio::async_write(stream->socket(), asio::buffer("hello", 5),
                               asio::use_awaitable);
    boost::beast::flat_buffer buffer;
    boost::beast::http::response<boost::beast::http::string_body> res;
    auto [read_ec, m] = co_await boost::beast::http::async_read(
        *stream, buffer, res, asio::as_tuple(asio::use_awaitable));
    EXPECT_FALSE(read_ec) << read_ec.message();
    EXPECT_EQ(res.result_int(), 200u);
    EXPECT_EQ(res.body(), "hello");
  }

  // Any other expectation is refused, as libevent (TF Serving) does.
  const testing::RequestHeaders odd_expectation{{"Expect", "something-else"}};
  auto odd = co_await HttpCall(server->port(), "POST", "/v1/x", "abc",
                               odd_expectation);
  CO_ASSERT_OK(odd.status());
  EXPECT_EQ(odd->status, 417u);
  server->Stop();
  co_await server->Drained();
}

CO_TEST(HttpServer, AClientWhoseHeadersTrickleLosesItsConnection) {
  HttpServerOptions o;
  o.header_timeout = std::chrono::milliseconds(100);
  auto server = Listening(o, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  const std::string half = "GET /v1/x HTTP/1.1\r\nHost: a\r\n";
  co_await asio::async_write(stream->socket(), asio::buffer(half),
                             asio::use_awaitable);
  // The rest never comes: the server closes without an answer.
  std::string got = co_await ReadUntilClosed(*stream);
  EXPECT_EQ(got, "");
  server->Stop();
  co_await server->Drained();
}

CO_TEST(HttpServer, AnIdleKeptAliveConnectionIsClosed) {
  HttpServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(100);
  auto server = Listening(o, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto stream = co_await HttpConnect(server->port());
  CO_ASSERT_OK(stream.status());
  auto reply = co_await HttpExchange(*stream, "GET", "/v1/x", "");
  CO_ASSERT_OK(reply.status());
  EXPECT_TRUE(reply->keep_alive);
  std::string got = co_await ReadUntilClosed(*stream);
  EXPECT_EQ(got, "");
  EXPECT_EQ(server->connections(), 0);
  server->Stop();
  co_await server->Drained();
}

CO_TEST(HttpServer, OneConnectionAboveTheBoundIsAnswered503) {
  HttpServerOptions o;
  o.max_connections = 1;
  auto server = Listening(o, Echo());
  CO_ASSERT_TRUE(server != nullptr);
  auto first = co_await HttpConnect(server->port());
  CO_ASSERT_OK(first.status());
  auto ok = co_await HttpExchange(*first, "GET", "/v1/x", "");  // it counts
  CO_ASSERT_OK(ok.status());
  auto second = co_await HttpConnect(server->port());
  CO_ASSERT_OK(second.status());
  std::string got = co_await ReadUntilClosed(*second);
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 503")) << got;
  server->Stop();
  co_await server->Drained();
}

CO_TEST(HttpServer, AClientThatLeavesCancelsItsHandler) {
  Signal entered(co_test::Io(), 1), cancelled(co_test::Io(), 1);
  Signal never(co_test::Io(), 1);
  HttpHandler handler = [&](HttpRequest) -> asio::awaitable<HttpReply> {
    entered.try_send(boost::system::error_code{});
    auto [ec] =
        co_await never.async_receive(asio::as_tuple(asio::use_awaitable));
    if (ec) cancelled.try_send(boost::system::error_code{});
    HttpReply reply;
    co_return reply;
  };
  auto server = Listening({}, handler);
  CO_ASSERT_TRUE(server != nullptr);
  {
    auto stream = co_await HttpConnect(server->port());
    CO_ASSERT_OK(stream.status());
    const std::string request =
        "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}";
    co_await asio::async_write(stream->socket(), asio::buffer(request),
                               asio::use_awaitable);
    co_await entered.async_receive(asio::use_awaitable);
  }  // the client closes its connection here
  co_await cancelled.async_receive(asio::use_awaitable);
  server->Stop();
  co_await server->Drained();
  EXPECT_EQ(server->connections(), 0);
}

CO_TEST(HttpServer, StopAnswersTheRequestInFlightThenDrains) {
  Signal entered(co_test::Io(), 1), release(co_test::Io(), 1);
  HttpHandler handler = [&](HttpRequest) -> asio::awaitable<HttpReply> {
    entered.try_send(boost::system::error_code{});
    co_await release.async_receive(asio::use_awaitable);
    HttpReply reply;
    reply.body = "done";
    co_return reply;
  };
  auto server = Listening({}, handler);
  CO_ASSERT_TRUE(server != nullptr);
  const uint16_t port = server->port();
  auto busy = co_await HttpConnect(port);
  CO_ASSERT_OK(busy.status());
  auto idle = co_await HttpConnect(port);
  CO_ASSERT_OK(idle.status());
  const std::string request = "GET /v1/x HTTP/1.1\r\nHost: a\r\n\r\n";
  co_await asio::async_write(busy->socket(), asio::buffer(request),
                             asio::use_awaitable);
  co_await entered.async_receive(asio::use_awaitable);
  server->Stop();
  // The idle connection is closed at once, new ones are refused.
  const std::string idle_got = co_await ReadUntilClosed(*idle);
  EXPECT_EQ(idle_got, "");
  auto refused = co_await HttpConnect(port);
  EXPECT_FALSE(refused.ok());
  release.try_send(boost::system::error_code{});
  std::string answer = co_await ReadUntilClosed(*busy);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "Connection: close")) << answer;
  EXPECT_TRUE(absl::EndsWith(answer, "done")) << answer;
  co_await server->Drained();
  EXPECT_EQ(server->connections(), 0);
}

}  // namespace
}  // namespace cosession::http_server_test
