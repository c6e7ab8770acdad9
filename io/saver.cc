#include "cosession/io/saver.h"

#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cosession/async/completion.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/console.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

constexpr absl::string_view kStateFileName = "checkpoint";
constexpr absl::string_view kFileSuffix = ".safetensors";
constexpr absl::string_view kRestoreValuePrefix = "save/restore/";
constexpr absl::string_view kAssignPrefix = "save/assign/";

void WarnTo(const std::function<void(const std::string&)>& warn,
            const std::string& message) {
  const std::string line = absl::StrCat("cosession: WARNING: ", message);
  if (warn) {
    warn(line);
  } else {
    Console::Stdout().Log(line, Console::kStderr);
  }
}

// The checkpoints "<prefix>-<step>.safetensors" of `dir`, newest (highest
// step) first, as names without the suffix ("model.ckpt-20").
std::vector<std::string> ScanCheckpoints(const std::string& dir,
                                         const std::string& prefix) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, prefix) ||
        !absl::ConsumePrefix(&rest, "-") ||
        !absl::ConsumeSuffix(&rest, kFileSuffix)) {
      continue;
    }
    int64_t step;
    if (rest.empty() || !absl::SimpleAtoi(rest, &step)) continue;
    name.resize(name.size() - kFileSuffix.size());
    found.emplace_back(step, std::move(name));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> names;
  for (auto& [step, name] : found) names.push_back(std::move(name));
  return names;
}

double UnixSecondsOf(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}
absl::Time TimeFromUnixSeconds(double seconds) {
  return absl::UnixEpoch() + absl::Seconds(seconds);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Quote(absl::string_view text) {
  // Names never hold quotes, backslashes or line breaks (Create refuses
  // such prefixes), so no escaping is needed.
  return absl::StrCat("\"", text, "\"");
}

// A quoted text-proto string: "..." with \" \\ \n escapes.
std::optional<std::string> Unquote(absl::string_view value) {
  if (value.size() < 2 || value.front() != '"' || value.back() != '"') {
    return std::nullopt;
  }
  value = value.substr(1, value.size() - 2);
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    if (c == '"') return std::nullopt;
    if (c == '\\') {
      if (++i == value.size()) return std::nullopt;
      c = value[i] == 'n' ? '\n' : value[i];
    }
    out.push_back(c);
  }
  return out;
}

std::string RenderState(const CheckpointState& state) {
  std::string text = absl::StrCat(
      "model_checkpoint_path: ", Quote(state.model_checkpoint_path), "\n");
  for (const std::string& path : state.all_model_checkpoint_paths) {
    absl::StrAppend(&text, "all_model_checkpoint_paths: ", Quote(path), "\n");
  }
  for (double t : state.all_model_checkpoint_timestamps) {
    absl::StrAppend(&text, "all_model_checkpoint_timestamps: ",
                    absl::StrFormat("%.3f", t), "\n");
  }
  if (state.last_preserved_timestamp) {
    absl::StrAppend(&text, "last_preserved_timestamp: ",
                    absl::StrFormat("%.3f", *state.last_preserved_timestamp),
                    "\n");
  }
  return text;
}

absl::StatusOr<CheckpointState> ParseState(absl::string_view text,
                                           const std::string& path) {
  auto corrupt = [&](int line, absl::string_view what) {
    return absl::DataLossError(absl::StrCat("corrupt checkpoint state file '",
                                            path, "' line ", line, ": ", what));
  };
  CheckpointState state;
  bool has_model_path = false;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return corrupt(number, "no ':'");
    absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    absl::string_view value =
        absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "model_checkpoint_path" || key == "all_model_checkpoint_paths") {
      std::optional<std::string> s = Unquote(value);
      if (!s || s->empty()) return corrupt(number, "not a quoted path");
      if (key == "model_checkpoint_path") {
        state.model_checkpoint_path = *std::move(s);
        has_model_path = true;
      } else {
        state.all_model_checkpoint_paths.push_back(*std::move(s));
      }
    } else if (key == "all_model_checkpoint_timestamps" ||
               key == "last_preserved_timestamp") {
      double seconds;
      if (!absl::SimpleAtod(value, &seconds)) {
        return corrupt(number, "not a number");
      }
      if (key == "last_preserved_timestamp") {
        state.last_preserved_timestamp = seconds;
      } else {
        state.all_model_checkpoint_timestamps.push_back(seconds);
      }
    } else {
      return corrupt(number, absl::StrCat("unknown field '", key, "'"));
    }
  }
  if (!has_model_path) {
    return absl::DataLossError(absl::StrCat("corrupt checkpoint state file '",
                                            path,
                                            "': no model_checkpoint_path"));
  }
  return state;
}

