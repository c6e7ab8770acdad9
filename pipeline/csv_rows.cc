// CsvRows (pipeline/csv_rows.h), and its fusion with Batch.
//
// Element by element, CsvRows is Filter(not blank) then Map(parse one
// row) -- with Map's parallelism. Batch(n) over it is fused (as tf.data
// fuses map and batch): the lines, taken as views from a LineSource
// (pipeline/detail/line_source.h), are parsed straight into the batch's
// two tensors, with no element, no string and no tensor per row. The
// fused stage yields exactly what Batch(CsvRows) would: the same batches,
// the same errors naming the row's origin, the same Skip; an error ends
// the stream. Its lines must come from a source of views (TextLines,
// ReadLines, TcpLines: detail::LineSourceNode); over any other input the
// chain stays unfused.
//
// With parallelism P > 1 the fused stage gathers up to P batches of raw
// lines ahead of the consumer and parses them on the pool, one task per
// batch, and the consumer parses too: when the batch it must return next
// is being parsed on the pool, it parses a later one instead of waiting
// (a wake-up would cost it more than a row). Batches come out in input
// order; an input error comes after the batches before it.
#include "cosession/pipeline/csv_rows.h"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/completion.h"
#include "cosession/io/csv_reader.h"
#include "cosession/pipeline/detail/line_source.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using detail::LineSource;
using Result = ElementIterator::Result;

absl::Status OptionError(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("CsvRows: ", problem));
}

// Parses the row `text` into `features` (num_columns - 1 floats) and the
// label at `label` (an int32 or int64, as options.label_dtype says).
// `values` is scratch space. Errors name the column, not the row: the
// caller prefixes the row's origin.
absl::Status ParseRowInto(const CsvRowOptions& options, absl::string_view text,
                          std::vector<double>& values, float* features,
                          void* label) {
  values.clear();
  if (absl::Status s =
          ParseCsvFields(text, options.num_columns, options.delimiter, values);
      !s.ok()) {
    return s;
  }
  const int64_t label_column = options.label_column;
  const double value = values[static_cast<size_t>(label_column)];
  if (options.num_classes.has_value() &&
      !(value >= 0 && value < static_cast<double>(*options.num_classes) &&
        std::floor(value) == value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column ", label_column + 1, ": label ", value, " is out of range [0, ",
        *options.num_classes, ") (num_classes)"));
  }
  const bool int32 = options.label_dtype == DType::kInt32;
  const double min_label =
      int32 ? static_cast<double>(std::numeric_limits<int32_t>::min())
            : -9.2233720368547758e18;
  const double max_label =
      int32 ? static_cast<double>(std::numeric_limits<int32_t>::max())
            : 9.2233720368547748e18;
  if (std::floor(value) != value || value < min_label || value > max_label) {
    return absl::InvalidArgumentError(
        absl::StrCat("column ", label_column + 1, ": label '", value,
                     "' is not an integer in the range of ",
                     DTypeName(options.label_dtype)));
  }
  size_t f = 0;
  for (int64_t c = 0; c < options.num_columns; ++c) {
    if (c != label_column) features[f++] = static_cast<float>(values[c]);
  }
  if (int32) {
    *static_cast<int32_t*>(label) = static_cast<int32_t>(value);
  } else {
    *static_cast<int64_t*>(label) = static_cast<int64_t>(value);
  }
  return absl::OkStatus();
}

size_t LabelBytes(const CsvRowOptions& options) {
  return options.label_dtype == DType::kInt32 ? 4 : 8;
}

// One element: a row parsed into a (features, label) pair.
absl::StatusOr<Element> ParseRow(const CsvRowOptions& options, Element line) {
  Tensor features =
      Tensor::Allocate(DType::kFloat, TensorShape{options.num_columns - 1});
  Tensor label = Tensor::Allocate(options.label_dtype, TensorShape{});
  std::vector<double> values;
  values.reserve(static_cast<size_t>(options.num_columns));
  if (absl::Status s =
          ParseRowInto(options, line.text(0), values,
                       features.mutable_flat<float>().data(), label.raw_data());
      !s.ok()) {
    return absl::InvalidArgumentError(line.origin.Describe(s.message()));
  }
  Element row = MakeElement({std::move(features), std::move(label)});
  row.origin = std::move(line.origin);
  return row;
}

