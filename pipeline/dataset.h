// Dataset: an input pipeline as a chain of asynchronous stages, as
// TensorFlow's tf.data:
//
//   Dataset lines = Dataset::TextLines({"digits.csv.gz"});
//   Dataset batches = CsvRows(lines, {.num_columns = 65, .parallelism = 2})
//                         .Shuffle(1024, /*seed=*/42)
//                         .Batch(32)
//                         .Repeat()
//                         .Prefetch(2);
//
// A Dataset is an immutable description (cheap to copy, shareable between
// threads); its iterators produce the stream. Each stage's iterator yields
// elements (pipeline/element.h) through an awaited Next() that completes
// with an element, the end of the sequence, or an error; awaiting never
// blocks a thread (file sources read in chunks on the pool, see
// TextLines). The stages (TensorFlow's names and semantics):
//   sources      FromElements, FromTensorSlices, Range, ListFiles,
//                TextLines (here);
//                ReadLines / ReadRecords over any Asio AsyncReadStream, and
//                TcpLines (pipeline/stream_source.h); FromGenerator and
//                FromChannel (pipeline/generator_source.h); CsvRows, CSV
//                rows parsed from lines (pipeline/csv_rows.h).
//   transforms   Map (a function or a coroutine, in parallel on the pool,
//                in input order when deterministic), FlatMap, Filter,
//                Shuffle(buffer, seed), Batch, PaddedBatch, Unbatch,
//                Repeat, Take, Skip, Shard, Enumerate, Cache (in memory or a
//                file), Prefetch(n) (a bounded buffer filled ahead by a
//                coordinated task).
//   combinators  Interleave (of datasets, or of fn's datasets for each
//                element), SampleFromDatasets, ChooseFromDatasets, Zip,
//                Concatenate.
// Each stage's header comment in its .cc file states its semantics; the
// summary is in the method comments below.
//
// Bad arguments do not throw: the chain carries the first one as status()
// (InvalidArgument naming the stage and the argument), and MakeIterator,
// DatasetIteratorGetNext and friends report it.
//
// Iterators (ElementIterator) are single-consumer: one Next() at a time,
// from one coroutine (any executor). A Next() in flight is cancelled by the
// awaiting coroutine's cancellation (a stop, a cancelled step), completing
// with Cancelled or the cancellation's exception; every wait of the chain --
// a socket read, a full buffer -- is cancelled with it. Work a stage started
// on the pool (a parallel map's call) finishes there and is dropped.
//
// Exact resume: an iterator over a deterministic dataset (deterministic()
// true: no socket, channel or generator, no non-deterministic map) yields
// the same stream every time. A position -- the number of elements taken --
// therefore resumes exactly: Skip(position) on a new iterator continues
// with the elements an uninterrupted run would have produced, shuffle
// buffers included. Stages skip without computing where they can (Range,
// slices and lines skip without building elements, Map without calling its
// function, Batch by skipping its input, Repeat whole passes by counting
// once it has seen one); a Shuffle replays its input.
// pipeline/dataset_iterator.h keeps the position in a checkpointed
// variable.
#ifndef COSESSION_PIPELINE_DATASET_H_
#define COSESSION_PIPELINE_DATASET_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/runtime.h"
#include "cosession/io/file_compression.h"
#include "cosession/pipeline/element.h"

