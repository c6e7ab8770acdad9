#include "cosession/pipeline/dataset.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/pipeline/detail/stages.h"
#include "cosession/pipeline/seeded_random.h"

namespace cosession {
namespace {

// Salt that keeps SeededRowSplit's stream apart from the shuffles'.
constexpr uint64_t kSplitSalt = 0x5b17'0000'0000'0001ULL;

// The inputs' nodes, when every input is ok and their specs agree; else the
// error naming the stage and the input.
absl::StatusOr<std::vector<detail::Node>> AgreeingInputs(
    const std::vector<Dataset>& inputs, absl::string_view stage) {
  std::vector<detail::Node> nodes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].ok()) {
      return absl::Status(inputs[i].status().code(),
                          absl::StrCat(stage, ": input ", i, ": ",
                                       inputs[i].status().message()));
    }
    std::optional<ElementSpec> a = inputs[0].spec();
    std::optional<ElementSpec> b = inputs[i].spec();
    if (a.has_value() && b.has_value() &&
        !MostSpecificCommonSpec(*a, *b).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(stage, ": input ", i, " yields ", ElementSpecString(*b),
                       ", input 0 yields ", ElementSpecString(*a)));
    }
    nodes.push_back(inputs[i].node());
  }
  return nodes;
}

// A seed for a shuffle the user did not seed: another stream each run.
uint64_t RandomSeed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// The CPUs of the machine, at least `floor` (kAutotune's fixed choice).
int64_t CpusAtLeast(int64_t floor) {
  return std::max<int64_t>(floor, std::thread::hardware_concurrency());
}

absl::Status ArgumentError(const Dataset& input, absl::string_view stage,
                           absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(input.ok() ? input.DebugString() + "." : std::string(),
                   stage, ": ", problem));
}

// A file source's list of files: InvalidArgument naming `source` when it
// is empty or holds an empty path.
absl::Status CheckFiles(const std::vector<std::string>& files,
                        absl::string_view source) {
  if (files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no files"));
  }
  for (const std::string& file : files) {
    if (file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": files holds an empty path"));
    }
  }
  return absl::OkStatus();
}

// A file source's num_parallel_reads (kAutotune: one per CPU), at most one
// per file.
absl::StatusOr<int64_t> ParallelReads(int64_t num_parallel_reads, size_t files,
                                      absl::string_view source) {
  if (num_parallel_reads == kAutotune) num_parallel_reads = CpusAtLeast(1);
  if (num_parallel_reads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": num_parallel_reads must be >= 1 or kAutotune, got ",
        num_parallel_reads));
  }
  return std::min<int64_t>(num_parallel_reads, static_cast<int64_t>(files));
}

// tf.data's num_parallel_reads = N of a file source: its files interleaved
// an element at a time, N of them read ahead at once. `one_file` is the
// source over one file.
Dataset ReadInParallel(std::vector<std::string> files, int64_t parallel_reads,
                       std::function<Dataset(const std::string&)> one_file,
                       absl::string_view source) {
  std::vector<Element> names;
  names.reserve(files.size());
  for (std::string& file : files) {
    Element name;
    name.components.emplace_back(std::move(file));
    names.push_back(std::move(name));
  }
  return Dataset::FromElements(std::move(names))
      .Interleave([one_file = std::move(one_file)](
                      const Element& name) { return one_file(name.text(0)); },
                  {.cycle_length = parallel_reads,
                   .block_length = 1,
                   .num_parallel_calls = parallel_reads,
                   .output_spec = ElementSpec{ComponentSpec::String()},
                   .name = std::string(source)});
}

}  // namespace

boost::asio::awaitable<ElementIterator::Result> NextOf(ElementIterator& it) {
  if (std::optional<ElementIterator::Result> ready = it.TryNext()) {
    co_return *std::move(ready);
  }
  co_return co_await it.Next();
}

absl::StatusOr<ElementIterator::Taken> ElementIterator::TryTakeInto(
    std::vector<Element>& out, size_t size) {
  while (out.size() < size) {
    std::optional<Result> next = TryNext();
    if (!next.has_value()) return Taken::kMustAwait;
    if (!next->ok()) return next->status();
    if (!(*next)->has_value()) return Taken::kEnd;
    out.push_back(**std::move(*next));
  }
  return Taken::kFull;
}

