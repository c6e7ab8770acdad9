// ModelServer: TensorFlow Serving's REST API over exported models, without
// HTTP: status, metadata, both predict formats, the error codes its
// clients expect, a version switch under load, and the batching queue's
// 503 and the deadline's 504 (driven by a TestWait gate, not by sleeps).
#include "cosession/serving/model_server.h"

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"
#include "cosession/serving/model_server_config.h"
#include "tests/co_test.h"
#include "tests/compact_json.h"
#include "tests/exported_model.h"
#include "tests/scratch_dir.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::model_server_test {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::ScratchDir;
using testing::TestEvents;
using testing::TestRuntime;

ModelServerOptions Options(const ScratchDir& dir) {
  ModelServerOptions o;
  o.model_name = "m";
  o.model_base_path = dir.path();
  o.file_system_poll_wait = std::chrono::milliseconds(0);  // PollNow only
  return o;
}

asio::awaitable<std::shared_ptr<ModelServer>> Started(ModelServerOptions o) {
  auto server = co_await ModelServer::Start(o, TestRuntime());
  EXPECT_TRUE(server.ok()) << server.status();
  co_return server.ok() ? *server : nullptr;
}

json::value Parsed(const HttpReply& reply) {
  boost::system::error_code ec;
  json::value v = json::parse(reply.body, ec);
  EXPECT_FALSE(ec) << reply.body;
  return v;
}

CO_TEST(ModelServer, ServesStatusMetadataAndBothPredictFormats) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  auto server = co_await Started(Options(dir));
  CO_ASSERT_TRUE(server != nullptr);

  HttpReply status = co_await server->Handle("GET", "/v1/models/m", "");
  EXPECT_EQ(status.status, 200u);
  EXPECT_EQ(Parsed(status),
            json::parse(R"({"model_version_status": [{"version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""}}]})"));
  // Byte for byte as TensorFlow Serving's documentation shows it (protobuf's
  // JSON printer with add_whitespace).
  EXPECT_EQ(status.body,
            "{\n \"model_version_status\": [\n  {\n   \"version\": \"1\",\n"
            "   \"state\": \"AVAILABLE\",\n   \"status\": {\n"
            "    \"error_code\": \"OK\",\n    \"error_message\": \"\"\n   }\n"
            "  }\n ]\n}\n");
  HttpReply one = co_await server->Handle("GET", "/v1/models/m/versions/1", "");
  EXPECT_EQ(one.status, 200u);

  HttpReply metadata =
      co_await server->Handle("GET", "/v1/models/m/metadata", "");
  EXPECT_EQ(metadata.status, 200u);
  json::value meta = Parsed(metadata);
  EXPECT_EQ(meta.at("model_spec").at("version"), "1");
  // TensorFlow Serving joins two printed messages with these bytes.
  EXPECT_TRUE(absl::StartsWith(
      metadata.body,
      "{\n\"model_spec\":{\n \"name\": \"m\",\n \"signature_name\": \"\",\n"
      " \"version\": \"1\"\n}\n,\n\"metadata\": {\"signature_def\": {\n"
      " \"signature_def\": {\n  \"serving_default\": {\n"))
      << metadata.body;
  EXPECT_TRUE(absl::EndsWith(metadata.body, "\n}\n}\n}\n")) << metadata.body;
  const json::value& x = meta.at("metadata")
                             .at("signature_def")
                             .at("signature_def")
                             .at("serving_default")
                             .at("inputs")
                             .at("x");
  EXPECT_EQ(x.at("dtype"), "DT_FLOAT");
  EXPECT_EQ(x.at("tensor_shape").at("dim").at(0).at("size"), "-1");
  EXPECT_EQ(x.at("tensor_shape").at("dim").at(1).at("size"), "2");
  EXPECT_EQ(x.at("name"), "x:0");

  HttpReply rows = co_await server->Handle(
      "POST", "/v1/models/m:predict", R"({"instances": [[1, 2], [4, 3]]})");
  EXPECT_EQ(rows.status, 200u) << rows.body;
  EXPECT_EQ(testing::CompactJson(rows.body),
            R"({"predictions":[{"classes":1,"doubled":[2.0,4.0]},)"
            R"({"classes":0,"doubled":[8.0,6.0]}]})");
  HttpReply columns = co_await server->Handle(
      "POST", "/v1/models/m/versions/1:predict",
      R"({"signature_name": "serving_default", "inputs": [[1, 2]]})");
  EXPECT_EQ(columns.status, 200u) << columns.body;
  EXPECT_EQ(testing::CompactJson(columns.body),
            R"({"outputs":{"classes":[1],"doubled":[[2.0,4.0]]}})");
  server->Stop();
}