namespace cosession {

// tf.data.AUTOTUNE, accepted where tf.data accepts it. cosession does not
// tune at run time; it picks a fixed value: a Map's parallelism and an
// Interleave's cycle_length become one per CPU of the machine (a Map's at
// least 2, so that it runs on the pool), a Prefetch's buffer
// kAutotunePrefetchBuffer elements.
inline constexpr int64_t kAutotune = -1;
// Dataset::Cardinality's answers besides a count (tf.data's
// INFINITE_CARDINALITY and UNKNOWN_CARDINALITY).
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;
inline constexpr int64_t kAutotunePrefetchBuffer = 8;

// Where a dataset's iterators run and who stops them.
struct IteratorContext {
  // Parallel maps' calls and file reads run on this pool.
  Runtime::executor_type pool;
  // Prefetch producers run as its coordinated tasks: its stop cancels them
  // and its Join waits for them. Required by chains with a Prefetch.
  Coordinator* coordinator = nullptr;
  // Mixed into shuffle seeds: Repeat gives each epoch its own, so that a
  // reshuffling Shuffle differs epoch to epoch and is the same run to run.
  uint64_t iteration = 0;
  // The event loop the I/O objects a source makes (TcpLines' socket) live
  // on; empty = the pool. StartDatasetIterator sets the coordinator's.
  boost::asio::any_io_executor io{};
};

class ElementIterator {
 public:
  // An element, the end of the sequence (nullopt), or an error.
  using Result = absl::StatusOr<std::optional<Element>>;

  virtual ~ElementIterator() = default;

  // The next result when it is ready without waiting; nullopt when the
  // caller must await Next() instead (which then continues where this
  // stopped). Never blocks on a wait. Stages that never wait answer here,
  // so a chain of them runs without a coroutine frame per element.
  virtual std::optional<Result> TryNext() { return std::nullopt; }

  // The next result. After the end, every call returns the end again.
  virtual boost::asio::awaitable<Result> Next() = 0;

  // What TryTakeInto stopped at.
  enum class Taken {
    kFull,       // `out` holds `size` elements
    kMustAwait,  // the next element must be awaited with Next()
    kEnd,        // the end of the sequence
  };
  // Appends ready elements to `out` until it holds `size` of them, the next
  // must be awaited, or the sequence ends, as TryNext would one by one; an
  // error is returned as TryNext would return it, after the elements before
  // it were appended. The default calls TryNext per element; stages that
  // make or pass many elements cheaply override it, so that a Batch pulls
  // its elements in one call instead of one Result each.
  virtual absl::StatusOr<Taken> TryTakeInto(std::vector<Element>& out,
                                            size_t size);

  // Skips up to n >= 0 elements; completes with how many it skipped (fewer
  // at the end of the sequence). The default takes them with Next().
  virtual boost::asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n);
};

// A stage: what a Dataset holds. For stages of one's own (a source), derive
// from it and wrap it with Dataset::FromNode.
class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const = 0;
  // What each element looks like; nullopt when unknown (after a Map without
  // MapOptions::output_spec).
  virtual std::optional<ElementSpec> spec() const = 0;
  // True when every iterator yields the same stream.
  virtual bool deterministic() const = 0;
  // The chain up to here, e.g. "Range(0, 10).Batch(4)".
  virtual std::string DebugString() const = 0;
  // The elements every iterator yields, when known without reading them;
  // kInfiniteCardinality or kUnknownCardinality (the default) otherwise.
  virtual int64_t cardinality() const { return kUnknownCardinality; }
};

// Awaits `it`'s next result, taking the synchronous path when it is ready.
boost::asio::awaitable<ElementIterator::Result> NextOf(ElementIterator& it);

using MapFunction = std::function<absl::StatusOr<Element>(Element)>;
using AsyncMapFunction =
    std::function<boost::asio::awaitable<absl::StatusOr<Element>>(Element)>;
using Predicate = std::function<absl::StatusOr<bool>(const Element&)>;

class Dataset;

// What a Scan function returns for one element: the state the next element
// sees, and the element to yield.
struct ScanStep {
  Element state;
  Element output;
};
// Reduce's step: the next state from the state and an element.
using ReduceFunction = std::function<absl::StatusOr<Element>(
    const Element& state, Element element)>;
using ScanFunction =
    std::function<absl::StatusOr<ScanStep>(const Element& state, Element)>;