boost::asio::awaitable<absl::StatusOr<int64_t>> ElementIterator::Skip(
    int64_t n) {
  int64_t skipped = 0;
  while (skipped < n) {
    Result next = co_await NextOf(*this);
    if (!next.ok()) co_return next.status();
    if (!next->has_value()) break;
    ++skipped;
  }
  co_return skipped;
}

Dataset::Dataset()
    : status_(absl::FailedPreconditionError(
          "an empty Dataset: make one with a source (Dataset::Range, "
          "Dataset::TextLines, ...)")) {}

namespace detail {
absl::Status UserFunctionError(absl::Status status,
                               absl::string_view function) {
  if (!absl::IsOutOfRange(status)) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", function,
      " returned OutOfRange (not an end of input): ", status.message()));
}
}  // namespace detail

int64_t Dataset::Cardinality() const {
  return ok() ? node_->cardinality() : kUnknownCardinality;
}

Dataset Dataset::FromNode(std::shared_ptr<const DatasetNode> node) {
  if (node == nullptr) {
    return Failed(absl::InvalidArgumentError("Dataset::FromNode: null node"));
  }
  return Dataset(std::move(node), absl::OkStatus());
}

Dataset Dataset::Failed(absl::Status status) {
  if (status.ok()) status = absl::InternalError("Dataset::Failed(OK)");
  return Dataset(nullptr, std::move(status));
}

Dataset Dataset::FromElements(std::vector<Element> elements) {
  for (size_t i = 1; i < elements.size(); ++i) {
    absl::StatusOr<ElementSpec> common =
        MostSpecificCommonSpec(SpecOf(elements[0]), SpecOf(elements[i]));
    if (!common.ok()) {
      return Failed(absl::InvalidArgumentError(absl::StrCat(
          "FromElements: element ", i, " ",
          ElementSpecString(SpecOf(elements[i])), " does not match element 0 ",
          ElementSpecString(SpecOf(elements[0])))));
    }
  }
  return FromNode(detail::FromElementsNode(std::move(elements)));
}

Dataset Dataset::FromTensorSlices(std::vector<Tensor> tensors) {
  if (tensors.empty()) {
    return Failed(
        absl::InvalidArgumentError("FromTensorSlices: no tensors to slice"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].shape().dims() < 1) {
      return Failed(absl::InvalidArgumentError(
          absl::StrCat("FromTensorSlices: tensor ", i,
                       " is a scalar; every tensor must "
                       "have at least 1 dimension")));
    }
    if (tensors[i].shape().dim_size(0) != tensors[0].shape().dim_size(0)) {
      return Failed(absl::InvalidArgumentError(
          absl::StrCat("FromTensorSlices: tensor ", i, " has ",
                       tensors[i].shape().dim_size(0), " slices, tensor 0 has ",
                       tensors[0].shape().dim_size(0),
                       "; all must have the same dimension 0")));
    }
  }
  return FromNode(detail::FromTensorSlicesNode(std::move(tensors)));
}

Dataset Dataset::ListFiles(std::vector<std::string> patterns,
                           ListFilesOptions options) {
  if (patterns.empty()) {
    return Failed(absl::InvalidArgumentError("ListFiles: no patterns"));
  }
  for (const std::string& pattern : patterns) {
    if (pattern.empty()) {
      return Failed(absl::InvalidArgumentError(
          "ListFiles: patterns holds an empty pattern"));
    }
  }
  if (!options.shuffle) {
    return FromNode(detail::ListFilesNode(std::move(patterns), std::nullopt,
                                          /*seeded=*/true));
  }
  const bool seeded = options.seed.has_value();
  const uint64_t seed = seeded ? *options.seed : RandomSeed();
  return FromNode(detail::ListFilesNode(std::move(patterns), seed, seeded));
}

Dataset Dataset::Range(int64_t start, int64_t stop, int64_t step) {
  if (step == 0) {
    return Failed(absl::InvalidArgumentError("Range: step must not be 0"));
  }
  return FromNode(detail::RangeNode(start, stop, step));
}

