// cosession_serve: serves a model exported by cosession_train --export_dir
// (or ExportSavedModel) over HTTP with TensorFlow Serving's REST API, on one
// io_context plus the runtime's pool, so that TensorFlow Serving's clients
// and curl work unchanged:
//
//   cosession_train --export_dir=/tmp/digits_model
//   cosession_serve --model_name=digits --model_base_path=/tmp/digits_model
//   curl localhost:8501/v1/models/digits
//   curl -d '{"instances": [[0, 0, 5, 13, 9, 1, ...64 pixels]]}'
//        localhost:8501/v1/models/digits:predict      (one command)
//   curl -d '{"signature_name": "classification",
//             "examples": [{"x": [0, 0, 5, 13, ...64 pixels]}]}'
//        localhost:8501/v1/models/digits:classify
//
// The flags are tensorflow_model_server's: --rest_api_port (8501; 0 here
// means any free port, printed), --model_name, --model_base_path or
// --model_config_file (several models, version policies and labels) with
// --model_config_file_poll_wait_seconds (0: read once) and
// --allow_version_labels_for_unavailable_models,
// --enable_signature_method_name_check,
// --enable_batching with --batching_parameters_file (its text format),
// --file_system_poll_wait_seconds (1), --rest_api_timeout_in_ms (30000),
// --rest_api_enable_cors_support, --monitoring_config_file (where the
// Prometheus page is), --tensorflow_intra_op_parallelism,
// --tensorflow_inter_op_parallelism and --tensorflow_session_parallelism
// (the runtime pool's threads). Its --port, --rest_api_num_threads and
// --enable_model_warmup are taken and checked but have nothing to act on
// (no gRPC API, one event loop, no warm-up records in cosession's
// exports); its other flags likewise (serve_unused_flags.cc).
// The highest version under --model_base_path is served; a higher one
// appearing is loaded and switched to, the old one unloaded once its
// requests finished. Prometheus metrics at /monitoring/prometheus/metrics.
// A base path without a version yet is waited for (listed again every
// --file_system_poll_wait_seconds), as tensorflow_model_server waits, and
// served once one appears; the port opens then.
// SIGTERM or SIGINT: stop accepting, answer the requests in flight (within
// --drain_grace_seconds), exit 0 (also while waiting for a model). A bad
// flag exits 2 naming it; a model that does not load, or a base path
// without a version when --file_system_poll_wait_seconds is 0 or less,
// exits 1 with the reason.
#include <signal.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/atomic_file.h"
#include "cosession/serving/batching_parameters.h"
#include "cosession/serving/http_server.h"
#include "cosession/serving/model_server.h"
#include "cosession/serving/model_server_config.h"
#include "cosession/serving/monitoring_config.h"
#include "examples/flags_usage.h"
#include "examples/strict_flags.h"

ABSL_FLAG(int32_t, rest_api_port, 8501,
          "Port of the HTTP/REST API (0: any free port, printed at start)");
ABSL_FLAG(std::string, rest_api_address, "0.0.0.0",
          "Address the REST API listens on");
ABSL_FLAG(std::string, model_name, "default",
          "Name of the model in the REST API's paths");
ABSL_FLAG(std::string, model_base_path, "",
          "Directory of the model's versions (subdirectories named by "
          "number, as cosession_train --export_dir writes them)");
ABSL_FLAG(std::string, model_config_file, "",
          "A ModelServerConfig text proto (model_config_list { config { "
          "name: ... base_path: ... } ... }) naming the models to serve, "
          "their version policies and labels; replaces --model_name and "
          "--model_base_path");
ABSL_FLAG(bool, allow_version_labels_for_unavailable_models, false,
          "With --model_config_file: a new version label may name a version "
          "that is not served yet (requests by it are 404 until it is)");
ABSL_FLAG(bool, enable_signature_method_name_check, false,
          "Predict only on signatures whose method_name is "
          "tensorflow/serving/predict, classify or regress (others: 500)");
ABSL_FLAG(int64_t, model_config_file_poll_wait_seconds, 0,
          "Seconds between readings of --model_config_file, whose changes "
          "(models added, removed, new policies and labels) are applied "
          "(0 or less: read once)");
ABSL_FLAG(bool, enable_batching, false,
          "Merge concurrent requests into batches (BatchingSession)");
ABSL_FLAG(std::string, batching_parameters_file, "",
          "With --enable_batching: a BatchingParameters text proto "
          "(max_batch_size { value: 64 } ...)");
ABSL_FLAG(int64_t, file_system_poll_wait_seconds, 1,
          "Seconds between looks for a new version (0 or less: never)");
