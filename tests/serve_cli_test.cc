// cosession_serve as its users run it, as a child process: it serves an
// exported model over HTTP on the port it prints, answers a TensorFlow
// Serving client's predict, drains and exits 0 on SIGTERM; bad flags exit
// 2 naming the flag; a base path without a model is waited for (or exits
// 1 saying why when it does not poll).
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/child_process.h"
#include "tests/co_test.h"
#include "tests/compact_json.h"
#include "tests/exported_model.h"
#include "tests/http_client.h"
#include "tests/scratch_dir.h"

namespace cosession::serve_cli_test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::ExitCodeOf;
using testing::ScratchDir;

constexpr char kServe[] = COSESSION_SERVE_BINARY;
constexpr auto kLimit = 60s;

// The port in "... at http://127.0.0.1:PORT/v1/models/m".
uint16_t PortIn(const std::string& output) {
  const std::string marker = "at http://127.0.0.1:";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return 0;
  const size_t begin = at + marker.size();
  const size_t end = output.find('/', begin);
  int port = 0;
  if (!absl::SimpleAtoi(output.substr(begin, end - begin), &port)) return 0;
  return static_cast<uint16_t>(port);
}

// SIGTERM, then an exit with 0 within kLimit.
void ExpectExit0OnSigterm(ChildProcess& child) {
  child.Signal(SIGTERM);
  std::optional<int> exited = child.Wait(kLimit);
  ASSERT_TRUE(exited.has_value()) << child.output();
  EXPECT_EQ(ExitCodeOf(*exited), 0) << child.output();
}

// Once `child` says it serves model "m" (tests/exported_model.h's, factor
// 2): its port and its answer to one predict, checked. Port 0 when it
// never said so.
struct Served {
  uint16_t port = 0;
  absl::StatusOr<testing::ClientReply> predicted;
};
asio::awaitable<Served> PredictOnceServed(ChildProcess& child) {
  Served served{.predicted = absl::UnknownError("not served")};
  if (!child.WaitForOutput("/v1/models/m\n", kLimit)) co_return served;
  served.port = PortIn(child.output());
  if (served.port == 0) co_return served;
  served.predicted =
      co_await testing::HttpCall(served.port, "POST", "/v1/models/m:predict",
                                 R"({"instances": [[3, 1]]})");
  if (served.predicted.ok()) {
    EXPECT_EQ(served.predicted->status, 200u);
    EXPECT_EQ(testing::CompactJson(served.predicted->body),
              R"({"predictions":[{"classes":0,"doubled":[6.0,2.0]}]})");
  }
  co_return served;
}

CO_TEST(ServeCli, ServesAnExportedModelAndDrainsOnSigterm) {
  ScratchDir dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 4, 2.0f, false));
  ChildProcess child({kServe, "--model_name=m",
                      "--model_base_path=" + dir.path(),
                      "--rest_api_address=127.0.0.1", "--rest_api_port=0"});
  CO_ASSERT_TRUE(child.started());
  Served served = co_await PredictOnceServed(child);
  CO_ASSERT_TRUE(served.port != 0);
  CO_ASSERT_OK(served.predicted.status());
  auto status =
      co_await testing::HttpCall(served.port, "GET", "/v1/models/m", "");
  CO_ASSERT_OK(status.status());
  EXPECT_EQ(status->status, 200u);
  EXPECT_NE(status->body.find("\"AVAILABLE\""), std::string::npos);
  ExpectExit0OnSigterm(child);
  EXPECT_NE(child.output().find("cosession_serve: stopped"), std::string::npos)
      << child.output();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// --model_config_file: two models, one of them by label, over HTTP.
CO_TEST(ServeCli, ServesTheModelsOfAConfigFile) {
  ScratchDir a, b, config_dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 1, 2.0f, false));
  CO_ASSERT_OK(co_await testing::ExportTestModel(a.path(), 2, 3.0f, false));
  CO_ASSERT_OK(co_await testing::ExportTestModel(b.path(), 5, 5.0f, false));
  const std::string config = config_dir.path() + "/models.config";
  WriteText(config,
            absl::StrCat("model_config_list {\n"
                         "  config { name: 'a' base_path: '",
                         a.path(), "'\n",
                         "    model_version_policy { all {} }\n"
                         "    version_labels { key: 'stable' value: 1 } }\n"
                         "  config { name: 'b' base_path: '",
                         b.path(), "' }\n}\n"));
  ChildProcess child({kServe, "--model_config_file=" + config,
                      "--rest_api_address=127.0.0.1", "--rest_api_port=0"});
  CO_ASSERT_TRUE(child.started());
  CO_ASSERT_TRUE(child.WaitForOutput("/v1/models/b\n", kLimit));
  EXPECT_NE(child.output().find("serving model 'a' version 2"),
            std::string::npos)
      << child.output();
  const uint16_t port = PortIn(child.output());
  CO_ASSERT_TRUE(port != 0);
  auto stable = co_await testing::HttpCall(port, "POST",
                                           "/v1/models/a/labels/stable:predict",
                                           R"({"instances": [[3, 1]]})");
  CO_ASSERT_OK(stable.status());
  EXPECT_EQ(testing::CompactJson(stable->body),
            R"({"predictions":[{"classes":0,"doubled":[6.0,2.0]}]})");
  auto other = co_await testing::HttpCall(port, "POST", "/v1/models/b:predict",
                                          R"({"instances": [[1, 1]]})");
  CO_ASSERT_OK(other.status());
  EXPECT_EQ(testing::CompactJson(other->body),
            R"({"predictions":[{"classes":0,"doubled":[5.0,5.0]}]})");
  ExpectExit0OnSigterm(child);
}