// The rows of one batch as they are parsed: the two tensors of n rows,
// filled row by row, and the first row's origin (the batch's).
class BatchUnderConstruction {
 public:
  BatchUnderConstruction(const CsvRowOptions& options, int64_t n)
      : features_(Tensor::Allocate(DType::kFloat,
                                   TensorShape{n, options.num_columns - 1})),
        labels_(Tensor::Allocate(options.label_dtype, TensorShape{n})),
        label_bytes_(LabelBytes(options)),
        features_per_row_(options.num_columns - 1) {}

  int64_t rows() const { return rows_; }
  float* next_features() {
    return features_.mutable_flat<float>().data() + rows_ * features_per_row_;
  }
  void* next_label() {
    return static_cast<char*>(labels_.raw_data()) + rows_ * label_bytes_;
  }
  // The batch's origin: its first row's.
  bool needs_origin() const { return rows_ == 0; }
  void set_origin(ElementOrigin origin) { origin_ = std::move(origin); }
  void Added() { ++rows_; }
  // The element of the rows added; the tensors are cut to them when fewer
  // than n.
  Element Take(const CsvRowOptions& options) && {
    const int64_t capacity = labels_.shape().dim_size(0);
    if (rows_ < capacity) {
      Tensor features = Tensor::Allocate(DType::kFloat,
                                         TensorShape{rows_, features_per_row_});
      Tensor labels = Tensor::Allocate(options.label_dtype, TensorShape{rows_});
      std::memcpy(features.raw_data(), features_.raw_data(),
                  features.TotalBytes());
      std::memcpy(labels.raw_data(), labels_.raw_data(), labels.TotalBytes());
      features_ = std::move(features);
      labels_ = std::move(labels);
    }
    Element batch = MakeElement({std::move(features_), std::move(labels_)});
    batch.origin = std::move(origin_);
    return batch;
  }

 private:
  Tensor features_;
  Tensor labels_;
  size_t label_bytes_;
  int64_t features_per_row_;
  int64_t rows_ = 0;
  ElementOrigin origin_{};
};

// Lines gathered for a batch that is parsed later (parallelism > 1), and
// its result once parsed. The state and the result are guarded by the
// iterator's shared mutex.
struct RawBatch {
  enum class State { kPending, kParsing, kDone };
  RawBatch() = default;
  RawBatch(RawBatch&& other) noexcept
      : text(std::move(other.text)),
        ends(std::move(other.ends)),
        origins(std::move(other.origins)) {}
  RawBatch& operator=(RawBatch&& other) noexcept {
    text = std::move(other.text);
    ends = std::move(other.ends);
    origins = std::move(other.origins);
    return *this;
  }

  std::string text{};  // the rows, back to back
  std::vector<size_t> ends{};
  std::vector<ElementOrigin> origins{};
  // Written under the shared mutex; read without it by a spinning consumer.
  std::atomic<State> state{State::kPending};
  Result result{std::optional<Element>()};
  // The consumer waiting for this batch to be done, if any: true once it
  // is, false when the wait was cancelled (the batch stays in the window).
  absl::AnyInvocable<void(bool)> waiter{};
};

Result ParseRawBatch(const CsvRowOptions& options, const RawBatch& raw) {
  const int64_t rows = static_cast<int64_t>(raw.ends.size());
  BatchUnderConstruction batch(options, rows);
  std::vector<double> values;
  values.reserve(static_cast<size_t>(options.num_columns));
  size_t begin = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const absl::string_view text(raw.text.data() + begin, raw.ends[r] - begin);
    begin = raw.ends[r];
    if (absl::Status s = ParseRowInto(
            options, text, values, batch.next_features(), batch.next_label());
        !s.ok()) {
      return absl::InvalidArgumentError(raw.origins[r].Describe(s.message()));
    }
    if (batch.needs_origin()) batch.set_origin(raw.origins[r]);
    batch.Added();
  }
  return std::optional<Element>(std::move(batch).Take(options));
}

// What the consumer and the pool's parse workers share: the batches
// gathered and not yet returned, in input order, and how many workers run.
struct SharedParsing {
  std::mutex mu;
  std::deque<std::shared_ptr<RawBatch>> window ABSL_GUARDED_BY(mu);
  int workers ABSL_GUARDED_BY(mu) = 0;