ABSL_FLAG(int64_t, rest_api_timeout_in_ms, 30000,
          "A prediction's deadline (0 or less: none)");
ABSL_FLAG(int64_t, drain_grace_seconds, 10,
          "On SIGTERM/SIGINT, how long requests in flight may still take");
ABSL_FLAG(bool, rest_api_enable_cors_support, false,
          "Answer the REST API with CORS headers (Access-Control-Allow-Origin: "
          "*), so that pages of other origins may call it");
ABSL_FLAG(std::string, monitoring_config_file, "",
          "A MonitoringConfig text proto (prometheus_config { enable: true "
          "path: ... }): where the Prometheus page is, or none (without "
          "the flag: at /monitoring/prometheus/metrics)");
// TensorFlow's session threads: cosession's one pool runs both the
// independent ops (inter-op) and the pieces of split ones (intra-op).
ABSL_FLAG(int32_t, tensorflow_intra_op_parallelism, 0,
          "Threads of the runtime's pool, which also runs split kernels' "
          "pieces (the larger of this and --tensorflow_inter_op_parallelism "
          "is taken; 0: one per CPU)");
ABSL_FLAG(int32_t, tensorflow_inter_op_parallelism, 0,
          "Threads of the runtime's pool, which runs independent ops (see "
          "--tensorflow_intra_op_parallelism; 0: one per CPU)");
ABSL_FLAG(int32_t, tensorflow_session_parallelism, 0,
          "Threads of the runtime's pool when neither of the two above is "
          "given (0: one per CPU)");
// tensorflow_model_server's flags that deployments pass but that have
// nothing to act on here: taken and checked (their help says they are
// unused), so that its command lines (e.g. its Docker image's, with
// --port=8500) work.
ABSL_FLAG(int32_t, port, 8500,
          "tensorflow_model_server's gRPC port: cosession_serve has no gRPC "
          "API (only checked)");
ABSL_FLAG(int32_t, rest_api_num_threads, 0,
          "tensorflow_model_server's REST threads: cosession_serve answers "
          "on one event loop, graph runs go to the runtime's pool (only "
          "checked: >= 0)");
ABSL_FLAG(bool, enable_model_warmup, false,
          "tensorflow_model_server replays a version's "
          "assets.extra/tf_serving_warmup_requests; cosession's exports "
          "have none, so there is nothing to replay (only checked)");

namespace asio = boost::asio;
using namespace cosession;
using namespace asio::experimental::awaitable_operators;

namespace {

struct Flags {
  ModelServerOptions model;
  HttpServerOptions http;
  // The runtime pool's threads, and the flag that set them (0: the
  // default runtime, one per CPU).
  int runtime_threads = 0;
  std::string runtime_threads_flag{};
  std::chrono::seconds grace{10};
};

absl::Status FlagError(absl::string_view flag, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", problem));
}

// The file a flag names, read and parsed by `parse(text, path)`; every
// error names the flag.
template <typename Parse>
auto ReadFlagFile(absl::string_view flag, const std::string& path, Parse parse)
    -> decltype(parse(std::string(), path)) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return FlagError(flag, text.status().message());
  auto parsed = parse(*text, path);
  if (!parsed.ok()) return FlagError(flag, parsed.status().message());
  return parsed;
}