// :classify and :regress over the signatures of those methods, straight on
// the session and through the batching queue.
CO_TEST(ModelServer, ClassifyAndRegressAnswerFromTheirSignatures) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportEveryApiModel(dir.path(), 1, 2.0f));
  for (bool batching : {false, true}) {
    ModelServerOptions options = Options(dir);
    options.enable_batching = batching;
    options.batching.max_batch_size = 8;
    auto server = co_await Started(options);
    CO_ASSERT_TRUE(server != nullptr);
    HttpReply classified =
        co_await server->Handle("POST", "/v1/models/m:classify",
                                R"({"signature_name": "classification",
            "examples": [{"x": [1, 2]}, {"x": [0.5, -1]}]})");
    EXPECT_EQ(classified.status, 200u) << classified.body;
    EXPECT_EQ(Parsed(classified).at("results"),
              json::parse(R"([[["0", 2.0], ["1", 4.0]],
                              [["0", 1.0], ["1", -2.0]]])"))
        << classified.body;
    EXPECT_EQ(Parsed(classified).at("result"),
              Parsed(classified).at("results"));
    HttpReply regressed = co_await server->Handle(
        "POST", "/v1/models/m/versions/1:regress",
        R"({"signature_name": "regression", "context": {"x": [1, 2]},
            "examples": [{}, {}, {}]})");
    EXPECT_EQ(regressed.status, 200u) << regressed.body;
    EXPECT_EQ(Parsed(regressed).at("results"), json::parse("[6.0, 6.0, 6.0]"))
        << regressed.body;
    // A signature of another method, and a feature the model lacks.
    HttpReply wrong = co_await server->Handle(
        "POST", "/v1/models/m:regress",
        R"({"signature_name": "classification", "examples": [{"x": [1, 2]}]})");
    EXPECT_EQ(wrong.status, 400u) << wrong.body;
    HttpReply missing = co_await server->Handle(
        "POST", "/v1/models/m:classify",
        R"({"signature_name": "classification", "examples": [{"y": 1}]})");
    EXPECT_EQ(missing.status, 400u);
    EXPECT_TRUE(
        absl::StrContains(missing.body, "Feature: x (data type: float)"))
        << missing.body;
    HttpReply metrics =
        co_await server->Handle("GET", ModelServer::kPrometheusPath, "");
    EXPECT_TRUE(absl::StrContains(metrics.body,
                                  "request_latency_count{model_name=\"m\","
                                  "API=\"classify\",entrypoint=\"REST\"} 1"))
        << metrics.body;
    EXPECT_TRUE(absl::StrContains(metrics.body,
                                  "request_latency_count{model_name=\"m\","
                                  "API=\"regress\",entrypoint=\"REST\"} 1"))
        << metrics.body;
    if (batching) {
      // TensorFlow Serving's fixed buckets, 1 to 8192 by powers of two,
      // whatever sizes ran (here a batch of 2 and one of 3).
      const std::string bucket =
          ":tensorflow:serving:batching_session:processed_batch_size_bucket";
      for (const auto& [le, count] : std::vector<std::pair<std::string, int>>{
               {"1", 0}, {"2", 1}, {"4", 2}, {"8192", 2}, {"+Inf", 2}}) {
        EXPECT_TRUE(absl::StrContains(
            metrics.body,
            absl::StrCat(bucket, "{le=\"", le, "\"} ", count, "\n")))
            << le << "\n"
            << metrics.body;
      }
      EXPECT_FALSE(absl::StrContains(metrics.body, bucket + "{le=\"3\"}"));
    }
    HttpReply metadata =
        co_await server->Handle("GET", "/v1/models/m/metadata", "");
    EXPECT_EQ(Parsed(metadata)
                  .at("metadata")
                  .at("signature_def")
                  .at("signature_def")
                  .at("regression")
                  .at("method_name"),
              "tensorflow/serving/regress");
    server->Stop();
  }
}

