// ModelServer: models' versions under their base paths, answering
// TensorFlow Serving's REST API -- the HTTP-free half of cosession_serve
// (serving/http_server.h carries the requests to it).
//
// Models: one (model_name, model_base_path), or the list of a
// --model_config_file (serving/model_server_config.h), each with its
// version policy and labels; the file may be read again to add, remove
// and change models (ReloadConfigNow).
//
// Versions (TensorFlow Serving's policies; "latest" keeps the highest
// one): Start loads the versions each model's policy serves and serves
// them. Every file_system_poll_wait the base paths are listed again; a
// version the policy now serves is loaded on the Runtime's pool, then
// served at once, and versions the policy no longer serves are unloaded
// once a version it serves is available: requests that started on a
// version finish on it, and it ends (state UNLOADING, then END) when its
// last request finished. A version that fails to load is reported (END
// with its error) and not retried; the versions already served keep
// serving. A request naming no version is answered by the highest served
// one; a label answers by the version the config gives it.
//
// Routes (the paths of TensorFlow Serving's REST API, matched as its own
// regular expressions, case-insensitively):
//   GET  /v1/models/{name}[/versions/{v}]             model status
//   GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata    signatures
//   POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict     row or
//                                                                  columnar
//   POST .../{name}[/versions/{v}|/labels/{l}]:classify   examples
//   POST .../{name}[/versions/{v}|/labels/{l}]:regress    (rest_json.h)
//   any  /monitoring/prometheus/metrics               Prometheus text (or
//                                                     prometheus_path)
//   OPTIONS /v1/...                                   CORS preflight
// Errors are {"error": "..."} with TensorFlow Serving's codes: 400 for a
// malformed path or body (the message naming the input) or an unknown
// label, 404 for an unknown model or version, 503 when the batching queue
// is full, 504 past rest_api_timeout; its messages ("Servable not found for
// request: Latest(m)", "Malformed request: PUT /v1/...", "Unrecognized
// servable version label: l").
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
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/runtime.h"
#include "cosession/serving/batching_session.h"
#include "cosession/serving/model_server_config.h"
#include "cosession/serving/monitoring_config.h"
#include "cosession/serving/saved_model.h"

namespace cosession {

// The flags of tensorflow_model_server that cosession_serve takes.
struct ModelServerOptions {
  std::string model_name = "default";
  std::string model_base_path{};
  // --model_config_file's models; when not empty, model_name and
  // model_base_path are not used (as in TensorFlow Serving).
  std::vector<ModelConfig> model_config_list{};
  // The file model_config_list came from, read again every
  // model_config_file_poll_wait (zero or less: never) to apply changes.
  std::string model_config_file{};
  std::chrono::milliseconds model_config_file_poll_wait{0};
  bool enable_batching = false;
  BatchingOptions batching{};
  // Between two listings of model_base_path; zero or less: never again
  // after Start.
  std::chrono::milliseconds file_system_poll_wait{1000};
  // A predict's deadline; zero or less: none.
  std::chrono::milliseconds rest_api_timeout{30000};
  // Request bodies at least this big are parsed on the runtime's pool,
  // so that the event loop keeps answering the other connections
  // meanwhile (a 64 MiB body takes ~0.1 s); smaller ones on the loop, where
  // the parse costs less than the hop. 0: every body on the pool.
  size_t parse_on_pool_bytes = 64 * 1024;
  // --rest_api_enable_cors_support: every answer under /v1/ carries
  // TensorFlow Serving's CORS headers (Access-Control-Allow-Origin: *,
  // -Methods: POST, GET, -Headers: Content-Type).
  bool enable_cors_support = false;
  // The Prometheus page (--monitoring_config_file,
  // serving/monitoring_config.h): whether it is served, and where (empty:
  // kDefaultPrometheusPath).
  bool enable_prometheus = true;
  std::string prometheus_path{};
  // --allow_version_labels_for_unavailable_models: a label may name a
  // version that is not (yet) served -- unless the label already names
  // another version, which it then keeps until the new one is served --
  // as TensorFlow Serving allows it; a request by that label is 404 until
  // the version is served. Without it such a label fails Start, and a
  // config reload drops it.
  bool allow_version_labels_for_unavailable_models = false;
  // --enable_signature_method_name_check: a predict on a signature whose
  // method_name is not predict, classify or regress is 500 "Expected
  // prediction signature method_name to be one of {...}. Was: ...", as
  // in TensorFlow Serving; without it any signature predicts.
  bool enable_signature_method_name_check = false;
};

struct HttpReply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body{};
  // Further header fields, written as given.
  std::vector<std::pair<std::string, std::string>> headers{};
  // The connection is closed after this answer ("Connection: close"), even
  // when the client asked to keep it alive.
  bool close_connection = false;
};

// TensorFlow Serving's HTTP status for a status code (OK 200,
// InvalidArgument 400, NotFound 404, Unavailable 503, DeadlineExceeded 504,
// Cancelled 499, ...).
unsigned HttpStatusOf(absl::StatusCode code);

class ModelServer : public std::enable_shared_from_this<ModelServer> {
 public:
  // The Prometheus page's default place (ModelServerOptions::prometheus_path).
  inline static constexpr const char* kPrometheusPath = kDefaultPrometheusPath;