struct GroupByWindowOptions {
  // The group of an element (tf.data's key_func).
  std::function<absl::StatusOr<int64_t>(const Element&)> key{};
  // What a full group (or, at the end of the input, a group left) becomes:
  // its elements, in input order, as a dataset (tf.data's reduce_func).
  std::function<Dataset(int64_t key, Dataset window)> reduce{};
  // The elements that fill the group of a key, >= 1 (tf.data's
  // window_size_func; a constant for its window_size).
  std::function<absl::StatusOr<int64_t>(int64_t key)> window_size{};
  // What reduce's datasets yield; unset = unknown (as Map's).
  std::optional<ElementSpec> output_spec{};
  // The elements the groups may hold together: one more is
  // ResourceExhausted (an input of ever new keys must not grow without
  // bound).
  int64_t max_held_elements = int64_t{1} << 20;
  // For messages: "GroupByWindow(<name>)".
  std::string name{};
};

struct BucketBySequenceLengthOptions {
  // The length of an element (tf.data's element_length_func), >= 0.
  std::function<absl::StatusOr<int64_t>(const Element&)> element_length{};
  // Ascending, >= 1: bucket i takes the lengths from boundaries[i - 1]
  // (bucket 0 from 0) to below boundaries[i] (the last bucket: any above).
  std::vector<int64_t> bucket_boundaries{};
  // Each bucket's batch size (>= 1), one more than the boundaries.
  std::vector<int64_t> bucket_batch_sizes{};
  // As PaddedBatchOptions' (empty padded_shapes: the components' spec
  // shapes, their unknown dimensions padded to the batch's longest).
  std::vector<TensorShape> padded_shapes{};
  std::vector<Tensor> padding_values{};
  // Pad the unknown dimensions to the bucket's boundary - 1 instead of the
  // batch's longest; every length must then be below the last boundary.
  bool pad_to_bucket_boundary = false;
  // Batch instead of PaddedBatch (the elements of a batch then need the
  // same shapes).
  bool no_padding = false;
  // Drop each bucket's last batch when it is short.
  bool drop_remainder = false;
};

struct WindowOptions {
  // Elements per window (>= 1).
  int64_t size = 1;
  // Elements between the starts of two windows (>= 1); unset: size (the
  // windows tile the input).
  std::optional<int64_t> shift{};
  // Elements between two of a window's elements (>= 1).
  int64_t stride = 1;
  // Drop the last windows when they have fewer than size elements.
  bool drop_remainder = false;
};

struct ScanOptions {
  // What the function yields; unset = unknown (as Map's).
  std::optional<ElementSpec> output_spec{};
  // For messages: "Scan(<name>)".
  std::string name{};
};

// What FlatMap makes of one element: a dataset (Dataset::Failed for an
// error).
using FlatMapFunction = std::function<Dataset(const Element&)>;

struct FlatMapOptions {
  // What the datasets fn makes yield; unset = unknown (as Map's).
  std::optional<ElementSpec> output_spec{};
  // For messages: "FlatMap(<name>)".
  std::string name{};
};

struct InterleaveOptions {
  // Inputs open at once; kAutotune (tf.data's default): one per CPU.
  int64_t cycle_length = kAutotune;
  // Elements taken from an input before the visit moves to the next.
  int64_t block_length = 1;
  // tf.data's num_parallel_calls: 1 reads the inputs in turn, in the
  // iterator's coroutine; more, or kAutotune (= cycle_length), reads each
  // open input ahead at the same time, as a Prefetch of 2 x block_length
  // elements run by the IteratorContext's coordinator (required then),
  // in the same order; an input's error then comes after the elements
  // before it and, as any Prefetch's, also requests stop on the
  // coordinator. At most cycle_length, as in tf.data.
  int64_t num_parallel_calls = 1;
  // With num_parallel_calls > 1, tf.data's deterministic: false lets the
  // visit take from another input that has an element ready when the
  // visited one has none, instead of waiting (each input's elements still
  // in order, every element once); the dataset is then not deterministic().
  bool deterministic = true;
  // What the datasets fn makes yield; unset = unknown (as Map's).
  std::optional<ElementSpec> output_spec{};
  // For messages: "Interleave(<name>)".
  std::string name{};
};

