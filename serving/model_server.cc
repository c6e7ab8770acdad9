#include "cosession/serving/model_server.h"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/atomic_file.h"
#include "cosession/serving/rest_json.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using SteadyClock = std::chrono::steady_clock;

// TensorFlow Serving's request latency buckets: Exponential(10, 1.8, 33)
// microseconds, then +Inf.
constexpr int kLatencyBuckets = 33;

HttpReply JsonReply(unsigned status, std::string body) {
  HttpReply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

HttpReply ErrorReply(const absl::Status& status) {
  return JsonReply(HttpStatusOf(status.code()),
                   RenderErrorBody(status.message()));
}

std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

// Percent-decoding of a path segment; nullopt for a bad escape.
std::optional<std::string> UrlDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !absl::ascii_isxdigit(s[i + 1]) ||
        !absl::ascii_isxdigit(s[i + 2])) {
      return std::nullopt;
    }
    auto digit = [](char c) {
      return absl::ascii_isdigit(c) ? c - '0'
                                    : absl::ascii_tolower(c) - 'a' + 10;
    };
    out += static_cast<char>(digit(s[i + 1]) * 16 + digit(s[i + 2]));
    i += 2;
  }
  return out;
}

std::string TfDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "DT_FLOAT";
    case DType::kDouble:
      return "DT_DOUBLE";
    case DType::kInt32:
      return "DT_INT32";
    case DType::kInt64:
      return "DT_INT64";
    case DType::kBool:
      return "DT_BOOL";
  }
  return "DT_INVALID";
}

json::object TensorInfoJson(const SignatureTensor& t) {
  json::array dims;
  if (!t.shape.unknown_rank()) {
    for (int64_t d : t.shape.dim_sizes()) {
      dims.push_back(json::object{{"size", absl::StrCat(d)}, {"name", ""}});
    }
  }
  return json::object{
      {"dtype", TfDTypeName(t.dtype)},
      {"tensor_shape", json::object{{"dim", std::move(dims)},
                                    {"unknown_rank", t.shape.unknown_rank()}}},
      {"name", t.tensor.valid() ? t.tensor.name() : std::string()}};
}

std::string ServableNotFound(const std::string& name,
                             std::optional<int64_t> version) {
  return version ? absl::StrCat("Servable not found for request: Specific(",
                                name, ", ", *version, ")")
                 : absl::StrCat("Servable not found for request: Latest(", name,
                                ")");
}

// Prometheus label values escape backslash, quote and newline.
std::string LabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The parts of a REST path, matched as TensorFlow Serving's regular
// expressions match them (case-insensitive literals):
//   POST
//   (?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)
//   GET
//   (?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?
// By hand rather than with std::regex: g++ 12 reports its internals as
// maybe-uninitialized in the sanitizer builds, and a path is matched per
// request.
struct RestPath {
  std::optional<std::string> name;
  std::optional<std::string> version;  // digits, not yet converted
  std::optional<std::string> label;
  std::string verb;  // as written: the verb compares case-sensitively
};

bool ConsumeIgnoringCase(absl::string_view& s, absl::string_view prefix) {
  if (s.size() < prefix.size() ||
      !absl::EqualsIgnoreCase(s.substr(0, prefix.size()), prefix)) {
    return false;
  }
  s.remove_prefix(prefix.size());
  return true;
}

// [^/:]+ (empty when there is none).
absl::string_view TakeSegment(absl::string_view& s) {
  size_t n = 0;
  while (n < s.size() && s[n] != '/' && s[n] != ':') ++n;
  absl::string_view segment = s.substr(0, n);
  s.remove_prefix(n);
  return segment;
}

// The optional "/versions/N" or "/labels/L".
void TakeVersionOrLabel(absl::string_view& s, RestPath& path) {
  absl::string_view rest = s;
  if (ConsumeIgnoringCase(rest, "/versions/")) {
    size_t n = 0;
    while (n < rest.size() && absl::ascii_isdigit(rest[n])) ++n;
    if (n > 0) {
      path.version = std::string(rest.substr(0, n));
      rest.remove_prefix(n);
      s = rest;
    }
    return;
  }
  if (ConsumeIgnoringCase(rest, "/labels/")) {
    absl::string_view label = TakeSegment(rest);
    if (!label.empty()) {
      path.label = std::string(label);
      s = rest;
    }
  }
}