CO_TEST(ModelServer, ErrorsAreTensorFlowServingsCodesAndMessages) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 3, 2.0f, false));
  auto server = co_await Started(Options(dir));
  CO_ASSERT_TRUE(server != nullptr);
  struct Case {
    std::string method, target, body;
    unsigned status;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/models/nope:predict", R"({"instances": [[1, 2]]})", 404,
       "Servable not found for request: Latest(nope)"},
      {"POST", "/v1/models/m/versions/9:predict", R"({"instances": [[1, 2]]})",
       404, "Servable not found for request: Specific(m, 9)"},
      // TF Serving parses the body before it looks the model up.
      {"POST", "/v1/models/nope:predict", "{\"instances\": [[1, 2]", 400,
       "JSON Parse error: Missing a comma or ']' after an array element. at "
       "offset: 21"},
      {"POST", "/v1/models/nope:predict", R"({"signature_name": 7})", 400,
       "'signature_name' key must be a string"},
      {"POST", "/v1/models/nope:classify", "{}", 400,
       "When method is classify, key 'examples' is expected"},
      {"POST", "/v1/models/nope:regress", R"({"examples": [{"x": 1}]})", 404,
       "Servable not found for request: Latest(nope)"},
      {"GET", "/v1/models/nope", "", 404,
       "Could not find any versions of model nope"},
      {"GET", "/v1/models/m/versions/9", "", 404,
       "Could not find version 9 of model m"},
      {"GET", "/v1/models/m/versions/9/metadata", "", 404,
       "Servable not found for request: Specific(m, 9)"},
      {"POST", "/v1/models/m:predict", "{\"instances\": [[1, 2]", 400,
       "JSON Parse error: Missing a comma or ']' after an array element. at "
       "offset: 21"},
      {"POST", "/v1/models/m:predict", "instances = [1, 2]", 400,
       "JSON Parse error: Invalid value. at offset: 0"},
      {"POST", "/v1/models/m:predict", R"({"instances": [[1, "a"]]})", 400,
       "is not of expected type: float"},
      {"POST", "/v1/models/m:predict", R"({"instances": [[1, 2, 3]]})", 400,
       "input 'x' has shape [1,3]"},
      {"POST", "/v1/models/m:predict",
       R"({"signature_name": "other", "instances": [[1, 2]]})", 400,
       "Serving signature name: \"other\" not found in signature def"},
      {"PUT", "/v1/models/m:predict", "", 400,
       "Malformed request: PUT /v1/models/m:predict"},
      {"POST", "/v1/models/m:explain", "", 400, "Malformed request"},
      {"GET", "/v1/models/m:predict", "", 400, "Malformed request"},
      {"GET", "/v1/models", "", 400, "Missing model name in request."},
      {"POST", "/v1/models/m/labels/stable:predict", "{}", 400,
       "Unrecognized servable version label: stable"},
      {"POST", "/v1/models/m:classify", "{}", 400,
       "When method is classify, key 'examples' is expected"},
      // serving_default is a predict signature: TF Serving's answer.
      {"POST", "/v1/models/m:classify", R"({"examples": [{"x": [1, 2]}]})", 400,
       "Expected classification signature method_name to be "
       "tensorflow/serving/classify. Was: tensorflow/serving/predict"},
      {"POST", "/v1/models/m:regress", R"({"examples": [{"x": [1, 2]}]})", 400,
       "Expected regression signature method_name"},
      {"POST", "/v1/models/m/versions/99999999999999999999:predict", "{}", 400,
       "Failed to convert version"},
  };
  // Paths outside /v1/: APathOutsideTheRestApiGetsLibeventsNotFoundPage.
  for (const Case& c : cases) {
    HttpReply reply = co_await server->Handle(c.method, c.target, c.body);
    EXPECT_EQ(reply.status, c.status) << c.method << " " << c.target;
    EXPECT_EQ(reply.content_type, "application/json");
    json::value body = Parsed(reply);
    CO_ASSERT_TRUE(body.is_object() && body.as_object().contains("error"));
    EXPECT_TRUE(absl::StrContains(std::string(body.at("error").as_string()),
                                  c.message_part))
        << c.method << " " << c.target << ": " << reply.body;
  }
  HttpReply metrics =
      co_await server->Handle("GET", ModelServer::kPrometheusPath, "");
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_TRUE(absl::StrContains(metrics.body,
                                ":tensorflow:serving:request_count{model_name="
                                "\"m\",status=\"NOT_FOUND\"}"))
      << metrics.body;
  EXPECT_TRUE(absl::StrContains(
      metrics.body, "# TYPE :tensorflow:serving:request_latency histogram"));
  server->Stop();
}

// `n` predictions, one after the other; the factor each answer shows.
asio::awaitable<void> PredictLoop(
    std::shared_ptr<ModelServer> server, int n,
    std::vector<std::string>* answers,
    asio::experimental::channel<void(boost::system::error_code)>* done) {
  for (int i = 0; i < n; ++i) {
    HttpReply reply = co_await server->Handle("POST", "/v1/models/m:predict",
                                              R"({"instances": [[1, 0]]})");
    answers->push_back(
        absl::StrCat(reply.status, " ", testing::CompactJson(reply.body)));
  }
  done->try_send(boost::system::error_code{});
}

CO_TEST(ModelServer, ANewVersionIsServedWithNoFailedRequestAndTheOldUnloaded) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  auto server = co_await Started(Options(dir));
  CO_ASSERT_TRUE(server != nullptr);
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 2, 3.0f, false));
  constexpr int kClients = 8;
  std::vector<std::vector<std::string>> answers(kClients);
  asio::experimental::channel<void(boost::system::error_code)> done(
      co_test::Io(), kClients);
  for (int i = 0; i < kClients; ++i) {
    asio::co_spawn(co_test::Io(), PredictLoop(server, 20, &answers[i], &done),
                   asio::detached);
  }
  co_await server->PollNow();  // while the clients' requests are in flight
  EXPECT_EQ(server->serving_version(), 2);
  for (int i = 0; i < kClients; ++i) {
    co_await done.async_receive(asio::use_awaitable);
  }
  int old_answers = 0;
  for (const auto& client : answers) {
    for (const std::string& a : client) {
      const bool v1 =
          a == R"(200 {"predictions":[{"classes":0,"doubled":[2.0,0.0]}]})";
      const bool v2 =
          a == R"(200 {"predictions":[{"classes":0,"doubled":[3.0,0.0]}]})";
      EXPECT_TRUE(v1 || v2) << a;
      old_answers += v1;
    }
  }
  EXPECT_GT(old_answers, 0);  // requests that started on version 1 ended on it
  HttpReply after = co_await server->Handle("POST", "/v1/models/m:predict",
                                            R"({"instances": [[1, 0]]})");
  EXPECT_EQ(testing::CompactJson(after.body),
            R"({"predictions":[{"classes":0,"doubled":[3.0,0.0]}]})");
  // Version 1 had no request left: unloaded (its END is posted).
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  HttpReply status = co_await server->Handle("GET", "/v1/models/m", "");
  json::value states = Parsed(status).at("model_version_status");
  CO_ASSERT_TRUE(states.as_array().size() == 2);
  EXPECT_EQ(states.at(0).at("version"), "2");
  EXPECT_EQ(states.at(0).at("state"), "AVAILABLE");
  EXPECT_EQ(states.at(1).at("version"), "1");
  EXPECT_EQ(states.at(1).at("state"), "END");
  server->Stop();
}

