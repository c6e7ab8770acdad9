// ModelServer: one model's versions under a base path, answering
// TensorFlow Serving's REST API -- the HTTP-free half of cosession_serve
// (serving/http_server.h carries the requests to it).
//
// Versions (TensorFlow Serving's "latest" policy): Start loads the highest
// version under model_base_path (a subdirectory named by an integer) and
// serves it. Every file_system_poll_wait the directory is listed again; a
// higher version is loaded on the Runtime's pool, then switched to at once:
// requests that started on the old version finish on it, later ones use the
// new one, and the old version is unloaded when its last request finished
// (state UNLOADING, then END). A version that fails to load is reported
// (END with its error) and not retried; the current one keeps serving.
//
// Routes (the paths of TensorFlow Serving's REST API, matched as its own
// regular expressions, case-insensitively):
//   GET  /v1/models/{name}[/versions/{v}]             model status
//   GET  /v1/models/{name}[/versions/{v}]/metadata    signatures
//   POST /v1/models/{name}[/versions/{v}]:predict     row or columnar body
//   POST /v1/models/{name}[/versions/{v}]:classify    examples (rest_json.h)
//   POST /v1/models/{name}[/versions/{v}]:regress     examples
//   any  /monitoring/prometheus/metrics               Prometheus text
// Errors are {"error": "..."} with TensorFlow Serving's codes: 400 for a
// malformed path or body (the message naming the input), 404 for an unknown
// model or version, 503 when the batching queue is full, 504 past
// rest_api_timeout; its messages ("Servable not found for request:
// Latest(m)", "Malformed request: PUT /v1/...").
//
// Thread safety: Handle, PollNow and Stop must be called on the executor
// Start ran on (one io_context thread); graph runs go to the Runtime's pool
// and complete back there.
#ifndef COSESSION_SERVING_MODEL_SERVER_H_
#define COSESSION_SERVING_MODEL_SERVER_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cosession/async/runtime.h"
#include "cosession/serving/batching_session.h"
#include "cosession/serving/saved_model.h"

namespace cosession {

// The flags of tensorflow_model_server that cosession_serve takes.
struct ModelServerOptions {
  std::string model_name = "default";
  std::string model_base_path{};
  bool enable_batching = false;
  BatchingOptions batching{};
  // Between two listings of model_base_path; zero or less: never again
  // after Start.
  std::chrono::milliseconds file_system_poll_wait{1000};
  // A predict's deadline; zero or less: none.
  std::chrono::milliseconds rest_api_timeout{30000};
};

struct HttpReply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body{};
};

// TensorFlow Serving's HTTP status for a status code (OK 200,
// InvalidArgument 400, NotFound 404, Unavailable 503, DeadlineExceeded 504,
// Cancelled 499, ...).
unsigned HttpStatusOf(absl::StatusCode code);

class ModelServer : public std::enable_shared_from_this<ModelServer> {
 public:
  inline static constexpr char kPrometheusPath[] =
      "/monitoring/prometheus/metrics";

  // Loads the highest version and starts polling. InvalidArgument naming
  // the flag for a bad option; NotFound when model_base_path does not exist
  // or holds no version; the load's error naming the version otherwise.
  static boost::asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
  Start(ModelServerOptions options, Runtime& runtime);

  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;
  ~ModelServer();

  // One request; `target` is the request target (path and query).
  // Cancellable (per-operation cancellation through the awaiting
  // coroutine): a predict still queued is dropped and answered 499.
  boost::asio::awaitable<HttpReply> Handle(std::string method,
                                           std::string target,
                                           std::string body);

  // Lists model_base_path now and loads a higher version if there is one
  // (what each poll does).
  boost::asio::awaitable<void> PollNow();

  // Stops polling; requests in flight finish.
  void Stop();

  // The version new requests are served by.
  int64_t serving_version() const;
  const ModelServerOptions& options() const { return options_; }

 private:
  struct ServedVersion;
  struct VersionState {
    std::string state;  // LOADING, AVAILABLE, UNLOADING, END
    absl::Status status;
  };
  struct Metrics;

  ModelServer(ModelServerOptions options, Runtime& runtime,
              boost::asio::any_io_executor executor);
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<ServedVersion>>> Load(
      int64_t version);
  boost::asio::awaitable<void> PollLoop();
  void Retire(int64_t version);

  HttpReply Status(const std::string& name, std::optional<int64_t> version);
  HttpReply Metadata(const std::string& name, std::optional<int64_t> version);
  // :predict, :classify or :regress (`verb`).
  boost::asio::awaitable<HttpReply> Predict(std::string name,
                                            std::optional<int64_t> version,
                                            std::string verb, std::string body);
  // One run of a signature: through its batcher when batching, else
  // straight on the version's session.
  boost::asio::awaitable<absl::StatusOr<NamedTensors>> RunSignature(
      std::shared_ptr<ServedVersion> served, std::string signature_name,
      NamedTensors inputs);
  HttpReply PrometheusText() const;

  const ModelServerOptions options_;
  Runtime& runtime_;
  boost::asio::any_io_executor executor_;
  boost::asio::steady_timer poll_timer_;
  bool stopped_ = false;
  bool polling_ = false;  // a listing or load in progress
  std::shared_ptr<ServedVersion> current_;
  std::map<int64_t, VersionState, std::greater<>> states_;
  std::unique_ptr<Metrics> metrics_;
};

}  // namespace cosession

#endif  // COSESSION_SERVING_MODEL_SERVER_H_