Dataset Dataset::TextLines(std::vector<std::string> files,
                           TextLinesOptions options) {
  if (absl::Status bad = CheckFiles(files, "TextLines"); !bad.ok()) {
    return Failed(std::move(bad));
  }
  if (options.chunk_bytes < 1 || options.max_line_bytes < 1 ||
      options.skip_lines < 0) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(
        "TextLines: chunk_bytes and max_line_bytes must be >= 1 and "
        "skip_lines >= 0, got ",
        options.chunk_bytes, ", ", options.max_line_bytes, ", ",
        options.skip_lines)));
  }
  absl::StatusOr<int64_t> parallel_reads =
      ParallelReads(options.num_parallel_reads, files.size(), "TextLines");
  if (!parallel_reads.ok()) return Failed(parallel_reads.status());
  if (*parallel_reads == 1) {
    return FromNode(detail::TextLinesNode(std::move(files), options));
  }
  TextLinesOptions one_file = options;
  one_file.num_parallel_reads = 1;
  return ReadInParallel(
      std::move(files), *parallel_reads,
      [one_file](const std::string& file) {
        return TextLines({file}, one_file);
      },
      "TextLines");
}

Dataset Dataset::TFRecords(std::vector<std::string> files,
                           TFRecordsOptions options) {
  if (absl::Status bad = CheckFiles(files, "TFRecords"); !bad.ok()) {
    return Failed(std::move(bad));
  }
  if (options.chunk_bytes < 1 || options.max_record_bytes < 0) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(
        "TFRecords: chunk_bytes must be >= 1 and max_record_bytes >= 0, "
        "got ",
        options.chunk_bytes, ", ", options.max_record_bytes)));
  }
  absl::StatusOr<int64_t> parallel_reads =
      ParallelReads(options.num_parallel_reads, files.size(), "TFRecords");
  if (!parallel_reads.ok()) return Failed(parallel_reads.status());
  if (*parallel_reads == 1) {
    return FromNode(detail::TFRecordsNode(std::move(files), options));
  }
  TFRecordsOptions one_file = options;
  one_file.num_parallel_reads = 1;
  return ReadInParallel(
      std::move(files), *parallel_reads,
      [one_file](const std::string& file) {
        return TFRecords({file}, one_file);
      },
      "TFRecords");
}

Dataset Dataset::Interleave(std::vector<Dataset> inputs, int64_t cycle_length,
                            int64_t block_length) {
  if (cycle_length == kAutotune) cycle_length = CpusAtLeast(1);
  if (inputs.empty()) {
    return Failed(absl::InvalidArgumentError("Interleave: no inputs"));
  }
  if (cycle_length < 0 || block_length < 1) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(
        "Interleave: cycle_length must be >= 0 (0 = all inputs; kAutotune "
        "= one per CPU) and block_length >= 1, got ",
        cycle_length, " and ", block_length)));
  }
  absl::StatusOr<std::vector<detail::Node>> nodes =
      AgreeingInputs(inputs, "Interleave");
  if (!nodes.ok()) return Failed(nodes.status());
  return FromNode(
      detail::InterleaveNode(*std::move(nodes), cycle_length, block_length));
}

Dataset Dataset::SampleFromDatasets(std::vector<Dataset> datasets,
                                    SampleOptions options) {
  if (datasets.empty()) {
    return Failed(
        absl::InvalidArgumentError("SampleFromDatasets: no datasets"));
  }
  std::vector<double>& weights = options.weights;
  if (weights.empty()) weights.assign(datasets.size(), 1.0);
  if (weights.size() != datasets.size()) {
    return Failed(absl::InvalidArgumentError(
        absl::StrCat("SampleFromDatasets: ", weights.size(), " weights for ",
                     datasets.size(), " datasets")));
  }
  double total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      return Failed(absl::InvalidArgumentError(
          absl::StrCat("SampleFromDatasets: weights[", i, "] is ", weights[i],
                       ": each weight must be finite and >= 0")));
    }
    total += weights[i];
  }
  if (total <= 0) {
    return Failed(
        absl::InvalidArgumentError("SampleFromDatasets: every weight is 0"));
  }
  absl::StatusOr<std::vector<detail::Node>> nodes =
      AgreeingInputs(datasets, "SampleFromDatasets");
  if (!nodes.ok()) return Failed(nodes.status());
  const bool seeded = options.seed.has_value();
  const uint64_t seed = seeded ? *options.seed : RandomSeed();
  return FromNode(
      detail::SampleNode(*std::move(nodes), seed, seeded, std::move(options)));
}