// A path of the state file, resolved against its directory.
std::string ResolveInDir(const std::string& dir, const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  return JoinPath(dir, path);
}

absl::Status NotAVariable(const Output& output) {
  return absl::InvalidArgumentError(
      absl::StrCat("Saver: '", output.name(), "' is not a Variable"));
}

// The restore op named `name` if an earlier Saver built it for `variable`.
Node* ExistingRestoreValue(Graph& graph, const Output& variable) {
  Node* node = graph.FindNode(
      absl::StrCat(kRestoreValuePrefix, variable.node()->name()));
  if (node == nullptr || node->type() != "Placeholder" ||
      node->output_dtype(0) != variable.dtype()) {
    return nullptr;
  }
  return node;
}
Node* ExistingAssign(Graph& graph, const Output& variable, Node* value) {
  Node* node =
      graph.FindNode(absl::StrCat(kAssignPrefix, variable.node()->name()));
  if (node == nullptr || node->type() != "Assign" || node->num_inputs() < 1 ||
      node->inputs().back().node() != value) {
    return nullptr;
  }
  const int64_t* target = node->FindAttr<int64_t>("variable");
  if (target == nullptr || *target != variable.node()->id()) return nullptr;
  return node;
}

asio::awaitable<absl::StatusOr<bool>> RestoreIfAny(std::shared_ptr<Saver> saver,
                                                   std::string dir,
                                                   Session* session) {
  co_return co_await saver->RestoreLatestIfAny(*session, std::move(dir));
}

// The saves in flight of every Saver of the process, by directory: a
// restore of a directory waits for them (RestoreLatest).
class SavesInFlight {
 public:
  static SavesInFlight& Get() {
    static SavesInFlight* saves = new SavesInFlight;
    return *saves;
  }

  void Add(const std::string& dir, const std::shared_ptr<PendingSave>& save) {
    std::lock_guard lock(mu_);
    std::vector<std::weak_ptr<PendingSave>>& saves = by_dir_[Key(dir)];
    Prune(saves);
    saves.push_back(save);
  }

  // The saves into `dir` not finished yet.
  std::vector<std::shared_ptr<PendingSave>> In(const std::string& dir) {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<PendingSave>> pending;
    auto it = by_dir_.find(Key(dir));
    if (it == by_dir_.end()) return pending;
    Prune(it->second);
    for (const auto& weak : it->second) {
      if (auto save = weak.lock()) pending.push_back(std::move(save));
    }
    if (it->second.empty()) by_dir_.erase(it);
    return pending;
  }

 private:
  // One spelling per directory ("ckpt", "./ckpt/" and its absolute path
  // are one).
  static std::string Key(const std::string& dir) {
    std::error_code ec;
    std::filesystem::path path = std::filesystem::absolute(dir, ec);
    if (ec) path = dir;
    std::string key = path.lexically_normal().string();
    while (key.size() > 1 && key.back() == '/') key.pop_back();
    return key;
  }
  static void Prune(std::vector<std::weak_ptr<PendingSave>>& saves) {
    saves.erase(std::remove_if(saves.begin(), saves.end(),
                               [](const std::weak_ptr<PendingSave>& weak) {
                                 auto save = weak.lock();
                                 return save == nullptr || save->done();
                               }),
                saves.end());
  }

  std::mutex mu_;
  std::map<std::string, std::vector<std::weak_ptr<PendingSave>>> by_dir_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

// ------------------------------------------------------------ state file

absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir) {
  const std::string path = JoinPath(dir, kStateFileName);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint state file '", path, "'"));
    }
    return text.status();
  }
  return ParseState(*text, path);
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  absl::StatusOr<CheckpointState> state = ReadCheckpointState(dir);
  if (!state.ok()) return state.status();
  std::string prefix = ResolveInDir(dir, state->model_checkpoint_path);
  if (!FileExists(CheckpointFilePath(prefix))) {
    return absl::NotFoundError(absl::StrCat("the checkpoint state file of '",
                                            dir, "' names '", prefix,
                                            "', which does not exist"));
  }
  return prefix;
}