  // The oldest batch nobody parses yet, now claimed by the caller; null
  // when there is none.
  std::shared_ptr<RawBatch> ClaimOldestPending() {
    std::lock_guard lock(mu);
    for (const std::shared_ptr<RawBatch>& raw : window) {
      if (raw->state.load(std::memory_order_relaxed) ==
          RawBatch::State::kPending) {
        raw->state.store(RawBatch::State::kParsing, std::memory_order_relaxed);
        return raw;
      }
    }
    return nullptr;
  }
  bool Claim(RawBatch& raw) {
    std::lock_guard lock(mu);
    if (raw.state.load(std::memory_order_relaxed) !=
        RawBatch::State::kPending) {
      return false;
    }
    raw.state.store(RawBatch::State::kParsing, std::memory_order_relaxed);
    return true;
  }
  // Parses a claimed batch into its result, and tells a waiting consumer.
  void ParseClaimed(RawBatch& raw, const CsvRowOptions& options) {
    Result result = ParseRawBatch(options, raw);
    absl::AnyInvocable<void(bool)> waiter;
    {
      std::lock_guard lock(mu);
      raw.result = std::move(result);
      raw.state.store(RawBatch::State::kDone, std::memory_order_release);
      waiter = std::move(raw.waiter);
      raw.waiter = nullptr;
    }
    if (waiter) waiter(true);
  }
  // A worker on the pool: parses pending batches until none is left.
  static void Work(std::shared_ptr<SharedParsing> self, CsvRowOptions options) {
    while (true) {
      std::shared_ptr<RawBatch> raw = self->ClaimOldestPending();
      if (raw == nullptr) {
        std::lock_guard lock(self->mu);
        // A batch added since the claim failed would find this worker
        // counted and post none: look again before leaving.
        bool pending = false;
        for (const auto& b : self->window) {
          pending = pending || b->state.load(std::memory_order_relaxed) ==
                                   RawBatch::State::kPending;
        }
        if (!pending) {
          --self->workers;
          return;
        }
        continue;
      }
      self->ParseClaimed(*raw, options);
    }
  }
};

class CsvBatchIterator : public ElementIterator {
 public:
  CsvBatchIterator(std::unique_ptr<ElementIterator> input,
                   CsvRowOptions options, int64_t batch_size,
                   bool drop_remainder, Runtime::executor_type pool)
      : input_(std::move(input)),
        lines_(dynamic_cast<LineSource*>(input_.get())),
        options_(std::move(options)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        pool_(std::move(pool)),
        shared_(std::make_shared<SharedParsing>()) {
    values_.reserve(static_cast<size_t>(options_.num_columns));
  }

  std::optional<Result> TryNext() override {
    if (options_.parallelism > 1) return TryNextParallel();
    return TryNextInline();
  }

  asio::awaitable<Result> Next() override {
    if (options_.parallelism > 1) co_return co_await NextParallel();
    while (true) {
      if (std::optional<Result> ready = TryNextInline()) {
        co_return *std::move(ready);
      }
      absl::Status waited = co_await lines_->WaitForLines();
      if (!waited.ok()) co_return Fail(waited);
    }
  }

  // Skips k batches -- k * n rows, not parsed -- at a batch boundary; in
  // the middle of one, batch by batch.
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t k) override {
    if (building_.has_value() || window_size() > 0 ||
        !gathering_.ends.empty() || input_done_ || !failure_.ok()) {
      co_return co_await ElementIterator::Skip(k);
    }
    const int64_t want = k * batch_size_;
    int64_t skipped = 0;
    while (skipped < want) {
      LineSource::Line line;
      absl::StatusOr<LineSource::Progress> progress = NextRow(line);
      if (!progress.ok()) co_return Fail(progress.status());
      if (*progress == LineSource::Progress::kEnd) {
        input_done_ = true;
        break;
      }
      if (*progress == LineSource::Progress::kMustWait) {
        absl::Status waited = co_await lines_->WaitForLines();
        if (!waited.ok()) co_return Fail(waited);
        continue;
      }
      ++skipped;
    }
    if (skipped == want) co_return k;
    co_return skipped / batch_size_ +
        (skipped % batch_size_ != 0 && !drop_remainder_ ? 1 : 0);
  }

 private:
  // The next row's line (blank lines skipped), without waiting.
  absl::StatusOr<LineSource::Progress> NextRow(LineSource::Line& line) {
    while (true) {
      absl::StatusOr<LineSource::Progress> progress = lines_->TryNextLine(line);
      if (!progress.ok() || *progress != LineSource::Progress::kLine ||
          !IsBlankLine(line.text)) {
        return progress;
      }
    }
  }

  // Records the error that ends the stream; later calls return it.
  absl::Status Fail(absl::Status status) {
    failure_ = status;
    building_.reset();
    return status;
  }