Dataset Dataset::ChooseFromDatasets(std::vector<Dataset> datasets,
                                    const Dataset& choices,
                                    bool stop_on_empty_dataset) {
  if (datasets.empty()) {
    return Failed(
        absl::InvalidArgumentError("ChooseFromDatasets: no datasets"));
  }
  if (!choices.ok()) {
    return Failed(absl::Status(choices.status().code(),
                               absl::StrCat("ChooseFromDatasets: choices: ",
                                            choices.status().message())));
  }
  const ElementSpec int64_scalar{ComponentSpec::Scalar(DType::kInt64)};
  if (std::optional<ElementSpec> spec = choices.spec();
      spec.has_value() && *spec != int64_scalar) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(
        "ChooseFromDatasets: choices must yield int64 scalars, they yield ",
        ElementSpecString(*spec))));
  }
  absl::StatusOr<std::vector<detail::Node>> nodes =
      AgreeingInputs(datasets, "ChooseFromDatasets");
  if (!nodes.ok()) return Failed(nodes.status());
  return FromNode(detail::ChooseNode(*std::move(nodes), choices.node(),
                                     stop_on_empty_dataset));
}

Dataset Dataset::Map(MapFunction fn, MapOptions options) const {
  if (!ok()) return *this;
  if (!fn) return Failed(ArgumentError(*this, "Map", "the function is empty"));
  if (options.parallelism == kAutotune) options.parallelism = CpusAtLeast(2);
  if (options.parallelism < 1) {
    return Failed(ArgumentError(
        *this, "Map",
        absl::StrCat("parallelism must be >= 1 or kAutotune, got ",
                     options.parallelism)));
  }
  return FromNode(detail::MapNode(node_, std::move(fn), std::move(options)));
}

Dataset Dataset::Map(AsyncMapFunction fn, MapOptions options) const {
  if (!ok()) return *this;
  if (!fn) return Failed(ArgumentError(*this, "Map", "the function is empty"));
  if (options.parallelism == kAutotune) options.parallelism = CpusAtLeast(2);
  if (options.parallelism < 1) {
    return Failed(ArgumentError(
        *this, "Map",
        absl::StrCat("parallelism must be >= 1 or kAutotune, got ",
                     options.parallelism)));
  }
  return FromNode(
      detail::AsyncMapNode(node_, std::move(fn), std::move(options)));
}

Dataset Dataset::Filter(Predicate pred) const {
  if (!ok()) return *this;
  if (!pred) {
    return Failed(ArgumentError(*this, "Filter", "the predicate is empty"));
  }
  return FromNode(detail::FilterNode(node_, std::move(pred)));
}

Dataset Dataset::Unique(UniqueOptions options) const {
  if (!ok()) return *this;
  if (options.max_bytes < 0) {
    return Failed(ArgumentError(
        *this, "Unique",
        absl::StrCat("max_bytes must be >= 0, got ", options.max_bytes)));
  }
  if (std::optional<ElementSpec> spec = this->spec()) {
    const bool scalar =
        spec->size() == 1 &&
        ((*spec)[0].is_string ||
         ((*spec)[0].shape.dims() <= 0 &&  // a scalar, or an unknown rank
          ((*spec)[0].dtype == DType::kInt64 ||
           (*spec)[0].dtype == DType::kInt32)));
    if (!scalar) {
      return Failed(ArgumentError(
          *this, "Unique",
          absl::StrCat("elements of ", ElementSpecString(*spec),
                       "; Unique takes int32, int64 or string scalars")));
    }
  }
  return FromNode(detail::UniqueNode(node_, std::move(options)));
}

Dataset Dataset::TakeWhile(Predicate pred) const {
  if (!ok()) return *this;
  if (!pred) {
    return Failed(ArgumentError(*this, "TakeWhile", "the predicate is empty"));
  }
  return FromNode(detail::TakeWhileNode(node_, std::move(pred)));
}

Dataset Dataset::Window(WindowOptions options) const {
  if (!ok()) return *this;
  if (!options.shift.has_value()) options.shift = options.size;
  if (options.size < 1 || *options.shift < 1 || options.stride < 1) {
    return Failed(ArgumentError(
        *this, "Window",
        absl::StrCat("size, shift and stride must be >= 1, got ", options.size,
                     ", ", *options.shift, " and ", options.stride)));
  }
  // A window spans (size - 1) * stride + 1 input elements.
  if (options.size - 1 >
      (std::numeric_limits<int64_t>::max() - 1) / options.stride) {
    return Failed(
        ArgumentError(*this, "Window",
                      absl::StrCat("a window of size ", options.size,
                                   " and stride ", options.stride,
                                   " spans more elements than int64 counts")));
  }
  return FromNode(detail::WindowNode(node_, options));
}