std::string CheckpointFilePath(const std::string& prefix) {
  if (absl::EndsWith(prefix, kFileSuffix)) return prefix;
  return absl::StrCat(prefix, kFileSuffix);
}

// ------------------------------------------------------------ PendingSave

bool PendingSave::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void PendingSave::AddWaiter(Waiter waiter) {
  std::unique_lock lock(mu_);
  if (!done_) {
    waiters_.push_back(std::move(waiter));
    return;
  }
  absl::StatusOr<std::string> result = result_;
  lock.unlock();
  waiter(std::move(result));  // posts to the waiter's executor
}

asio::awaitable<absl::StatusOr<std::string>> PendingSave::Wait() {
  // Named before the co_await: g++ 12 mishandles capturing lambda
  // temporaries inside co_await expressions (docs/async_pitfalls.md, 4).
  auto initiation = [this](auto handler) {
    AddWaiter(PostToHandler<absl::StatusOr<std::string>>(
        std::move(handler), [](absl::StatusOr<std::string> r) { return r; }));
  };
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                          void(absl::StatusOr<std::string>)>(
      initiation, asio::use_awaitable);
}

absl::StatusOr<std::string> PendingSave::WaitBlocking() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return result_;
}

void PendingSave::Complete(absl::StatusOr<std::string> result) {
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(mu_);
    result_ = std::move(result);
    done_ = true;
    waiters.swap(waiters_);
    cv_.notify_all();
  }
  for (Waiter& waiter : waiters) {
    absl::StatusOr<std::string> copy;
    {
      std::lock_guard lock(mu_);
      copy = result_;
    }
    waiter(std::move(copy));
  }
}

// ------------------------------------------------------------ Saver

absl::StatusOr<std::shared_ptr<Saver>> Saver::Create(Graph& graph,
                                                     SaverOptions options) {
  if (options.max_to_keep < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SaverOptions.max_to_keep must be >= 0, got ", options.max_to_keep));
  }
  if (options.keep_checkpoint_every_n_hours <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SaverOptions.keep_checkpoint_every_n_hours must be "
        "positive, got ",
        absl::FormatDuration(options.keep_checkpoint_every_n_hours)));
  }
  if (options.filename_prefix.empty() ||
      options.filename_prefix.find_first_of("/\\\"\n\r") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SaverOptions.filename_prefix must be a plain file name (no '/', "
        "'\\', '\"' or line break), got '",
        options.filename_prefix, "'"));
  }
  std::vector<Output> variables = options.variables;
  if (variables.empty()) {
    for (Node* node : graph.GetCollection(kVariablesCollection)) {
      variables.emplace_back(node, 0);
    }
  }
  if (variables.empty()) {
    return absl::InvalidArgumentError(
        "Saver: the graph has no variables to save");
  }
  absl::flat_hash_set<Node*> seen;
  for (const Output& v : variables) {
    if (!v.valid() || v.node()->type() != "Variable" || v.index() != 0 ||
        &v.node()->graph() != &graph) {
      return v.valid() ? NotAVariable(v)
                       : absl::InvalidArgumentError(
                             "Saver: SaverOptions.variables holds an empty "
                             "Output");
    }
    if (!seen.insert(v.node()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Saver: variable '", v.node()->name(), "' is listed twice"));
    }
  }

  absl::flat_hash_set<const Node*> optional;
  for (Node* node : graph.GetCollection(kRestoreOptionalCollection)) {
    optional.insert(node);
  }
  std::vector<Operation> initializers;
  for (const Output& v : variables) {
    if (!optional.contains(v.node())) {
      initializers.emplace_back();
      continue;
    }
    try {
      initializers.push_back(ops::VariableInitializer(v));
    } catch (const StatusError& e) {
      return e.status();
    }
  }
  std::vector<Output> restore_values;
  std::vector<Operation> assigns;
  for (const Output& v : variables) {
    Node* value = ExistingRestoreValue(graph, v);
    Node* assign = value ? ExistingAssign(graph, v, value) : nullptr;
    if (assign == nullptr) {
      if (graph.finalized()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Saver: the graph is finalized and has no restore ops for '",
            v.node()->name(),
            "'; create the Saver before the graph is finalized (hooks do it "
            "in Begin)"));
      }
      try {
        Output placeholder = ops::Placeholder(
            graph, v.dtype(), v.shape(),
            absl::StrCat(kRestoreValuePrefix, v.node()->name()));
        Output assigned =
            ops::Assign(graph, v, placeholder,
                        absl::StrCat(kAssignPrefix, v.node()->name()));
        value = placeholder.node();
        assign = assigned.node();
      } catch (const StatusError& e) {
        return e.status();
      }
    }
    restore_values.emplace_back(value, 0);
    assigns.emplace_back(assign);
  }
  return std::shared_ptr<Saver>(new Saver(
      std::move(options), std::move(variables), std::move(restore_values),
      std::move(assigns), std::move(initializers)));
}