  // What the end of the input leaves: the last, smaller batch or the end.
  Result EndOfInput(std::optional<BatchUnderConstruction>& batch) {
    input_done_ = true;
    if (!batch.has_value() || batch->rows() == 0 ||
        (drop_remainder_ && batch->rows() < batch_size_)) {
      batch.reset();
      return std::optional<Element>();
    }
    Element done = std::move(*batch).Take(options_);
    batch.reset();
    return std::optional<Element>(std::move(done));
  }

  // ---- parallelism 1: rows parsed as they are read.
  std::optional<Result> TryNextInline() {
    if (!failure_.ok()) return Result(failure_);
    if (input_done_) return Result(std::optional<Element>());
    if (!building_.has_value()) building_.emplace(options_, batch_size_);
    while (building_->rows() < batch_size_) {
      LineSource::Line line;
      absl::StatusOr<LineSource::Progress> progress = NextRow(line);
      if (!progress.ok()) return Result(Fail(progress.status()));
      if (*progress == LineSource::Progress::kMustWait) return std::nullopt;
      if (*progress == LineSource::Progress::kEnd) return EndOfInput(building_);
      if (absl::Status s =
              ParseRowInto(options_, line.text, values_,
                           building_->next_features(), building_->next_label());
          !s.ok()) {
        return Result(Fail(absl::InvalidArgumentError(
            lines_->OriginOf(line.index).Describe(s.message()))));
      }
      if (building_->needs_origin()) {
        building_->set_origin(lines_->OriginOf(line.index));
      }
      building_->Added();
    }
    Element batch = std::move(*building_).Take(options_);
    building_.reset();
    return Result(std::optional<Element>(std::move(batch)));
  }

  // ---- parallelism P > 1: up to 2P batches gathered ahead, P parsing at
  // once (P - 1 workers on the pool, and the consumer).
  size_t max_window() const {
    return 2 * static_cast<size_t>(options_.parallelism);
  }
  size_t window_size() {
    std::lock_guard lock(shared_->mu);
    return shared_->window.size();
  }
  std::shared_ptr<RawBatch> front() {
    std::lock_guard lock(shared_->mu);
    return shared_->window.empty() ? nullptr : shared_->window.front();
  }
  // The front batch's result, taken out of the window (it is done).
  Result PopFront() {
    std::lock_guard lock(shared_->mu);
    std::shared_ptr<RawBatch> raw = std::move(shared_->window.front());
    shared_->window.pop_front();
    return std::move(raw->result);
  }

  // Gathers rows into gathering_ without waiting; a full batch (or the
  // last one) joins the window, where a worker or the consumer parses it.
  // Returns kMustWait when the input must be waited for, kEnd at its end.
  absl::StatusOr<LineSource::Progress> GatherAhead() {
    size_t in_window = window_size();
    while (in_window < max_window()) {
      LineSource::Line line;
      absl::StatusOr<LineSource::Progress> progress = NextRow(line);
      if (!progress.ok()) return progress;
      if (*progress == LineSource::Progress::kMustWait) return progress;
      if (*progress == LineSource::Progress::kEnd) {
        input_done_ = true;
        const int64_t rows = static_cast<int64_t>(gathering_.ends.size());
        if (rows > 0 && !(drop_remainder_ && rows < batch_size_)) Launch();
        return progress;
      }
      gathering_.text.append(line.text.data(), line.text.size());
      gathering_.ends.push_back(gathering_.text.size());
      gathering_.origins.push_back(lines_->OriginOf(line.index));
      if (static_cast<int64_t>(gathering_.ends.size()) == batch_size_) {
        Launch();
        ++in_window;
      }
    }
    return LineSource::Progress::kLine;
  }

  void Launch() {
    auto raw = std::make_shared<RawBatch>(std::move(gathering_));
    gathering_ = RawBatch();
    bool post = false;
    {
      std::lock_guard lock(shared_->mu);
      shared_->window.push_back(std::move(raw));
      if (shared_->workers < options_.parallelism - 1) {
        ++shared_->workers;
        post = true;
      }
    }
    if (post) {
      asio::post(pool_, [shared = shared_, options = options_] {
        SharedParsing::Work(shared, options);
      });
    }
  }