struct MapOptions {
  // Calls in flight at once; 1 runs the function in the iterator's
  // coroutine, more run it on the pool (an AsyncMapFunction is spawned
  // there); kAutotune: one per CPU, at least 2.
  int64_t parallelism = 1;
  // With parallelism > 1: true keeps the input order; false returns results
  // as they finish (each exactly once, the end never early), and the stream
  // is no longer deterministic.
  bool deterministic = true;
  // What the function returns; unset = unknown (an IteratorGetNext op then
  // needs a stage that fixes it, or fails naming this Map).
  std::optional<ElementSpec> output_spec{};
  // For messages: "Map(<name>)".
  std::string name{};
};

struct TextLinesOptions {
  // Bytes read per chunk (the memory a file source holds besides a line).
  int64_t chunk_bytes = 1 << 16;
  // A longer line is InvalidArgument "<file>:<line>: line longer than N
  // bytes" (a binary file, a missing newline): nothing grows without bound.
  int64_t max_line_bytes = 1 << 20;
  // Leading lines of each file to skip (a header).
  int64_t skip_lines = 0;
  // tf.data's compression_type: kNone (""), kGzip ("GZIP"), kZlib
  // ("ZLIB"); kDetect (the default) reads a file starting with gzip's magic
  // number as gzip, any other as plain text.
  FileCompression compression = FileCompression::kDetect;
  // tf.data's num_parallel_reads: 1 reads the files one after another;
  // N > 1 (or kAutotune: one per CPU) interleaves them a line at a time,
  // N files open and read ahead at once (Interleave(fn) with cycle_length
  // and num_parallel_calls N, its order and its errors; the
  // IteratorContext needs a coordinator then).
  int64_t num_parallel_reads = 1;
};

struct TFRecordsOptions {
  // Bytes read per chunk (tf.data's buffer_size); a record longer than a
  // chunk is read in one go once its length is known.
  int64_t chunk_bytes = 256 << 10;
  // A record claiming a longer length is DataLoss naming it: a corrupt
  // length must not make the reader buffer what it claims.
  int64_t max_record_bytes = int64_t{64} << 20;
  // tf.data's compression_type: kNone (""), kGzip ("GZIP"), kZlib
  // ("ZLIB"); kDetect (the default) reads a file as gzip when it starts
  // with gzip's magic number and not with a valid record header (a plain
  // file whose first record is 35,615 bytes long starts with the magic
  // number too).
  FileCompression compression = FileCompression::kDetect;
  // As TextLinesOptions::num_parallel_reads: N > 1 (or kAutotune)
  // interleaves the files a record at a time, N open and read ahead at
  // once (the IteratorContext needs a coordinator then).
  int64_t num_parallel_reads = 1;
};

struct SampleOptions {
  // Per dataset, its weight: the probability of a pick is its weight over
  // the weights of the datasets still going. Empty = all equal. Finite,
  // >= 0, not all 0.
  std::vector<double> weights{};
  // The same picks in every run; unset (tf.data's default): a seed drawn
  // once per dataset, which is then not deterministic().
  std::optional<uint64_t> seed{};
  // true: the stream ends when a picked dataset ended; false (tf.data's
  // default): that dataset is dropped and the pick made among the others.
  bool stop_on_empty_dataset = false;
  // Another sequence of picks in each pass of a Repeat; false (tf.data's
  // default): the same picks every pass.
  bool rerandomize_each_iteration = false;
};

struct CacheOptions {
  // The most bytes (tensor and string bytes of the elements) an iterator
  // keeps while it fills the cache; past it, ResourceExhausted.
  int64_t max_bytes = int64_t{1} << 30;
  // For messages: "Cache(<name>)".
  std::string name{};
  // tf.data's cache(filename): non-empty caches the elements in this file
  // instead of memory, for later passes and later runs of the program
  // (pipeline/file_cache.cc); max_bytes does not apply then.
  std::string filename{};
};