  // Loads the versions each model's policy serves and starts polling.
  // A base path that does not exist yet, or holds no version the policy
  // serves, is waited for as TensorFlow Serving waits for it: listed again
  // every file_system_poll_wait (the reason written to stderr once, "No
  // versions of servable m found under base path /p. Did you forget to
  // name your leaf directory as a number (eg. '/1/')?") until a version
  // appears; without polling (file_system_poll_wait <= 0) that is NotFound
  // at once. Cancelling the wait (per-operation cancellation of the
  // awaiting coroutine, e.g. a SIGTERM meanwhile) completes it with
  // Cancelled. InvalidArgument naming the flag for a bad option, or a label
  // on a version that is not served (unless
  // allow_version_labels_for_unavailable_models); the load's error naming
  // the model and
  // version otherwise (a version that does not load is not waited past).
  static boost::asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
  Start(ModelServerOptions options, Runtime& runtime);

  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;
  ~ModelServer();

  // One request; `target` is the request target (path and query),
  // `origin` its Origin header ("" without one). Cancellable
  // (per-operation cancellation through the awaiting coroutine): a predict
  // still queued is dropped and answered 499.
  // A CORS preflight (OPTIONS of a path under /v1/) is answered as
  // TensorFlow Serving answers it: 200 with an empty body when `origin`
  // holds "http://" or "https://", else 400 "Origin header is missing in
  // CORS preflight"; the CORS headers come with it only under
  // enable_cors_support. A path outside /v1/ (but the Prometheus page's)
  // gets TensorFlow Serving's 404: libevent's HTML page, and the
  // connection closed.
  boost::asio::awaitable<HttpReply> Handle(std::string method,
                                           std::string target, std::string body,
                                           std::string origin = {});

  // Lists the base paths now, loads the versions the policies now serve
  // and unloads those they no longer serve (what each poll does).
  boost::asio::awaitable<void> PollNow();

  // Reads model_config_file now and applies it (what each config poll
  // does): models added are loaded, models removed are unloaded (their
  // requests in flight finish; new ones are 404), the others take their
  // new base path, policy and labels (a label naming a version not served
  // is dropped, and said, unless allow_version_labels_for_unavailable_models
  // lets it stay). A file that does not read or parse is said on
  // stderr and returned, and the models served stay as they were;
  // Unavailable while a poll or load is in progress.
  boost::asio::awaitable<absl::Status> ReloadConfigNow();

  // Stops polling; requests in flight finish.
  void Stop();

  // The version new requests naming none are served by: of `model`, or of
  // the first model (by name) when it is empty; -1 when there is none.
  int64_t serving_version(const std::string& model = "") const;
  const ModelServerOptions& options() const { return options_; }

 private:
  struct ServedVersion;
  struct VersionState {
    std::string state;  // LOADING, AVAILABLE, UNLOADING, END
    absl::Status status;
  };
  // One configured model and its versions.
  struct Model {
    ModelConfig config;
    std::map<int64_t, std::shared_ptr<ServedVersion>> served;
    std::map<int64_t, VersionState, std::greater<>> states;
  };
  struct Metrics;

  ModelServer(ModelServerOptions options, Runtime& runtime,
              boost::asio::any_io_executor executor);
  // Start's work; Start turns its exceptions into statuses and leaves the
  // coroutine's cancellation state clean for its caller's co_spawn.
  static boost::asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
  StartModels(ModelServerOptions options, Runtime& runtime);
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<ServedVersion>>> Load(
      std::string model, int64_t version);
  // The coroutines below take a Model by reference: models_ owns it, and
  // no model is erased while they run (Start runs them before any poll;
  // a poll holds polling_, and only a poll erases models).
  // The versions of `model` its policy serves, once there are any (Start's
  // wait for a first version).
  boost::asio::awaitable<absl::StatusOr<std::vector<int64_t>>>
  AwaitVersionsToServe(Model& model);
  // Loads the versions of `wanted` not tried yet; OK, or the first load's
  // error.
  boost::asio::awaitable<absl::Status> LoadWanted(Model& model,
                                                  std::vector<int64_t> wanted);
  boost::asio::awaitable<void> PollLoop();
  boost::asio::awaitable<void> ConfigPollLoop();
  // Lists `model`'s base path, loads the versions its policy wants and
  // unloads the others once one it wants serves.
  boost::asio::awaitable<void> Refresh(Model& model);
  void Retire(const std::string& model, int64_t version);
  // The version a request names (by number, label, or neither: the
  // highest served), or TensorFlow Serving's error.
  absl::StatusOr<std::shared_ptr<ServedVersion>> Resolve(
      const std::string& name, std::optional<int64_t> version,
      const std::optional<std::string>& label) const;
  // The model label a request's metrics carry: its name when it is served,
  // "" otherwise (so that unknown names cannot grow the metrics).
  std::string MetricsModel(const std::string& name) const;

  // Handle's routing of a path under /v1/, after the CORS preflight and
  // before its headers.
  boost::asio::awaitable<HttpReply> Route(std::string method, std::string path,
                                          std::string body);
  HttpReply Status(const std::string& name, std::optional<int64_t> version);
  HttpReply Metadata(const std::string& name, std::optional<int64_t> version,
                     const std::optional<std::string>& label);
  // :predict, :classify or :regress (`verb`).
  boost::asio::awaitable<HttpReply> Predict(std::string name,
                                            std::optional<int64_t> version,
                                            std::optional<std::string> label,
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
  boost::asio::steady_timer config_timer_;
  bool stopped_ = false;
  bool polling_ = false;  // a listing or load in progress
  std::map<std::string, std::unique_ptr<Model>> models_;  // by name
  std::unique_ptr<Metrics> metrics_;
};

}  // namespace cosession

#endif  // COSESSION_SERVING_MODEL_SERVER_H_