  // Spins while a worker finishes `raw`, for as long as parsing a batch
  // takes at most: cheaper than sleeping and being woken.
  static void SpinUntilDone(const RawBatch& raw) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1;
         raw.state.load(std::memory_order_acquire) != RawBatch::State::kDone;
         ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 &&
          std::chrono::steady_clock::now() - start > kMaxSpinForBatch) {
        return;
      }
    }
  }
  static constexpr std::chrono::microseconds kMaxSpinForBatch{50};

  // What a result leaving the window means for the stream.
  Result Emitted(Result result) {
    if (!result.ok()) failure_ = result.status();
    return result;
  }

  std::optional<Result> TryNextParallel() {
    if (!failure_.ok()) return Result(failure_);
    absl::StatusOr<LineSource::Progress> gathered = GatherAhead();
    if (!gathered.ok()) pending_failure_ = gathered.status();
    while (true) {
      std::shared_ptr<RawBatch> first = front();
      if (first == nullptr) {
        // Batches before an input error come first; then the error.
        if (!pending_failure_.ok()) return Result(Fail(pending_failure_));
        if (input_done_) return Result(std::optional<Element>());
        return std::nullopt;  // the input must be waited for
      }
      if (first->state.load(std::memory_order_acquire) ==
          RawBatch::State::kDone) {
        return Emitted(PopFront());
      }
      if (shared_->Claim(*first)) {
        shared_->ParseClaimed(*first, options_);
        return Emitted(PopFront());
      }
      // A worker parses the front batch: parse a later one meanwhile.
      if (std::shared_ptr<RawBatch> later = shared_->ClaimOldestPending()) {
        shared_->ParseClaimed(*later, options_);
        continue;
      }
      SpinUntilDone(*first);
      if (first->state.load(std::memory_order_acquire) !=
          RawBatch::State::kDone) {
        return std::nullopt;  // Next waits for it
      }
    }
  }

  // Completes with true once the front batch is done, or with false when
  // the wait is cancelled.
  template <typename CompletionToken>
  auto AsyncWaitDone(std::shared_ptr<RawBatch> raw, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(bool)>(
        [this](auto handler, std::shared_ptr<RawBatch> raw) {
          asio::cancellation_slot slot =
              asio::get_associated_cancellation_slot(handler);
          auto done =
              PostToHandler<bool>(std::move(handler), [](bool d) { return d; });
          std::unique_lock lock(shared_->mu);
          if (raw->state.load(std::memory_order_relaxed) ==
              RawBatch::State::kDone) {
            lock.unlock();
            done(true);
            return;
          }
          if (slot.is_connected()) {
            slot.assign([shared = shared_, raw](asio::cancellation_type) {
              absl::AnyInvocable<void(bool)> waiter;
              {
                std::lock_guard lock(shared->mu);
                waiter = std::move(raw->waiter);
                raw->waiter = nullptr;
              }
              if (waiter) waiter(false);
            });
          }
          raw->waiter = std::move(done);
        },
        token, std::move(raw));
  }

  asio::awaitable<Result> NextParallel() {
    while (true) {
      if (std::optional<Result> ready = TryNextParallel()) {
        co_return *std::move(ready);
      }
      std::shared_ptr<RawBatch> first = front();
      if (first == nullptr) {
        // Nothing gathered: the input must be read first.
        absl::Status waited = co_await lines_->WaitForLines();
        if (!waited.ok()) pending_failure_ = waited;
        continue;
      }
      if (!co_await AsyncWaitDone(first, asio::use_awaitable)) {
        co_return Result(
            absl::CancelledError("the wait for the next batch was cancelled"));
      }
      co_return Emitted(PopFront());
    }
  }

  std::unique_ptr<ElementIterator> input_;
  LineSource* lines_;
  CsvRowOptions options_;
  int64_t batch_size_;
  bool drop_remainder_;
  Runtime::executor_type pool_;
  std::vector<double> values_;
  absl::Status failure_;
  bool input_done_ = false;
  // Parallelism 1: the batch being filled.
  std::optional<BatchUnderConstruction> building_;
  // Parallelism P: the lines of the next batch, the batches gathered and
  // not yet returned (in order), an input error that comes after them.
  std::shared_ptr<SharedParsing> shared_;
  RawBatch gathering_;
  absl::Status pending_failure_;
};