struct UniqueOptions {
  // The most bytes the values seen may take (8 an integer, a string's
  // length plus 32); past it, ResourceExhausted.
  int64_t max_bytes = int64_t{1} << 30;
  // For messages: "Unique(<name>)".
  std::string name{};
};

struct ListFilesOptions {
  // tf.data's default: the names in a random order, another each pass of a
  // Repeat; false: sorted by name.
  bool shuffle = true;
  // The shuffle's seed: the same order in every run. Unset (tf.data's
  // default): a seed drawn once per dataset, so the dataset is not
  // deterministic() and cannot resume exactly.
  std::optional<uint64_t> seed{};
};

struct PaddedBatchOptions {
  // Per component, the shape to pad to; kUnknownDim pads that dimension to
  // the longest in the batch. Empty = each component's spec shape (unknown
  // dimensions to the longest).
  std::vector<TensorShape> padded_shapes{};
  // Per component, the value to pad with (a scalar of its dtype); empty =
  // zeros.
  std::vector<Tensor> padding_values{};
  bool drop_remainder = false;
};

class Dataset {
 public:
  // An empty dataset description, not ok(): status() says so.
  Dataset();

  // --- Sources ---
  // The elements, in order.
  static Dataset FromElements(std::vector<Element> elements);
  // One element per slice along dimension 0 of every tensor (all at least
  // rank 1, with the same dimension 0).
  static Dataset FromTensorSlices(std::vector<Tensor> tensors);
  // int64 scalars start, start + step, ... before stop (Python's range;
  // a step away from stop gives nothing). step != 0.
  static Dataset Range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset Range(int64_t stop) { return Range(0, stop); }
  // One string element per line of each file in turn (plain, gzip or zlib:
  // TextLinesOptions::compression), read chunk by chunk on the pool -- never
  // the whole file. Lines end at '\n'; a '\r' before it is dropped; a last line
  // without '\n' counts; empty lines are elements too. Origins are
  // "<file>:<line>". Errors: NotFound/PermissionDenied naming the file,
  // DataLoss for corrupt compressed data, InvalidArgument for an overlong line.
  // With num_parallel_reads N > 1, the files are interleaved a line at a time,
  // N read ahead at once (TextLinesOptions).
  static Dataset TextLines(std::vector<std::string> files,
                           TextLinesOptions options = {});
  // tf.data's TFRecordDataset: one string element per record of each
  // TFRecord file in turn (the framing of TensorFlow's TFRecordWriter and
  // of event files; plain, gzip or zlib: TFRecordsOptions::compression),
  // read chunk by chunk on the pool. Origins are "<file>: record <n>". Errors
  // name the file, the record and its byte offset: DataLoss for a CRC mismatch,
  // a length above max_record_bytes or a file that ends inside a record;
  // NotFound/PermissionDenied for a file that cannot be opened.
  static Dataset TFRecords(std::vector<std::string> files,
                           TFRecordsOptions options = {});
  // tf.data's list_files: one string element per path matching any of the
  // glob patterns ("data/part-*.csv.gz"), listed on the pool when an
  // iterator first needs them, sorted, then shuffled unless told not to
  // (ListFilesOptions). No match at all is InvalidArgument naming the
  // patterns. The usual start of a chain that reads many files:
  //   Dataset::ListFiles({"logs/*.gz"}, {.seed = 7}).Interleave(
  //       [](const Element& e) { return Dataset::TextLines({e.text(0)}); },
  //       {.cycle_length = 4, .num_parallel_calls = 4});
  static Dataset ListFiles(std::vector<std::string> patterns,
                           ListFilesOptions options = {});
  // tf.data's sample_from_datasets: each element from a dataset picked at
  // random by its weight (SampleOptions); ends when every dataset ended
  // (or, with stop_on_empty_dataset, the first time a picked one ended).
  // Mixes sources, e.g. 70 % of one file's rows and 30 % of another's.
  static Dataset SampleFromDatasets(std::vector<Dataset> datasets,
                                    SampleOptions options = {});
  // tf.data's choose_from_datasets: element k from datasets[c_k], c_k the
  // k-th int64 scalar of `choices`; ends with the choices (or, with
  // stop_on_empty_dataset, tf.data's default here, the first time a chosen
  // dataset ended; without it, choices of an ended dataset are passed
  // over). A choice out of range is InvalidArgument naming its origin.
  static Dataset ChooseFromDatasets(std::vector<Dataset> datasets,
                                    const Dataset& choices,
                                    bool stop_on_empty_dataset = true);
  // Round-robin over `inputs`: block_length elements from each of
  // cycle_length open inputs in turn (0 = all of them, kAutotune = one per
  // CPU); an input that ends
  // leaves its slot empty, and the next input opens there when the cycle
  // comes back to it; ends when all ended. TensorFlow's interleave, in its
  // order, with the datasets given (many files, many sockets).
  static Dataset Interleave(std::vector<Dataset> inputs,
                            int64_t cycle_length = 0, int64_t block_length = 1);
  // One element per step from each of `datasets`, its components theirs in
  // order; ends with the shortest (tf.data's zip, flattened).
  static Dataset Zip(std::vector<Dataset> datasets);
  // A stage of one's own.
  static Dataset FromNode(std::shared_ptr<const DatasetNode> node);
  // A chain that failed to build (what a bad argument makes).
  static Dataset Failed(absl::Status status);