CO_TEST(ModelServer, AVersionThatFailsToLoadIsReportedAndTheOldKeepsServing) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  auto server = co_await Started(Options(dir));
  CO_ASSERT_TRUE(server != nullptr);
  std::filesystem::create_directories(dir / "5");  // no model.json
  co_await server->PollNow();
  EXPECT_EQ(server->serving_version(), 1);
  HttpReply status =
      co_await server->Handle("GET", "/v1/models/m/versions/5", "");
  json::value state = Parsed(status).at("model_version_status").at(0);
  EXPECT_EQ(state.at("state"), "END");
  EXPECT_EQ(state.at("status").at("error_code"), "NOT_FOUND");
  HttpReply still = co_await server->Handle("POST", "/v1/models/m:predict",
                                            R"({"instances": [[1, 0]]})");
  EXPECT_EQ(still.status, 200u);
  server->Stop();
}

CO_TEST(ModelServer, StartFailsNamingTheBasePathOrTheVersion) {
  ScratchDir dir;
  ModelServerOptions o = Options(dir);
  o.model_base_path = dir / "missing";
  auto missing = co_await ModelServer::Start(o, TestRuntime());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "missing"));
  auto empty = co_await ModelServer::Start(Options(dir), TestRuntime());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(
      empty.status().message(),
      "No versions of servable m found under base path " + dir.path()))
      << empty.status();
}

// Holds every thread of TestRuntime's pool until Open (or its end): what
// is queued on the pool after it waits until then.
class PoolGate {
 public:
  PoolGate() {
    std::shared_future<void> opened = open_.get_future().share();
    for (int i = 0; i < TestRuntime().num_threads(); ++i) {
      asio::post(TestRuntime().executor(), [opened] { opened.wait(); });
    }
  }
  ~PoolGate() { Open(); }
  void Open() {
    if (!std::exchange(opened_, true)) open_.set_value();
  }

 private:
  std::promise<void> open_;
  bool opened_ = false;
};

// A start cancelled while its version loads (a SIGTERM then: cosession_serve
// awaits Start || the signal) ends Cancelled and starts no poll, which
// would keep the event loop busy for a server nobody holds. The load is
// queued on the pool behind a gate that opens only once the cancellation
// was emitted, so the cancellation comes while the load waits (without the
// gate, the load could finish before the cancellation's handler ran).
CO_TEST(ModelServer, AStartCancelledWhileItLoadsEndsCancelled) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  ModelServerOptions o = Options(dir);
  o.file_system_poll_wait = std::chrono::hours(1);
  PoolGate gate;
  asio::cancellation_signal cancel;
  asio::experimental::channel<void(boost::system::error_code, absl::Status)>
      done(co_test::Io(), 1);
  asio::co_spawn(
      co_test::Io(), ModelServer::Start(o, TestRuntime()),
      asio::bind_cancellation_slot(
          cancel.slot(),
          [&done](std::exception_ptr error,
                  absl::StatusOr<std::shared_ptr<ModelServer>> server) {
            if (server.ok()) (*server)->Stop();  // (so the test can end)
            done.try_send(
                boost::system::error_code(),
                error ? absl::InternalError("threw") : server.status());
          }));
  asio::post(co_test::Io(), [&cancel, &gate] {
    cancel.emit(asio::cancellation_type::terminal);
    gate.Open();
  });
  auto [ec, status] =
      co_await done.async_receive(asio::as_tuple(asio::use_awaitable));
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
}

// Reads the metrics page until no batch of model "m" runs.
asio::awaitable<void> UntilNoBatchRuns(ModelServer& server) {
  const std::string running =
      ":cosession:serving:batching_running_batches{model_name=\"m\"} ";
  for (;;) {
    HttpReply metrics =
        co_await server.Handle("GET", ModelServer::kPrometheusPath, "");
    const bool listed = absl::StrContains(metrics.body, running);
    EXPECT_TRUE(listed) << metrics.body;
    if (!listed || absl::StrContains(metrics.body, running + "0\n")) {
      co_return;
    }
    co_await asio::post(co_test::Io(), asio::use_awaitable);
  }
}

