// cosession_serve's two halves together on loopback, as its main wires
// them (HttpServer carrying requests to ModelServer, batching on): clients
// that vanish while their requests wait in the batching queue have them
// cancelled and counted, and the others are answered; a new version is
// switched to while keep-alive clients keep sending, with no failed request.
// Ordering is by the gate op (TestWait) and by the server's own Prometheus
// metrics, never by sleeps; each test is bounded by CO_TEST's limit.
#include <gtest/gtest.h>

#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cosession/serving/http_server.h"
#include "cosession/serving/model_server.h"
#include "tests/co_test.h"
#include "tests/compact_json.h"
#include "tests/exported_model.h"
#include "tests/http_client.h"
#include "tests/scratch_dir.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::serving_end_to_end_test {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::ClientReply;
using testing::HttpCall;
using testing::HttpConnect;
using testing::HttpExchange;
using testing::ScratchDir;
using testing::TestEvents;
using testing::TestRuntime;
using Replies = asio::experimental::channel<void(boost::system::error_code,
                                                 absl::StatusOr<ClientReply>)>;
using Signal = asio::experimental::channel<void(boost::system::error_code)>;

constexpr char kPredict[] = "/v1/models/m:predict";
constexpr char kOneRow[] = R"({"instances": [[1, 0]]})";

// A ModelServer and the HttpServer in front of it, on the test's thread.
struct Served {
  std::shared_ptr<ModelServer> model;
  std::unique_ptr<HttpServer> http;

  uint16_t port() const { return http->port(); }
  asio::awaitable<void> Stop() {
    http->Stop();
    model->Stop();
    co_await http->Drained();
  }
};

asio::awaitable<std::optional<Served>> Serve(ModelServerOptions o) {
  auto model = co_await ModelServer::Start(o, TestRuntime());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) co_return std::nullopt;
  std::shared_ptr<ModelServer> m = *model;
  HttpHandler handler = [m](HttpRequest r) {
    return m->Handle(std::move(r.method), std::move(r.target),
                     std::move(r.body));
  };
  HttpServerOptions http_options;
  http_options.address = "127.0.0.1";
  http_options.port = 0;
  auto http = HttpServer::Listen(co_test::Io().get_executor(), http_options,
                                 std::move(handler));
  EXPECT_TRUE(http.ok()) << http.status();
  if (!http.ok()) co_return std::nullopt;
  (*http)->Start();
  co_return Served{m, *std::move(http)};
}

ModelServerOptions Options(const ScratchDir& dir) {
  ModelServerOptions o;
  o.model_name = "m";
  o.model_base_path = dir.path();
  o.file_system_poll_wait = std::chrono::milliseconds(0);  // PollNow only
  return o;
}

// The value of the sample `name{labels}` in Prometheus text, or -1.
int64_t Sample(const std::string& text, const std::string& sample) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, sample) || !absl::ConsumePrefix(&line, " "))
      continue;
    int64_t value = -1;
    if (absl::SimpleAtoi(line, &value)) return value;
  }
  return -1;
}

// Fetches the metrics over one kept-alive connection until `sample` reads
// `value`; the server runs on this thread, so each fetch lets it make
// progress.
asio::awaitable<std::string> UntilSample(uint16_t port, std::string sample,
                                         int64_t value) {
  absl::StatusOr<boost::beast::tcp_stream> stream = co_await HttpConnect(port);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) co_return "";
  for (;;) {
    absl::StatusOr<ClientReply> metrics = co_await HttpExchange(
        *stream, "GET", "/monitoring/prometheus/metrics", "");
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    if (!metrics.ok()) co_return "";
    if (Sample(metrics->body, sample) == value) co_return metrics->body;
    co_await asio::post(co_test::Io(), asio::use_awaitable);
  }
}

asio::awaitable<void> PredictInto(uint16_t port, Replies* replies) {
  absl::StatusOr<ClientReply> reply =
      co_await HttpCall(port, "POST", kPredict, kOneRow);
  replies->try_send(boost::system::error_code{}, std::move(reply));
}

constexpr char kQueueDepth[] =
    ":cosession:serving:batching_queue_depth{model_name=\"m\"}";
constexpr char kCancelled[] =
    ":cosession:serving:batching_cancelled_requests{model_name=\"m\"}";
constexpr char kDoubled[] =
    R"({"predictions":[{"classes":0,"doubled":[2.0,0.0]}]})";

