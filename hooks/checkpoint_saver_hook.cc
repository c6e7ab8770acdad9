#include "cosession/hooks/checkpoint_saver_hook.h"

#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/graph_def_proto.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

asio::awaitable<absl::StatusOr<bool>> RestoreWithHookSaver(
    std::shared_ptr<CheckpointSaverHook> hook, Session* session) {
  if (!hook->saver()) {
    co_return absl::FailedPreconditionError(
        "CheckpointSaverHook restore function called before the hook's Begin "
        "created its Saver");
  }
  auto restore = MakeRestoreFunction(hook->saver(), hook->checkpoint_dir());
  co_return co_await restore(*session);
}

}  // namespace

// ------------------------------------------------------------ listener

absl::Status CheckpointSaverListener::Begin(Graph&) { return absl::OkStatus(); }
asio::awaitable<absl::Status> CheckpointSaverListener::BeforeSave(Session&,
                                                                  int64_t) {
  co_return absl::OkStatus();
}
asio::awaitable<absl::StatusOr<bool>> CheckpointSaverListener::AfterSave(
    Session&, int64_t) {
  co_return false;
}
asio::awaitable<absl::Status> CheckpointSaverListener::End(Session&, int64_t) {
  co_return absl::OkStatus();
}

// ------------------------------------------------------------ hook

absl::StatusOr<std::shared_ptr<CheckpointSaverHook>>
CheckpointSaverHook::Create(CheckpointSaverHookOptions options) {
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "CheckpointSaverHookOptions.checkpoint_dir must be set");
  }
  for (const auto& listener : options.listeners) {
    if (!listener) {
      return absl::InvalidArgumentError(
          "CheckpointSaverHookOptions.listeners holds a null listener");
    }
  }
  Clock& clock = options.clock ? *options.clock : SystemClock();
  absl::StatusOr<SecondOrStepTimer> timer =
      SecondOrStepTimer::Create(options.save_secs, options.save_steps, clock);
  if (!timer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckpointSaverHookOptions.save_secs/save_steps: ",
                     timer.status().message()));
  }
  if (!options.saver_options.clock) options.saver_options.clock = &clock;
  return std::shared_ptr<CheckpointSaverHook>(
      new CheckpointSaverHook(std::move(options), *std::move(timer)));
}

CheckpointSaverHook::CheckpointSaverHook(CheckpointSaverHookOptions options,
                                         SecondOrStepTimer timer)
    : options_(std::move(options)),
      timer_(std::move(timer)),
      saver_(options_.saver) {}

