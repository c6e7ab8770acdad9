// The asynchronous side of an input pipeline: the IteratorGetNext op, and
// the per-session iterator whose producer prefetches a CsvDataset's batches
// (pipeline/dataset.h) into a bounded channel.
//
//   auto [x, y] = DatasetIteratorGetNext(graph, *dataset);  // build time
//   // With a MonitoredSession: a hook starts an iterator for each session
//   // it creates (training/dataset_hook.h):
//   auto hook = DatasetHook::Create({.get_next = x,
//                                    .resume_from_global_step = true});
//   // With a bare Session and a Coordinator:
//   absl::Status s = StartDatasetIterator(session, coordinator, x);
//   ... session.Run({.fetches = {x, y}}, token) ...   // until OutOfRange
//
// The op: IteratorGetNext, an async kernel with no inputs and two outputs,
// features float [-1, F] and labels [-1] (int32 or int64). Each run takes
// the next batch from its session's iterator, waiting -- without holding a
// thread -- while the channel is empty. After the last batch every run
// fails with OutOfRange ("End of sequence"): a clean stop for a
// MonitoredSession (its step returns OutOfRange, ShouldStop() becomes true,
// Close() calls End and returns OK). A run with no started iterator fails
// with FailedPrecondition saying how to start one. A stop of the run
// (cancellation, another op's failure) cancels the wait: Cancelled.
//
// The iterator: StartDatasetIterator makes one for `session` (kept in the
// session's ResourceManager under the op's node; starting again replaces it
// and shuts the old one down) and spawns its producer as a coordinated task
// of `coordinator` ("dataset producer '<op>'"). The producer reads the files
// on a thread of the session's Runtime pool (blocking I/O never runs on a
// step's path or the coordinator's strand), then, on the coordinator's
// strand, builds batches from batch `start_at_batch` on and sends them into
// a channel of CsvDatasetOptions::prefetch_batches batches, waiting while
// it is full. Then:
//   * end of the data: it queues the end after the last batch and finishes
//     OK (it does not stop the coordinator: the batches already queued are
//     still consumed; the step that meets the end stops the session);
//   * an error (a bad row, a missing file): it finishes with that error,
//     which requests stop on the coordinator (surfacing from Join/Close), and
//     every waiting and later GetNext fails with it too;
//   * a coordinator stop (RequestStop, Close, a cancelled caller) cancels
//     the producer promptly -- also while it waits on a full channel; a file
//     read in progress finishes first. Waiting and later GetNext runs then
//     fail with Cancelled ("input pipeline stopped"), so that runs not tied
//     to the coordinator (a bare Session) do not wait forever.
// Resuming: start_at_batch = b gives exactly the batches b, b+1, ... of an
// uninterrupted stream (see pipeline/dataset.h). DatasetHook can take b from
// the global step restored from a checkpoint.
//
// Thread safety: the op's kernel may run in concurrent runs (each batch goes
// to exactly one of them). StartDatasetIterator is thread-safe. The Session
// and the Coordinator must outlive the calls; the iterator and its producer
// keep what they use alive themselves.
#ifndef COSESSION_PIPELINE_DATASET_ITERATOR_H_
#define COSESSION_PIPELINE_DATASET_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

// The op type name.
inline constexpr char kIteratorGetNextOp[] = "IteratorGetNext";

struct DatasetOutputs {
  Output features{};  // float [-1, F]
  Output labels{};    // int32 / int64 [-1]
};

// Adds an IteratorGetNext op reading `dataset` (stateful: never merged or
// cached). Throws StatusError as every builder when the graph is finalized
// or `dataset` is null.
DatasetOutputs DatasetIteratorGetNext(Graph& g,
                                      std::shared_ptr<const CsvDataset> dataset,
                                      std::string name = "");

// The dataset an IteratorGetNext op reads, from either of its outputs;
// InvalidArgument when `get_next` is not an output of such an op.
absl::StatusOr<std::shared_ptr<const CsvDataset>> DatasetOfGetNext(
    const Output& get_next);

// Starts (or restarts) `session`'s iterator for the IteratorGetNext op of
// `get_next` (either output), from batch `start_at_batch` (>= 0), with its
// producer a coordinated task of `coordinator`. InvalidArgument when
// get_next is not an IteratorGetNext output of the session's graph or
// start_at_batch is negative.
absl::Status StartDatasetIterator(Session& session, Coordinator& coordinator,
                                  const Output& get_next,
                                  int64_t start_at_batch = 0);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_DATASET_ITERATOR_H_