Saver::Saver(SaverOptions options, std::vector<Output> variables,
             std::vector<Output> restore_values, std::vector<Operation> assigns,
             std::vector<Operation> initializers)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &SystemClock()),
      variables_(std::move(variables)),
      variable_names_([this] {
        std::vector<std::string> names;
        for (const Output& v : variables_) names.push_back(v.node()->name());
        return names;
      }()),
      variable_dtypes_([this] {
        std::vector<DType> dtypes;
        for (const Output& v : variables_) dtypes.push_back(v.dtype());
        return dtypes;
      }()),
      restore_values_(std::move(restore_values)),
      assigns_(std::move(assigns)),
      initializers_(std::move(initializers)) {}

absl::Status Saver::CheckSnapshot(const std::vector<Tensor>& snapshot) const {
  if (snapshot.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Saver: a snapshot of ", snapshot.size(), " tensors for ",
                     variables_.size(), " variables"));
  }
  for (size_t i = 0; i < snapshot.size(); ++i) {
    if (snapshot[i].dtype() != variable_dtypes_[i] ||
        !snapshot[i].IsInitialized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Saver: the snapshot of '", variable_names_[i], "' is a ",
          DTypeName(snapshot[i].dtype()), " tensor, the variable is ",
          DTypeName(variable_dtypes_[i])));
    }
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::string>> Saver::Save(Session& session,
                                                         std::string dir,
                                                         int64_t step) {
  RunArgs args{.fetches = variables_};
  absl::StatusOr<std::vector<Tensor>> values =
      co_await session.Run(std::move(args), asio::use_awaitable);
  if (!values.ok()) co_return values.status();
  absl::StatusOr<std::shared_ptr<PendingSave>> pending = co_await StartSave(
      session.runtime(), *std::move(values), std::move(dir), step);
  if (!pending.ok()) co_return pending.status();
  co_return co_await (*pending)->Wait();
}

asio::awaitable<absl::StatusOr<std::shared_ptr<PendingSave>>> Saver::StartSave(
    Runtime& runtime, std::vector<Tensor> snapshot, std::string dir,
    int64_t step) {
  if (absl::Status s = CheckSnapshot(snapshot); !s.ok()) co_return s;
  auto mine = std::make_shared<PendingSave>(step);
  while (true) {
    std::shared_ptr<PendingSave> previous;
    {
      std::lock_guard lock(pending_mu_);
      if (!pending_ || pending_->done()) {
        pending_ = mine;
        break;
      }
      previous = pending_;
    }
    (void)co_await previous->Wait();
  }
  SavesInFlight::Get().Add(dir, mine);
  // Named, not a temporary inside the coroutine (docs/async_pitfalls.md, 4).
  auto write = [self = shared_from_this(), mine, snapshot = std::move(snapshot),
                dir = std::move(dir), step] {
    absl::StatusOr<std::string> result;
    try {
      result = self->WriteCheckpoint(snapshot, dir, step);
    } catch (const std::exception& e) {
      result = absl::InternalError(
          absl::StrCat("writing the checkpoint for step ", step, " in '", dir,
                       "' threw: ", e.what()));
    }
    mine->Complete(std::move(result));
  };
  asio::post(runtime.executor(), std::move(write));
  co_return mine;
}

