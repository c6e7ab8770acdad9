#include "cosession/serving/model_server.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
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
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/io/atomic_file.h"
#include "cosession/serving/proto_json_layout.h"
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

// What TensorFlow Serving answers a request that none of its handlers takes
// (a path outside /v1/ other than the Prometheus page): its HTTP server's
// libevent (2.1.12, evhttp_send_error) sends 404 with this HTML page and
// closes the connection.
HttpReply NoHandlerReply() {
  HttpReply reply;
  reply.status = 404;
  reply.content_type = "text/html";
  reply.body =
      "<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n"
      "<H1>Not Found</H1>\n</BODY></HTML>\n";
  reply.close_connection = true;
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

// A request body parsed on the pool (ModelServerOptions::
// parse_on_pool_bytes). Parameters by value (docs/async_pitfalls.md, 5);
// `model` holds the signatures until the parse returned.
asio::awaitable<absl::StatusOr<PredictRequest>> ParsePredictOnPool(
    std::shared_ptr<SavedModel> model, std::string body) {
  co_return ParsePredictRequest(body, model->signatures);
}

asio::awaitable<absl::StatusOr<ExamplesRequest>> ParseExamplesOnPool(
    std::shared_ptr<SavedModel> model, std::string body,
    ExamplesMethod method) {
  co_return ParseExamplesRequest(body, method, model->signatures);
}

asio::awaitable<absl::Status> CheckBodyOnPool(
    std::string body, std::optional<ExamplesMethod> method) {
  co_return CheckBodyBeforeModelLookup(body, method);
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
  // By (model, status code) and (model, API: predict, classify, regress);
  // each model's predict histogram is there from the start, as a scraper
  // expects it.
  std::map<std::pair<std::string, std::string>, int64_t> requests_by_status;
  std::map<std::pair<std::string, std::string>, Latency> latency_by_api;

  void Record(const std::string& model, absl::StatusCode code) {
    ++requests_by_status[{model, CodeName(code)}];
  }
  void RecordLatency(const std::string& model, const std::string& api,
                     std::chrono::nanoseconds took) {
    const double us = std::chrono::duration<double, std::micro>(took).count();
    int bucket = 0;
    double limit = 10;
    while (bucket < kLatencyBuckets && us > limit) {
      ++bucket;
      limit *= 1.8;
    }
    Latency& latency = latency_by_api[{model, api}];
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
      config_timer_(executor),
      metrics_(std::make_unique<Metrics>()) {}

ModelServer::~ModelServer() = default;

asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
ModelServer::Start(ModelServerOptions options, Runtime& runtime) {
  absl::StatusOr<std::shared_ptr<ModelServer>> started;
  try {
    started = co_await StartModels(std::move(options), runtime);
  } catch (...) {
    started = StatusFromException(std::current_exception(), "the start");
  }
  // After a cancellation, the final hop of a co_spawn that runs Start (as
  // the || of cosession_serve's start and its signals does) would throw
  // instead of completing (docs/async_pitfalls.md, item 12).
  co_await asio::this_coro::reset_cancellation_state();
  co_return started;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer>>>
ModelServer::StartModels(ModelServerOptions options, Runtime& runtime) {
  std::vector<ModelConfig> configs = options.model_config_list;
  if (configs.empty()) {
    if (options.model_base_path.empty()) {
      co_return absl::InvalidArgumentError("--model_base_path is required");
    }
    if (options.model_name.empty()) {
      co_return absl::InvalidArgumentError("--model_name must not be empty");
    }
    configs.push_back(
        {.name = options.model_name, .base_path = options.model_base_path});
  }
  asio::any_io_executor executor = co_await asio::this_coro::executor;
  // A cancellation (of the wait for a first version) ends Start with
  // Cancelled, never with an exception.
  co_await asio::this_coro::throw_if_cancelled(false);
  std::shared_ptr<ModelServer> server(
      new ModelServer(std::move(options), runtime, executor));
  for (ModelConfig& config : configs) {
    auto model = std::make_unique<Model>();
    model->config = std::move(config);
    Model& m = *model;
    server->models_.emplace(m.config.name, std::move(model));
    server->metrics_->latency_by_api.try_emplace({m.config.name, "predict"});
    absl::StatusOr<std::vector<int64_t>> wanted =
        co_await server->AwaitVersionsToServe(m);
    if (!wanted.ok()) co_return wanted.status();
    if (absl::Status loaded =
            co_await server->LoadWanted(m, *std::move(wanted));
        !loaded.ok()) {
      co_return loaded;
    }
    for (const auto& [label, version] : m.config.version_labels) {
      if (!m.served.contains(version) &&
          !server->options_.allow_version_labels_for_unavailable_models) {
        co_return absl::InvalidArgumentError(
            absl::StrCat("Request to assign label '", label, "' to version ",
                         version, " of model ", m.config.name,
                         ", which is not currently available for inference"));
      }
    }
  }
  // A cancellation that came while the versions loaded (a SIGTERM at
  // start: serve.cc awaits Start || the signal) ends Start here, so that no
  // poll starts for a server nobody will use.
  const asio::cancellation_state cancellation =
      co_await asio::this_coro::cancellation_state;
  if (cancellation.cancelled() != asio::cancellation_type::none) {
    co_return absl::CancelledError("the model server's start was cancelled");
  }
  auto report = [](std::exception_ptr error) {
    if (error) {
      std::fprintf(stderr, "cosession: a poll ended with an exception\n");
    }
  };
  if (server->options_.file_system_poll_wait.count() > 0) {
    asio::co_spawn(executor, server->PollLoop(), report);
  }
  if (!server->options_.model_config_file.empty() &&
      server->options_.model_config_file_poll_wait.count() > 0) {
    asio::co_spawn(executor, server->ConfigPollLoop(), report);
  }
  co_return server;
}

asio::awaitable<absl::StatusOr<std::vector<int64_t>>>
ModelServer::AwaitVersionsToServe(Model& m) {
  const std::string& name = m.config.name;
  std::string reported;  // the last reason for waiting written to stderr
  for (;;) {
    absl::Status missing;
    std::vector<int64_t> wanted;
    absl::StatusOr<std::vector<int64_t>> versions =
        ListSavedModelVersions(m.config.base_path);
    if (!versions.ok()) {
      missing = absl::NotFoundError(absl::StrCat(
          "Could not find base path ", m.config.base_path, " for servable ",
          name, ": ", versions.status().message()));
    } else {
      wanted = VersionsToServe(m.config.version_policy, *versions);
      if (wanted.empty()) {
        missing = absl::NotFoundError(absl::StrCat(
            "No versions of servable ", name, " found under base path ",
            m.config.base_path,
            versions->empty()
                ? ". Did you forget to name your leaf directory as a number "
                  "(eg. '/1/')?"
                : absl::StrCat(" that its model_version_policy serves (it "
                               "has ",
                               absl::StrJoin(*versions, ", "), ")")));
      }
    }
    if (missing.ok()) co_return wanted;
    // Without polling nothing would ever appear: a clear error, rather
    // than TensorFlow Serving's wait without end.
    if (options_.file_system_poll_wait.count() <= 0) co_return missing;
    if (missing.message() != reported) {
      reported = std::string(missing.message());
      std::fprintf(
          stderr,
          "cosession_serve: %s; waiting for one (looking again "
          "every %lld ms)\n",
          reported.c_str(),
          static_cast<long long>(options_.file_system_poll_wait.count()));
    }
    // A cancellation that came while nothing waited is only in the state
    // (docs/async_pitfalls.md, item 2); one during the wait ends it.
    const asio::cancellation_state cancellation =
        co_await asio::this_coro::cancellation_state;
    boost::system::error_code ec;
    if (cancellation.cancelled() == asio::cancellation_type::none) {
      asio::steady_timer wait(executor_, options_.file_system_poll_wait);
      std::tie(ec) =
          co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
    } else {
      ec = asio::error::operation_aborted;
    }
    if (ec) {
      co_return absl::CancelledError(absl::StrCat(
          "stopped while waiting for a version of servable ", name));
    }
  }
}

asio::awaitable<absl::Status> ModelServer::LoadWanted(
    Model& model, std::vector<int64_t> wanted) {
  absl::Status first_error;
  for (int64_t version : wanted) {
    if (model.states.contains(version)) continue;  // served, or tried
    model.states[version] = {"LOADING", absl::OkStatus()};
    absl::StatusOr<std::shared_ptr<ServedVersion>> loaded =
        co_await Load(model.config.name, version);
    if (!loaded.ok()) {
      const absl::Status error(
          loaded.status().code(),
          absl::StrCat("servable ", model.config.name, " version ", version,
                       " did not load: ", loaded.status().message()));
      model.states[version] = {"END", error};
      if (first_error.ok()) first_error = error;
      continue;
    }
    model.served[version] = *std::move(loaded);
    model.states[version] = {"AVAILABLE", absl::OkStatus()};
  }
  co_return first_error;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<ModelServer::ServedVersion>>>
ModelServer::Load(std::string model, int64_t version) {
  const std::string path =
      JoinPath(models_.at(model)->config.base_path, absl::StrCat(version));
  // The files are read and parsed on the pool, not on the event loop. A
  // load is not cancelled (its caller's cancellation would make the
  // pool's co_spawn throw past its completion: docs/async_pitfalls.md,
  // item 12); a cancelled Start looks at its state once the load is done.
  absl::StatusOr<std::unique_ptr<SavedModel>> saved = co_await asio::co_spawn(
      runtime_.executor(), LoadSavedModel(path, runtime_),
      asio::bind_cancellation_slot(asio::cancellation_slot(),
                                   asio::use_awaitable));
  if (!saved.ok()) co_return saved.status();
  auto served = std::make_unique<ServedVersion>();
  served->version = version;
  served->model = std::shared_ptr<SavedModel>(*std::move(saved));
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
      served.release(), [weak, executor, model, version](ServedVersion* v) {
        delete v;
        asio::post(executor, [weak, model, version] {
          if (std::shared_ptr<ModelServer> server = weak.lock()) {
            server->Retire(model, version);
          }
        });
      });
}

void ModelServer::Retire(const std::string& model, int64_t version) {
  auto m = models_.find(model);
  if (m == models_.end()) return;
  auto it = m->second->states.find(version);
  if (it != m->second->states.end() && it->second.state == "UNLOADING") {
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
  for (auto& [name, model] : models_) co_await Refresh(*model);
  polling_ = false;
}

asio::awaitable<void> ModelServer::Refresh(Model& m) {
  const std::string& name = m.config.name;
  absl::StatusOr<std::vector<int64_t>> versions =
      ListSavedModelVersions(m.config.base_path);
  if (!versions.ok() || versions->empty()) co_return;
  const std::vector<int64_t> wanted =
      VersionsToServe(m.config.version_policy, *versions);
  const size_t served_before = m.served.size();
  const int64_t highest_before =
      m.served.empty() ? -1 : m.served.rbegin()->first;
  if (absl::Status loaded = co_await LoadWanted(m, wanted); !loaded.ok()) {
    std::fprintf(stderr, "cosession_serve: %s\n", loaded.ToString().c_str());
  }
  // Unloads only once a wanted version serves: never no version at all.
  bool wanted_served = false;
  for (int64_t v : wanted)
    wanted_served = wanted_served || m.served.contains(v);
  if (!wanted_served) co_return;
  for (auto it = m.served.begin(); it != m.served.end();) {
    if (std::find(wanted.begin(), wanted.end(), it->first) != wanted.end()) {
      ++it;
      continue;
    }
    m.states[it->first] = {"UNLOADING", absl::OkStatus()};
    it = m.served.erase(it);  // the version goes with its last request
  }
  if (m.served.size() != served_before ||
      m.served.rbegin()->first != highest_before) {
    std::fprintf(stderr, "cosession_serve: serving %s version %lld\n",
                 name.c_str(),
                 static_cast<long long>(m.served.rbegin()->first));
  }
}

asio::awaitable<absl::Status> ModelServer::ReloadConfigNow() {
  if (options_.model_config_file.empty()) {
    co_return absl::FailedPreconditionError("no --model_config_file to read");
  }
  if (polling_ || stopped_) {
    co_return absl::UnavailableError(
        "a poll is in progress, or the server stopped");
  }
  absl::StatusOr<std::string> text =
      ReadFileToString(options_.model_config_file);
  absl::StatusOr<std::vector<ModelConfig>> configs =
      text.ok() ? ParseModelServerConfig(*text, options_.model_config_file)
                : absl::StatusOr<std::vector<ModelConfig>>(text.status());
  if (!configs.ok()) {
    std::fprintf(stderr,
                 "cosession_serve: --model_config_file not applied, the "
                 "models served stay as they were: %s\n",
                 configs.status().ToString().c_str());
    co_return configs.status();
  }
  polling_ = true;
  // Models no longer configured: their versions finish their requests in
  // flight; new requests are 404.
  for (auto it = models_.begin(); it != models_.end();) {
    const bool kept =
        std::any_of(configs->begin(), configs->end(),
                    [&](const ModelConfig& c) { return c.name == it->first; });
    if (kept) {
      ++it;
      continue;
    }
    std::fprintf(stderr,
                 "cosession_serve: model %s unloaded: no longer in %s\n",
                 it->first.c_str(), options_.model_config_file.c_str());
    it = models_.erase(it);
  }
  for (ModelConfig& config : *configs) {
    auto [it, added] = models_.try_emplace(config.name);
    if (added) {
      it->second = std::make_unique<Model>();
      metrics_->latency_by_api.try_emplace({config.name, "predict"});
    }
    Model& m = *it->second;
    const std::map<std::string, int64_t> old_labels =
        std::exchange(m.config.version_labels, {});
    m.config = std::move(config);
    co_await Refresh(m);
    // A label may name only a served version (as at start); one that does
    // not is dropped, and said -- unless unavailable versions may be
    // labelled, as long as the label is new or names the version it named
    // (TensorFlow Serving's rule: a label moves only to a served version;
    // it then keeps its old one).
    for (auto label = m.config.version_labels.begin();
         label != m.config.version_labels.end();) {
      const auto old = old_labels.find(label->first);
      const bool moves =
          old != old_labels.end() && old->second != label->second;
      if (m.served.contains(label->second) ||
          (options_.allow_version_labels_for_unavailable_models && !moves)) {
        ++label;
        continue;
      }
      if (moves && options_.allow_version_labels_for_unavailable_models) {
        std::fprintf(stderr,
                     "cosession_serve: label '%s' of model %s stays on "
                     "version %lld: version %lld is not available\n",
                     label->first.c_str(), m.config.name.c_str(),
                     static_cast<long long>(old->second),
                     static_cast<long long>(label->second));
        label->second = old->second;
        ++label;
        continue;
      }
      std::fprintf(stderr,
                   "cosession_serve: label '%s' of model %s dropped: version "
                   "%lld is not available\n",
                   label->first.c_str(), m.config.name.c_str(),
                   static_cast<long long>(label->second));
      label = m.config.version_labels.erase(label);
    }
  }
  polling_ = false;
  co_return absl::OkStatus();
}

asio::awaitable<void> ModelServer::ConfigPollLoop() {
  std::shared_ptr<ModelServer> self = shared_from_this();
  while (!stopped_) {
    config_timer_.expires_after(options_.model_config_file_poll_wait);
    (void)co_await config_timer_.async_wait(
        asio::as_tuple(asio::use_awaitable));
    if (stopped_) break;
    (void)co_await ReloadConfigNow();
  }
}

void ModelServer::Stop() {
  stopped_ = true;
  poll_timer_.cancel();
  config_timer_.cancel();
}

int64_t ModelServer::serving_version(const std::string& model) const {
  auto it = model.empty() ? models_.begin() : models_.find(model);
  if (it == models_.end() || it->second->served.empty()) return -1;
  return it->second->served.rbegin()->first;
}

absl::StatusOr<std::shared_ptr<ModelServer::ServedVersion>>
ModelServer::Resolve(const std::string& name, std::optional<int64_t> version,
                     const std::optional<std::string>& label) const {
  auto model = models_.find(name);
  if (model == models_.end()) {
    return absl::NotFoundError(ServableNotFound(name, version));
  }
  const Model& m = *model->second;
  if (label) {
    auto labelled = m.config.version_labels.find(*label);
    if (labelled == m.config.version_labels.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Unrecognized servable version label: ", *label));
    }
    version = labelled->second;
  }
  if (version) {
    auto it = m.served.find(*version);
    if (it == m.served.end()) {
      return absl::NotFoundError(ServableNotFound(name, version));
    }
    return it->second;
  }
  if (m.served.empty()) return absl::NotFoundError(ServableNotFound(name, {}));
  return m.served.rbegin()->second;
}

std::string ModelServer::MetricsModel(const std::string& name) const {
  return models_.contains(name) ? name : std::string();
}

asio::awaitable<HttpReply> ModelServer::Handle(std::string method,
                                               std::string target,
                                               std::string body,
                                               std::string origin) {
  std::string path = target.substr(0, target.find_first_of("?#"));
  if (options_.enable_prometheus &&
      path == (options_.prometheus_path.empty()
                   ? std::string_view(kDefaultPrometheusPath)
                   : std::string_view(options_.prometheus_path))) {
    co_return PrometheusText();
  }
  // TensorFlow Serving's REST handler takes only (?i)/v1/.*.
  if (!absl::StartsWithIgnoreCase(path, "/v1/")) co_return NoHandlerReply();
  HttpReply reply;
  if (method == "OPTIONS") {
    // TensorFlow Serving's preflight: any origin that names a scheme gets
    // 200 with no body.
    if (!absl::StrContains(origin, "http://") &&
        !absl::StrContains(origin, "https://")) {
      reply = ErrorReply(absl::FailedPreconditionError(
          "Origin header is missing in CORS preflight"));
    }
  } else {
    reply = co_await Route(std::move(method), std::move(path), std::move(body));
  }
  if (options_.enable_cors_support) {
    reply.headers.emplace_back("Access-Control-Allow-Origin", "*");
    reply.headers.emplace_back("Access-Control-Allow-Methods", "POST, GET");
    reply.headers.emplace_back("Access-Control-Allow-Headers", "Content-Type");
  }
  co_return reply;
}

asio::awaitable<HttpReply> ModelServer::Route(std::string method,
                                              std::string path,
                                              std::string body) {
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
  std::optional<std::string> label;
  if (parts->label) {
    label = UrlDecode(*parts->label);
    if (!label) co_return ErrorReply(malformed);
  }
  if (method == "GET") {
    if (!name) {
      co_return ErrorReply(
          absl::InvalidArgumentError("Missing model name in request."));
    }
    // As TensorFlow Serving: the verb compares case-sensitively, and a
    // status request ignores a label.
    if (parts->verb == "metadata") co_return Metadata(*name, version, label);
    co_return Status(*name, version);
  }
  const std::string& verb = parts->verb;
  if (verb != "predict" && verb != "classify" && verb != "regress") {
    co_return ErrorReply(malformed);
  }
  co_return co_await Predict(*std::move(name), version, std::move(label), verb,
                             std::move(body));
}

HttpReply ModelServer::Status(const std::string& name,
                              std::optional<int64_t> version) {
  auto model = models_.find(name);
  if (model == models_.end()) {
    metrics_->Record("", absl::StatusCode::kNotFound);
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("Could not find any versions of model ", name)));
  }
  json::array list;
  for (const auto& [v, state] : model->second->states) {
    if (version && v != *version) continue;
    list.push_back(json::object{
        {"version", absl::StrCat(v)},
        {"state", state.state},
        {"status", json::object{{"error_code", CodeName(state.status.code())},
                                {"error_message",
                                 std::string(state.status.message())}}}});
  }
  if (version && list.empty()) {
    metrics_->Record(name, absl::StatusCode::kNotFound);
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("Could not find version ", *version, " of model ", name)));
  }
  metrics_->Record(name, absl::StatusCode::kOk);
  return JsonReply(
      200,
      ProtoJsonLayout(json::object{{"model_version_status", std::move(list)}}));
}

HttpReply ModelServer::Metadata(const std::string& name,
                                std::optional<int64_t> version,
                                const std::optional<std::string>& label) {
  absl::StatusOr<std::shared_ptr<ServedVersion>> resolved =
      Resolve(name, version, label);
  if (!resolved.ok()) {
    metrics_->Record(MetricsModel(name), resolved.status().code());
    return ErrorReply(resolved.status());
  }
  const std::shared_ptr<ServedVersion>& served = *resolved;
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
  metrics_->Record(name, absl::StatusCode::kOk);
  // TensorFlow Serving prints the model spec and the signatures as two
  // messages and joins them with these bytes (http_rest_api_util.cc).
  const std::string model_spec =
      ProtoJsonLayout(json::object{{"name", name},
                                   {"signature_name", ""},
                                   {"version", absl::StrCat(served->version)}});
  const std::string signature_def =
      ProtoJsonLayout(json::object{{"signature_def", std::move(signatures)}});
  return JsonReply(200, absl::StrCat("{\n\"model_spec\":", model_spec,
                                     ",\n\"metadata\": {\"signature_def\": ",
                                     signature_def, "}\n}\n"));
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

asio::awaitable<HttpReply> ModelServer::Predict(
    std::string name, std::optional<int64_t> version,
    std::optional<std::string> label, std::string verb, std::string body) {
  const SteadyClock::time_point start = SteadyClock::now();
  const std::string metrics_model = MetricsModel(name);
  // Held until the answer: a version switch leaves this request on the
  // version it started on.
  absl::StatusOr<std::shared_ptr<ServedVersion>> resolved =
      Resolve(name, version, label);
  // A big body is parsed on the pool, so that the event loop keeps
  // answering the other connections meanwhile; a small one here, where
  // the hop would cost more than the parse.
  const bool parse_on_pool = body.size() >= options_.parse_on_pool_bytes;
  if (!resolved.ok()) {
    // TensorFlow Serving parses the body before it looks the model up: a
    // malformed one is 400 whatever the model.
    std::optional<ExamplesMethod> method;
    if (verb == "classify") method = ExamplesMethod::kClassify;
    if (verb == "regress") method = ExamplesMethod::kRegress;
    absl::Status malformed;
    if (parse_on_pool) {
      malformed = co_await asio::co_spawn(
          runtime_.executor(), CheckBodyOnPool(std::move(body), method),
          asio::use_awaitable);
    } else {
      malformed = CheckBodyBeforeModelLookup(body, method);
    }
    const absl::Status& answer = malformed.ok() ? resolved.status() : malformed;
    metrics_->Record(metrics_model, answer.code());
    co_return ErrorReply(answer);
  }
  std::shared_ptr<ServedVersion> served = *std::move(resolved);
  const std::map<std::string, Signature>& signatures =
      served->model->signatures;
  std::string signature_name;
  NamedTensors inputs;
  // What renders the outputs: the request's format or method.
  std::function<absl::StatusOr<std::string>(const NamedTensors&)> render;
  if (verb == "predict") {
    // (An if, not a conditional around the co_await: g++ 12 mishandles
    // temporaries there: docs/async_pitfalls.md, 13.)
    absl::StatusOr<PredictRequest> request;
    if (parse_on_pool) {
      request = co_await asio::co_spawn(
          runtime_.executor(),
          ParsePredictOnPool(served->model, std::move(body)),
          asio::use_awaitable);
    } else {
      request = ParsePredictRequest(body, signatures);
    }
    if (!request.ok()) {
      metrics_->Record(metrics_model, request.status().code());
      co_return ErrorReply(request.status());
    }
    signature_name = std::move(request->signature_name);
    const std::string& method = signatures.at(signature_name).method_name;
    if (options_.enable_signature_method_name_check &&
        method != kPredictMethodName && method != kClassifyMethodName &&
        method != kRegressMethodName) {
      // TensorFlow Serving's predict_util.cc, with the check on.
      const absl::Status wrong_method = absl::InternalError(absl::StrCat(
          "Expected prediction signature method_name to be one of {",
          kPredictMethodName, ", ", kClassifyMethodName, ", ",
          kRegressMethodName, "}. Was: ", method));
      metrics_->Record(metrics_model, wrong_method.code());
      co_return ErrorReply(wrong_method);
    }
    inputs = std::move(request->inputs);
    render = [format = request->format](const NamedTensors& outputs) {
      return RenderPredictResponse(format, outputs);
    };
  } else {
    const ExamplesMethod method = verb == "classify" ? ExamplesMethod::kClassify
                                                     : ExamplesMethod::kRegress;
    absl::StatusOr<ExamplesRequest> request;
    if (parse_on_pool) {
      request = co_await asio::co_spawn(
          runtime_.executor(),
          ParseExamplesOnPool(served->model, std::move(body), method),
          asio::use_awaitable);
    } else {
      request = ParseExamplesRequest(body, method, signatures);
    }
    if (!request.ok()) {
      metrics_->Record(metrics_model, request.status().code());
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
    metrics_->Record(metrics_model, outputs.status().code());
    co_return ErrorReply(outputs.status());
  }
  absl::StatusOr<std::string> rendered = render(*outputs);
  if (!rendered.ok()) {
    metrics_->Record(metrics_model, rendered.status().code());
    co_return ErrorReply(rendered.status());
  }
  metrics_->Record(metrics_model, absl::StatusCode::kOk);
  metrics_->RecordLatency(metrics_model, verb, SteadyClock::now() - start);
  co_return JsonReply(200, *std::move(rendered));
}

HttpReply ModelServer::PrometheusText() const {
  std::string out = "# TYPE :tensorflow:serving:request_count counter\n";
  for (const auto& [key, count] : metrics_->requests_by_status) {
    absl::StrAppend(&out, ":tensorflow:serving:request_count{model_name=\"",
                    LabelValue(key.first), "\",status=\"", key.second, "\"} ",
                    count, "\n");
  }
  out += "# TYPE :tensorflow:serving:request_latency histogram\n";
  for (const auto& [key, latency] : metrics_->latency_by_api) {
    const std::string latency_labels =
        absl::StrCat("model_name=\"", LabelValue(key.first), "\",API=\"",
                     key.second, "\",entrypoint=\"REST\"");
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
  if (!options_.enable_batching) {
    HttpReply reply;
    reply.content_type = "text/plain; version=0.0.4";
    reply.body = std::move(out);
    return reply;
  }
  // Batch sizes over every served version; the queue per model.
  std::map<int64_t, int64_t> sizes;
  int64_t batches = 0, rows = 0;
  std::string depths, running_batches, cancellations;  // one family each
  for (const auto& [name, model] : models_) {
    int64_t queued = 0, running = 0, cancelled = 0;
    for (const auto& [version, served] : model->served) {
      for (const auto& [signature, batcher] : served->batchers) {
        const BatchingStats stats = batcher->stats();
        for (const auto& [size, count] : stats.batch_sizes) {
          sizes[size] += count;
          rows += size * count;
        }
        batches += stats.batches;
        queued += stats.queued_requests;
        running += stats.running_batches;
        cancelled += stats.cancelled;
      }
    }
    const std::string label = LabelValue(name);
    absl::StrAppend(&depths,
                    ":cosession:serving:batching_queue_depth{model_name=\"",
                    label, "\"} ", queued, "\n");
    // Batches whose graph run has not completed, including those every
    // request of which already left (cancelled, past its deadline).
    absl::StrAppend(&running_batches,
                    ":cosession:serving:batching_running_batches{model_name="
                    "\"",
                    label, "\"} ", running, "\n");
    absl::StrAppend(&cancellations,
                    ":cosession:serving:batching_cancelled_requests{model_"
                    "name=\"",
                    label, "\"} ", cancelled, "\n");
  }
  out +=
      "# TYPE :tensorflow:serving:batching_session:processed_batch_size "
      "histogram\n";
  // TensorFlow Serving's fixed buckets (batching_util.h's
  // Buckets::Exponential(1, 2, 14)): 1, 2, 4, ..., 8192, then +Inf, the same
  // set in every scrape whatever sizes ran.
  for (int64_t limit = 1; limit <= 8192; limit *= 2) {
    int64_t below = 0;
    for (auto it = sizes.begin(); it != sizes.end() && it->first <= limit;
         ++it) {
      below += it->second;
    }
    absl::StrAppend(&out,
                    ":tensorflow:serving:batching_session:processed_batch_"
                    "size_bucket{le=\"",
                    limit, "\"} ", below, "\n");
  }
  absl::StrAppend(
      &out,
      ":tensorflow:serving:batching_session:processed_batch_size_bucket{le="
      "\"+Inf\"} ",
      batches, "\n",
      ":tensorflow:serving:batching_session:processed_batch_size_sum{} ", rows,
      "\n",
      ":tensorflow:serving:batching_session:processed_batch_size_count{} ",
      batches, "\n", "# TYPE :cosession:serving:batching_queue_depth gauge\n",
      depths, "# TYPE :cosession:serving:batching_running_batches gauge\n",
      running_batches,
      "# TYPE :cosession:serving:batching_cancelled_requests counter\n",
      cancellations);
  HttpReply reply;
  reply.content_type = "text/plain; version=0.0.4";
  reply.body = std::move(out);
  return reply;
}

}  // namespace cosession