Dataset Dataset::GroupByWindow(GroupByWindowOptions options) const {
  if (!ok()) return *this;
  if (!options.key || !options.reduce || !options.window_size) {
    return Failed(ArgumentError(*this, "GroupByWindow",
                                "key, reduce and window_size must be given"));
  }
  if (options.max_held_elements < 1) {
    return Failed(
        ArgumentError(*this, "GroupByWindow",
                      absl::StrCat("max_held_elements must be >= 1, got ",
                                   options.max_held_elements)));
  }
  return FromNode(detail::GroupByWindowNode(node_, std::move(options)));
}

Dataset Dataset::BucketBySequenceLength(
    BucketBySequenceLengthOptions options) const {
  if (!ok()) return *this;
  auto refuse = [this](const std::string& why) {
    return Failed(ArgumentError(*this, "BucketBySequenceLength", why));
  };
  if (!options.element_length) return refuse("element_length must be given");
  const std::vector<int64_t>& boundaries = options.bucket_boundaries;
  const std::vector<int64_t>& batch_sizes = options.bucket_batch_sizes;
  if (batch_sizes.size() != boundaries.size() + 1) {
    return refuse(absl::StrCat(
        "bucket_batch_sizes must have one more entry than bucket_boundaries, "
        "got ",
        batch_sizes.size(), " and ", boundaries.size()));
  }
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] < 1 || (i > 0 && boundaries[i] <= boundaries[i - 1])) {
      return refuse(
          absl::StrCat("bucket_boundaries must be ascending and >= 1, got ",
                       absl::StrJoin(boundaries, ", ")));
    }
  }
  for (int64_t size : batch_sizes) {
    if (size < 1) {
      return refuse(absl::StrCat("bucket_batch_sizes must be >= 1, got ",
                                 absl::StrJoin(batch_sizes, ", ")));
    }
  }
  if (options.pad_to_bucket_boundary && boundaries.empty()) {
    return refuse("pad_to_bucket_boundary needs bucket_boundaries");
  }
  std::optional<ElementSpec> spec = this->spec();
  if (!options.no_padding && options.padded_shapes.empty()) {
    if (!spec.has_value()) {
      return refuse(
          "the element spec is unknown: give padded_shapes (or "
          "MapOptions::output_spec)");
    }
    for (const ComponentSpec& c : *spec) {
      options.padded_shapes.push_back(c.shape);
    }
  }
  // What each bucket's batches are: checked here, on one bucket, so that a
  // bad padded shape or padding value is refused now.
  auto batch = [options](int64_t bucket, Dataset window) {
    if (options.no_padding) {
      return window.Batch(options.bucket_batch_sizes[bucket],
                          options.drop_remainder);
    }
    PaddedBatchOptions padded{.padded_shapes = options.padded_shapes,
                              .padding_values = options.padding_values,
                              .drop_remainder = options.drop_remainder};
    if (options.pad_to_bucket_boundary) {
      for (TensorShape& shape : padded.padded_shapes) {
        for (int d = 0; d < shape.dims(); ++d) {
          if (shape.dim_size(d) == kUnknownDim) {
            shape.set_dim(d, options.bucket_boundaries[bucket] - 1);
          }
        }
      }
    }
    return window.PaddedBatch(options.bucket_batch_sizes[bucket],
                              std::move(padded));
  };
  Dataset checked = batch(0, *this);
  if (!checked.ok()) return Failed(checked.status());
  auto length = options.element_length;
  GroupByWindowOptions grouping{
      .key = [length, boundaries, pad = options.pad_to_bucket_boundary](
                 const Element& e) -> absl::StatusOr<int64_t> {
        absl::StatusOr<int64_t> n = length(e);
        if (!n.ok()) return n.status();
        if (*n < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("element_length returned ", *n));
        }
        const int64_t bucket =
            std::upper_bound(boundaries.begin(), boundaries.end(), *n) -
            boundaries.begin();
        if (pad && bucket == static_cast<int64_t>(boundaries.size())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "length ", *n, " is not below the last bucket boundary ",
              boundaries.back(), " (pad_to_bucket_boundary pads to it)"));
        }
        return bucket;
      },
      .reduce = batch,
      .window_size = [batch_sizes](int64_t bucket) -> absl::StatusOr<int64_t> {
        return batch_sizes[bucket];
      },
      .output_spec = checked.spec(),
      .name = "BucketBySequenceLength"};
  if (grouping.output_spec.has_value()) {
    // Another bucket's batches have another batch size and, padded to its
    // boundary, other padded dimensions: those are unknown.
    for (size_t i = 0; i < grouping.output_spec->size(); ++i) {
      TensorShape& shape = (*grouping.output_spec)[i].shape;
      if (shape.unknown_rank()) continue;
      shape.set_dim(0, kUnknownDim);
      for (int d = 1; options.pad_to_bucket_boundary &&
                      i < options.padded_shapes.size() && d < shape.dims();
           ++d) {
        if (options.padded_shapes[i].dim_size(d - 1) == kUnknownDim) {
          shape.set_dim(d, kUnknownDim);
        }
      }
    }
  }
  return GroupByWindow(std::move(grouping));
}

