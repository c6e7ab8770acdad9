#include "cosession/pipeline/dataset_iterator.h"

#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/async_kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/io/saver.h"
#include "cosession/pipeline/detail/prefetcher.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

// What an IteratorGetNext node holds (attr "dataset").
struct GetNextConfig {
  Dataset dataset;
  ElementSpec spec;
  int64_t buffer_size = 0;
  // The "<op>/position" variable and "IteratorGetNext '<op>'" for
  // messages; set once, while the graph is built (not per step).
  Node* position = nullptr;
  std::string what{};
};

absl::Status NotGetNext(const Output& output) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", output.valid() ? output.name() : std::string("<empty>"),
                   "' is not an output of an ", kIteratorGetNextOp, " op"));
}

std::shared_ptr<const GetNextConfig> ConfigOf(const Node& node) {
  if (node.type() != kIteratorGetNextOp) return nullptr;
  const OpaqueAttr* attr = node.FindAttr<OpaqueAttr>("dataset");
  return attr == nullptr ? nullptr : attr->get<GetNextConfig>();
}

std::shared_ptr<detail::Prefetcher> IteratorOf(KernelContext& ctx) {
  return ctx.resources().LookupResource<detail::Prefetcher>(ctx.node());
}

absl::Status NotStarted(KernelContext& ctx) {
  return absl::FailedPreconditionError(absl::StrCat(
      kIteratorGetNextOp, " '", ctx.node().name(),
      "': the dataset iterator of this session was not started; add a "
      "DatasetHook (training/dataset_hook.h) to the MonitoredSession, or "
      "call StartDatasetIterator(session, coordinator, get_next) before "
      "running it"));
}

// The op's outputs from the iterator's next result.
absl::Status TakeNext(KernelContext& ctx, ElementIterator::Result next) {
  if (!next.ok()) return next.status();
  if (!next->has_value()) return absl::OutOfRangeError("End of sequence");
  std::shared_ptr<const GetNextConfig> config = ConfigOf(ctx.node());
  Element& element = **next;
  absl::Status fits = CheckElement(element, config->spec, config->what);
  if (!fits.ok()) return fits;
  // Counted as taken before the step ends, so that a checkpoint saved
  // after this step resumes after this element.
  absl::StatusOr<Tensor> position = ctx.resources().UpdateVariable(
      *config->position, [](const Tensor* current) -> absl::StatusOr<Tensor> {
        return Tensor::Scalar<int64_t>(
            current == nullptr ? 1 : current->scalar<int64_t>() + 1);
      });
  if (!position.ok()) return position.status();
  for (size_t i = 0; i < element.size(); ++i) {
    ctx.set_output(static_cast<int>(i), std::move(element.tensor(i)));
  }
  return absl::OkStatus();
}

// The usual step: the element is already in the buffer.
std::optional<absl::Status> TryGetNext(KernelContext& ctx) {
  std::shared_ptr<detail::Prefetcher> iterator = IteratorOf(ctx);
  if (iterator == nullptr) return NotStarted(ctx);
  std::optional<ElementIterator::Result> ready = iterator->TryReceive();
  if (!ready.has_value()) return std::nullopt;
  return TakeNext(ctx, *std::move(ready));
}

asio::awaitable<absl::Status> GetNextKernel(KernelContext& ctx) {
  std::shared_ptr<detail::Prefetcher> iterator = IteratorOf(ctx);
  if (iterator == nullptr) co_return NotStarted(ctx);
  // No co_await inside a conditional expression: g++ 12 destroys its
  // temporaries twice (docs/async_pitfalls.md, item 13).
  std::optional<ElementIterator::Result> ready = iterator->TryReceive();
  if (!ready.has_value()) ready = co_await iterator->Receive();
  co_return TakeNext(ctx, *std::move(ready));
}

absl::Status GetNextShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  absl::StatusOr<OpaqueAttr> attr = c.attr<OpaqueAttr>("dataset");
  if (!attr.ok()) return attr.status();
  std::shared_ptr<const GetNextConfig> config = attr->get<GetNextConfig>();
  if (config == nullptr) {
    return absl::InvalidArgumentError("attr 'dataset' holds no dataset");
  }
  for (const ComponentSpec& component : config->spec) {
    c.AddOutput(component.dtype, component.shape);
  }
  return absl::OkStatus();
}

void RegisterDatasetOps() {
  static const bool registered = [] {
    ThrowIfError(OpRegistry::Global().Register(
        {.name = kIteratorGetNextOp,
         .shape_fn = GetNextShape,
         .async_kernel = MakeAsyncKernel(GetNextKernel, TryGetNext),
         .stateful = true}));
    return true;
  }();
  (void)registered;
}

}  // namespace