std::optional<RestPath> MatchPredictPath(absl::string_view s) {
  RestPath path;
  if (!ConsumeIgnoringCase(s, "/v1/models/")) return std::nullopt;
  absl::string_view name = TakeSegment(s);
  if (name.empty()) return std::nullopt;
  path.name = std::string(name);
  TakeVersionOrLabel(s, path);
  if (s.empty() || s.front() != ':') return std::nullopt;
  s.remove_prefix(1);
  if (!absl::EqualsIgnoreCase(s, "classify") &&
      !absl::EqualsIgnoreCase(s, "regress") &&
      !absl::EqualsIgnoreCase(s, "predict")) {
    return std::nullopt;
  }
  path.verb = std::string(s);
  return path;
}

std::optional<RestPath> MatchStatusPath(absl::string_view s) {
  RestPath path;
  if (!ConsumeIgnoringCase(s, "/v1/models")) return std::nullopt;
  if (!s.empty() && s.front() == '/') {
    absl::string_view rest = s.substr(1);
    absl::string_view name = TakeSegment(rest);
    if (!name.empty()) {
      path.name = std::string(name);
      s = rest;
    }
  }
  TakeVersionOrLabel(s, path);
  if (!s.empty()) {
    absl::string_view rest = s;
    if (!ConsumeIgnoringCase(rest, "/") ||
        !absl::EqualsIgnoreCase(rest, "metadata")) {
      return std::nullopt;
    }
    path.verb = std::string(rest);
  }
  return path;
}

}  // namespace

unsigned HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    default:
      return 500;
  }
}

struct ModelServer::ServedVersion {
  int64_t version = 0;
  // Shared with the batchers, whose batches may still run after the last
  // request left (a client that went away).
  std::shared_ptr<SavedModel> model;
  std::map<std::string, std::unique_ptr<BatchingSession>> batchers;
};

struct ModelServer::Metrics {
  struct Latency {
    std::array<int64_t, kLatencyBuckets + 1> buckets{};
    double sum_us = 0;
    int64_t count = 0;
  };
  std::map<std::string, int64_t> requests_by_status;
  // By API (predict, classify, regress); predict's is there from the start,
  // as a scraper expects it.
  std::map<std::string, Latency> latency_by_api{{"predict", Latency{}}};

  void Record(absl::StatusCode code) { ++requests_by_status[CodeName(code)]; }
  void RecordLatency(const std::string& api, std::chrono::nanoseconds took) {
    const double us = std::chrono::duration<double, std::micro>(took).count();
    int bucket = 0;
    double limit = 10;
    while (bucket < kLatencyBuckets && us > limit) {
      ++bucket;
      limit *= 1.8;
    }
    Latency& latency = latency_by_api[api];
    ++latency.buckets[bucket];
    latency.sum_us += us;
    ++latency.count;
  }
};

ModelServer::ModelServer(ModelServerOptions options, Runtime& runtime,
                         asio::any_io_executor executor)
    : options_(std::move(options)),
      runtime_(runtime),
      executor_(executor),
      poll_timer_(executor),
      metrics_(std::make_unique<Metrics>()) {}

ModelServer::~ModelServer() = default;

asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
ModelServer::Start(ModelServerOptions options, Runtime& runtime) {
  if (options.model_base_path.empty()) {
    co_return absl::InvalidArgumentError("--model_base_path is required");
  }
  if (options.model_name.empty()) {
    co_return absl::InvalidArgumentError("--model_name must not be empty");
  }
  asio::any_io_executor executor = co_await asio::this_coro::executor;
  std::shared_ptr<ModelServer> server(
      new ModelServer(std::move(options), runtime, executor));
  const ModelServerOptions& o = server->options_;
  absl::StatusOr<std::vector<int64_t>> versions =
      ListSavedModelVersions(o.model_base_path);
  if (!versions.ok()) {
    co_return absl::NotFoundError(absl::StrCat(
        "Could not find base path ", o.model_base_path, " for servable ",
        o.model_name, ": ", versions.status().message()));
  }
  if (versions->empty()) {
    co_return absl::NotFoundError(absl::StrCat(
        "no version of servable ", o.model_name, " under ", o.model_base_path,
        ": name each version's directory by its number, e.g. ",
        JoinPath(o.model_base_path, "1")));
  }
  const int64_t version = versions->back();
  server->states_[version] = {"LOADING", absl::OkStatus()};
  absl::StatusOr<std::shared_ptr<ServedVersion>> loaded =
      co_await server->Load(version);
  if (!loaded.ok()) {
    co_return absl::Status(
        loaded.status().code(),
        absl::StrCat("servable ", o.model_name, " version ", version,
                     " did not load: ", loaded.status().message()));
  }
  server->current_ = *std::move(loaded);
  server->states_[version] = {"AVAILABLE", absl::OkStatus()};
  if (o.file_system_poll_wait.count() > 0) {
    asio::co_spawn(executor, server->PollLoop(), [](std::exception_ptr error) {
      if (error) {
        std::fprintf(stderr,
                     "cosession: the version poll ended with "
                     "an exception\n");
      }
    });
  }
  co_return server;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer::ServedVersion>>>
ModelServer::Load(int64_t version) {
  const std::string path =
      JoinPath(options_.model_base_path, absl::StrCat(version));
  // The files are read and parsed on the pool, not on the event loop.
  absl::StatusOr<std::unique_ptr<SavedModel>> model = co_await asio::co_spawn(
      runtime_.executor(), LoadSavedModel(path, runtime_), asio::use_awaitable);
  if (!model.ok()) co_return model.status();
  auto served = std::make_unique<ServedVersion>();
  served->version = version;
  served->model = std::shared_ptr<SavedModel>(*std::move(model));
  if (options_.enable_batching) {
    for (const auto& [name, signature] : served->model->signatures) {
      absl::StatusOr<std::unique_ptr<BatchingSession>> batcher =
          BatchingSession::Create(*served->model->session, signature,
                                  options_.batching, served->model);
      if (!batcher.ok()) co_return batcher.status();
      served->batchers.emplace(name, *std::move(batcher));
    }
  }
  // When its last request is done: END.
  std::weak_ptr<ModelServer> weak = weak_from_this();
  asio::any_io_executor executor = executor_;
  co_return std::shared_ptr<ServedVersion>(
      served.release(), [weak, executor, version](ServedVersion* v) {
        delete v;
        asio::post(executor, [weak, version] {
          if (std::shared_ptr<ModelServer> server = weak.lock()) {
            server->Retire(version);
          }
        });
      });
}

void ModelServer::Retire(int64_t version) {
  auto it = states_.find(version);
  if (it != states_.end() && it->second.state == "UNLOADING") {
    it->second.state = "END";
  }
}

asio::awaitable<void> ModelServer::PollLoop() {
  std::shared_ptr<ModelServer> self = shared_from_this();
  while (!stopped_) {
    poll_timer_.expires_after(options_.file_system_poll_wait);
    // Cancelled by Stop, or the interval passed: stopped_ tells which.
    (void)co_await poll_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (stopped_) break;
    co_await PollNow();
  }
}

asio::awaitable<void> ModelServer::PollNow() {
  if (polling_ || stopped_) co_return;
  polling_ = true;
  absl::StatusOr<std::vector<int64_t>> versions =
      ListSavedModelVersions(options_.model_base_path);
  const int64_t serving = serving_version();
  if (versions.ok() && !versions->empty() && versions->back() > serving &&
      !states_.contains(versions->back())) {
    const int64_t version = versions->back();
    states_[version] = {"LOADING", absl::OkStatus()};
    absl::StatusOr<std::shared_ptr<ServedVersion>> loaded =
        co_await Load(version);
    if (!loaded.ok()) {
      std::fprintf(stderr, "cosession_serve: version %lld did not load: %s\n",
                   static_cast<long long>(version),
                   loaded.status().ToString().c_str());
      states_[version] = {"END", loaded.status()};
    } else {
      states_[version] = {"AVAILABLE", absl::OkStatus()};
      if (current_ != nullptr) {
        states_[current_->version] = {"UNLOADING", absl::OkStatus()};
      }
      current_ = *std::move(loaded);  // the old one goes with its requests
      std::fprintf(stderr, "cosession_serve: serving version %lld\n",
                   static_cast<long long>(version));
    }
  }
  polling_ = false;
}

void ModelServer::Stop() {
  stopped_ = true;
  poll_timer_.cancel();
}

int64_t ModelServer::serving_version() const {
  return current_ != nullptr ? current_->version : -1;
}

asio::awaitable<HttpReply> ModelServer::Handle(std::string method,
                                               std::string target,
                                               std::string body) {
  const std::string path = target.substr(0, target.find_first_of("?#"));
  if (path == kPrometheusPath) co_return PrometheusText();
  if (!absl::StartsWithIgnoreCase(path, "/v1/")) {
    co_return JsonReply(
        404, RenderErrorBody(absl::StrCat("Not found: ", path,
                                          " (the REST API is under /v1/)")));
  }
  const absl::Status malformed = absl::InvalidArgumentError(
      absl::StrCat("Malformed request: ", method, " ", path));
  std::optional<RestPath> parts;
  if (method == "POST") parts = MatchPredictPath(path);
  if (method == "GET") parts = MatchStatusPath(path);
  if (!parts) co_return ErrorReply(malformed);
  std::optional<std::string> name;
  if (parts->name) {
    name = UrlDecode(*parts->name);
    if (!name) co_return ErrorReply(malformed);
  }
  std::optional<int64_t> version;
  if (parts->version) {
    int64_t v;
    if (!absl::SimpleAtoi(*parts->version, &v)) {
      co_return ErrorReply(absl::InvalidArgumentError(absl::StrCat(
          "Failed to convert version: ", *parts->version, " to numeric.")));
    }
    version = v;
  }
  if (method == "GET") {
    if (!name) {
      co_return ErrorReply(
          absl::InvalidArgumentError("Missing model name in request."));
    }
    // As TensorFlow Serving: the verb compares case-sensitively, and a
    // status request ignores a label.
    if (parts->verb == "metadata") {
      if (parts->label) {
        co_return ErrorReply(absl::InvalidArgumentError(absl::StrCat(
            "Unrecognized servable version label: ", *parts->label)));
      }
      co_return Metadata(*name, version);
    }
    co_return Status(*name, version);
  }
  const std::string& verb = parts->verb;
  if (verb != "predict" && verb != "classify" && verb != "regress") {
    co_return ErrorReply(malformed);
  }
  if (parts->label) {
    co_return ErrorReply(absl::InvalidArgumentError(
        absl::StrCat("Unrecognized servable version label: ", *parts->label)));
  }
  co_return co_await Predict(*std::move(name), version, verb, std::move(body));
}

HttpReply ModelServer::Status(const std::string& name,
                              std::optional<int64_t> version) {
  if (name != options_.model_name) {
    metrics_->Record(absl::StatusCode::kNotFound);
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("Could not find any versions of model ", name)));
  }
  json::array list;
  for (const auto& [v, state] : states_) {
    if (version && v != *version) continue;
    list.push_back(json::object{
        {"version", absl::StrCat(v)},
        {"state", state.state},
        {"status", json::object{{"error_code", CodeName(state.status.code())},
                                {"error_message",
                                 std::string(state.status.message())}}}});
  }
  if (version && list.empty()) {
    metrics_->Record(absl::StatusCode::kNotFound);
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("Could not find version ", *version, " of model ", name)));
  }
  metrics_->Record(absl::StatusCode::kOk);
  return JsonReply(
      200,
      json::serialize(json::object{{"model_version_status", std::move(list)}}));
}