// TensorFlow Serving's command line as its Docker image and deployments
// write it: the flags cosession_serve only checks are taken, CORS and the
// monitoring config act.
CO_TEST(ServeCli, TakesTensorFlowServingsDeploymentFlags) {
  ScratchDir dir, config_dir;
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 4, 2.0f, false));
  const std::string monitoring = config_dir.path() + "/monitoring.config";
  WriteText(monitoring,
            "prometheus_config {\n  enable: true,\n  path: \"/metrics\"\n}\n");
  ChildProcess child(
      {kServe, "--port=8500", "--rest_api_port=0", "--model_name=m",
       "--model_base_path=" + dir.path(), "--rest_api_address=127.0.0.1",
       "--rest_api_enable_cors_support=true", "--rest_api_num_threads=8",
       "--enable_model_warmup", "--monitoring_config_file=" + monitoring,
       "--tensorflow_intra_op_parallelism=1",
       "--tensorflow_inter_op_parallelism=2",
       "--enable_signature_method_name_check=true",
       "--allow_version_labels_for_unavailable_models=true",
       // Some of the flags it takes and leaves unused
       // (examples/serve_unused_flags.cc).
       "--grpc_channel_arguments=grpc.max_connection_age_ms=60000",
       "--grpc_max_threads=16", "--max_num_load_retries=3",
       "--load_retry_interval_micros=1000000", "--saved_model_tags=serve",
       "--per_process_gpu_memory_fraction=0.5", "--num_load_threads=2",
       "--xla_cpu_compilation_enabled=false"});
  CO_ASSERT_TRUE(child.started());
  Served served = co_await PredictOnceServed(child);
  CO_ASSERT_TRUE(served.port != 0);
  CO_ASSERT_OK(served.predicted.status());
  const uint16_t port = served.port;
  EXPECT_NE(child.output().find("running graphs on 2 threads "
                                "(--tensorflow_inter_op_parallelism)"),
            std::string::npos)
      << child.output();
  EXPECT_EQ(served.predicted->headers["Access-Control-Allow-Origin"], "*");
  // (Named: g++ 12 mishandles a braced list inside a co_await.)
  testing::RequestHeaders preflight_headers{
      {"Origin", "http://localhost:3000"},
      {"Access-Control-Request-Method", "POST"}};
  auto preflight =
      co_await testing::HttpCall(port, "OPTIONS", "/v1/models/m:predict", "",
                                 std::move(preflight_headers));
  CO_ASSERT_OK(preflight.status());
  EXPECT_EQ(preflight->status, 200u) << preflight->body;
  EXPECT_EQ(preflight->headers["Access-Control-Allow-Methods"], "POST, GET");
  EXPECT_EQ(preflight->headers["Access-Control-Allow-Headers"], "Content-Type");
  auto metrics = co_await testing::HttpCall(port, "GET", "/metrics", "");
  CO_ASSERT_OK(metrics.status());
  EXPECT_EQ(metrics->status, 200u);
  EXPECT_NE(metrics->body.find(":tensorflow:serving:request_count"),
            std::string::npos)
      << metrics->body;
  ExpectExit0OnSigterm(child);
}

TEST(ServeCli, VersionNamesTheProgramAndCosession) {
  ChildProcess child({kServe, "--version"});
  ASSERT_TRUE(child.started());
  std::optional<int> exited = child.Wait(kLimit);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCodeOf(*exited), 0) << child.output();
  EXPECT_EQ(child.output(), "cosession_serve (cosession 0.1.0)\n");
}

