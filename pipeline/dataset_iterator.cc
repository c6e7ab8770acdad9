#include "cosession/pipeline/dataset_iterator.h"

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/experimental/channel_error.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/async_kernel.h"
#include "cosession/async/completion.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

// One session's iterator: the channel between the producer and the
// IteratorGetNext runs, and the status every GetNext returns once the
// stream ended (or broke).
class DatasetIterator {
 public:
  using Channel = asio::experimental::concurrent_channel<void(
      error_code, absl::StatusOr<DatasetBatch>)>;

  DatasetIterator(Runtime::executor_type executor, int64_t capacity)
      : channel(executor, static_cast<size_t>(capacity)) {}

  // The final status, once known to GetNext.
  std::optional<absl::Status> end() {
    std::lock_guard lock(mu_);
    return end_;
  }
  // Records the final status (the first one wins), then closes the channel:
  // waiting GetNext runs wake up (channel_closed) and read it, the
  // producer's pending send fails. Batches still queued are dropped, so the
  // regular end of the data travels in the channel instead, behind them.
  void Finish(absl::Status status) {
    {
      std::lock_guard lock(mu_);
      if (!end_.has_value()) end_ = std::move(status);
    }
    channel.close();
  }

  Channel channel;
  // Set by the producer once it queued the end of the data.
  std::atomic<bool> producer_done{false};

 private:
  std::mutex mu_;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
};

// Owned by the producer's coroutine frame: however the producer ends --
// returns, throws, is cancelled, or is destroyed without ever running (a
// task spawned after a stop) -- the iterator learns that no more batches
// will come unless the producer queued the end itself.
class ProducerGuard {
 public:
  explicit ProducerGuard(std::shared_ptr<DatasetIterator> iterator)
      : iterator_(std::move(iterator)) {}
  ProducerGuard(ProducerGuard&&) = default;
  ProducerGuard& operator=(ProducerGuard&&) = delete;
  ~ProducerGuard() {
    if (iterator_ != nullptr && !iterator_->producer_done.load()) {
      iterator_->Finish(absl::CancelledError("input pipeline stopped"));
    }
  }

 private:
  std::shared_ptr<DatasetIterator> iterator_;
};

absl::Status NotGetNext(const Output& output) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", output.valid() ? output.name() : std::string("<empty>"),
                   "' is not an output of an ", kIteratorGetNextOp, " op"));
}

using LoadResult = absl::StatusOr<std::shared_ptr<const DatasetRows>>;

// Loads the dataset's rows on a thread of `pool` (blocking I/O) and
// completes through the handler's executor. Cancellation (any type)
// completes it at once with Cancelled: the read in progress finishes in the
// background and its result is dropped, so a stop never waits for a slow
// file.
template <typename CompletionToken>
auto AsyncLoad(Runtime::executor_type pool,
               std::shared_ptr<const CsvDataset> dataset,
               CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(LoadResult)>(
      [](auto handler, Runtime::executor_type pool,
         std::shared_ptr<const CsvDataset> dataset) {
        struct Once {
          std::mutex mu;
          absl::AnyInvocable<void(LoadResult)> done ABSL_GUARDED_BY(mu);
          void Complete(LoadResult result) {
            absl::AnyInvocable<void(LoadResult)> taken;
            {
              std::lock_guard lock(mu);
              taken = std::move(done);
            }
            if (taken) taken(std::move(result));
          }
        };
        auto once = std::make_shared<Once>();
        auto slot = asio::get_associated_cancellation_slot(handler);
        {
          std::lock_guard lock(once->mu);
          once->done = PostToHandler<LoadResult>(
              std::move(handler), [](LoadResult r) { return r; });
        }
        if (slot.is_connected()) {
          slot.assign([once](asio::cancellation_type) {
            once->Complete(absl::CancelledError("input pipeline stopped"));
          });
        }
        asio::post(pool, [once, dataset = std::move(dataset)] {
          once->Complete(dataset->Load());
        });
      },
      token, pool, std::move(dataset));
}

asio::awaitable<absl::Status> Produce(std::shared_ptr<const CsvDataset> dataset,
                                      std::shared_ptr<DatasetIterator> iterator,
                                      Runtime::executor_type pool,
                                      int64_t start_at_batch,
                                      ProducerGuard guard) {
  (void)guard;  // its destructor is the point
  // The read runs on the pool and completes back here, on the strand.
  LoadResult rows = co_await AsyncLoad(pool, dataset, asio::use_awaitable);
  if (absl::IsCancelled(rows.status())) co_return rows.status();
  if (!rows.ok()) {
    iterator->Finish(rows.status());
    co_return rows.status();
  }
  DatasetStream stream(dataset, *std::move(rows), start_at_batch);
  while (true) {
    absl::StatusOr<DatasetBatch> batch = stream.Next();
    const bool at_end = absl::IsOutOfRange(batch.status());
    if (!batch.ok() && !at_end) {
      iterator->Finish(batch.status());
      co_return batch.status();
    }
    auto [ec] = co_await iterator->channel.async_send(
        error_code(), std::move(batch), asio::as_tuple(asio::use_awaitable));
    if (ec == asio::experimental::error::channel_closed) {
      // Shut down by its owner (replaced, or the end already recorded).
      co_return absl::OkStatus();
    }
    if (ec) co_return absl::CancelledError("input pipeline stopped");
    if (at_end) {
      iterator->producer_done.store(true);
      co_return absl::OkStatus();
    }
  }
}