std::vector<Output> IteratorGetNext(Graph& g, const Dataset& dataset,
                                    std::string name, int64_t buffer_size) {
  RegisterDatasetOps();
  const std::string what = absl::StrCat(kIteratorGetNextOp, " '", name, "'");
  ThrowIfError(dataset.status());
  if (buffer_size < 1) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(what, ": buffer_size must be >= 1, got ", buffer_size)));
  }
  std::optional<ElementSpec> spec = dataset.spec();
  if (!spec.has_value()) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(what, ": the element spec of ", dataset.DebugString(),
                     " is unknown; give its Map a MapOptions::output_spec")));
  }
  for (size_t i = 0; i < spec->size(); ++i) {
    if ((*spec)[i].is_string) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          what, ": component ", i, " of ", dataset.DebugString(),
          " is a string; the graph takes tensors (parse it with a Map)")));
    }
  }
  auto config = std::make_shared<GetNextConfig>(GetNextConfig{
      .dataset = dataset, .spec = *spec, .buffer_size = buffer_size});
  NodeSpec node_spec;
  node_spec.op = kIteratorGetNextOp;
  node_spec.name = std::move(name);
  node_spec.attrs.emplace(
      "dataset", OpaqueAttr::Of(std::shared_ptr<const GetNextConfig>(config)));
  Node* node = g.AddNode(std::move(node_spec));
  // Not trainable: optimizers leave it alone; the Saver saves it as every
  // variable.
  config->what = absl::StrCat(kIteratorGetNextOp, " '", node->name(), "'");
  config->position = ops::Variable(g, Tensor::Scalar<int64_t>(0),
                                   absl::StrCat(node->name(), "/position"),
                                   /*trainable=*/false)
                         .node();
  // Checkpoints written before iterators had a position restore into this
  // graph too: the position then starts at 0.
  g.AddToCollection(kRestoreOptionalCollection, config->position);
  std::vector<Output> outputs;
  for (size_t i = 0; i < spec->size(); ++i) {
    outputs.emplace_back(node, static_cast<int>(i));
  }
  return outputs;
}

absl::StatusOr<Dataset> DatasetOfGetNext(const Output& get_next) {
  if (!get_next.valid()) return NotGetNext(get_next);
  std::shared_ptr<const GetNextConfig> config = ConfigOf(*get_next.node());
  if (config == nullptr) return NotGetNext(get_next);
  return config->dataset;
}

absl::StatusOr<Output> IteratorPosition(const Output& get_next) {
  if (!get_next.valid()) return NotGetNext(get_next);
  std::shared_ptr<const GetNextConfig> config = ConfigOf(*get_next.node());
  if (config == nullptr) return NotGetNext(get_next);
  return Output(config->position, 0);
}

absl::Status StartDatasetIterator(Session& session, Coordinator& coordinator,
                                  const Output& get_next, int64_t start_at) {
  if (!get_next.valid()) return NotGetNext(get_next);
  std::shared_ptr<const GetNextConfig> config = ConfigOf(*get_next.node());
  if (config == nullptr) return NotGetNext(get_next);
  if (&get_next.node()->graph() != &session.graph()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", get_next.name(), "' belongs to another graph than the session's"));
  }
  if (start_at < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StartDatasetIterator: start_at must not be negative, got ", start_at));
  }
  IteratorContext context{.pool = session.runtime().executor(),
                          .coordinator = &coordinator,
                          .iteration = 0,
                          .io = coordinator.strand().get_inner_executor()};
  absl::StatusOr<std::unique_ptr<ElementIterator>> input =
      config->dataset.MakeIterator(context);
  if (!input.ok()) return input.status();
  absl::StatusOr<std::shared_ptr<detail::Prefetcher>> iterator =
      detail::Prefetcher::Start(
          *std::move(input), config->buffer_size, context, start_at,
          absl::StrCat("dataset producer '", get_next.node()->name(), "'"));
  if (!iterator.ok()) return iterator.status();
  // Only StartDatasetIterator sets the resource of an IteratorGetNext
  // node, so a previous one is a Prefetcher.
  std::shared_ptr<void> previous =
      session.resources().SetResource(*get_next.node(), *iterator);
  if (previous != nullptr) {
    static_cast<detail::Prefetcher*>(previous.get())->Shutdown();
  }
  return absl::OkStatus();
}

DatasetOutputs DatasetIteratorGetNext(Graph& g,
                                      std::shared_ptr<const CsvDataset> dataset,
                                      std::string name) {
  if (dataset == nullptr) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(kIteratorGetNextOp, ": the dataset is null")));
  }
  const int64_t buffer = dataset->options().prefetch_batches;
  std::vector<Output> outputs = IteratorGetNext(
      g, CsvBatches(std::move(dataset)), std::move(name), buffer);
  return {outputs[0], outputs[1]};
}

}  // namespace cosession