absl::Status CheckpointSaverHook::Begin(Graph& graph) {
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "CheckpointSaverHook"));
  graph_ = &graph;
  // A second Begin on the same graph keeps the Saver it made.
  if (!options_.saver && saver_graph_ != &graph) {
    absl::StatusOr<std::shared_ptr<Saver>> saver =
        Saver::Create(graph, options_.saver_options);
    if (!saver.ok()) return saver.status();
    saver_ = *std::move(saver);
    saver_graph_ = &graph;
  }
  for (const auto& listener : options_.listeners) {
    if (absl::Status s = listener->Begin(graph); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckpointSaverHook::OpenSummaryWriter() {
  if (summary_writer_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<SummaryWriter>> writer =
      SummaryWriterCache::Get(options_.checkpoint_dir);
  if (!writer.ok()) return writer.status();
  summary_writer_ = *std::move(writer);
  return absl::OkStatus();
}

absl::Status CheckpointSaverHook::WriteGraph() {
  // The graph is final once every hook's Begin ran, which is why
  // TensorFlow writes it here and not in Begin.
  COSESSION_RETURN_IF_ERROR(OpenSummaryWriter());
  COSESSION_RETURN_IF_ERROR(WriteFileAtomically(
      JoinPath(options_.checkpoint_dir, "graph.pbtxt"), GraphDefText(*graph_)));
  std::string graph_def = EncodeGraphDef(*graph_);
  std::string meta_graph_def = EncodeMetaGraphDef(graph_def);
  summary_writer_->AddEvent(
      Event{.what = SerializedGraphDef{std::move(graph_def)}});
  summary_writer_->AddEvent(
      Event{.what = SerializedMetaGraphDef{std::move(meta_graph_def)}});
  return absl::OkStatus();
}

absl::Status CheckpointSaverHook::LogCheckpoint(const PendingSave& save) {
  COSESSION_RETURN_IF_ERROR(OpenSummaryWriter());
  // TensorFlow's checkpoint_path here is the save path without the step
  // ("<dir>/model.ckpt"); the state file names the step's checkpoint.
  summary_writer_->AddSessionLog(
      SessionLog::kCheckpoint, save.step(),
      JoinPath(options_.checkpoint_dir, saver_->options().filename_prefix));
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::vector<Tensor>>>
CheckpointSaverHook::ReadSnapshot(Session& session) {
  RunArgs args{.fetches = {step_.tensor()}};
  args.fetches.insert(args.fetches.end(), saver_->variables().begin(),
                      saver_->variables().end());
  auto snapshot = co_await session.Run(std::move(args), asio::use_awaitable);
  if (snapshot.ok()) step_.Observe(snapshot->at(0).scalar<int64_t>());
  co_return snapshot;
}

asio::awaitable<absl::Status> CheckpointSaverHook::Deliver(
    Session& session, SessionRunContext* context) {
  if (!undelivered_) co_return absl::OkStatus();
  std::shared_ptr<PendingSave> save = std::move(undelivered_);
  undelivered_.reset();
  absl::StatusOr<std::string> written = co_await save->Wait();
  if (!written.ok()) co_return written.status();
  if (absl::Status s = LogCheckpoint(*save); !s.ok()) co_return s;
  bool stop = false;
  for (const auto& listener : options_.listeners) {
    absl::StatusOr<bool> asked =
        co_await listener->AfterSave(session, save->step());
    if (!asked.ok()) co_return asked.status();
    stop = stop || *asked;
  }
  if (stop && context != nullptr) context->RequestStop();
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> CheckpointSaverHook::DeliverIfDone(
    Session& session, SessionRunContext* context) {
  if (!undelivered_ || !undelivered_->done()) co_return absl::OkStatus();
  co_return co_await Deliver(session, context);
}

asio::awaitable<absl::Status> CheckpointSaverHook::Save(
    Session& session, int64_t step, std::vector<Tensor> snapshot,
    SessionRunContext* context) {
  // One save at a time: the previous one's AfterSave comes first.
  if (absl::Status s = co_await Deliver(session, context); !s.ok()) co_return s;
  for (const auto& listener : options_.listeners) {
    if (absl::Status s = co_await listener->BeforeSave(session, step);
        !s.ok()) {
      co_return s;
    }
  }
  // snapshot[0] is the global step; the rest are the Saver's variables.
  snapshot.erase(snapshot.begin());
  absl::StatusOr<std::shared_ptr<PendingSave>> started =
      co_await saver_->StartSave(session.runtime(), std::move(snapshot),
                                 options_.checkpoint_dir, step);
  if (!started.ok()) co_return started.status();
  undelivered_ = *std::move(started);
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> CheckpointSaverHook::AfterCreateSession(
    Session& session, Coordinator&) {
  absl::StatusOr<std::vector<Tensor>> snapshot = co_await ReadSnapshot(session);
  if (!snapshot.ok()) co_return snapshot.status();
  if (options_.save_graph_def) {
    if (absl::Status s = WriteGraph(); !s.ok()) co_return s;
  }
  const int64_t step = (*snapshot)[0].scalar<int64_t>();
  // TF: "The checkpoint saved here is the state at step global_step".
  absl::Status s = co_await Save(session, step, *std::move(snapshot), nullptr);
  timer_.UpdateLastTriggeredStep(step);
  co_return s;
}

bool CheckpointSaverHook::MaySuspendInNextStep() const {
  if (undelivered_ && !options_.listeners.empty()) return true;
  std::optional<int64_t> expected = step_.ExpectedAfterNextStep();
  return !expected.has_value() || timer_.ShouldTriggerForStep(*expected);
}

absl::Status CheckpointSaverHook::DeliverIfDoneWithoutListeners() {
  if (!undelivered_ || !undelivered_->done()) return absl::OkStatus();
  std::shared_ptr<PendingSave> save = std::move(undelivered_);
  undelivered_.reset();
  // Done: returns at once.
  if (absl::Status s = save->WaitBlocking().status(); !s.ok()) return s;
  return LogCheckpoint(*save);
}

absl::Status CheckpointSaverHook::BeforeRunSync(SessionRunContext&,
                                                SessionRunArgs& args) {
  COSESSION_RETURN_IF_ERROR(DeliverIfDoneWithoutListeners());
  step_.AddFetch(args);
  return absl::OkStatus();
}

absl::Status CheckpointSaverHook::AfterRunSync(SessionRunContext&,
                                               const SessionRunValues& values) {
  COSESSION_RETURN_IF_ERROR(DeliverIfDoneWithoutListeners());
  // A timer that became due during this step makes the next step expect a
  // save (MaySuspendInNextStep): no second look at the clock here.
  return step_.TakeFetched(values).status();
}

asio::awaitable<absl::StatusOr<SessionRunArgs>> CheckpointSaverHook::BeforeRun(
    SessionRunContext& context) {
  if (absl::Status s = co_await DeliverIfDone(context.session(), &context);
      !s.ok()) {
    co_return s;
  }
  SessionRunArgs args;
  step_.AddFetch(args);
  co_return args;
}

asio::awaitable<absl::Status> CheckpointSaverHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  Session& session = context.session();
  if (absl::Status s = co_await DeliverIfDone(session, &context); !s.ok()) {
    co_return s;
  }
  absl::Status fetched = step_.TakeFetched(values).status();
  if (!fetched.ok()) co_return fetched;
  if (!timer_.ShouldTriggerForStep(step_.EstimatedAfter())) {
    co_return absl::OkStatus();
  }
  // The real step after the train op, with the variables of that step.
  absl::StatusOr<std::vector<Tensor>> snapshot = co_await ReadSnapshot(session);
  if (!snapshot.ok()) co_return snapshot.status();
  const int64_t step = (*snapshot)[0].scalar<int64_t>();
  if (!timer_.ShouldTriggerForStep(step)) co_return absl::OkStatus();
  timer_.UpdateLastTriggeredStep(step);
  if (absl::Status s =
          co_await Save(session, step, *std::move(snapshot), &context);
      !s.ok()) {
    co_return s;
  }
  if (options_.wait_for_write) co_return co_await Deliver(session, &context);
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> CheckpointSaverHook::End(Session& session) {
  absl::StatusOr<std::vector<Tensor>> snapshot = co_await ReadSnapshot(session);
  if (!snapshot.ok()) co_return snapshot.status();
  const int64_t step = (*snapshot)[0].scalar<int64_t>();
  absl::Status status;
  if (timer_.last_triggered_step() != step) {
    timer_.UpdateLastTriggeredStep(step);
    status = co_await Save(session, step, *std::move(snapshot), nullptr);
  }
  // The last write must be on disk before the session is gone.
  absl::Status delivered = co_await Deliver(session, nullptr);
  if (status.ok()) status = delivered;
  // The CHECKPOINT events with it.
  if (summary_writer_ != nullptr) {
    absl::Status flushed =
        co_await summary_writer_->AsyncFlush(asio::use_awaitable);
    if (status.ok()) status = flushed;
  }
  for (const auto& listener : options_.listeners) {
    absl::Status s = co_await listener->End(session, step);
    if (status.ok()) status = s;
  }
  co_return status;
}

std::function<asio::awaitable<absl::StatusOr<bool>>(Session&)>
MakeRestoreFunction(std::shared_ptr<CheckpointSaverHook> hook) {
  return [hook = std::move(hook)](Session& session) {
    return RestoreWithHookSaver(hook, &session);
  };
}

}  // namespace cosession