asio::awaitable<absl::Status> Saver::WaitForPendingSave() {
  std::shared_ptr<PendingSave> pending;
  {
    std::lock_guard lock(pending_mu_);
    pending = pending_;
  }
  if (!pending) co_return absl::OkStatus();
  absl::StatusOr<std::string> result = co_await pending->Wait();
  co_return result.status();
}

void Saver::AdoptDirectory(const std::string& dir) {
  directory_ = dir;
  retained_.clear();
  last_preserved_.reset();
  RemoveStaleTempFiles(dir, options_.filename_prefix);
  RemoveStaleTempFiles(dir, kStateFileName);
  const absl::Time now = clock_->Now();
  next_preserve_time_ = now + options_.keep_checkpoint_every_n_hours;
  absl::StatusOr<CheckpointState> state = ReadCheckpointState(dir);
  if (!state.ok()) {
    // Without a state file, the checkpoints found in the directory (oldest
    // first) are the list retention continues from.
    std::vector<std::string> found =
        ScanCheckpoints(dir, options_.filename_prefix);
    if (!absl::IsNotFound(state.status()) || !found.empty()) {
      WarnTo(options_.warn,
             absl::StrCat(
                 "the checkpoint state of '", dir, "' is ",
                 absl::IsNotFound(state.status()) ? "missing" : "unreadable",
                 " (", state.status().ToString(), "); a new one lists ",
                 found.size(), " checkpoint(s) found there"));
    }
    for (auto it = found.rbegin(); it != found.rend(); ++it) {
      retained_.push_back({*it, now});
    }
    return;
  }
  for (size_t i = 0; i < state->all_model_checkpoint_paths.size(); ++i) {
    std::string name = state->all_model_checkpoint_paths[i];
    // Paths of this directory only; anything else is not ours to delete.
    if (name.find('/') != std::string::npos) {
      std::filesystem::path p(name);
      if (p.parent_path() != std::filesystem::path(dir)) continue;
      name = p.filename().string();
    }
    absl::Time time =
        i < state->all_model_checkpoint_timestamps.size()
            ? TimeFromUnixSeconds(state->all_model_checkpoint_timestamps[i])
            : now;
    retained_.push_back({std::move(name), time});
  }
  if (state->last_preserved_timestamp) {
    last_preserved_ = TimeFromUnixSeconds(*state->last_preserved_timestamp);
    next_preserve_time_ =
        *last_preserved_ + options_.keep_checkpoint_every_n_hours;
  }
}