Dataset Dataset::Scan(Element initial_state, ScanFunction fn,
                      ScanOptions options) const {
  if (!ok()) return *this;
  if (!fn) {
    return Failed(ArgumentError(*this, "Scan", "the scan function is empty"));
  }
  return FromNode(detail::ScanNode(node_, std::move(initial_state),
                                   std::move(fn), std::move(options)));
}

Dataset Dataset::Shuffle(int64_t buffer_size, uint64_t seed,
                         bool reshuffle_each_iteration) const {
  if (!ok()) return *this;
  if (buffer_size < 1) {
    return Failed(ArgumentError(
        *this, "Shuffle",
        absl::StrCat("buffer_size must be >= 1, got ", buffer_size)));
  }
  return FromNode(
      detail::ShuffleNode(node_, buffer_size, seed, reshuffle_each_iteration));
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder) const {
  if (!ok()) return *this;
  if (batch_size < 1) {
    return Failed(ArgumentError(
        *this, "Batch",
        absl::StrCat("batch_size must be >= 1, got ", batch_size)));
  }
  std::optional<ElementSpec> spec = this->spec();
  if (spec.has_value()) {
    for (size_t i = 0; i < spec->size(); ++i) {
      if ((*spec)[i].is_string) {
        return Failed(ArgumentError(
            *this, "Batch",
            absl::StrCat("component ", i,
                         " is a string; only tensors batch (Map the strings "
                         "to tensors first)")));
      }
    }
  }
  return FromNode(detail::BatchNode(node_, batch_size, drop_remainder));
}

Dataset Dataset::PaddedBatch(int64_t batch_size,
                             PaddedBatchOptions options) const {
  if (!ok()) return *this;
  if (batch_size < 1) {
    return Failed(ArgumentError(
        *this, "PaddedBatch",
        absl::StrCat("batch_size must be >= 1, got ", batch_size)));
  }
  std::optional<ElementSpec> spec = this->spec();
  if (!spec.has_value() && options.padded_shapes.empty()) {
    return Failed(
        ArgumentError(*this, "PaddedBatch",
                      "the element spec is unknown: give padded_shapes (or "
                      "MapOptions::output_spec)"));
  }
  const size_t components =
      spec.has_value() ? spec->size() : options.padded_shapes.size();
  if (options.padded_shapes.empty()) {
    for (const ComponentSpec& c : *spec) {
      options.padded_shapes.push_back(c.shape);
    }
  }
  if (options.padded_shapes.size() != components) {
    return Failed(ArgumentError(
        *this, "PaddedBatch",
        absl::StrCat(options.padded_shapes.size(), " padded_shapes for ",
                     components, " components")));
  }
  if (!options.padding_values.empty() &&
      options.padding_values.size() != components) {
    return Failed(ArgumentError(
        *this, "PaddedBatch",
        absl::StrCat(options.padding_values.size(), " padding_values for ",
                     components, " components")));
  }
  for (size_t i = 0; i < components; ++i) {
    const TensorShape& padded = options.padded_shapes[i];
    if (padded.unknown_rank()) {
      return Failed(ArgumentError(
          *this, "PaddedBatch",
          absl::StrCat("padded_shapes[", i, "] has an unknown rank")));
    }
    if (spec.has_value()) {
      const ComponentSpec& c = (*spec)[i];
      if (c.is_string) {
        return Failed(
            ArgumentError(*this, "PaddedBatch",
                          absl::StrCat("component ", i, " is a string")));
      }
      if (!c.shape.unknown_rank() && c.shape.dims() != padded.dims()) {
        return Failed(ArgumentError(
            *this, "PaddedBatch",
            absl::StrCat("padded_shapes[", i, "] ", padded.DebugString(),
                         " has another rank than component ", i, " ",
                         c.DebugString())));
      }
      if (!options.padding_values.empty()) {
        const Tensor& v = options.padding_values[i];
        if (v.shape().dims() != 0 || v.dtype() != c.dtype) {
          return Failed(
              ArgumentError(*this, "PaddedBatch",
                            absl::StrCat("padding_values[", i, "] must be a ",
                                         DTypeName(c.dtype), " scalar")));
        }
      }
    }
  }
  return FromNode(
      detail::PaddedBatchNode(node_, batch_size, std::move(options)));
}

