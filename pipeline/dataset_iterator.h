// The graph's side of an input pipeline: the IteratorGetNext op, which
// takes the next element of a dataset (pipeline/dataset.h) into the step,
// and the per-session iterator that prefetches it.
//
//   Dataset batches = CsvRows(Dataset::TextLines({"digits.csv.gz"}),
//                             {.num_columns = 65})
//                         .Shuffle(1024, /*seed=*/42)
//                         .Batch(32)
//                         .Repeat();
//   std::vector<Output> xy = IteratorGetNext(graph, batches, "train_batch");
//   // With a MonitoredSession: a hook starts an iterator for each session
//   // it creates (training/dataset_hook.h):
//   auto hook = DatasetHook::Create({.get_next = xy[0],
//                                    .resume_from_global_step = true});
//   // With a bare Session and a Coordinator:
//   absl::Status s = StartDatasetIterator(session, coordinator, xy[0]);
//   ... session.Run({.fetches = xy}, token) ...   // until OutOfRange
//
// The op: IteratorGetNext, an async kernel with no inputs and one output per
// component of the dataset's elements, with the dtypes and shapes of its
// spec (a batch's leading dimension unknown). Each run takes the next
// element from its session's iterator, waiting -- without holding a thread
// -- while the buffer is empty, and checks it against the spec
// (InvalidArgument naming the component and the element's origin). After
// the last element every run fails with OutOfRange ("End of sequence"): a
// clean stop for a MonitoredSession (its step returns OutOfRange,
// ShouldStop() becomes true, Close() calls End and returns OK). A run with
// no started iterator fails with FailedPrecondition saying how to start
// one. A stop of the run (cancellation, another op's failure) cancels the
// wait: Cancelled.
//
// The iterator: StartDatasetIterator makes one for `session` (kept in the
// session's ResourceManager under the op's node; starting again replaces it
// and shuts the old one down). Its producer is a coordinated task of
// `coordinator` ("dataset producer '<op>'") that runs the whole chain on a
// strand of the session's Runtime pool -- off the step's path and off the
// coordinator's strand -- into a buffer of `buffer_size` elements, waiting
// while it is full (pipeline/detail/prefetcher.h). Then:
//   * end of the data: the end is queued after the last element; the
//     producer finishes OK (the step that meets the end stops the session);
//   * an error (a bad row, a missing file, a reset socket): the producer
//     finishes with it, which requests stop on the coordinator (surfacing
//     from Join/Close), and every waiting and later GetNext fails with it;
//   * a coordinator stop (RequestStop, Close, a cancelled caller) cancels
//     the producer promptly, also while it waits on a full buffer or a
//     socket. Waiting and later GetNext runs fail with Cancelled ("input
//     pipeline stopped"), so that runs not tied to the coordinator (a bare
//     Session) never wait forever.
// Resuming: start_at = p skips the first p elements (Dataset's exact
// resume: for a deterministic dataset the run continues with element p of
// an uninterrupted stream). Every IteratorGetNext op has a position: a
// non-trainable int64 variable "<op>/position" (IteratorPosition) that
// each run taking an element increments, within the step. Being a
// variable, it is saved in the checkpoint's own file and restored with it,
// so DatasetHook's resume_from_checkpoint starts a restored session's
// iterator exactly after the last element the checkpointed run took.
//
// CsvDataset (pipeline/csv_dataset.h) feeds the same op: its batches are
// the chain CsvBatches, and DatasetIteratorGetNext is this op over it.
//
// Thread safety: the op's kernel may run in concurrent runs (each element
// goes to exactly one of them). StartDatasetIterator is thread-safe. The
// Session and the Coordinator must outlive the calls; the iterator and its
// producer keep what they use alive themselves.
#ifndef COSESSION_PIPELINE_DATASET_ITERATOR_H_
#define COSESSION_PIPELINE_DATASET_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/pipeline/csv_dataset.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

// The op type name.
inline constexpr char kIteratorGetNextOp[] = "IteratorGetNext";

// Adds an IteratorGetNext op reading `dataset` (stateful: never merged or
// cached) with a prefetch buffer of `buffer_size` >= 1 elements; returns
// its outputs, one per component. The default, 8, has the producer woken
// once every 4 steps (at half the buffer) rather than at every step, a
// wake-up being a step's dearest input cost (BM_Train_FromPipeline in the
// README); pass less for very large elements. Throws StatusError as every
// builder when the graph is finalized, the dataset is not ok() (its status),
// its spec is unknown (a Map without MapOptions::output_spec) or has a string
// component, or buffer_size < 1.
std::vector<Output> IteratorGetNext(Graph& g, const Dataset& dataset,
                                    std::string name = "",
                                    int64_t buffer_size = 8);

// The dataset an IteratorGetNext op reads, from any of its outputs;
// InvalidArgument when `get_next` is not an output of such an op.
absl::StatusOr<Dataset> DatasetOfGetNext(const Output& get_next);

// The position variable of the IteratorGetNext op of `get_next`.
absl::StatusOr<Output> IteratorPosition(const Output& get_next);

// Starts (or restarts) `session`'s iterator for the IteratorGetNext op of
// `get_next` (any output), skipping the first `start_at` (>= 0) elements,
// with its producer a coordinated task of `coordinator`. InvalidArgument
// when get_next is not an IteratorGetNext output of the session's graph or
// start_at is negative; the dataset's MakeIterator errors.
absl::Status StartDatasetIterator(Session& session, Coordinator& coordinator,
                                  const Output& get_next, int64_t start_at = 0);

// CsvDataset's op: IteratorGetNext over CsvBatches(dataset), with
// CsvDatasetOptions::prefetch_batches as its buffer.
struct DatasetOutputs {
  Output features{};  // float [-1, F]
  Output labels{};    // int32 / int64 [-1]
};
DatasetOutputs DatasetIteratorGetNext(Graph& g,
                                      std::shared_ptr<const CsvDataset> dataset,
                                      std::string name = "");

}  // namespace cosession

#endif  // COSESSION_PIPELINE_DATASET_ITERATOR_H_