absl::StatusOr<std::string> Saver::WriteCheckpoint(
    const std::vector<Tensor>& snapshot, const std::string& dir, int64_t step) {
  std::lock_guard lock(write_mu_);
  if (absl::Status s = CheckSnapshot(snapshot); !s.ok()) return s;
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        "Saver: the checkpoint directory is empty");
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::ErrnoToStatus(
        error.value(),
        absl::StrCat("cannot create the checkpoint directory '", dir, "'"));
  }
  if (dir != directory_) AdoptDirectory(dir);

  std::vector<std::pair<std::string, Tensor>> named;
  named.reserve(snapshot.size());
  for (size_t i = 0; i < snapshot.size(); ++i) {
    named.emplace_back(variable_names_[i], snapshot[i]);
  }
  std::map<std::string, std::string> metadata{
      {std::string(kGlobalStepKey), absl::StrCat(step)}};
  absl::StatusOr<SafetensorsFile> file =
      BuildSafetensors(named, std::move(metadata));
  if (!file.ok()) return file.status();
  std::vector<absl::string_view> pieces{file->header};
  for (const Tensor& t : file->data) {
    if (t.TotalBytes() > 0) {
      pieces.emplace_back(static_cast<const char*>(t.raw_data()),
                          t.TotalBytes());
    }
  }
  const std::string name = absl::StrCat(options_.filename_prefix, "-", step);
  const std::string path = JoinPath(dir, absl::StrCat(name, kFileSuffix));
  // Rewriting the checkpoint this run restored from (its step saved again
  // at session creation) or wrote itself is routine; replacing another is
  // said out loud.
  if (name != restored_name_ && !written_.contains(name) && FileExists(path)) {
    WarnTo(options_.warn,
           absl::StrCat("replacing '", path,
                        "', a checkpoint this run did not write"));
  }
  if (absl::Status s = WriteFileAtomically(path, pieces); !s.ok()) {
    return s;
  }
  written_.insert(name);

  // Retention, as TF's Saver: the newest last; the oldest beyond
  // max_to_keep leave the list, and are deleted unless preserved.
  std::erase_if(retained_, [&](const Retained& r) { return r.name == name; });
  retained_.push_back({name, clock_->Now()});
  std::vector<std::string> doomed;
  if (options_.max_to_keep == 0) {
    // TF's Saver with max_to_keep 0 deletes nothing and lists only the
    // newest checkpoint, so the state file does not grow with every save.
    retained_.erase(retained_.begin(), retained_.end() - 1);
  } else {
    while (retained_.size() > static_cast<size_t>(options_.max_to_keep)) {
      Retained oldest = retained_.front();
      retained_.erase(retained_.begin());
      if (oldest.time > next_preserve_time_) {
        last_preserved_ = oldest.time;
        next_preserve_time_ += options_.keep_checkpoint_every_n_hours;
        continue;
      }
      doomed.push_back(oldest.name);
    }
  }
  CheckpointState state;
  state.model_checkpoint_path = name;
  for (const Retained& r : retained_) {
    state.all_model_checkpoint_paths.push_back(r.name);
    state.all_model_checkpoint_timestamps.push_back(UnixSecondsOf(r.time));
  }
  if (last_preserved_)
    state.last_preserved_timestamp = UnixSecondsOf(*last_preserved_);
  if (absl::Status s = WriteFileAtomically(JoinPath(dir, kStateFileName),
                                           RenderState(state));
      !s.ok()) {
    return s;
  }
  // Only now that the state file no longer names them.
  for (const std::string& old : doomed) {
    absl::Status s =
        RemoveFileIfExists(JoinPath(dir, absl::StrCat(old, kFileSuffix)));
    if (!s.ok())
      WarnTo(options_.warn,
             absl::StrCat("cannot delete an old checkpoint: ", s.ToString()));
  }
  return JoinPath(dir, name);
}

absl::Status Saver::RestoreFrom(const std::string& file,
                                const SafetensorsContents& contents,
                                RunArgs& args) const {
  auto step = contents.metadata.find(std::string(kGlobalStepKey));
  int64_t unused;
  if (step == contents.metadata.end() ||
      !absl::SimpleAtoi(step->second, &unused)) {
    return absl::DataLossError(
        absl::StrCat("corrupt checkpoint file '", file,
                     "': __metadata__ has no integer global_step"));
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    const Output& v = variables_[i];
    const std::string& name = v.node()->name();
    auto it = contents.tensors.find(name);
    if (it == contents.tensors.end() && initializers_[i].valid()) {
      WarnTo(options_.warn,
             absl::StrCat("checkpoint '", file, "' has no value for '", name,
                          "' (written before the variable existed); it "
                          "starts from its initial value"));
      args.targets.push_back(initializers_[i]);
      continue;
    }
    if (it == contents.tensors.end()) {
      return absl::NotFoundError(absl::StrCat(
          "variable '", name, "' is not in checkpoint '", file, "'"));
    }
    const Tensor& value = it->second;
    if (value.dtype() != v.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' is ", DTypeName(v.dtype()),
                       " but checkpoint '", file, "' holds a ",
                       DTypeName(value.dtype()), " tensor for it"));
    }
    if (!v.shape().IsCompatibleWith(value.shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", name, "' has shape ", v.shape().DebugString(),
          " but checkpoint '", file, "' holds shape ",
          value.shape().DebugString(), " for it"));
    }
    args.feeds.emplace_back(restore_values_[i], value);
    args.targets.push_back(assigns_[i]);
  }
  return absl::OkStatus();
}