Dataset Dataset::Repeat(int64_t count) const {
  if (!ok()) return *this;
  // tf.data reads every negative count as -1.
  if (count < 0) count = -1;
  return FromNode(detail::RepeatNode(node_, count));
}

Dataset Dataset::Take(int64_t count) const {
  if (!ok()) return *this;
  // tf.data reads every negative count as -1.
  if (count < 0) count = -1;
  return FromNode(detail::TakeNode(node_, count));
}

Dataset Dataset::Skip(int64_t count) const {
  if (!ok()) return *this;
  // tf.data reads every negative count as -1.
  if (count < 0) count = -1;
  return FromNode(detail::SkipNode(node_, count));
}

Dataset Dataset::Zip(std::vector<Dataset> datasets) {
  if (datasets.empty()) {
    return Failed(absl::InvalidArgumentError("Zip: no datasets"));
  }
  std::vector<detail::Node> inputs;
  for (const Dataset& d : datasets) {
    if (!d.ok()) return d;
    inputs.push_back(d.node_);
  }
  return FromNode(detail::ZipNode(std::move(inputs)));
}

Dataset Dataset::Concatenate(const Dataset& other) const {
  if (!ok()) return *this;
  if (!other.ok()) return other;
  std::optional<ElementSpec> spec;
  std::optional<ElementSpec> mine = node_->spec();
  std::optional<ElementSpec> theirs = other.node_->spec();
  if (mine.has_value() && theirs.has_value()) {
    absl::StatusOr<ElementSpec> common = MostSpecificCommonSpec(*mine, *theirs);
    if (!common.ok()) {
      return Failed(ArgumentError(
          *this, "Concatenate",
          absl::StrCat("the input dataset ", ElementSpecString(*mine),
                       " and the dataset to be concatenated ",
                       ElementSpecString(*theirs),
                       " have incompatible element specs: ",
                       common.status().message())));
    }
    spec = *std::move(common);
  }
  return FromNode(detail::ConcatenateNode(node_, other.node_, std::move(spec)));
}

Dataset Dataset::FlatMap(FlatMapFunction fn, FlatMapOptions options) const {
  if (!ok()) return *this;
  if (!fn) {
    return Failed(ArgumentError(*this, "FlatMap", "the function is empty"));
  }
  return FromNode(
      detail::FlatMapNode(node_, std::move(fn), std::move(options)));
}

Dataset Dataset::Interleave(FlatMapFunction fn,
                            InterleaveOptions options) const {
  if (!ok()) return *this;
  if (!fn) {
    return Failed(ArgumentError(*this, "Interleave", "the function is empty"));
  }
  if (options.cycle_length == kAutotune) options.cycle_length = CpusAtLeast(1);
  if (options.cycle_length < 1 || options.block_length < 1) {
    return Failed(ArgumentError(
        *this, "Interleave",
        absl::StrCat("cycle_length must be >= 1 or kAutotune and "
                     "block_length >= 1, got ",
                     options.cycle_length, " and ", options.block_length)));
  }
  if (options.num_parallel_calls == kAutotune) {
    options.num_parallel_calls = options.cycle_length;
  }
  if (options.num_parallel_calls < 1 ||
      options.num_parallel_calls > options.cycle_length) {
    return Failed(ArgumentError(
        *this, "Interleave",
        absl::StrCat("num_parallel_calls must be >= 1 or kAutotune and at "
                     "most cycle_length (",
                     options.cycle_length, "), got ",
                     options.num_parallel_calls)));
  }
  return FromNode(
      detail::MappedInterleaveNode(node_, std::move(fn), std::move(options)));
}