  // --- Transformations ---
  // fn(element) for every element. An error from fn ends the stream with
  // it (InvalidArgument "Map(name): <origin>: ..." as fn words it); an
  // OutOfRange from fn becomes InvalidArgument (it is not an end); an
  // exception becomes Internal naming the stage.
  Dataset Map(MapFunction fn, MapOptions options = {}) const;
  Dataset Map(AsyncMapFunction fn, MapOptions options = {}) const;
  // fn(element)'s elements for each element in turn (tf.data's flat_map):
  //   Dataset::FromElements(file_names).FlatMap([](const Element& e) {
  //     return Dataset::TextLines({e.text(0)});
  //   });
  // fn runs in the iterator's coroutine and must be a function of the
  // element (the stream is deterministic when the input is). A failed
  // dataset from fn is the stream's error, naming the element's origin.
  Dataset FlatMap(FlatMapFunction fn, FlatMapOptions options = {}) const;
  // tf.data's interleave(map_func, cycle_length, block_length): as the
  // static Interleave, over fn(element)'s datasets for this dataset's
  // elements, each made when it enters the cycle (a thousand file names
  // hold at most cycle_length files open):
  //   Dataset::FromElements(file_names).Interleave(
  //       [](const Element& e) { return Dataset::TextLines({e.text(0)}); },
  //       {.cycle_length = 4, .block_length = 16});
  // fn runs in the iterator's coroutine, as FlatMap's, with FlatMap's
  // errors (naming "Interleave(<name>)"). The inputs are read in turn, or
  // ahead in parallel with num_parallel_calls > 1 (same order).
  Dataset Interleave(FlatMapFunction fn, InterleaveOptions options = {}) const;
  // The elements for which pred is true, in order.
  Dataset Filter(Predicate pred) const;
  // tf.data's unique(): each element once, at its first occurrence. An
  // element is one int32, int64 or string scalar, as in tf.data (else
  // InvalidArgument); the values seen are kept, within
  // UniqueOptions::max_bytes (ResourceExhausted past it).
  Dataset Unique(UniqueOptions options = {}) const;
  // tf.data's take_while: the elements up to the first for which pred is
  // false, which ends the stream (the input is not read further). pred's
  // error is passed on, as Filter's.
  Dataset TakeWhile(Predicate pred) const;
  // tf.data's window, each window batched: window(size, shift, stride,
  // drop_remainder).flat_map(lambda *w: zip(c.batch(size) for c in w)),
  // what time series are cut into. Window k holds the elements k * shift
  // + j * stride, j < size, stacked along a new dimension 0 as Batch
  // stacks them (same errors); at the end of the input the shorter
  // windows that still start inside it follow, unless drop_remainder:
  //   Range(7).Window({.size = 3, .shift = 2})  [0 1 2] [2 3 4] [4 5 6] [6]
  // Holds (size - 1) * stride + 1 elements at most. An input error is
  // returned at once and the windows it cuts are dropped, as Batch drops
  // its partial batch.
  Dataset Window(WindowOptions options) const;
  // tf.data's group_by_window (GroupByWindowOptions): each element joins
  // the group of its key; a group of window_size(key) elements becomes
  // reduce(key, its elements as a dataset), whose elements are yielded
  // before the input is read on; at the end of the input the groups left
  // are reduced in ascending key order. Errors (the input's, key's,
  // window_size's, reduce's) are returned at once naming the stage and the
  // element's origin or the key, and the next call goes on.
  Dataset GroupByWindow(GroupByWindowOptions options) const;
  // tf.data's bucket_by_sequence_length: elements of similar lengths
  // batched together, each bucket with its batch size, padded as
  // PaddedBatch pads (to the batch's longest, or to the bucket's boundary -
  // 1): GroupByWindow with the bucket as the key. A length below 0, or not
  // below the last boundary with pad_to_bucket_boundary, is
  // InvalidArgument naming the element's origin.
  Dataset BucketBySequenceLength(BucketBySequenceLengthOptions options) const;
  // tf.data's scan: a state carried through the stream, starting at
  // initial_state in every iterator. For each element, fn(state, element)
  // returns the next state (as many components as initial_state, each of
  // the same kind and dtype; shapes may change) and the element to yield:
  //   // A running sum of int64 scalars, yielded beside each element.
  //   Dataset sums = numbers.Scan(
  //       MakeElement({Tensor::Scalar<int64_t>(0)}),
  //       [](const Element& sum, Element e) -> absl::StatusOr<ScanStep> {
  //         Tensor next = Tensor::Scalar<int64_t>(
  //             sum.tensor(0).scalar<int64_t>() +
  //             e.tensor(0).scalar<int64_t>());
  //         return ScanStep{.state = MakeElement({next}),
  //                         .output = MakeElement({e.tensor(0), next})};
  //       });
  // fn's error, or a state of another structure (InvalidArgument naming
  // the component and the element's origin), ends the stream with it, as
  // Map's; Skip runs fn over the skipped elements, so a resumed stream has
  // the state it had there.
  Dataset Scan(Element initial_state, ScanFunction fn,
               ScanOptions options = {}) const;
  // TensorFlow's shuffle: a buffer of buffer_size elements; each output is
  // drawn uniformly from the buffer (refilled from the input); seeded, so
  // the same seed gives the same stream; with reshuffle_each_iteration, each
  // Repeat epoch draws differently (and the same in every run).
  Dataset Shuffle(int64_t buffer_size, uint64_t seed,
                  bool reshuffle_each_iteration = true) const;
  // Stacks batch_size consecutive elements per component (same shapes in a
  // batch); the last, smaller batch is kept unless drop_remainder.
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  // Batch for elements of different shapes: each component is padded at
  // the end of every dimension to PaddedBatchOptions' shapes.
  Dataset PaddedBatch(int64_t batch_size,
                      PaddedBatchOptions options = {}) const;
  // count passes (a new input iterator each); -1 (any negative count, as
  // in tf.data) = forever; 0 = none.
  // Skip over a deterministic input counts whole passes once it has seen
  // one pass end: every pass of it has that length (a Map or Filter whose
  // function keeps state of its own breaks this, as it breaks resuming).
  Dataset Repeat(int64_t count = -1) const;
  // The first count elements (-1, or any negative count = all).
  Dataset Take(int64_t count) const;
  // All but the first count elements (-1, or any negative count = none
  // left).
  Dataset Skip(int64_t count) const;
  // This dataset's elements, then other's (whose iterator is made when
  // this one ends). Their specs must agree: the same components and
  // dtypes; where shapes differ, the result's dimension is unknown.
  Dataset Concatenate(const Dataset& other) const;
  // An int64 scalar count (start, start + 1, ...) before each element's
  // components (tf.data's enumerate, flattened).
  Dataset Enumerate(int64_t start = 0) const;
  // Every num_shards-th element from `index` (0 <= index < num_shards):
  // one worker's share, as tf.data's shard. Shard before a Shuffle, so that
  // workers split the input and not each a shuffled copy of it.
  Dataset Shard(int64_t num_shards, int64_t index) const;
  // Each element split along dimension 0 into its rows (tf.data's unbatch):
  // every component a tensor of rank >= 1, all with the same dimension 0.
  Dataset Unbatch() const;
  // A buffer of buffer_size >= 1 elements that a coordinated task fills
  // ahead of the consumer, on a strand of the pool: the chain before it
  // runs off the consumer's path (and off the coordinator's strand). The
  // producer waits while the buffer is full, so a slow consumer slows the
  // source (a socket is then not read).
  // buffer_size kAutotune: kAutotunePrefetchBuffer elements.
  Dataset Prefetch(int64_t buffer_size) const;
  // tf.data's cache(), in memory: the first iterator that reads this
  // dataset to its end keeps its elements; later iterators (the next pass
  // of a Repeat) replay them without reading the input. A partial pass is
  // not kept. Bounded by options.max_bytes (ResourceExhausted past it).
  // With options.filename, tf.data's cache(filename): the elements are
  // kept in that file, which later iterators -- also in later runs of the
  // program -- replay; it appears only once a pass is complete.
  // Shuffle after it for another order each pass.
  Dataset Cache(CacheOptions options = {}) const;