CO_TEST(ModelServer, AFullBatchingQueueIs503AndADeadlineIs504) {
  TestEvents events;
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, true));
  ModelServerOptions o = Options(dir);
  o.enable_batching = true;
  o.batching = {.max_batch_size = 1,
                .batch_timeout = std::chrono::microseconds(0),
                .max_enqueued_batches = 1,
                .num_batch_threads = 1};
  o.rest_api_timeout = std::chrono::milliseconds(200);
  auto server = co_await Started(o);
  CO_ASSERT_TRUE(server != nullptr);
  std::vector<std::vector<std::string>> answers(2);
  asio::experimental::channel<void(boost::system::error_code)> done(
      co_test::Io(), 2);
  // The first runs (held by the gate), the second waits in the queue.
  asio::co_spawn(co_test::Io(), PredictLoop(server, 1, &answers[0], &done),
                 asio::detached);
  (void)co_await events.started.async_receive(asio::use_awaitable);
  asio::co_spawn(co_test::Io(), PredictLoop(server, 1, &answers[1], &done),
                 asio::detached);
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  HttpReply full = co_await server->Handle("POST", "/v1/models/m:predict",
                                           R"({"instances": [[1, 0]]})");
  EXPECT_EQ(full.status, 503u) << full.body;
  // Nothing is released: both run out of time.
  co_await done.async_receive(asio::use_awaitable);
  co_await done.async_receive(asio::use_awaitable);
  for (const auto& a : answers) {
    CO_ASSERT_TRUE(a.size() == 1);
    EXPECT_TRUE(absl::StartsWith(a[0], "504 ")) << a[0];
  }
  // The batches their requests left are cancelled: their runs return
  // without the gate being released (and before `events` is gone).
  co_await UntilNoBatchRuns(*server);
  server->Stop();
}

// The doubled first input a prediction of ExportTestModel's answers: its
// version's factor (x = [1, 0]).
asio::awaitable<std::string> Factor(std::shared_ptr<ModelServer> server,
                                    std::string target) {
  HttpReply reply =
      co_await server->Handle("POST", target, R"({"instances": [[1, 0]]})");
  if (reply.status != 200) co_return absl::StrCat(reply.status);
  json::value body = Parsed(reply);
  co_return json::serialize(body.at("predictions").at(0).at("doubled").at(0));
}

// --model_config_file: several models, each with its version policy, and
// labels naming versions.
CO_TEST(ModelServer, ServesEachConfiguredModelByPolicyAndLabel) {
  ScratchDir a, b;
  for (int v : {1, 2, 3}) {
    CO_ASSERT_OK(
        co_await testing::ExportTestModel(a.path(), v, 1.0f * v, false));
  }
  CO_ASSERT_OK(co_await testing::ExportTestModel(b.path(), 7, 7.0f, false));
  auto configs = ParseModelServerConfig(
      absl::StrCat(
          "model_config_list {\n"
          "  config { name: 'a' base_path: '",
          a.path(), "'\n",
          "    model_version_policy { specific { versions: [1, 3] } }\n"
          "    version_labels { key: 'stable' value: 1 }\n"
          "    version_labels { key: 'canary' value: 3 } }\n"
          "  config { name: 'b' base_path: '",
          b.path(), "' }\n}"),
      "models.config");
  CO_ASSERT_OK(configs.status());
  ModelServerOptions options = Options(a);
  options.model_config_list = *configs;
  auto server = co_await Started(options);
  CO_ASSERT_TRUE(server != nullptr);
  EXPECT_EQ(server->serving_version("a"), 3);
  EXPECT_EQ(server->serving_version("b"), 7);

  EXPECT_EQ(co_await Factor(server, "/v1/models/a:predict"), "3E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/versions/1:predict"), "1E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/versions/2:predict"), "404");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/stable:predict"),
            "1E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/canary:predict"),
            "3E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/beta:predict"), "400");
  EXPECT_EQ(co_await Factor(server, "/v1/models/b:predict"), "7E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/m:predict"), "404");

  HttpReply status = co_await server->Handle("GET", "/v1/models/a", "");
  EXPECT_EQ(status.status, 200u);
  json::value versions = Parsed(status).at("model_version_status");
  CO_ASSERT_TRUE(versions.as_array().size() == 2u);
  EXPECT_EQ(versions.at(0).at("version"), "3");
  EXPECT_EQ(versions.at(1).at("version"), "1");
  HttpReply metadata =
      co_await server->Handle("GET", "/v1/models/a/labels/stable/metadata", "");
  EXPECT_EQ(metadata.status, 200u) << metadata.body;
  EXPECT_EQ(Parsed(metadata).at("model_spec").at("version"), "1");
  HttpReply unknown_label =
      co_await server->Handle("GET", "/v1/models/a/labels/beta/metadata", "");
  EXPECT_EQ(unknown_label.status, 400u);
  EXPECT_TRUE(absl::StrContains(unknown_label.body,
                                "Unrecognized servable version label: beta"));
  HttpReply metrics =
      co_await server->Handle("GET", ModelServer::kPrometheusPath, "");
  EXPECT_TRUE(absl::StrContains(metrics.body,
                                ":tensorflow:serving:request_count{model_name="
                                "\"b\",status=\"OK\"} 1"))
      << metrics.body;
  EXPECT_TRUE(absl::StrContains(metrics.body,
                                ":tensorflow:serving:request_count{model_name="
                                "\"\",status=\"NOT_FOUND\"} 1"))
      << metrics.body;
  server->Stop();
}