asio::awaitable<absl::Status> GetNextKernel(KernelContext& ctx) {
  std::shared_ptr<DatasetIterator> iterator =
      ctx.resources().LookupResource<DatasetIterator>(ctx.node());
  if (iterator == nullptr) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        kIteratorGetNextOp, " '", ctx.node().name(),
        "': the dataset iterator of this session was not started; add a "
        "DatasetHook (training/dataset_hook.h) to the MonitoredSession, or "
        "call "
        "StartDatasetIterator(session, coordinator, get_next) before running "
        "it"));
  }
  if (std::optional<absl::Status> end = iterator->end()) co_return *end;
  auto [ec, batch] = co_await iterator->channel.async_receive(
      asio::as_tuple(asio::use_awaitable));
  if (ec == asio::experimental::error::channel_closed) {
    std::optional<absl::Status> end = iterator->end();
    co_return end.has_value() ? *end
                              : absl::CancelledError("input pipeline stopped");
  }
  if (ec) {
    co_return absl::CancelledError(absl::StrCat(
        kIteratorGetNextOp, " '", ctx.node().name(), "' was cancelled"));
  }
  if (!batch.ok()) {
    // The end of the data: from now on every GetNext returns it.
    iterator->Finish(batch.status());
    co_return batch.status();
  }
  ctx.set_output(0, std::move(batch->features));
  ctx.set_output(1, std::move(batch->labels));
  co_return absl::OkStatus();
}

absl::Status GetNextShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  absl::StatusOr<OpaqueAttr> dataset_attr = c.attr<OpaqueAttr>("dataset");
  if (!dataset_attr.ok()) return dataset_attr.status();
  std::shared_ptr<const CsvDataset> dataset = dataset_attr->get<CsvDataset>();
  if (dataset == nullptr) {
    return absl::InvalidArgumentError("attr 'dataset' holds no CsvDataset");
  }
  c.AddOutput(DType::kFloat, TensorShape{kUnknownDim, dataset->num_features()});
  c.AddOutput(dataset->options().label_dtype, TensorShape{kUnknownDim});
  return absl::OkStatus();
}

void RegisterDatasetOps() {
  static const bool registered = [] {
    ThrowIfError(OpRegistry::Global().Register(
        {.name = kIteratorGetNextOp,
         .shape_fn = GetNextShape,
         .async_kernel = MakeAsyncKernel(GetNextKernel),
         .stateful = true}));
    return true;
  }();
  (void)registered;
}

}  // namespace

DatasetOutputs DatasetIteratorGetNext(Graph& g,
                                      std::shared_ptr<const CsvDataset> dataset,
                                      std::string name) {
  RegisterDatasetOps();
  if (dataset == nullptr) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(kIteratorGetNextOp, ": the dataset is null")));
  }
  NodeSpec spec;
  spec.op = kIteratorGetNextOp;
  spec.name = std::move(name);
  spec.attrs.emplace("dataset", OpaqueAttr::Of(std::move(dataset)));
  Node* node = g.AddNode(std::move(spec));
  return {Output(node, 0), Output(node, 1)};
}

absl::StatusOr<std::shared_ptr<const CsvDataset>> DatasetOfGetNext(
    const Output& get_next) {
  if (!get_next.valid() || get_next.node()->type() != kIteratorGetNextOp) {
    return NotGetNext(get_next);
  }
  const OpaqueAttr* attr = get_next.node()->FindAttr<OpaqueAttr>("dataset");
  std::shared_ptr<const CsvDataset> dataset =
      attr == nullptr ? nullptr : attr->get<CsvDataset>();
  if (dataset == nullptr) return NotGetNext(get_next);
  return dataset;
}

absl::Status StartDatasetIterator(Session& session, Coordinator& coordinator,
                                  const Output& get_next,
                                  int64_t start_at_batch) {
  absl::StatusOr<std::shared_ptr<const CsvDataset>> dataset =
      DatasetOfGetNext(get_next);
  if (!dataset.ok()) return dataset.status();
  if (&get_next.node()->graph() != &session.graph()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", get_next.name(), "' belongs to another graph than the session's"));
  }
  if (start_at_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StartDatasetIterator: start_at_batch must not be negative, got ",
        start_at_batch));
  }
  Runtime::executor_type pool = session.runtime().executor();
  auto iterator = std::make_shared<DatasetIterator>(
      pool, (*dataset)->options().prefetch_batches);
  // Only StartDatasetIterator sets the resource of an IteratorGetNext
  // node, so a previous one is a DatasetIterator.
  std::shared_ptr<void> previous =
      session.resources().SetResource(*get_next.node(), iterator);
  if (previous != nullptr) {
    static_cast<DatasetIterator*>(previous.get())
        ->Finish(absl::CancelledError("the dataset iterator was restarted"));
  }
  ProducerGuard guard(iterator);
  coordinator.Spawn(
      absl::StrCat("dataset producer '", get_next.node()->name(), "'"),
      Produce(*std::move(dataset), iterator, pool, start_at_batch,
              std::move(guard)));
  return absl::OkStatus();
}

}  // namespace cosession