Dataset Dataset::Enumerate(int64_t start) const {
  if (!ok()) return *this;
  return FromNode(detail::EnumerateNode(node_, start));
}

Dataset Dataset::Shard(int64_t num_shards, int64_t index) const {
  if (!ok()) return *this;
  if (num_shards < 1) {
    return Failed(ArgumentError(
        *this, "Shard",
        absl::StrCat("num_shards must be >= 1, got ", num_shards)));
  }
  if (index < 0 || index >= num_shards) {
    return Failed(
        ArgumentError(*this, "Shard",
                      absl::StrCat("index must be in [0, num_shards) = [0, ",
                                   num_shards, "), got ", index)));
  }
  return FromNode(detail::ShardNode(node_, num_shards, index));
}

Dataset Dataset::Unbatch() const {
  if (!ok()) return *this;
  if (std::optional<ElementSpec> spec = node_->spec()) {
    for (size_t i = 0; i < spec->size(); ++i) {
      const ComponentSpec& c = (*spec)[i];
      if (c.is_string || c.shape.dims() == 0) {
        return Failed(ArgumentError(
            *this, "Unbatch",
            absl::StrCat("component ", i, " is ", c.DebugString(),
                         ": every component must be a tensor of rank >= 1 "
                         "to be unbatched")));
      }
    }
  }
  return FromNode(detail::UnbatchNode(node_));
}

Dataset Dataset::Cache(CacheOptions options) const {
  if (!ok()) return *this;
  if (options.max_bytes < 1) {
    return Failed(ArgumentError(
        *this, "Cache",
        absl::StrCat("max_bytes must be >= 1, got ", options.max_bytes)));
  }
  if (!options.filename.empty()) {
    return FromNode(detail::FileCacheNode(node_, std::move(options)));
  }
  return FromNode(detail::CacheNode(node_, std::move(options)));
}

Dataset Dataset::Prefetch(int64_t buffer_size) const {
  if (!ok()) return *this;
  if (buffer_size == kAutotune) buffer_size = kAutotunePrefetchBuffer;
  if (buffer_size < 1) {
    return Failed(ArgumentError(
        *this, "Prefetch",
        absl::StrCat("buffer_size must be >= 1 or kAutotune, got ",
                     buffer_size)));
  }
  return FromNode(detail::PrefetchNode(node_, buffer_size));
}

std::optional<ElementSpec> Dataset::spec() const {
  if (!ok()) return std::nullopt;
  return node_->spec();
}

bool Dataset::deterministic() const { return ok() && node_->deterministic(); }

std::string Dataset::DebugString() const {
  if (!ok()) return absl::StrCat("<failed: ", status_.message(), ">");
  return node_->DebugString();
}

absl::StatusOr<std::unique_ptr<ElementIterator>> Dataset::MakeIterator(
    const IteratorContext& context) const {
  if (!ok()) return status_;
  return node_->MakeIterator(context);
}

absl::StatusOr<RowSplit> SeededRowSplit(int64_t num_rows, double first_fraction,
                                        uint64_t seed) {
  if (num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SeededRowSplit: num_rows must not be negative, got ", num_rows));
  }
  if (!(first_fraction >= 0.0 && first_fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SeededRowSplit: first_fraction must be in [0, 1], got ",
                     first_fraction));
  }
  const auto first_size = static_cast<int64_t>(
      std::llround(static_cast<double>(num_rows) * first_fraction));
  // The first first_size rows of a seeded permutation go first.
  std::vector<int64_t> order = SeededPermutation(num_rows, seed, kSplitSalt);
  RowSplit split;
  split.first.assign(order.begin(), order.begin() + first_size);
  split.second.assign(order.begin() + first_size, order.end());
  std::sort(split.first.begin(), split.first.end());
  std::sort(split.second.begin(), split.second.end());
  return split;
}

}  // namespace cosession