HttpReply ModelServer::Metadata(const std::string& name,
                                std::optional<int64_t> version) {
  std::shared_ptr<ServedVersion> served = current_;
  if (name != options_.model_name || served == nullptr ||
      (version && *version != served->version)) {
    metrics_->Record(absl::StatusCode::kNotFound);
    return ErrorReply(absl::NotFoundError(ServableNotFound(name, version)));
  }
  json::object signatures;
  for (const auto& [sig_name, sig] : served->model->signatures) {
    json::object inputs, outputs;
    for (const auto& [key, t] : sig.inputs) inputs[key] = TensorInfoJson(t);
    for (const auto& [key, t] : sig.outputs) outputs[key] = TensorInfoJson(t);
    signatures[sig_name] = json::object{{"inputs", std::move(inputs)},
                                        {"outputs", std::move(outputs)},
                                        {"method_name", sig.method_name},
                                        {"defaults", json::object{}}};
  }
  metrics_->Record(absl::StatusCode::kOk);
  return JsonReply(
      200, json::serialize(json::object{
               {"model_spec",
                json::object{{"name", name},
                             {"signature_name", ""},
                             {"version", absl::StrCat(served->version)}}},
               {"metadata",
                json::object{{"signature_def",
                              json::object{{"signature_def",
                                            std::move(signatures)}}}}}}));
}