// The config file read again: a model added, one removed, a label moved;
// a broken file changes nothing.
CO_TEST(ModelServer, AReadConfigFileAddsRemovesAndChangesModels) {
  ScratchDir a, b, config_dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 1, 1.0f, false));
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 2, 2.0f, false));
  CO_ASSERT_OK(co_await testing::ExportTestModel(b.path(), 9, 9.0f, false));
  const std::string file = config_dir.path() + "/models.config";
  auto write_config = [&](const std::string& text) {
    std::ofstream(file, std::ios::trunc) << text;
  };
  const std::string model_a = absl::StrCat(
      "config { name: 'a' base_path: '", a.path(),
      "' model_version_policy { all {} } version_labels { key: 'stable' "
      "value: ");
  write_config(absl::StrCat("model_config_list { ", model_a, "1 } } }"));
  ModelServerOptions options = Options(a);
  options.model_config_file = file;
  auto configs = ParseModelServerConfig(
      absl::StrCat("model_config_list { ", model_a, "1 } } }"), file);
  CO_ASSERT_OK(configs.status());
  options.model_config_list = *configs;
  auto server = co_await Started(options);
  CO_ASSERT_TRUE(server != nullptr);
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/stable:predict"),
            "1E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/b:predict"), "404");

  // b added, a's label moved to version 2.
  write_config(absl::StrCat("model_config_list { ", model_a, "2 } }\n",
                            "config { name: 'b' base_path: '", b.path(),
                            "' } }"));
  CO_ASSERT_OK(co_await server->ReloadConfigNow());
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/stable:predict"),
            "2E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/b:predict"), "9E0");

  // A broken file: said, and nothing changes.
  write_config("model_config_list { config { name: 'b' } }");
  absl::Status broken = co_await server->ReloadConfigNow();
  EXPECT_TRUE(absl::StrContains(broken.message(), "has no base_path"))
      << broken;
  EXPECT_EQ(co_await Factor(server, "/v1/models/b:predict"), "9E0");

  // a removed: 404, as a model never configured.
  write_config(
      absl::StrCat("model_config_list { config { name: 'b' "
                   "base_path: '",
                   b.path(), "' } }"));
  CO_ASSERT_OK(co_await server->ReloadConfigNow());
  EXPECT_EQ(co_await Factor(server, "/v1/models/a:predict"), "404");
  HttpReply status = co_await server->Handle("GET", "/v1/models/a", "");
  EXPECT_EQ(status.status, 404u);
  EXPECT_EQ(co_await Factor(server, "/v1/models/b:predict"), "9E0");
  server->Stop();
}

// --allow_version_labels_for_unavailable_models: a new label may name a
// version not served yet (404 by that label until it is); a label that
// already names a version does not move to one that is not served. Without
// the option the same labels fail Start.
CO_TEST(ModelServer, LabelsOfUnavailableVersionsOnlyWhenAllowed) {
  ScratchDir a, config_dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 1, 1.0f, false));
  const std::string file = config_dir.path() + "/models.config";
  auto config_text = [&](int stable, int canary) {
    return absl::StrCat(
        "model_config_list { config { name: 'a' base_path: '", a.path(),
        "' model_version_policy { all {} } "
        "version_labels { key: 'stable' value: ",
        stable, " } version_labels { key: 'canary' value: ", canary, " } } }");
  };
  std::ofstream(file, std::ios::trunc) << config_text(1, 3);
  auto configs = ParseModelServerConfig(config_text(1, 3), file);
  CO_ASSERT_OK(configs.status());
  ModelServerOptions options = Options(a);
  options.model_config_file = file;
  options.model_config_list = *configs;

  auto refused = co_await ModelServer::Start(options, TestRuntime());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "which is not currently available"))
      << refused.status();

  options.allow_version_labels_for_unavailable_models = true;
  auto server = co_await Started(options);
  CO_ASSERT_TRUE(server != nullptr);
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/stable:predict"),
            "1E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/canary:predict"),
            "404");
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 3, 3.0f, false));
  co_await server->PollNow();
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/canary:predict"),
            "3E0");
  // stable asked to move to version 7, which is not served: it stays.
  std::ofstream(file, std::ios::trunc) << config_text(7, 3);
  CO_ASSERT_OK(co_await server->ReloadConfigNow());
  EXPECT_EQ(co_await Factor(server, "/v1/models/a/labels/stable:predict"),
            "1E0");
  server->Stop();
}