asio::awaitable<absl::Status> Saver::Restore(Session& session,
                                             std::string checkpoint) {
  const std::string file = CheckpointFilePath(checkpoint);
  absl::StatusOr<SafetensorsContents> contents = ReadSafetensorsFile(file);
  if (!contents.ok()) co_return contents.status();
  RunArgs args;
  if (absl::Status s = RestoreFrom(file, *contents, args); !s.ok()) {
    co_return s;
  }
  absl::StatusOr<std::vector<Tensor>> ran =
      co_await session.Run(std::move(args), asio::use_awaitable);
  co_return ran.status();
}

asio::awaitable<absl::StatusOr<std::string>> Saver::RestoreLatest(
    Session& session, std::string dir) {
  // The saves' own errors went to whoever started them; here only their
  // end matters.
  for (const auto& save : SavesInFlight::Get().In(dir)) {
    (void)co_await save->Wait();
  }
  absl::StatusOr<CheckpointState> state = ReadCheckpointState(dir);
  std::vector<std::string> candidates;
  if (state.ok()) {
    // Newest first: the model path, then the list from its end.
    candidates.push_back(state->model_checkpoint_path);
    for (auto it = state->all_model_checkpoint_paths.rbegin();
         it != state->all_model_checkpoint_paths.rend(); ++it) {
      if (std::find(candidates.begin(), candidates.end(), *it) ==
          candidates.end()) {
        candidates.push_back(*it);
      }
    }
  } else {
    // A deleted or truncated state file: the checkpoints of the directory
    // itself, newest first.
    candidates = ScanCheckpoints(dir, options_.filename_prefix);
    if (candidates.empty()) co_return state.status();
    WarnTo(options_.warn,
           absl::StrCat(
               "the checkpoint state of '", dir, "' is ",
               absl::IsNotFound(state.status()) ? "missing" : "unreadable",
               " (", state.status().ToString(),
               "); restoring the newest checkpoint found there"));
  }
  std::vector<std::string> failures;
  for (const std::string& candidate : candidates) {
    const std::string prefix = ResolveInDir(dir, candidate);
    const std::string file = CheckpointFilePath(prefix);
    absl::StatusOr<SafetensorsContents> contents = ReadSafetensorsFile(file);
    RunArgs args;
    absl::Status checked = contents.status();
    if (checked.ok()) checked = RestoreFrom(file, *contents, args);
    if (absl::IsDataLoss(checked) || absl::IsNotFound(contents.status())) {
      WarnTo(options_.warn, absl::StrCat("cannot restore checkpoint '", prefix,
                                         "': ", checked.ToString(),
                                         "; trying the one before it"));
      failures.push_back(checked.ToString());
      continue;
    }
    if (!checked.ok()) co_return checked;
    absl::StatusOr<std::vector<Tensor>> ran =
        co_await session.Run(std::move(args), asio::use_awaitable);
    if (!ran.ok()) co_return ran.status();
    if (!failures.empty()) {
      WarnTo(options_.warn,
             absl::StrCat("restored the older checkpoint '", prefix,
                          "' because newer ones of '", dir, "' are unusable"));
    }
    {
      std::lock_guard lock(write_mu_);
      restored_name_ = std::filesystem::path(prefix).filename().string();
    }
    co_return prefix;
  }
  co_return absl::DataLossError(
      absl::StrCat("no checkpoint of '", dir,
                   "' can be restored: ", absl::StrJoin(failures, "; ")));
}

asio::awaitable<absl::StatusOr<bool>> Saver::RestoreLatestIfAny(
    Session& session, std::string dir) {
  for (const auto& save : SavesInFlight::Get().In(dir)) {
    (void)co_await save->Wait();
  }
  absl::StatusOr<CheckpointState> state = ReadCheckpointState(dir);
  if (absl::IsNotFound(state.status()) &&
      ScanCheckpoints(dir, options_.filename_prefix).empty()) {
    co_return false;
  }
  absl::StatusOr<std::string> restored =
      co_await RestoreLatest(session, std::move(dir));
  if (!restored.ok()) co_return restored.status();
  co_return true;
}

std::function<asio::awaitable<absl::StatusOr<bool>>(Session&)>
MakeRestoreFunction(std::shared_ptr<Saver> saver, std::string checkpoint_dir) {
  return [saver = std::move(saver), dir = std::move(checkpoint_dir)](
             Session& session) { return RestoreIfAny(saver, dir, &session); };
}

}  // namespace cosession