asio::awaitable<absl::StatusOr<NamedTensors>> ModelServer::RunSignature(
    std::shared_ptr<ServedVersion> served, std::string signature_name,
    NamedTensors inputs) {
  RunOptions run_options;
  if (options_.rest_api_timeout.count() > 0) {
    run_options.timeout = options_.rest_api_timeout;
  }
  auto batcher = served->batchers.find(signature_name);
  if (batcher != served->batchers.end()) {
    // The batcher checks the inputs against the signature itself.
    co_return co_await batcher->second->Run(std::move(inputs), run_options,
                                            asio::use_awaitable);
  }
  const Signature& sig = served->model->signatures.at(signature_name);
  if (absl::StatusOr<int64_t> rows = CheckSignatureInputs(sig, inputs);
      !rows.ok()) {
    co_return rows.status();
  }
  RunArgs args;
  args.options = run_options;
  std::vector<std::string> names;
  for (const auto& [key, t] : sig.outputs) {
    args.fetches.push_back(t.tensor);
    names.push_back(key);
  }
  for (auto& [key, t] : inputs) {
    args.feeds.emplace_back(sig.inputs.at(key).tensor, std::move(t));
  }
  absl::StatusOr<std::vector<Tensor>> ran =
      co_await served->model->session->Run(std::move(args),
                                           asio::use_awaitable);
  if (!ran.ok()) co_return ran.status();
  NamedTensors named;
  for (size_t i = 0; i < names.size(); ++i) {
    named.emplace(names[i], std::move((*ran)[i]));
  }
  co_return named;
}

asio::awaitable<HttpReply> ModelServer::Predict(std::string name,
                                                std::optional<int64_t> version,
                                                std::string verb,
                                                std::string body) {
  const SteadyClock::time_point start = SteadyClock::now();
  // Held until the answer: a version switch leaves this request on the
  // version it started on.
  std::shared_ptr<ServedVersion> served = current_;
  if (name != options_.model_name || served == nullptr ||
      (version && *version != served->version)) {
    metrics_->Record(absl::StatusCode::kNotFound);
    co_return ErrorReply(absl::NotFoundError(ServableNotFound(name, version)));
  }
  const std::map<std::string, Signature>& signatures =
      served->model->signatures;
  std::string signature_name;
  NamedTensors inputs;
  // What renders the outputs: the request's format or method.
  std::function<absl::StatusOr<std::string>(const NamedTensors&)> render;
  if (verb == "predict") {
    absl::StatusOr<PredictRequest> request =
        ParsePredictRequest(body, signatures);
    if (!request.ok()) {
      metrics_->Record(request.status().code());
      co_return ErrorReply(request.status());
    }
    signature_name = std::move(request->signature_name);
    inputs = std::move(request->inputs);
    render = [format = request->format](const NamedTensors& outputs) {
      return RenderPredictResponse(format, outputs);
    };
  } else {
    const ExamplesMethod method = verb == "classify" ? ExamplesMethod::kClassify
                                                     : ExamplesMethod::kRegress;
    absl::StatusOr<ExamplesRequest> request =
        ParseExamplesRequest(body, method, signatures);
    if (!request.ok()) {
      metrics_->Record(request.status().code());
      co_return ErrorReply(request.status());
    }
    signature_name = std::move(request->signature_name);
    inputs = std::move(request->inputs);
    render = [method, n = request->num_examples](const NamedTensors& outputs) {
      return RenderExamplesResponse(method, outputs, n);
    };
  }
  absl::StatusOr<NamedTensors> outputs = co_await RunSignature(
      served, std::move(signature_name), std::move(inputs));
  if (!outputs.ok()) {
    metrics_->Record(outputs.status().code());
    co_return ErrorReply(outputs.status());
  }
  absl::StatusOr<std::string> rendered = render(*outputs);
  if (!rendered.ok()) {
    metrics_->Record(rendered.status().code());
    co_return ErrorReply(rendered.status());
  }
  metrics_->Record(absl::StatusCode::kOk);
  metrics_->RecordLatency(verb, SteadyClock::now() - start);
  co_return JsonReply(200, *std::move(rendered));
}