CO_TEST(ServingEndToEnd, ClientsVanishingMidQueueAreCancelledAndOthersServed) {
  TestEvents events;
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, true));
  ModelServerOptions o = Options(dir);
  o.enable_batching = true;
  o.batching = {.max_batch_size = 1,
                .batch_timeout = std::chrono::microseconds(0),
                .max_enqueued_batches = 8,
                .num_batch_threads = 1};
  std::optional<Served> served = co_await Serve(o);
  CO_ASSERT_TRUE(served.has_value());
  const uint16_t port = served->port();
  // The first client's batch runs and is held at the gate.
  Replies replies(co_test::Io(), 4);
  asio::co_spawn(co_test::Io(), PredictInto(port, &replies), asio::detached);
  (void)co_await events.started.async_receive(asio::use_awaitable);
  {
    // Three more wait in the queue behind it, then their clients leave.
    std::vector<boost::beast::tcp_stream> leaving;
    const std::string request = absl::StrCat(
        "POST ", kPredict,
        " HTTP/1.1\r\nHost: a\r\nContent-Length: ", sizeof(kOneRow) - 1,
        "\r\n\r\n", kOneRow);
    for (int i = 0; i < 3; ++i) {
      auto stream = co_await HttpConnect(port);
      CO_ASSERT_OK(stream.status());
      co_await asio::async_write(stream->socket(), asio::buffer(request),
                                 asio::use_awaitable);
      leaving.push_back(*std::move(stream));
    }
    co_await UntilSample(port, kQueueDepth, 3);
  }  // their connections close here
  const std::string after = co_await UntilSample(port, kCancelled, 3);
  EXPECT_EQ(Sample(after, kQueueDepth), 0) << after;
  // The held request is answered once released; none of the cancelled ran.
  events.trigger.try_send(boost::system::error_code{});
  auto [ec, first] =
      co_await replies.async_receive(asio::as_tuple(asio::use_awaitable));
  CO_ASSERT_OK(first.status());
  EXPECT_EQ(first->status, 200u) << first->body;
  EXPECT_EQ(testing::CompactJson(first->body), kDoubled);
  // A later client is served as if nothing had happened.
  events.trigger.try_send(boost::system::error_code{});
  absl::StatusOr<ClientReply> later =
      co_await HttpCall(port, "POST", kPredict, kOneRow);
  CO_ASSERT_OK(later.status());
  EXPECT_EQ(later->status, 200u) << later->body;
  EXPECT_EQ(testing::CompactJson(later->body), kDoubled);
  CO_ASSERT_TRUE(events.started.try_receive(
      [](boost::system::error_code, std::string) {}));  // the later client's
  EXPECT_FALSE(events.started.try_receive([](boost::system::error_code,
                                             std::string) {
  })) << "a cancelled request's batch ran";
  co_await served->Stop();
  EXPECT_EQ(served->http->connections(), 0);
}

// Keep-alive predicts until `*switched`, then `after` more; every answer.
asio::awaitable<void> PredictUntilSwitched(uint16_t port, const bool* switched,
                                           int after, Signal* warm,
                                           std::vector<std::string>* answers,
                                           Signal* done) {
  auto stream = co_await HttpConnect(port);
  EXPECT_TRUE(stream.ok()) << stream.status();
  int left = after;
  while (stream.ok() && left > 0) {
    absl::StatusOr<ClientReply> reply =
        co_await HttpExchange(*stream, "POST", kPredict, kOneRow);
    if (!reply.ok()) {
      answers->push_back(std::string(reply.status().message()));
      break;
    }
    answers->push_back(
        absl::StrCat(reply->status, " ", testing::CompactJson(reply->body)));
    if (answers->size() == 1) warm->try_send(boost::system::error_code{});
    if (*switched) --left;
  }
  done->try_send(boost::system::error_code{});
}

CO_TEST(ServingEndToEnd, ANewVersionUnderKeepAliveLoadFailsNoRequest) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  ModelServerOptions o = Options(dir);
  o.enable_batching = true;
  o.batching = {.max_batch_size = 4,
                .batch_timeout = std::chrono::microseconds(100)};
  std::optional<Served> served = co_await Serve(o);
  CO_ASSERT_TRUE(served.has_value());
  const uint16_t port = served->port();
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 2, 3.0f, false));
  constexpr int kClients = 8;
  bool switched = false;
  std::vector<std::vector<std::string>> answers(kClients);
  Signal warm(co_test::Io(), kClients), done(co_test::Io(), kClients);
  for (int i = 0; i < kClients; ++i) {
    asio::co_spawn(
        co_test::Io(),
        PredictUntilSwitched(port, &switched, 5, &warm, &answers[i], &done),
        asio::detached);
  }
  for (int i = 0; i < kClients; ++i) {
    co_await warm.async_receive(asio::use_awaitable);
  }
  co_await served->model->PollNow();  // while every client keeps sending
  switched = true;
  EXPECT_EQ(served->model->serving_version(), 2);
  for (int i = 0; i < kClients; ++i) {
    co_await done.async_receive(asio::use_awaitable);
  }
  const std::string v1 = absl::StrCat("200 ", kDoubled);
  const std::string v2 =
      R"(200 {"predictions":[{"classes":0,"doubled":[3.0,0.0]}]})";
  for (const auto& client : answers) {
    CO_ASSERT_TRUE(client.size() >= 5);
    EXPECT_EQ(client.front(), v1);
    EXPECT_EQ(client.back(), v2);
    for (const std::string& a : client) {
      EXPECT_TRUE(a == v1 || a == v2) << a;
    }
  }
  // Version 1 finished its last request: unloaded (its END is posted).
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  absl::StatusOr<ClientReply> status =
      co_await HttpCall(port, "GET", "/v1/models/m", "");
  CO_ASSERT_OK(status.status());
  boost::system::error_code parse_ec;
  const json::value parsed = json::parse(status->body, parse_ec);
  EXPECT_FALSE(parse_ec) << status->body;
  CO_ASSERT_TRUE(!parse_ec && parsed.is_object());
  const json::value& states = parsed.at("model_version_status");
  EXPECT_EQ(states.as_array().size(), 2u) << status->body;
  CO_ASSERT_TRUE(states.as_array().size() == 2);
  EXPECT_EQ(states.at(0).at("version"), "2");
  EXPECT_EQ(states.at(0).at("state"), "AVAILABLE");
  EXPECT_EQ(states.at(1).at("version"), "1");
  EXPECT_EQ(states.at(1).at("state"), "END");
  co_await served->Stop();
}

}  // namespace
}  // namespace cosession::serving_end_to_end_test
