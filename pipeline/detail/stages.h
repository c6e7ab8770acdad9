// The stages behind Dataset's methods (pipeline/dataset.h), one factory per
// stage, each defined in the .cc file of its concept. Arguments are
// validated by the caller (dataset.cc); a factory gets valid ones.
#ifndef COSESSION_PIPELINE_DETAIL_STAGES_H_
#define COSESSION_PIPELINE_DETAIL_STAGES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/pipeline/dataset.h"

namespace cosession::detail {

using Node = std::shared_ptr<const DatasetNode>;

// A stage that builds batches of its elements more cheaply than Batch
// stacks them (CsvRows parses rows straight into the batch's tensors), as
// tf.data fuses a map and a batch: Batch(n, drop_remainder) over it is
// FusedBatch(n, drop_remainder), which must yield exactly the batches,
// errors and positions (Skip) that Batch would. `self` is this node as the
// unfused Batch would hold it.
class BatchFusable {
 public:
  virtual ~BatchFusable() = default;
  virtual Node FusedBatch(const Node& self, int64_t batch_size,
                          bool drop_remainder) const = 0;
};

// What an error of a user's function (a map, a predicate, a key...) is in
// the stream: itself, but an OutOfRange becomes InvalidArgument, so that
// it cannot pass for the end of the input (IteratorGetNext would take it
// for a clean stop). `function` names it: "the map function returned
// OutOfRange (not an end of input): ...".
absl::Status UserFunctionError(absl::Status status, absl::string_view function);

// A stage that passes on some of its input's results and drops the others
// (Filter, Unique): Derived's `std::optional<Result> Keep(Result in)` says,
// per result, what to return, or nullopt to drop it and take the next.
// Both paths loop over the input: TryNext while it has results ready, Next
// awaiting them.
template <typename Derived>
class DroppingIterator : public ElementIterator {
 public:
  explicit DroppingIterator(std::unique_ptr<ElementIterator> input)
      : input_(std::move(input)) {}

  std::optional<Result> TryNext() override {
    while (true) {
      std::optional<Result> in = input_->TryNext();
      if (!in.has_value()) return std::nullopt;
      if (std::optional<Result> out = self().Keep(*std::move(in))) return out;
    }
  }
  boost::asio::awaitable<Result> Next() override {
    while (true) {
      if (std::optional<Result> out = self().Keep(co_await NextOf(*input_))) {
        co_return *std::move(out);
      }
    }
  }