HttpReply ModelServer::PrometheusText() const {
  const std::string model = LabelValue(options_.model_name);
  std::string out = "# TYPE :tensorflow:serving:request_count counter\n";
  for (const auto& [code, count] : metrics_->requests_by_status) {
    absl::StrAppend(&out, ":tensorflow:serving:request_count{model_name=\"",
                    model, "\",status=\"", code, "\"} ", count, "\n");
  }
  out += "# TYPE :tensorflow:serving:request_latency histogram\n";
  for (const auto& [api, latency] : metrics_->latency_by_api) {
    const std::string latency_labels = absl::StrCat(
        "model_name=\"", model, "\",API=\"", api, "\",entrypoint=\"REST\"");
    int64_t cumulative = 0;
    double limit = 10;
    for (int i = 0; i <= kLatencyBuckets; ++i) {
      cumulative += latency.buckets[i];
      const std::string le =
          i < kLatencyBuckets ? absl::StrCat(limit) : std::string("+Inf");
      absl::StrAppend(&out, ":tensorflow:serving:request_latency_bucket{",
                      latency_labels, ",le=\"", le, "\"} ", cumulative, "\n");
      limit *= 1.8;
    }
    absl::StrAppend(&out, ":tensorflow:serving:request_latency_sum{",
                    latency_labels, "} ", latency.sum_us, "\n",
                    ":tensorflow:serving:request_latency_count{",
                    latency_labels, "} ", latency.count, "\n");
  }
  if (current_ != nullptr && !current_->batchers.empty()) {
    out +=
        "# TYPE :tensorflow:serving:batching_session:processed_batch_size "
        "histogram\n";
    std::map<int64_t, int64_t> sizes;
    int64_t queued = 0, batches = 0, rows = 0, cancelled = 0;
    for (const auto& [name, batcher] : current_->batchers) {
      const BatchingStats stats = batcher->stats();
      for (const auto& [size, count] : stats.batch_sizes) {
        sizes[size] += count;
        rows += size * count;
      }
      batches += stats.batches;
      queued += stats.queued_requests;
      cancelled += stats.cancelled;
    }
    int64_t below = 0;
    for (const auto& [size, count] : sizes) {
      below += count;
      absl::StrAppend(&out,
                      ":tensorflow:serving:batching_session:processed_batch_"
                      "size_bucket{le=\"",
                      size, "\"} ", below, "\n");
    }
    absl::StrAppend(
        &out,
        ":tensorflow:serving:batching_session:processed_batch_size_bucket{le="
        "\"+Inf\"} ",
        batches, "\n",
        ":tensorflow:serving:batching_session:processed_batch_size_sum{} ",
        rows, "\n",
        ":tensorflow:serving:batching_session:processed_batch_size_count{} ",
        batches, "\n", "# TYPE :cosession:serving:batching_queue_depth gauge\n",
        ":cosession:serving:batching_queue_depth{model_name=\"", model, "\"} ",
        queued, "\n",
        "# TYPE :cosession:serving:batching_cancelled_requests counter\n",
        ":cosession:serving:batching_cancelled_requests{model_name=\"", model,
        "\"} ", cancelled, "\n");
  }
  HttpReply reply;
  reply.content_type = "text/plain; version=0.0.4";
  reply.body = std::move(out);
  return reply;
}

}  // namespace cosession