class CsvBatchDataset : public DatasetNode {
 public:
  CsvBatchDataset(detail::Node lines, detail::Node unfused,
                  CsvRowOptions options, int64_t batch_size,
                  bool drop_remainder)
      : lines_(std::move(lines)),
        unfused_(std::move(unfused)),
        options_(std::move(options)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    absl::StatusOr<std::unique_ptr<ElementIterator>> lines =
        lines_->MakeIterator(context);
    if (!lines.ok()) return lines.status();
    if (dynamic_cast<LineSource*>(lines->get()) == nullptr) {
      return absl::InternalError(
          absl::StrCat(lines_->DebugString(),
                       " declares lines as views but its iterator "
                       "is no LineSource"));
    }
    return std::make_unique<CsvBatchIterator>(*std::move(lines), options_,
                                              batch_size_, drop_remainder_,
                                              context.pool);
  }
  std::optional<ElementSpec> spec() const override { return unfused_->spec(); }
  bool deterministic() const override { return unfused_->deterministic(); }
  std::string DebugString() const override { return unfused_->DebugString(); }

 private:
  detail::Node lines_;
  detail::Node unfused_;
  CsvRowOptions options_;
  int64_t batch_size_;
  bool drop_remainder_;
};

// CsvRows' node: the Filter + Map chain for elements, fused with a Batch.
class CsvRowsDataset : public DatasetNode, public detail::BatchFusable {
 public:
  CsvRowsDataset(detail::Node lines, detail::Node rows, CsvRowOptions options)
      : lines_(std::move(lines)),
        rows_(std::move(rows)),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    return rows_->MakeIterator(context);
  }
  std::optional<ElementSpec> spec() const override { return rows_->spec(); }
  bool deterministic() const override { return rows_->deterministic(); }
  std::string DebugString() const override { return rows_->DebugString(); }

  // Fused when the lines come from a source of views (TextLines,
  // ReadLines, TcpLines); else Batch over the rows.
  detail::Node FusedBatch(const detail::Node&, int64_t batch_size,
                          bool drop_remainder) const override {
    detail::Node unfused =
        detail::StackingBatchNode(rows_, batch_size, drop_remainder);
    if (dynamic_cast<const detail::LineSourceNode*>(lines_.get()) == nullptr) {
      return unfused;
    }
    return std::make_shared<CsvBatchDataset>(
        lines_, std::move(unfused), options_, batch_size, drop_remainder);
  }

 private:
  detail::Node lines_;
  detail::Node rows_;
  CsvRowOptions options_;
};

}  // namespace

Dataset CsvRows(Dataset lines, CsvRowOptions options) {
  if (!lines.ok()) return lines;
  if (options.num_columns < 2) {
    return Dataset::Failed(OptionError(absl::StrCat(
        "num_columns must be at least 2 (features and a label), got ",
        options.num_columns)));
  }
  if (options.label_column < -1 ||
      options.label_column >= options.num_columns) {
    return Dataset::Failed(OptionError(
        absl::StrCat("label_column must be -1 (the last column) or in [0, ",
                     options.num_columns, "), got ", options.label_column)));
  }
  if (options.label_column == -1)
    options.label_column = options.num_columns - 1;
  if (options.label_dtype != DType::kInt32 &&
      options.label_dtype != DType::kInt64) {
    return Dataset::Failed(
        OptionError(absl::StrCat("label_dtype must be int32 or int64, got ",
                                 DTypeName(options.label_dtype))));
  }
  if (options.num_classes.has_value() && *options.num_classes < 1) {
    return Dataset::Failed(OptionError(
        absl::StrCat("num_classes must be >= 1, got ", *options.num_classes)));
  }
  if (std::optional<ElementSpec> spec = lines.spec();
      spec.has_value() && (spec->size() != 1 || !(*spec)[0].is_string)) {
    return Dataset::Failed(OptionError(
        absl::StrCat("the input must yield lines (one string), it yields ",
                     ElementSpecString(*spec))));
  }
  ElementSpec output{
      ComponentSpec::Of(DType::kFloat, TensorShape{options.num_columns - 1}),
      ComponentSpec::Scalar(options.label_dtype)};
  Dataset rows =
      lines
          .Filter([](const Element& line) -> absl::StatusOr<bool> {
            return !IsBlankLine(line.text(0));
          })
          .Map([options](
                   Element line) { return ParseRow(options, std::move(line)); },
               MapOptions{.parallelism = options.parallelism,
                          .deterministic = true,
                          .output_spec = std::move(output),
                          .name = "CsvRows"});
  if (!rows.ok()) return rows;
  return Dataset::FromNode(std::make_shared<CsvRowsDataset>(
      lines.node(), rows.node(), std::move(options)));
}

}  // namespace cosession