  // OK, or the first bad argument of the chain.
  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }
  std::optional<ElementSpec> spec() const;
  bool deterministic() const;
  std::string DebugString() const;
  // tf.data's cardinality(): how many elements the stream has, known from
  // the chain without reading it -- kInfiniteCardinality for a Repeat
  // without end, kUnknownCardinality when it depends on the data (a file's
  // lines, a Filter) or the dataset is not ok():
  //   Range(10).Batch(4).Repeat(2).Cardinality()   6
  int64_t Cardinality() const;

  // A new iterator at the start of the stream.
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const;

  // tf.data's reduce: reads the whole stream with an iterator made with
  // `context` and completes with fn(...fn(fn(initial_state, e0), e1)...,
  // eN) -- initial_state itself when the stream is empty:
  //   ReduceFunction add = [](const Element& sum, Element e) ... ;
  //   absl::StatusOr<Element> total =
  //       co_await Dataset::Range(5).Reduce(zero, add, context);
  // It is a Scan run to its end (pipeline/reduce.cc), so the state keeps
  // initial_state's structure and fn's errors are named as there
  // ("Scan(Reduce): ..."). The first error -- the chain's or fn's --
  // is the result; cancelling the awaiting coroutine ends the read with
  // Cancelled. Name fn before the co_await (docs/async_pitfalls.md, items
  // 4 and 8).
  boost::asio::awaitable<absl::StatusOr<Element>> Reduce(
      Element initial_state, ReduceFunction fn, IteratorContext context) const;

 private:
  Dataset(std::shared_ptr<const DatasetNode> node, absl::Status status)
      : node_(std::move(node)), status_(std::move(status)) {}
  std::shared_ptr<const DatasetNode> node_;
  absl::Status status_;
};

// A seeded split of rows 0..num_rows-1 (e.g. 80/20 train/eval): `first`
// gets round(num_rows * first_fraction) rows chosen uniformly, `second` the
// rest; both sorted. Depends only on (num_rows, first_fraction, seed).
// InvalidArgument when num_rows < 0 or first_fraction is outside [0, 1].
struct RowSplit {
  std::vector<int64_t> first{};
  std::vector<int64_t> second{};
};
absl::StatusOr<RowSplit> SeededRowSplit(int64_t num_rows, double first_fraction,
                                        uint64_t seed);

}  // namespace cosession

#endif  // COSESSION_PIPELINE_DATASET_H_