absl::StatusOr<Flags> ReadFlags() {
  Flags f;
  const int32_t port = absl::GetFlag(FLAGS_rest_api_port);
  if (port < 0 || port > 65535) {
    return FlagError("rest_api_port", "must be in 0..65535");
  }
  f.http.port = static_cast<uint16_t>(port);
  f.http.address = absl::GetFlag(FLAGS_rest_api_address);
  f.model.model_name = absl::GetFlag(FLAGS_model_name);
  if (f.model.model_name.empty() ||
      f.model.model_name.find_first_of("/:") != std::string::npos) {
    return FlagError("model_name", "must be non-empty, without '/' or ':'");
  }
  f.model.model_base_path = absl::GetFlag(FLAGS_model_base_path);
  const std::string config_file = absl::GetFlag(FLAGS_model_config_file);
  if (!config_file.empty()) {
    absl::StatusOr<std::vector<ModelConfig>> configs =
        ReadFlagFile("model_config_file", config_file, ParseModelServerConfig);
    if (!configs.ok()) return configs.status();
    f.model.model_config_list = *std::move(configs);
    f.model.model_config_file = config_file;
    f.model.model_config_file_poll_wait = std::chrono::seconds(
        absl::GetFlag(FLAGS_model_config_file_poll_wait_seconds));
    if (!f.model.model_base_path.empty()) {
      // TensorFlow Serving takes the file too; say which one wins.
      std::fprintf(stderr,
                   "cosession_serve: --model_base_path is not used: "
                   "--model_config_file names the models\n");
    }
  } else if (f.model.model_base_path.empty()) {
    return FlagError("model_base_path", "is required (or --model_config_file)");
  }
  f.model.enable_batching = absl::GetFlag(FLAGS_enable_batching);
  const std::string batching_file =
      absl::GetFlag(FLAGS_batching_parameters_file);
  if (!batching_file.empty() && !f.model.enable_batching) {
    return FlagError("batching_parameters_file",
                     "needs --enable_batching (as TensorFlow Serving)");
  }
  f.model.batching = DefaultBatchingOptions();
  if (!batching_file.empty()) {
    absl::StatusOr<BatchingOptions> parsed = ReadFlagFile(
        "batching_parameters_file", batching_file, ParseBatchingParameters);
    if (!parsed.ok()) return parsed.status();
    f.model.batching = *std::move(parsed);
  }
  f.model.file_system_poll_wait =
      std::chrono::seconds(absl::GetFlag(FLAGS_file_system_poll_wait_seconds));
  f.model.rest_api_timeout =
      std::chrono::milliseconds(absl::GetFlag(FLAGS_rest_api_timeout_in_ms));
  f.model.enable_cors_support =
      absl::GetFlag(FLAGS_rest_api_enable_cors_support);
  f.model.allow_version_labels_for_unavailable_models =
      absl::GetFlag(FLAGS_allow_version_labels_for_unavailable_models);
  f.model.enable_signature_method_name_check =
      absl::GetFlag(FLAGS_enable_signature_method_name_check);
  const std::string monitoring_file =
      absl::GetFlag(FLAGS_monitoring_config_file);
  if (!monitoring_file.empty()) {
    absl::StatusOr<MonitoringConfig> monitoring = ReadFlagFile(
        "monitoring_config_file", monitoring_file, ParseMonitoringConfig);
    if (!monitoring.ok()) return monitoring.status();
    f.model.enable_prometheus = !monitoring->prometheus_path.empty();
    f.model.prometheus_path = monitoring->prometheus_path;
  }
  const int32_t grpc_port = absl::GetFlag(FLAGS_port);
  if (grpc_port < 0 || grpc_port > 65535) {
    return FlagError("port", "must be in 0..65535");
  }
  if (grpc_port != 0 && grpc_port == port) {
    // TensorFlow Serving then exports no REST API at all.
    return FlagError("rest_api_port", "cannot be the same as --port");
  }
  if (absl::GetFlag(FLAGS_rest_api_num_threads) < 0) {
    return FlagError("rest_api_num_threads", "must be >= 0");
  }
  for (const auto& [name, value] :
       {std::pair{"tensorflow_intra_op_parallelism",
                  absl::GetFlag(FLAGS_tensorflow_intra_op_parallelism)},
        std::pair{"tensorflow_inter_op_parallelism",
                  absl::GetFlag(FLAGS_tensorflow_inter_op_parallelism)},
        std::pair{"tensorflow_session_parallelism",
                  absl::GetFlag(FLAGS_tensorflow_session_parallelism)}}) {
    if (value < 0 || value > 1024) return FlagError(name, "must be in 0..1024");
    // The first two: the larger; the session's only when neither is given.
    const bool session =
        absl::string_view(name) == "tensorflow_session_parallelism";
    if (value > f.runtime_threads && !(session && f.runtime_threads > 0)) {
      f.runtime_threads = value;
      f.runtime_threads_flag = name;
    }
  }
  const int64_t grace = absl::GetFlag(FLAGS_drain_grace_seconds);
  if (grace < 0) return FlagError("drain_grace_seconds", "must be >= 0");
  f.grace = std::chrono::seconds(grace);
  return f;
}