// --enable_signature_method_name_check: a predict on a signature of
// another method is 500 with TensorFlow Serving's message; without the
// check any signature predicts.
CO_TEST(ModelServer, TheMethodNameCheckRefusesPredictOnOtherMethods) {
  ScratchDir dir;
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output y =
      ops::Mul(g, x, ops::Const(g, Tensor::Scalar<float>(2.0f)), "doubled");
  std::map<std::string, ExportSignature> sigs{
      {kDefaultServingSignature,
       {.inputs = {{"x", x}},
        .outputs = {{"doubled", y}},
        .method_name = "custom/method"}},
      {"plain", {.inputs = {{"x", x}}, .outputs = {{"doubled", y}}}}};
  CO_ASSERT_OK(
      co_await testing::InitializeAndExport(g, std::move(sigs), dir.path(), 1));
  ModelServerOptions options = Options(dir);
  auto unchecked = co_await Started(options);
  CO_ASSERT_TRUE(unchecked != nullptr);
  HttpReply predicted = co_await unchecked->Handle(
      "POST", "/v1/models/m:predict", R"({"instances": [[1, 0]]})");
  EXPECT_EQ(predicted.status, 200u) << predicted.body;
  unchecked->Stop();

  options.enable_signature_method_name_check = true;
  auto checked = co_await Started(options);
  CO_ASSERT_TRUE(checked != nullptr);
  HttpReply refused = co_await checked->Handle("POST", "/v1/models/m:predict",
                                               R"({"instances": [[1, 0]]})");
  EXPECT_EQ(refused.status, 500u);
  EXPECT_TRUE(absl::StrContains(
      refused.body,
      "Expected prediction signature method_name to be one of "
      "{tensorflow/serving/predict, tensorflow/serving/classify, "
      "tensorflow/serving/regress}. Was: custom/method"))
      << refused.body;
  HttpReply plain = co_await checked->Handle(
      "POST", "/v1/models/m:predict",
      R"({"signature_name": "plain", "instances": [[1, 0]]})");
  EXPECT_EQ(plain.status, 200u) << plain.body;
  checked->Stop();
}

// latest { num_versions: 2 }: a new version joins, the oldest leaves once
// the new one serves.
CO_TEST(ModelServer, ALatestPolicyOfTwoKeepsTheTwoHighestVersions) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 1.0f, false));
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 2, 2.0f, false));
  ModelServerOptions options = Options(dir);
  options.model_config_list = {
      {.name = "m",
       .base_path = dir.path(),
       .version_policy = {.kind = ModelVersionPolicy::Kind::kLatest,
                          .num_versions = 2}}};
  auto server = co_await Started(options);
  CO_ASSERT_TRUE(server != nullptr);
  EXPECT_EQ(co_await Factor(server, "/v1/models/m/versions/1:predict"), "1E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/m:predict"), "2E0");
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 3, 3.0f, false));
  co_await server->PollNow();
  EXPECT_EQ(co_await Factor(server, "/v1/models/m:predict"), "3E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/m/versions/2:predict"), "2E0");
  EXPECT_EQ(co_await Factor(server, "/v1/models/m/versions/1:predict"), "404");
  // Version 1 ends once nothing holds it: its END is posted to the loop.
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  HttpReply status =
      co_await server->Handle("GET", "/v1/models/m/versions/1", "");
  EXPECT_EQ(Parsed(status).at("model_version_status").at(0).at("state"), "END")
      << status.body;
  server->Stop();
}

// Bodies parsed on the pool (parse_on_pool_bytes 0: every one) are answered
// exactly as bodies parsed on the event loop: results and errors alike.
CO_TEST(ModelServer, BodiesParsedOnThePoolAreAnsweredTheSame) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportEveryApiModel(dir.path(), 1, 2.0f));
  ModelServerOptions on_loop = Options(dir);
  on_loop.parse_on_pool_bytes = size_t{1} << 30;
  ModelServerOptions on_pool = Options(dir);
  on_pool.parse_on_pool_bytes = 0;
  auto loop_server = co_await Started(on_loop);
  auto pool_server = co_await Started(on_pool);
  CO_ASSERT_TRUE(loop_server != nullptr && pool_server != nullptr);
  const std::pair<std::string, std::string> requests[] = {
      {"/v1/models/m:predict", R"({"instances": [[1, 2], [3, 4]]})"},
      {"/v1/models/m:predict", R"({"inputs": {"x": [[0.5, -1]]}})"},
      {"/v1/models/m:predict", R"({"instances": [[1, 2], [3]]})"},
      {"/v1/models/m:predict", R"({"instances": [[1, 2]] )"},
      {"/v1/models/m:classify",
       R"({"signature_name": "classification", "examples": [{"x": [1, 2]}]})"},
      {"/v1/models/m:regress",
       R"({"signature_name": "regression", "examples": [{"y": 1}]})"},
  };
  for (const auto& [target, body] : requests) {
    HttpReply expected = co_await loop_server->Handle("POST", target, body);
    HttpReply got = co_await pool_server->Handle("POST", target, body);
    EXPECT_EQ(got.status, expected.status) << target << " " << body;
    EXPECT_EQ(got.body, expected.body) << target << " " << body;
  }
  // Both kinds of answers came: the comparison is not of two failures.
  HttpReply ok = co_await pool_server->Handle("POST", "/v1/models/m:predict",
                                              R"({"instances": [[1, 2]]})");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  loop_server->Stop();
  pool_server->Stop();
}