TEST(ServeCli, BadFlagsExit2NamingTheFlag) {
  ScratchDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rest_api_port=70000", "--model_base_path=" + dir.path()},
       "--rest_api_port"},
      {{}, "--model_base_path"},
      {{"--model_base_path=" + dir.path(), "--batching_parameters_file=x"},
       "--batching_parameters_file"},
      {{"--model_base_path=" + dir.path(), "--rest_api_timeout_in_ms=soon"},
       "--rest_api_timeout_in_ms"},
      {{"--model_config_file=" + dir.path() + "/missing.config"},
       "--model_config_file"},
      {{"--model_config_file=" + dir.path() + "/bad.config"},
       "--model_config_file: " + dir.path() +
           "/bad.config:2: unknown field 'basepath' of config"},
      {{"--model_base_path=" + dir.path(),
        "--monitoring_config_file=" + dir.path() + "/bad_monitoring.config"},
       "--monitoring_config_file: " + dir.path() +
           "/bad_monitoring.config:1: field 'enable' must be true or false"},
      {{"--model_base_path=" + dir.path(), "--port=8501"},
       "--rest_api_port: cannot be the same as --port"},
      {{"--model_base_path=" + dir.path(), "--rest_api_num_threads=-1"},
       "--rest_api_num_threads"},
      {{"--model_base_path=" + dir.path(),
        "--tensorflow_intra_op_parallelism=5000"},
       "--tensorflow_intra_op_parallelism: must be in 0..1024"},
      // An unused flag is still parsed with its type.
      {{"--model_base_path=" + dir.path(), "--max_num_load_retries=many"},
       "max_num_load_retries"},
  };
  WriteText(dir.path() + "/bad_monitoring.config",
            "prometheus_config { enable: maybe }");
  WriteText(dir.path() + "/bad.config",
            "model_config_list { config { name: 'm'\n basepath: '/m' } }");
  for (const auto& [args, flag] : cases) {
    std::vector<std::string> argv{kServe};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess child(argv);
    ASSERT_TRUE(child.started());
    std::optional<int> exited = child.Wait(kLimit);
    ASSERT_TRUE(exited.has_value());
    EXPECT_EQ(ExitCodeOf(*exited), 2) << child.output();
    EXPECT_NE(child.output().find(flag), std::string::npos) << child.output();
  }
}

// Without polling nothing would ever appear: an error, not a wait.
TEST(ServeCli, ABasePathWithoutAVersionExits1SayingWhyWhenItDoesNotPoll) {
  ScratchDir dir;
  ChildProcess child({kServe, "--model_base_path=" + dir.path(),
                      "--file_system_poll_wait_seconds=0"});
  ASSERT_TRUE(child.started());
  std::optional<int> exited = child.Wait(kLimit);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCodeOf(*exited), 1) << child.output();
  EXPECT_NE(child.output().find("No versions of servable default found under "
                                "base path " +
                                dir.path() +
                                ". Did you forget to name your leaf "
                                "directory as a number (eg. '/1/')?"),
            std::string::npos)
      << child.output();
}

// As tensorflow_model_server, it waits for a first version (a trainer
// started beside it exports one later), and serves it once it appears.
CO_TEST(ServeCli, WaitsForAFirstVersionAndServesItOnceItAppears) {
  ScratchDir dir;
  ChildProcess child({kServe, "--model_name=m",
                      "--model_base_path=" + dir.path(),
                      "--rest_api_address=127.0.0.1", "--rest_api_port=0"});
  CO_ASSERT_TRUE(child.started());
  CO_ASSERT_TRUE(
      child.WaitForOutput("No versions of servable m found", kLimit));
  EXPECT_EQ(PortIn(child.output()), 0) << child.output();
  CO_ASSERT_OK(co_await testing::ExportTestModel(dir.path(), 3, 2.0f, false));
  Served served = co_await PredictOnceServed(child);
  CO_ASSERT_TRUE(served.port != 0);
  CO_ASSERT_OK(served.predicted.status());
  EXPECT_NE(child.output().find("' version 3 from"), std::string::npos)
      << child.output();
  ExpectExit0OnSigterm(child);
}

// A SIGTERM while it waits for a base path to appear stops it cleanly.
TEST(ServeCli, ASigtermWhileWaitingForAModelExits0) {
  ScratchDir dir;
  const std::string missing = dir.path() + "/not_yet";
  ChildProcess child({kServe, "--model_name=m", "--model_base_path=" + missing,
                      "--rest_api_port=0"});
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.WaitForOutput(
      "Could not find base path " + missing + " for servable m", kLimit))
      << child.output();
  ExpectExit0OnSigterm(child);
  EXPECT_NE(child.output().find("before the models were served: stopped"),
            std::string::npos)
      << child.output();
}

}  // namespace
}  // namespace cosession::serve_cli_test