 protected:
  std::unique_ptr<ElementIterator> input_;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

class Prefetcher;

// An iterator that reads its input ahead through a Prefetcher (the
// Prefetch stage's): what a parallel interleave that is not deterministic
// needs to wait for whichever of its inputs gives first.
class ReadAheadIterator : public ElementIterator {
 public:
  // Null until a TryNext or Next started the producer, or when it could
  // not start.
  virtual Prefetcher* prefetcher() = 0;
};

// pipeline/memory_sources.cc
Node FromElementsNode(std::vector<Element> elements);
Node FromTensorSlicesNode(std::vector<Tensor> tensors);
Node RangeNode(int64_t start, int64_t stop, int64_t step);
// pipeline/text_lines.cc
Node TextLinesNode(std::vector<std::string> files, TextLinesOptions options);
Node TFRecordsNode(std::vector<std::string> files, TFRecordsOptions options);
// pipeline/map.cc
Node MapNode(Node input, MapFunction fn, MapOptions options);
Node AsyncMapNode(Node input, AsyncMapFunction fn, MapOptions options);
// pipeline/element_filters.cc: the stages that pass elements through.
Node FilterNode(Node input, Predicate pred);
Node TakeNode(Node input, int64_t count);
Node SkipNode(Node input, int64_t count);
Node ShardNode(Node input, int64_t num_shards, int64_t index);
Node RepeatNode(Node input, int64_t count);
Node TakeWhileNode(Node input, Predicate pred);
// pipeline/scan.cc
Node ScanNode(Node input, Element initial_state, ScanFunction fn,
              ScanOptions options);
// pipeline/combine.cc: the stages that combine streams. `spec` is the
// common spec of both inputs (Dataset::Concatenate checks they agree).
Node ConcatenateNode(Node first, Node second, std::optional<ElementSpec> spec);
Node ZipNode(std::vector<Node> inputs);
Node EnumerateNode(Node input, int64_t start);
Node FlatMapNode(Node input, FlatMapFunction fn, FlatMapOptions options);
// For the stages over several inputs (pipeline/combine.cc): the spec every
// input satisfies (nullopt when one is unknown or they disagree), whether
// every input is deterministic, an iterator per input (the first error
// otherwise), and their DebugStrings joined by ", ".
std::optional<ElementSpec> CommonSpecOf(const std::vector<Node>& inputs);
bool AllDeterministic(const std::vector<Node>& inputs);
absl::StatusOr<std::vector<std::unique_ptr<ElementIterator>>> IteratorsOf(
    const std::vector<Node>& inputs, const IteratorContext& context);
std::string DebugStringOf(const std::vector<Node>& inputs);
// The iterator of fn(element)'s dataset, for FlatMap and Interleave: a
// failed dataset, or an exception from fn, is its status naming `stage`
// and the element's origin. With read_ahead > 0 the dataset is read ahead
// through a Prefetch of that many elements (a parallel Interleave's input).
absl::StatusOr<std::unique_ptr<ElementIterator>> OpenDatasetOf(
    const FlatMapFunction& fn, const Element& element, absl::string_view stage,
    const IteratorContext& context, int64_t read_ahead = 0);

// pipeline/cache.cc
Node CacheNode(Node input, CacheOptions options);
Node FileCacheNode(Node input, CacheOptions options);

// pipeline/directed_interleave.cc: options.weights holds one weight per
// input; `seeded` tells whether the picks are the same in every run
// (deterministic()).
Node SampleNode(std::vector<Node> inputs, uint64_t seed, bool seeded,
                SampleOptions options);
Node ChooseNode(std::vector<Node> inputs, Node choices,
                bool stop_on_empty_dataset);

// pipeline/list_files.cc: shuffle_seed unset = sorted order; `seeded`
// tells whether the order is the same in every run (deterministic()).
Node ListFilesNode(std::vector<std::string> patterns,
                   std::optional<uint64_t> shuffle_seed, bool seeded);

// pipeline/unbatch.cc
Node UnbatchNode(Node input);

// pipeline/shuffle.cc
Node ShuffleNode(Node input, int64_t buffer_size, uint64_t seed,
                 bool reshuffle_each_iteration);
// pipeline/batch.cc. BatchNode fuses with a BatchFusable input;
// StackingBatchNode never does (what a fused stage falls back to).
Node BatchNode(Node input, int64_t batch_size, bool drop_remainder);
Node StackingBatchNode(Node input, int64_t batch_size, bool drop_remainder);
Node PaddedBatchNode(Node input, int64_t batch_size,
                     PaddedBatchOptions options);
// `elements` (at least one) stacked along a new dimension 0, component by
// component, as Batch stacks them; InvalidArgument naming `stage`, the
// component and the element's origin when they do not stack, and an error
// naming `stage` when the batch is too large to make (never a throw).
ElementIterator::Result StackElements(const std::vector<Element>& elements,
                                      const std::string& stage);
// The spec of such stacks of elements of spec `in` (nullopt: unknown):
// each component with a dimension 0 of `leading` (or kUnknownDim) first.
std::optional<ElementSpec> StackedSpec(const std::optional<ElementSpec>& in,
                                       int64_t leading);
// Cardinality arithmetic (pipeline/batch.cc): batches of `size` out of
// `n` elements (the last one short, or dropped); and `n` with the
// unknown and infinite cases passed through.
int64_t BatchedCardinality(int64_t n, int64_t size, bool drop_remainder);
// pipeline/window.cc
Node WindowNode(Node input, WindowOptions options);
// pipeline/unique.cc
Node UniqueNode(Node input, UniqueOptions options);
// pipeline/group_by_window.cc
Node GroupByWindowNode(Node input, GroupByWindowOptions options);
// pipeline/prefetch.cc
Node PrefetchNode(Node input, int64_t buffer_size);
// pipeline/interleave.cc
Node InterleaveNode(std::vector<Node> inputs, int64_t cycle_length,
                    int64_t block_length);
Node MappedInterleaveNode(Node upstream, FlatMapFunction fn,
                          InterleaveOptions options);

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_STAGES_H_