// The value of `reply`'s header `name`, "" when it has none.
std::string Header(const HttpReply& reply, absl::string_view name) {
  for (const auto& [n, v] : reply.headers) {
    if (n == name) return v;
  }
  return "";
}

CO_TEST(ModelServer, CorsHeadersAndPreflightAsTensorFlowServing) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  for (bool cors : {false, true}) {
    SCOPED_TRACE(cors ? "with CORS" : "without CORS");
    ModelServerOptions o = Options(dir);
    o.enable_cors_support = cors;
    auto server = co_await Started(o);
    CO_ASSERT_TRUE(server != nullptr);
    const std::string allowed = cors ? "*" : "";
    // Every answer under /v1/, errors too, carries the headers.
    HttpReply predicted = co_await server->Handle(
        "POST", "/v1/models/m:predict", R"({"instances": [[1, 0]]})");
    EXPECT_EQ(predicted.status, 200u) << predicted.body;
    EXPECT_EQ(Header(predicted, "Access-Control-Allow-Origin"), allowed);
    EXPECT_EQ(Header(predicted, "Access-Control-Allow-Methods"),
              cors ? "POST, GET" : "");
    EXPECT_EQ(Header(predicted, "Access-Control-Allow-Headers"),
              cors ? "Content-Type" : "");
    HttpReply unknown = co_await server->Handle("GET", "/v1/models/nope", "");
    EXPECT_EQ(unknown.status, 404u);
    EXPECT_EQ(Header(unknown, "Access-Control-Allow-Origin"), allowed);
    // The preflight: an origin naming a scheme is 200 with no body.
    HttpReply preflight = co_await server->Handle(
        "OPTIONS", "/v1/models/m:predict", "", "https://app.example.com");
    EXPECT_EQ(preflight.status, 200u) << preflight.body;
    EXPECT_EQ(preflight.body, "");
    EXPECT_EQ(Header(preflight, "Access-Control-Allow-Origin"), allowed);
    HttpReply no_origin =
        co_await server->Handle("OPTIONS", "/v1/models/m:predict", "", "");
    EXPECT_EQ(no_origin.status, 400u);
    EXPECT_TRUE(absl::StrContains(no_origin.body,
                                  "Origin header is missing in CORS preflight"))
        << no_origin.body;
    // Not under /v1/: no CORS headers.
    HttpReply metrics =
        co_await server->Handle("GET", ModelServer::kPrometheusPath, "");
    EXPECT_EQ(metrics.status, 200u);
    EXPECT_EQ(Header(metrics, "Access-Control-Allow-Origin"), "");
    server->Stop();
  }
}

// A path outside /v1/ gets what TensorFlow Serving's HTTP server (libevent)
// sends when no handler takes a request, whatever the method.
CO_TEST(ModelServer, APathOutsideTheRestApiGetsLibeventsNotFoundPage) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  auto server = co_await Started(Options(dir));
  CO_ASSERT_TRUE(server != nullptr);
  for (const char* method : {"GET", "POST", "OPTIONS"}) {
    for (const char* path : {"/", "/healthz", "/v1", "/v2/models/m"}) {
      HttpReply reply = co_await server->Handle(method, path, "{}");
      EXPECT_EQ(reply.status, 404u) << method << " " << path;
      EXPECT_EQ(reply.content_type, "text/html") << method << " " << path;
      EXPECT_EQ(reply.body,
                "<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n"
                "<H1>Not Found</H1>\n</BODY></HTML>\n")
          << method << " " << path;
      EXPECT_TRUE(reply.close_connection) << method << " " << path;
    }
  }
  // Under /v1/ (any case), errors stay TensorFlow Serving's JSON.
  HttpReply api = co_await server->Handle("GET", "/V1/models/nope", "");
  EXPECT_EQ(api.status, 404u);
  EXPECT_EQ(api.content_type, "application/json");
  EXPECT_FALSE(api.close_connection);
  server->Stop();
}

CO_TEST(ModelServer, ThePrometheusPageIsWhereTheMonitoringConfigSays) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 1, 2.0f, false));
  ModelServerOptions o = Options(dir);
  o.prometheus_path = "/metrics";
  auto moved = co_await Started(o);
  CO_ASSERT_TRUE(moved != nullptr);
  HttpReply at_path = co_await moved->Handle("GET", "/metrics", "");
  EXPECT_EQ(at_path.status, 200u);
  EXPECT_TRUE(absl::StrContains(at_path.body, "# TYPE")) << at_path.body;
  HttpReply at_default =
      co_await moved->Handle("GET", ModelServer::kPrometheusPath, "");
  EXPECT_EQ(at_default.status, 404u) << at_default.body;
  moved->Stop();

  o.enable_prometheus = false;  // enable: false
  auto off = co_await Started(o);
  CO_ASSERT_TRUE(off != nullptr);
  HttpReply none =
      co_await off->Handle("GET", ModelServer::kPrometheusPath, "");
  EXPECT_EQ(none.status, 404u) << none.body;
  off->Stop();
}

}  // namespace
}  // namespace cosession::model_server_test