void Say(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

// Returns the exit code; `drained` says whether every connection closed
// within the grace period.
asio::awaitable<int> Serve(Flags f, Runtime* runtime, bool* drained) {
  asio::any_io_executor executor = co_await asio::this_coro::executor;
  // A signal while the models load, or while a base path waits for its
  // first version, stops the start: exit 0, as after serving.
  asio::signal_set signals(executor, SIGINT, SIGTERM);
  auto starting = ModelServer::Start(f.model, *runtime);
  auto stopping = signals.async_wait(asio::as_tuple(asio::use_awaitable));
  auto start_or_signal = co_await (std::move(starting) || std::move(stopping));
  if (start_or_signal.index() == 1) {
    const int signal = std::get<1>(std::get<1>(start_or_signal));
    Say(absl::StrCat("cosession_serve: ", strsignal(signal),
                     " before the models were served: stopped"));
    co_return 0;
  }
  absl::StatusOr<std::shared_ptr<ModelServer>> started =
      std::get<0>(std::move(start_or_signal));
  if (!started.ok()) {
    std::fprintf(stderr, "cosession_serve: %s\n",
                 started.status().ToString().c_str());
    co_return 1;
  }
  std::shared_ptr<ModelServer> model = *started;
  HttpHandler handler = [model](HttpRequest r) {
    return model->Handle(std::move(r.method), std::move(r.target),
                         std::move(r.body), std::move(r.origin));
  };
  // Big gzip bodies are uncompressed on the pool, as big bodies are parsed
  // there, so that the event loop keeps answering meanwhile.
  f.http.inflate_executor = runtime->executor();
  absl::StatusOr<std::unique_ptr<HttpServer>> listening =
      HttpServer::Listen(executor, f.http, std::move(handler));
  if (!listening.ok()) {
    std::fprintf(stderr, "cosession_serve: --rest_api_port: %s\n",
                 listening.status().ToString().c_str());
    model->Stop();
    co_return 1;
  }
  HttpServer& http = **listening;
  http.Start();
  std::vector<ModelConfig> served = f.model.model_config_list;
  if (served.empty()) {
    served.push_back(
        {.name = f.model.model_name, .base_path = f.model.model_base_path});
  }
  for (const ModelConfig& config : served) {
    Say(absl::StrCat("cosession_serve: serving model '", config.name,
                     "' version ", model->serving_version(config.name),
                     " from ", config.base_path, " at http://", f.http.address,
                     ":", http.port(), "/v1/models/", config.name));
  }
  auto [ec, signal] =
      co_await signals.async_wait(asio::as_tuple(asio::use_awaitable));
  Say(absl::StrCat("cosession_serve: ", strsignal(signal),
                   ": draining the requests in flight"));
  http.Stop();
  model->Stop();
  asio::steady_timer grace(executor, f.grace);
  auto closed = http.Drained();
  auto expired = grace.async_wait(asio::as_tuple(asio::use_awaitable));
  auto first = co_await (std::move(closed) || std::move(expired));
  *drained = first.index() == 0;
  if (!*drained) {
    Say(absl::StrCat("cosession_serve: ", http.connections(),
                     " connection(s) still busy after the grace period"));
  }
  Say("cosession_serve: stopped");
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves an exported model over TensorFlow Serving's REST API.\n"
      "Usage: cosession_serve --model_base_path=DIR [--model_name=NAME] "
      "[--rest_api_port=8501] ...");
  SetFlagsUsage("cosession_serve", "examples/serve.cc");
  ExitOnUnparsableFlags("cosession_serve", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Flags> flags = ReadFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "cosession_serve: %s (see --help)\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  // A pool of the size the TensorFlow flags ask for, or the default one;
  // declared before the event loop so that it outlives it, as the default
  // runtime (a static) does.
  std::unique_ptr<Runtime> sized_runtime;
  Runtime* runtime = &Runtime::Default();
  if (flags->runtime_threads > 0) {
    absl::StatusOr<bool> pin =
        PinThreadsFromEnvironment(std::getenv("COSESSION_PIN_THREADS"));
    if (!pin.ok()) {
      std::fprintf(stderr, "cosession_serve: %s\n",
                   std::string(pin.status().message()).c_str());
      return 2;
    }
    sized_runtime = std::make_unique<Runtime>(RuntimeOptions{
        .num_threads = flags->runtime_threads, .pin_threads = *pin});
    runtime = sized_runtime.get();
    std::printf("cosession_serve: running graphs on %d threads (--%s)\n",
                flags->runtime_threads, flags->runtime_threads_flag.c_str());
    std::fflush(stdout);
  }
  asio::io_context io;
  int exit_code = 1;
  bool drained = true;
  asio::co_spawn(io, Serve(*std::move(flags), runtime, &drained),
                 [&](std::exception_ptr error, int code) {
                   exit_code = error ? 1 : code;
                   // Past the grace period the busy requests are abandoned:
                   // their completions would outlive the event loop.
                   if (!drained) {
                     std::fflush(nullptr);
                     std::_Exit(exit_code);
                   }
                 });
  io.run();
  return exit_code;
}
