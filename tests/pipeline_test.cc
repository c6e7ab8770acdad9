// The stage pipeline (pipeline/dataset.h): each stage's semantics, the
// file, stream and user-fed sources, backpressure and stops of a Prefetch,
// cancellation of a socket read, a peer closing mid-record, exact resume
// of a shuffled, parallel-mapped chain, and the IteratorGetNext op over a
// Dataset.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/session.h"
#include "cosession/io/summary_writer.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/pipeline/generator_source.h"
#include "cosession/pipeline/stream_source.h"
#include "tests/co_test.h"
#include "tests/event_test_util.h"
#include "tests/scratch_dir.h"
#include "tests/stalled_input.h"
#include "tests/test_files.h"
#include "tests/test_util.h"

namespace cosession::pipeline_test {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using testing::ReadBytes;
using testing::ScratchDir;
using testing::TestRuntime;
using testing::WriteFile;
using testing::WriteGzip;

IteratorContext Context(Coordinator* coordinator = nullptr) {
  return {.pool = TestRuntime().executor(), .coordinator = coordinator};
}

int64_t Int(const Tensor& t) {
  return t.dtype() == DType::kInt64 ? t.flat<int64_t>()[0]
                                    : t.flat<int32_t>()[0];
}

// What a stream gave: the int64 scalars (or a batch's values, flattened
// and joined per element), and how it ended.
struct Drained {
  std::vector<std::vector<int64_t>> elements;
  std::vector<std::string> texts;
  absl::Status end;
  std::vector<std::string> origins;  // each element's, as ToString()
};

std::vector<int64_t> Values(const Component& c) {
  std::vector<int64_t> out;
  if (const Tensor* t = std::get_if<Tensor>(&c)) {
    if (t->dtype() == DType::kInt64) {
      for (int64_t v : t->flat<int64_t>()) out.push_back(v);
    } else if (t->dtype() == DType::kInt32) {
      for (int32_t v : t->flat<int32_t>()) out.push_back(v);
    } else {
      for (float v : t->flat<float>()) out.push_back(static_cast<int64_t>(v));
    }
  }
  return out;
}

asio::awaitable<Drained> DrainIterator(ElementIterator& it,
                                       int64_t limit = 100000) {
  Drained out;
  for (int64_t i = 0; i < limit; ++i) {
    ElementIterator::Result next = co_await NextOf(it);
    if (!next.ok()) {
      out.end = next.status();
      co_return out;
    }
    if (!next->has_value()) co_return out;
    const Element& e = **next;
    out.origins.push_back(e.origin.ToString());
    std::vector<int64_t> values;
    for (const Component& c : e.components) {
      if (const std::string* s = std::get_if<std::string>(&c)) {
        out.texts.push_back(*s);
      }
      for (int64_t v : Values(c)) values.push_back(v);
    }
    out.elements.push_back(std::move(values));
  }
  co_return out;
}

asio::awaitable<Drained> Drain(Dataset dataset, IteratorContext context) {
  auto it = dataset.MakeIterator(context);
  if (!it.ok())
    co_return Drained{
        .elements = {}, .texts = {}, .end = it.status(), .origins = {}};
  co_return co_await DrainIterator(**it);
}

std::vector<std::vector<int64_t>> Scalars(std::vector<int64_t> values) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t v : values) out.push_back({v});
  return out;
}

Dataset TimesTen(Dataset d, int64_t parallelism, bool deterministic = true) {
  return d.Map(
      [](Element e) -> absl::StatusOr<Element> {
        return MakeElement({Tensor::Scalar<int64_t>(Int(e.tensor(0)) * 10)});
      },
      {.parallelism = parallelism,
       .deterministic = deterministic,
       .output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)},
       .name = "times_ten"});
}

// Starts `body` at once on `executor` (an awaitable from co_spawn with
// use_awaitable would start only when awaited); Get() awaits its result.
template <typename T>
class Started {
 public:
  using Channel = asio::experimental::concurrent_channel<void(error_code, T)>;
  Started(asio::any_io_executor executor, asio::awaitable<T> body,
          asio::cancellation_slot slot = {})
      : channel_(std::make_shared<Channel>(executor, 1)) {
    asio::co_spawn(
        executor, std::move(body),
        asio::bind_cancellation_slot(
            slot, [channel = channel_](std::exception_ptr e, T value) {
              if (e) value = T(absl::InternalError("thrown"));
              channel->try_send(error_code(), std::move(value));
            }));
  }
  asio::awaitable<T> Get() {
    auto [ec, value] =
        co_await channel_->async_receive(asio::as_tuple(asio::use_awaitable));
    co_return std::move(value);
  }

 private:
  std::shared_ptr<Channel> channel_;
};

asio::awaitable<ElementIterator::Result> NextOfPtr(ElementIterator* it) {
  co_return co_await it->Next();
}

// How a Next() of `dataset`'s new iterator ends when it is cancelled while
// it waits (on a socket nobody writes to): the cancellation is emitted on
// the executor the wait runs on, once the wait started.
asio::awaitable<absl::Status> StatusOfACancelledNext(Dataset dataset) {
  auto it = dataset.MakeIterator(Context());
  if (!it.ok()) co_return it.status();
  asio::cancellation_signal cancel;
  auto executor = co_await asio::this_coro::executor;
  Started<ElementIterator::Result> next(executor, NextOfPtr(it->get()),
                                        cancel.slot());
  asio::post(executor,
             [&cancel] { cancel.emit(asio::cancellation_type::terminal); });
  ElementIterator::Result result = co_await next.Get();
  co_return result.status();
}

// ------------------------------------------------------------- stages

CO_TEST(Pipeline, RangeTakeSkipFilterRepeat) {
  Drained d = co_await Drain(Dataset::Range(0, 10, 3), Context());
  EXPECT_EQ(d.elements, Scalars({0, 3, 6, 9}));
  d = co_await Drain(Dataset::Range(5, 0, -2), Context());
  EXPECT_EQ(d.elements, Scalars({5, 3, 1}));
  d = co_await Drain(Dataset::Range(10).Skip(2).Take(3), Context());
  EXPECT_EQ(d.elements, Scalars({2, 3, 4}));
  auto odd = [](const Element& e) -> absl::StatusOr<bool> {
    return Int(e.tensor(0)) % 2 == 1;
  };
  Dataset odds = Dataset::Range(10).Filter(odd);
  d = co_await Drain(odds, Context());
  EXPECT_EQ(d.elements, Scalars({1, 3, 5, 7, 9}));
  d = co_await Drain(Dataset::Range(3).Repeat(2), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 0, 1, 2}));
  d = co_await Drain(Dataset::Range(3).Repeat().Take(7), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 0, 1, 2, 0}));
  EXPECT_TRUE(d.end.ok()) << d.end;
}

// Resuming a long run at element n must not replay n elements: once Repeat
// has seen one pass of a deterministic input to its end, it skips whole
// passes by counting. The predicate counts the input elements looked at.
CO_TEST(Pipeline, RepeatSkipsWholePassesOfADeterministicInputByCounting) {
  auto looked_at = std::make_shared<std::atomic<int64_t>>(0);
  auto counting = [looked_at](const Element&) -> absl::StatusOr<bool> {
    looked_at->fetch_add(1);
    return true;
  };
  Dataset forever = Dataset::Range(10).Filter(counting).Repeat();
  CO_ASSERT_TRUE(forever.deterministic());
  auto it = forever.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(100'003);
  CO_ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, 100'003);
  // The first pass (10) and 3 into the last one.
  EXPECT_EQ(looked_at->load(), 13);
  Drained next = co_await DrainIterator(**it, 8);
  EXPECT_EQ(next.elements, Scalars({3, 4, 5, 6, 7, 8, 9, 0}));

  // A bounded Repeat stops at its last pass.
  auto bounded =
      Dataset::Range(10).Filter(counting).Repeat(3).MakeIterator(Context());
  CO_ASSERT_TRUE(bounded.ok());
  skipped = co_await (*bounded)->Skip(1'000);
  CO_ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, 30);
  Drained rest = co_await DrainIterator(**bounded);
  EXPECT_TRUE(rest.elements.empty());
  EXPECT_TRUE(rest.end.ok()) << rest.end;
}

// The identity, as a coroutine: the stage after it takes the Next() path
// rather than TryNext's.
Dataset Awaited(Dataset d) {
  return d.Map(
      [](Element e) -> asio::awaitable<absl::StatusOr<Element>> {
        co_return e;
      },
      {.output_spec = d.spec()});
}

CO_TEST(Pipeline, TakeWhileEndsAtTheFirstFalseWithoutReadingFurther) {
  auto looked_at = std::make_shared<std::atomic<int64_t>>(0);
  auto counted = [looked_at](const Element&) -> absl::StatusOr<bool> {
    looked_at->fetch_add(1);
    return true;
  };
  auto below_four = [](const Element& e) -> absl::StatusOr<bool> {
    return Int(e.tensor(0)) < 4;
  };
  for (bool awaited : {false, true}) {
    looked_at->store(0);
    Dataset input = Dataset::Range(10).Filter(counted);
    if (awaited) input = Awaited(input);
    Dataset head = input.TakeWhile(below_four);
    EXPECT_EQ(head.DebugString(),
              awaited ? "Range(0, 10, 1).Filter().Map().TakeWhile()"
                      : "Range(0, 10, 1).Filter().TakeWhile()");
    auto it = head.MakeIterator(Context());
    CO_ASSERT_OK(it.status());
    Drained d = co_await DrainIterator(**it);
    EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3})) << "awaited " << awaited;
    EXPECT_TRUE(d.end.ok()) << d.end;
    // 4 ended it; after the end nothing more is read.
    ElementIterator::Result again = co_await NextOf(**it);
    EXPECT_TRUE(again.ok() && !again->has_value());
    EXPECT_EQ(looked_at->load(), 5) << "awaited " << awaited;
  }
  // Each pass of a Repeat starts again.
  Dataset twice = Dataset::Range(10).TakeWhile(below_four).Repeat(2);
  Drained d = co_await Drain(twice, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3, 0, 1, 2, 3}));

  // The predicate's error is passed on, as Filter's; a throw is Internal.
  auto fussy = [](const Element& e) -> absl::StatusOr<bool> {
    if (Int(e.tensor(0)) == 1) return absl::InvalidArgumentError("one");
    if (Int(e.tensor(0)) == 2) throw std::runtime_error("two");
    return Int(e.tensor(0)) < 4;
  };
  auto it = Dataset::Range(10).TakeWhile(fussy).MakeIterator(Context());
  CO_ASSERT_OK(it.status());
  std::vector<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    ElementIterator::Result next = co_await NextOf(**it);
    seen.push_back(!next.ok()          ? next.status().ToString()
                   : next->has_value() ? std::to_string(Int((*next)->tensor(0)))
                                       : "end");
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "INVALID_ARGUMENT: one",
                                            "INTERNAL: TakeWhile threw: two",
                                            "3", "end", "end"}));
  Dataset empty = Dataset::Range(3).TakeWhile(nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
}

CO_TEST(Pipeline, WindowCutsTheStreamAsTfDataWindowThenBatch) {
  using Rows = std::vector<std::vector<int64_t>>;
  struct Case {
    int64_t elements;
    WindowOptions options;
    Rows want;
  };
  const std::vector<Case> cases{
      {7, {.size = 3, .shift = 2}, {{0, 1, 2}, {2, 3, 4}, {4, 5, 6}, {6}}},
      {7,
       {.size = 3, .shift = 2, .drop_remainder = true},
       {{0, 1, 2}, {2, 3, 4}, {4, 5, 6}}},
      {5,
       {.size = 3, .shift = 1},
       {{0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4}, {4}}},
      {5, {.size = 2}, {{0, 1}, {2, 3}, {4}}},  // shift = size: tiles
      {10,
       {.size = 3, .shift = 3, .stride = 2},
       {{0, 2, 4}, {3, 5, 7}, {6, 8}, {9}}},
      // A shift past the window skips the elements between.
      {12, {.size = 2, .shift = 5}, {{0, 1}, {5, 6}, {10, 11}}},
      {3, {.size = 5, .drop_remainder = true}, {}},
  };
  for (bool awaited : {false, true}) {
    for (const Case& c : cases) {
      Dataset input = Dataset::Range(c.elements);
      if (awaited) input = Awaited(input);
      Dataset windows = input.Window(c.options);
      CO_ASSERT_OK(windows.status());
      Drained d = co_await Drain(windows, Context());
      EXPECT_TRUE(d.end.ok()) << d.end;
      EXPECT_EQ(d.elements, c.want)
          << windows.DebugString() << ", awaited " << awaited;
    }
  }
  Dataset fixed = Dataset::Range(7).Window({.size = 3, .drop_remainder = true});
  EXPECT_EQ(ElementSpecString(*fixed.spec()), "(int64 [3])");
  EXPECT_EQ(fixed.DebugString(),
            "Range(0, 7, 1).Window(3, shift 3, stride 1, drop_remainder)");
  EXPECT_EQ(ElementSpecString(*Dataset::Range(7).Window({.size = 3}).spec()),
            "(int64 [?])");
  for (const WindowOptions& bad :
       {WindowOptions{.size = 0}, WindowOptions{.size = 2, .shift = 0},
        WindowOptions{.size = 2, .stride = 0},
        WindowOptions{.size = int64_t{1} << 62, .stride = 4}}) {
    Dataset refused = Dataset::Range(3).Window(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "Window"));
  }
}

// A batch too large to make is an error naming the stage, not an exception
// out of the iterator.
CO_TEST(Pipeline, ABatchTooLargeToMakeIsAnErrorNamingTheStage) {
  Dataset huge =
      Dataset::FromElements(
          {MakeElement({Tensor::FromVector<int64_t>({1, 2})})})
          .PaddedBatch(1, {.padded_shapes = {TensorShape{int64_t{1} << 50}}});
  CO_ASSERT_OK(huge.status());
  Drained d = co_await Drain(huge, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_TRUE(absl::StartsWith(d.end.message(), "PaddedBatch(1): ")) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(), "too large")) << d.end;
}

CO_TEST(Pipeline, WindowReturnsAnInputErrorAtOnceAndDropsTheWindowsItCuts) {
  auto fails_at_three = [](const Element& e) -> absl::StatusOr<bool> {
    if (Int(e.tensor(0)) == 3) return absl::DataLossError("bad 3");
    return true;
  };
  auto it = Dataset::Range(8)
                .Filter(fails_at_three)
                .Window({.size = 2})
                .MakeIterator(Context());
  CO_ASSERT_OK(it.status());
  std::vector<std::string> seen;
  for (int i = 0; i < 5; ++i) {
    ElementIterator::Result next = co_await NextOf(**it);
    if (!next.ok()) {
      seen.push_back(next.status().ToString());
    } else if (!next->has_value()) {
      seen.push_back("end");
    } else {
      seen.push_back(absl::StrJoin(Values((*next)->components[0]), " "));
    }
  }
  // [2 3] is cut by the error: 2 is dropped with it.
  EXPECT_EQ(seen, (std::vector<std::string>{"0 1", "DATA_LOSS: bad 3", "4 5",
                                            "6 7", "end"}));
  // Elements of different shapes do not stack: Batch's error.
  Dataset ragged =
      Dataset::FromElements({MakeElement({Tensor::FromVector<int64_t>({1, 2})}),
                             MakeElement({Tensor::FromVector<int64_t>({3})})})
          .Window({.size = 2});
  Drained d = co_await Drain(ragged, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(),
                                "Cannot batch tensors with different shapes"))
      << d.end;
}

CO_TEST(Pipeline, GroupByWindowReducesFullGroupsThenTheRestInKeyOrder) {
  using Rows = std::vector<std::vector<int64_t>>;
  auto parity = [](const Element& e) -> absl::StatusOr<int64_t> {
    return Int(e.tensor(0)) % 2;
  };
  auto batched = [](int64_t, Dataset window) { return window.Batch(100); };
  for (bool awaited : {false, true}) {
    Dataset input = Dataset::Range(10);
    if (awaited) input = Awaited(input);
    Dataset threes = input.GroupByWindow(
        {.key = parity,
         .reduce = batched,
         .window_size = [](int64_t) -> absl::StatusOr<int64_t> { return 3; }});
    Drained d = co_await Drain(threes, Context());
    EXPECT_TRUE(d.end.ok()) << d.end;
    EXPECT_EQ(d.elements, (Rows{{0, 2, 4}, {1, 3, 5}, {6, 8}, {7, 9}}))
        << "awaited " << awaited;
    // A window size per key; a reduce that yields the window's elements.
    Dataset sized = input.GroupByWindow(
        {.key = parity,
         .reduce = batched,
         .window_size = [](int64_t key) -> absl::StatusOr<int64_t> {
           return key == 0 ? 2 : 4;
         }});
    d = co_await Drain(sized, Context());
    EXPECT_EQ(d.elements, (Rows{{0, 2}, {4, 6}, {1, 3, 5, 7}, {8}, {9}}));
    Dataset regrouped = input.GroupByWindow(
        {.key = parity,
         .reduce = [](int64_t, Dataset window) { return window; },
         .window_size = [](int64_t) -> absl::StatusOr<int64_t> { return 2; },
         .output_spec = input.spec()});
    EXPECT_EQ(ElementSpecString(*regrouped.spec()), "(int64 [])");
    d = co_await Drain(regrouped, Context());
    EXPECT_EQ(d.elements, Scalars({0, 2, 1, 3, 4, 6, 5, 7, 8, 9}));
  }
}

CO_TEST(Pipeline, GroupByWindowErrorsNameTheStageAndGoOn) {
  auto one = [](int64_t) -> absl::StatusOr<int64_t> { return 1; };
  auto batched = [](int64_t, Dataset window) { return window.Batch(8); };
  // Five calls of a dataset's iterator, as text.
  auto five = [](Dataset d) -> asio::awaitable<std::vector<std::string>> {
    std::vector<std::string> seen;
    auto it = d.MakeIterator(Context());
    if (!it.ok()) co_return std::vector<std::string>{it.status().ToString()};
    for (int i = 0; i < 5; ++i) {
      ElementIterator::Result next = co_await NextOf(**it);
      seen.push_back(!next.ok() ? next.status().ToString()
                     : next->has_value()
                         ? absl::StrJoin(Values((*next)->components[0]), " ")
                         : "end");
    }
    co_return seen;
  };
  Dataset bad_key = Dataset::Range(4).GroupByWindow(
      {.key = [](const Element& e) -> absl::StatusOr<int64_t> {
         if (Int(e.tensor(0)) == 1) return absl::InvalidArgumentError("no key");
         return Int(e.tensor(0));
       },
       .reduce = batched,
       .window_size = one,
       .name = "k"});
  {
    std::vector<std::string> got = co_await five(bad_key);

    EXPECT_EQ(got, (std::vector<std::string>{
                       "0", "INVALID_ARGUMENT: GroupByWindow(k): no key", "2",
                       "3", "end"}));
  }
  Dataset failing_reduce = Dataset::Range(3).GroupByWindow(
      {.key = [](const Element& e) -> absl::StatusOr<int64_t> {
         return Int(e.tensor(0));
       },
       .reduce =
           [](int64_t key, Dataset window) {
             if (key == 1) return Dataset::Range(0).Batch(0);  // refused
             if (key == 2) throw std::runtime_error("two");
             return window;
           },
       .window_size = one});
  std::vector<std::string> seen = co_await five(failing_reduce);
  CO_ASSERT_TRUE(seen.size() == 5u);
  EXPECT_EQ(seen[0], "0");
  EXPECT_TRUE(absl::StartsWith(seen[1],
                               "INVALID_ARGUMENT: GroupByWindow(): the reduced "
                               "dataset of key 1: Range(0, 0, 1).Batch"))
      << seen[1];
  EXPECT_TRUE(absl::StartsWith(seen[2], "INTERNAL: GroupByWindow() reduce"))
      << seen[2];
  EXPECT_EQ(seen[3], "end");
  // Ever new keys: the groups hold at most max_held_elements.
  Dataset unbounded = Dataset::Range(10).GroupByWindow(
      {.key = [](const Element& e) -> absl::StatusOr<int64_t> {
         return Int(e.tensor(0));
       },
       .reduce = batched,
       .window_size = [](int64_t) -> absl::StatusOr<int64_t> { return 2; },
       .max_held_elements = 3});
  seen = co_await five(unbounded);
  EXPECT_TRUE(absl::StartsWith(seen[0],
                               "RESOURCE_EXHAUSTED: GroupByWindow(): "
                               "the groups hold max_held_elements = 3"))
      << seen[0];
  Dataset zero_window = Dataset::Range(2).GroupByWindow(
      {.key = [](const Element&) -> absl::StatusOr<int64_t> { return 7; },
       .reduce = batched,
       .window_size = [](int64_t) -> absl::StatusOr<int64_t> { return 0; }});
  seen = co_await five(zero_window);
  EXPECT_TRUE(absl::StrContains(seen[0], "the window size of key 7 is 0"))
      << seen[0];
  Dataset incomplete = Dataset::Range(2).GroupByWindow({.window_size = one});
  EXPECT_TRUE(absl::IsInvalidArgument(incomplete.status()));
}

// An int64 vector of `n` elements, each n.
Element OfLength(int64_t n) {
  return MakeElement({Tensor::FromVector<int64_t>(
      std::vector<int64_t>(static_cast<size_t>(n), n))});
}

// Each batch's shape, then its values.
asio::awaitable<std::vector<std::string>> BatchesOf(Dataset d) {
  std::vector<std::string> out;
  auto it = d.MakeIterator(Context());
  if (!it.ok()) co_return std::vector<std::string>{it.status().ToString()};
  while (true) {
    ElementIterator::Result next = co_await NextOf(**it);
    if (!next.ok()) {
      out.push_back(next.status().ToString());
      co_return out;
    }
    if (!next->has_value()) co_return out;
    const Tensor& t = (*next)->tensor(0);
    out.push_back(absl::StrCat(t.shape().DebugString(), " ",
                               absl::StrJoin(Values(t), " ")));
  }
}

CO_TEST(Pipeline, BucketBySequenceLengthBatchesSimilarLengthsPadded) {
  std::vector<Element> sequences;
  for (int64_t n : {1, 5, 2, 7, 3, 9, 4}) sequences.push_back(OfLength(n));
  auto length = [](const Element& e) -> absl::StatusOr<int64_t> {
    return e.tensor(0).shape().dim_size(0);
  };
  Dataset input = Dataset::FromElements(sequences);
  Dataset buckets =
      input.BucketBySequenceLength({.element_length = length,
                                    .bucket_boundaries = {3, 6},
                                    .bucket_batch_sizes = {2, 2, 2}});
  CO_ASSERT_OK(buckets.status());
  EXPECT_EQ(ElementSpecString(*buckets.spec()), "(int64 [?,?])");
  // Lengths 1 and 2 (below 3), 5 and 3 (below 6), 7 and 9, then the last
  // bucket left, 4: each padded to its batch's longest.
  {
    std::vector<std::string> got = co_await BatchesOf(buckets);

    EXPECT_EQ(got, (std::vector<std::string>{
                       "[2,2] 1 0 2 2", "[2,5] 5 5 5 5 5 3 3 3 0 0",
                       "[2,9] 7 7 7 7 7 7 7 0 0 9 9 9 9 9 9 9 9 9",
                       "[1,4] 4 4 4 4"}));
  }
  // Padded to the bucket's boundary - 1, not to the batch's longest; the
  // short batch (a 5 alone) dropped.
  std::vector<Element> shorter;
  for (int64_t n : {1, 4, 1, 7, 3, 8, 5}) shorter.push_back(OfLength(n));
  Dataset to_boundary = Dataset::FromElements(shorter).BucketBySequenceLength(
      {.element_length = length,
       .bucket_boundaries = {3, 6, 10},
       .bucket_batch_sizes = {2, 2, 2, 2},
       .padding_values = {Tensor::Scalar<int64_t>(-1)},
       .pad_to_bucket_boundary = true,
       .drop_remainder = true});
  EXPECT_EQ(ElementSpecString(*to_boundary.spec()), "(int64 [?,?])");
  {
    std::vector<std::string> got = co_await BatchesOf(to_boundary);

    EXPECT_EQ(got, (std::vector<std::string>{
                       "[2,2] 1 -1 1 -1", "[2,5] 4 4 4 4 -1 3 3 3 -1 -1",
                       "[2,9] 7 7 7 7 7 7 7 -1 -1 8 8 8 8 8 8 8 8 -1"}));
  }
  // With pad_to_bucket_boundary a length past the last boundary is refused,
  // naming the element.
  sequences[3].origin = {.kind = ElementOrigin::Kind::kFileLine,
                         .source = std::make_shared<const std::string>("s.txt"),
                         .index = 4};
  Dataset too_long = Dataset::FromElements(sequences).BucketBySequenceLength(
      {.element_length = length,
       .bucket_boundaries = {3, 6},
       .bucket_batch_sizes = {2, 2, 2},
       .pad_to_bucket_boundary = true});
  std::vector<std::string> got = co_await BatchesOf(too_long);
  CO_ASSERT_TRUE(!got.empty());
  EXPECT_TRUE(absl::StrContains(
      got.back(),
      "BucketBySequenceLength): s.txt:4: length 7 is not below "
      "the last bucket boundary 6"))
      << got.back();
  // Equal lengths need no padding.
  Dataset same = Dataset::Range(5).BucketBySequenceLength(
      {.element_length = [](const Element& e) -> absl::StatusOr<int64_t> {
         return Int(e.tensor(0)) % 2;
       },
       .bucket_boundaries = {1},
       .bucket_batch_sizes = {2, 3},
       .no_padding = true});
  {
    std::vector<std::string> got = co_await BatchesOf(same);

    EXPECT_EQ(got, (std::vector<std::string>{"[2] 0 2", "[1] 4", "[2] 1 3"}));
  }
  for (const BucketBySequenceLengthOptions& bad :
       {BucketBySequenceLengthOptions{.bucket_batch_sizes = {1}},
        BucketBySequenceLengthOptions{.element_length = length,
        .bucket_boundaries = {3},
        .bucket_batch_sizes = {1}},
        BucketBySequenceLengthOptions{.element_length = length,
        .bucket_boundaries = {3, 3},
        .bucket_batch_sizes = {1, 1, 1}},
        BucketBySequenceLengthOptions{.element_length = length,
        .bucket_boundaries = {3},
        .bucket_batch_sizes = {1, 0}}}) {
    Dataset refused = input.BucketBySequenceLength(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
    EXPECT_TRUE(
        absl::StrContains(refused.status().message(), "BucketBySequenceLength"))
        << refused.status();
  }
}

CO_TEST(Pipeline, UniqueKeepsFirstOccurrencesOfScalarsWithinItsBound) {
  auto ints = [](std::vector<int64_t> values, bool int32) {
    std::vector<Element> out;
    for (int64_t v : values) {
      out.push_back(
          MakeElement({int32 ? Tensor::Scalar<int32_t>(static_cast<int32_t>(v))
                             : Tensor::Scalar<int64_t>(v)}));
    }
    return Dataset::FromElements(std::move(out));
  };
  for (bool awaited : {false, true}) {
    for (bool int32 : {false, true}) {
      Dataset input = ints({3, 1, 3, 2, 1, 4, 4}, int32);
      if (awaited) input = Awaited(input);
      // Named first: a default options struct inside a co_await expression
      // is freed too early by g++ 12 (docs/async_pitfalls.md, item 8).
      Dataset unique = input.Unique();
      Drained d = co_await Drain(unique, Context());
      EXPECT_TRUE(d.end.ok()) << d.end;
      EXPECT_EQ(d.elements, Scalars({3, 1, 2, 4}))
          << "awaited " << awaited << ", int32 " << int32;
    }
  }
  std::vector<Element> words;
  for (const char* w : {"b", "a", "b", "", "c", ""}) {
    Element e;
    e.components.emplace_back(std::string(w));
    words.push_back(std::move(e));
  }
  Dataset unique_words = Dataset::FromElements(words).Unique();
  CO_ASSERT_OK(unique_words.status());
  EXPECT_EQ(unique_words.Cardinality(), kUnknownCardinality);
  Drained d = co_await Drain(unique_words, Context());
  EXPECT_EQ(d.texts, (std::vector<std::string>{"b", "a", "", "c"}));

  // The values seen are bounded: 10 int64s take 80 bytes. A value seen
  // again takes nothing more.
  Dataset bounded = Dataset::Range(3)
                        .Repeat(5)
                        .Concatenate(Dataset::Range(100))
                        .Unique({.max_bytes = 80, .name = "ids"});
  d = co_await Drain(bounded, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(absl::IsResourceExhausted(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(
      d.end.message(), "Unique(ids): the values seen take max_bytes = 80"))
      << d.end;

  // Other elements are refused: when the dataset is made if the spec says
  // so, else at the element, naming its origin.
  for (const Dataset& refused :
       {Dataset::Range(4).Batch(2).Unique(),
        Dataset::Zip({Dataset::Range(2), Dataset::Range(2)}).Unique(),
        Dataset::FromElements({MakeElement({Tensor::Scalar<float>(1)})})
            .Unique()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                  "Unique takes int32, int64 or string"))
        << refused.status();
  }
  // A map without an output spec: 0, then a vector from "r.txt:2".
  Dataset unchecked =
      Dataset::Range(2)
          .Map([](Element e) -> absl::StatusOr<Element> {
            if (Int(e.tensor(0)) == 0) return e;
            Element row = MakeElement({Tensor::FromVector<int64_t>({1, 2})});
            row.origin = {
                .kind = ElementOrigin::Kind::kFileLine,
                .source = std::make_shared<const std::string>("r.txt"),
                .index = 2};
            return row;
          })
          .Unique();
  CO_ASSERT_OK(unchecked.status());
  d = co_await Drain(unchecked, Context());
  EXPECT_EQ(d.elements, Scalars({0}));
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(),
                                "Unique(): r.txt:2: a int64 [2] element"))
      << d.end;
}

// A user's function that returns OutOfRange must not end the stream as if
// the input had ended: every stage makes it InvalidArgument.
CO_TEST(Pipeline, AFunctionsOutOfRangeIsNeverTakenForTheEndOfTheInput) {
  auto out_of_range = [](const Element&) -> absl::StatusOr<bool> {
    return absl::OutOfRangeError("done early");
  };
  auto key_out_of_range = [](const Element&) -> absl::StatusOr<int64_t> {
    return absl::OutOfRangeError("done early");
  };
  auto one = [](int64_t) -> absl::StatusOr<int64_t> { return 1; };
  const std::vector<Dataset> stages{
      Dataset::Range(3).Filter(out_of_range),
      Dataset::Range(3).TakeWhile(out_of_range),
      Dataset::Range(3).GroupByWindow(
          {.key = key_out_of_range,
           .reduce = [](int64_t, Dataset window) { return window; },
           .window_size = one}),
      Dataset::Range(3).GroupByWindow(
          {.key = [](const Element&) -> absl::StatusOr<int64_t> { return 0; },
           .reduce =
               [](int64_t, Dataset) {
                 return Dataset::Failed(absl::OutOfRangeError("done early"));
               },
           .window_size = one}),
  };
  for (const Dataset& stage : stages) {
    Drained d = co_await Drain(stage, Context());
    EXPECT_TRUE(absl::IsInvalidArgument(d.end))
        << stage.DebugString() << ": " << d.end;
    EXPECT_TRUE(absl::StrContains(d.end.message(),
                                  "OutOfRange (not an end of input): done "
                                  "early"))
        << d.end;
  }
}

// A running sum, yielded beside each element.
absl::StatusOr<ScanStep> RunningSum(const Element& sum, Element e) {
  Tensor next = Tensor::Scalar<int64_t>(Int(sum.tensor(0)) + Int(e.tensor(0)));
  return ScanStep{.state = MakeElement({next}),
                  .output = MakeElement({e.tensor(0), next})};
}

CO_TEST(Pipeline, ScanCarriesItsStateThroughEveryPathAndRestartsPerIterator) {
  using Rows = std::vector<std::vector<int64_t>>;
  const Element zero = MakeElement({Tensor::Scalar<int64_t>(0)});
  const Rows sums{{1, 1}, {2, 3}, {3, 6}, {4, 10}, {5, 15}};
  for (bool awaited : {false, true}) {
    Dataset input = Dataset::Range(1, 6);
    if (awaited) input = Awaited(input);
    Dataset scanned = input.Scan(zero, RunningSum, {.name = "sum"});
    EXPECT_TRUE(scanned.deterministic());
    EXPECT_FALSE(scanned.spec().has_value());
    EXPECT_TRUE(absl::EndsWith(scanned.DebugString(), ".Scan(sum)"));
    Drained d = co_await Drain(scanned, Context());
    EXPECT_EQ(d.elements, sums) << "awaited " << awaited;
    EXPECT_TRUE(d.end.ok()) << d.end;
    // Skip runs the function over what it skips: the sums go on from there.
    auto it = scanned.MakeIterator(Context());
    CO_ASSERT_OK(it.status());
    absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(2);
    CO_ASSERT_OK(skipped.status());
    EXPECT_EQ(*skipped, 2);
    d = co_await DrainIterator(**it);
    EXPECT_EQ(d.elements, (Rows{{3, 6}, {4, 10}, {5, 15}}));
  }
  // Every iterator, and so every pass of a Repeat, starts at the initial
  // state; Batch stacks the outputs as any other elements.
  Dataset repeated =
      Dataset::Range(1, 4)
          .Scan(zero, RunningSum,
                {.output_spec =
                     ElementSpec{ComponentSpec::Scalar(DType::kInt64),
                                 ComponentSpec::Scalar(DType::kInt64)}})
          .Repeat(2)
          .Batch(3);
  EXPECT_EQ(ElementSpecString(*repeated.spec()), "(int64 [?], int64 [?])");
  Drained d = co_await Drain(repeated, Context());
  EXPECT_EQ(d.elements, (Rows{{1, 2, 3, 1, 3, 6}, {1, 2, 3, 1, 3, 6}}));
  Dataset empty = Dataset::Range(3).Scan(zero, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
}

// tf.data's cardinality rules; every known count is the count a drain
// finds.
CO_TEST(Pipeline, CardinalityIsWhatTheChainTellsWithoutReadingIt) {
  const int64_t kInf = kInfiniteCardinality;
  const int64_t kUnknown = kUnknownCardinality;
  auto any = [](const Element&) -> absl::StatusOr<bool> { return true; };
  auto same = [](Element e) -> absl::StatusOr<Element> { return e; };
  const Element zero = MakeElement({Tensor::Scalar<int64_t>(0)});
  struct Case {
    Dataset dataset;
    int64_t want;
  };
  const std::vector<Case> cases{
      {Dataset::Range(10), 10},
      {Dataset::Range(10, 0, -3), 4},
      {Dataset::Range(5, 5), 0},
      {Dataset::FromElements({zero, zero}), 2},
      {Dataset::FromTensorSlices({Tensor::FromVector<int64_t>({1, 2, 3})}), 3},
      {Dataset::FromTensorSlices({Tensor::FromVector<int64_t>({1, 2, 3})})
           .Batch(2),
       2},
      {Dataset::Range(10).Batch(4), 3},
      {Dataset::Range(10).Batch(4, /*drop_remainder=*/true), 2},
      {Dataset::Range(10).Map(same).Prefetch(2), 10},
      {Dataset::Range(10).Shuffle(4, 1).Cache().Enumerate(), 10},
      {Dataset::Range(10).Scan(zero, RunningSum), 10},
      {Dataset::Range(10).Take(3), 3},
      {Dataset::Range(10).Take(30), 10},
      {Dataset::Range(10).Take(-1), 10},
      {Dataset::Range(10).Skip(3), 7},
      {Dataset::Range(10).Skip(30), 0},
      {Dataset::Range(10).Skip(-1), 0},
      {Dataset::Range(10).Shard(3, 0), 4},
      {Dataset::Range(10).Shard(3, 1), 3},
      {Dataset::Range(10).Shard(3, 2), 3},
      {Dataset::Range(3).Repeat(4), 12},
      {Dataset::Range(3).Repeat(), kInf},
      {Dataset::Range(0).Repeat(), 0},
      {Dataset::Range(3).Repeat().Take(7), 7},
      {Dataset::Range(3).Repeat().Skip(2), kInf},
      {Dataset::Range(3).Repeat().Batch(2), kInf},
      {Dataset::Range(10).Filter(any), kUnknown},
      {Dataset::Range(10).TakeWhile(any), kUnknown},
      {Dataset::Range(10).Filter(any).Repeat(), kInf},
      {Dataset::Range(10).Filter(any).Repeat(2), kUnknown},
      {Dataset::Range(10).Filter(any).Take(3), kUnknown},
      {Dataset::Zip({Dataset::Range(3), Dataset::Range(5)}), 3},
      {Dataset::Zip({Dataset::Range(3).Repeat(), Dataset::Range(5)}), 5},
      {Dataset::Zip({Dataset::Range(3), Dataset::Range(5).Filter(any)}),
       kUnknown},
      {Dataset::Range(3).Concatenate(Dataset::Range(4)), 7},
      {Dataset::Range(3).Concatenate(Dataset::Range(4).Repeat()), kInf},
      {Dataset::Range(3).Concatenate(Dataset::Range(4).Filter(any)), kUnknown},
      {Dataset::Range(7).Window({.size = 3, .shift = 2}), 4},
      {Dataset::Range(7).Window(
           {.size = 3, .shift = 2, .drop_remainder = true}),
       3},
      {Dataset::Range(10).Window(
           {.size = 3, .shift = 3, .stride = 2, .drop_remainder = true}),
       2},
      {Dataset::Range(2).Window({.size = 3, .drop_remainder = true}), 0},
      {Dataset::Range(6).Batch(2).Unbatch(), kUnknown},
      {Dataset::TextLines({"lines.txt"}), kUnknown},
      {Dataset::Range(3).Batch(0), kUnknown},  // not ok()
  };
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);  // for the Prefetch
  for (const Case& c : cases) {
    EXPECT_EQ(c.dataset.Cardinality(), c.want) << c.dataset.DebugString();
    if (c.want < 0) continue;
    Drained d = co_await Drain(c.dataset, Context(&coordinator));
    EXPECT_TRUE(d.end.ok()) << d.end;
    EXPECT_EQ(static_cast<int64_t>(d.elements.size()), c.want)
        << c.dataset.DebugString();
  }
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

CO_TEST(Pipeline, ScanErrorsEndTheStreamNamingTheElement) {
  const Element zero = MakeElement({Tensor::Scalar<int64_t>(0)});
  // Elements that say where they came from, as a file's lines do.
  std::vector<Element> rows;
  for (int64_t i = 1; i <= 4; ++i) {
    Element e = MakeElement({Tensor::Scalar<int64_t>(i)});
    e.origin = {.kind = ElementOrigin::Kind::kFileLine,
                .source = std::make_shared<const std::string>("rows.txt"),
                .index = i};
    rows.push_back(std::move(e));
  }
  auto ends_at_three = [&](ScanFunction fn) -> asio::awaitable<Drained> {
    auto it = Dataset::FromElements(rows)
                  .Scan(zero, std::move(fn), {.name = "s"})
                  .MakeIterator(Context());
    if (!it.ok()) {
      Drained failed;
      failed.end = it.status();
      co_return failed;
    }
    Drained d = co_await DrainIterator(**it);
    // The error stays: the state after it is not known.
    ElementIterator::Result again = co_await NextOf(**it);
    EXPECT_EQ(again.status(), d.end);
    EXPECT_EQ(d.elements, Scalars({1, 2})) << d.end;
    co_return d;
  };
  // A state of another structure: a string, or another dtype.
  ScanFunction to_string = [](const Element& sum,
                              Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) {
      Element text;
      text.components.emplace_back(std::string("three"));
      return ScanStep{.state = text, .output = e};
    }
    return ScanStep{.state = sum, .output = e};
  };
  Drained d = co_await ends_at_three(to_string);
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_EQ(d.end.message(),
            "Scan(s): rows.txt:3: the new state's component 0 is a string, "
            "the initial state's a int64 tensor");
  ScanFunction to_float = [](const Element& sum,
                             Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) {
      return ScanStep{.state = MakeElement({Tensor::Scalar<float>(3)}),
                      .output = e};
    }
    return ScanStep{.state = sum, .output = e};
  };
  d = co_await ends_at_three(to_float);
  EXPECT_TRUE(absl::StrContains(d.end.message(), "is a float tensor")) << d.end;
  ScanFunction two_parts = [](const Element& sum,
                              Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) {
      return ScanStep{.state = MakeElement({sum.tensor(0), sum.tensor(0)}),
                      .output = e};
    }
    return ScanStep{.state = sum, .output = e};
  };
  d = co_await ends_at_three(two_parts);
  EXPECT_TRUE(absl::StrContains(
      d.end.message(), "the new state has 2 components, the initial state 1"))
      << d.end;
  // The function's own error; OutOfRange is not taken for the end; a throw
  // is Internal.
  ScanFunction failing = [](const Element& sum,
                            Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) return absl::DataLossError("bad row");
    return ScanStep{.state = sum, .output = e};
  };
  d = co_await ends_at_three(failing);
  EXPECT_EQ(d.end, absl::DataLossError("bad row"));
  ScanFunction out_of_range = [](const Element& sum,
                                 Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) return absl::OutOfRangeError("done");
    return ScanStep{.state = sum, .output = e};
  };
  d = co_await ends_at_three(out_of_range);
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  ScanFunction throwing = [](const Element& sum,
                             Element e) -> absl::StatusOr<ScanStep> {
    if (Int(e.tensor(0)) == 3) throw std::runtime_error("oops");
    return ScanStep{.state = sum, .output = e};
  };
  d = co_await ends_at_three(throwing);
  EXPECT_TRUE(absl::IsInternal(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(), "Scan(s) threw")) << d.end;
}

// A running (count, sum), as tf.data's reduce documentation counts and sums.
absl::StatusOr<Element> CountAndSum(const Element& state, Element e) {
  return MakeElement(
      {Tensor::Scalar<int64_t>(Int(state.tensor(0)) + 1),
       Tensor::Scalar<int64_t>(Int(state.tensor(1)) + Int(e.tensor(0)))});
}

std::vector<int64_t> Ints(const absl::StatusOr<Element>& e) {
  std::vector<int64_t> out;
  if (!e.ok()) return out;
  for (size_t i = 0; i < e->size(); ++i) out.push_back(Int(e->tensor(i)));
  return out;
}

CO_TEST(Pipeline, ReduceFoldsTheWholeStreamFromTheInitialState) {
  const Element zeros =
      MakeElement({Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(0)});
  const ReduceFunction count_and_sum = CountAndSum;
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);  // for the Prefetch
  const IteratorContext context = Context(&coordinator);
  struct Case {
    Dataset dataset;
    std::vector<int64_t> want;
  };
  const std::vector<Case> cases{
      {Dataset::Range(1, 6), {5, 15}},
      {Awaited(Dataset::Range(1, 6)), {5, 15}},
      {Dataset::Range(1, 6).Prefetch(2).Repeat(2), {10, 30}},
      {Dataset::Range(1, 6).Batch(2).Unbatch(), {5, 15}},
      // Nothing to fold: the initial state.
      {Dataset::Range(0), {0, 0}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Element> total =
        co_await c.dataset.Reduce(zeros, count_and_sum, context);
    CO_ASSERT_OK(total.status());
    EXPECT_EQ(Ints(total), c.want) << c.dataset.DebugString();
  }
  // Each Reduce reads the stream afresh.
  const Dataset numbers = Dataset::Range(1, 4);
  absl::StatusOr<Element> first =
      co_await numbers.Reduce(zeros, count_and_sum, context);
  absl::StatusOr<Element> second =
      co_await numbers.Reduce(zeros, count_and_sum, context);
  EXPECT_EQ(Ints(first), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(Ints(second), (std::vector<int64_t>{3, 6}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

CO_TEST(Pipeline, ReduceEndsWithTheFirstErrorNamingIt) {
  const Element zero = MakeElement({Tensor::Scalar<int64_t>(0)});
  ReduceFunction failing_at_three = [](const Element& sum,
                                       Element e) -> absl::StatusOr<Element> {
    if (Int(e.tensor(0)) == 3) return absl::DataLossError("bad row 3");
    return MakeElement(
        {Tensor::Scalar<int64_t>(Int(sum.tensor(0)) + Int(e.tensor(0)))});
  };
  absl::StatusOr<Element> r =
      co_await Dataset::Range(1, 6).Reduce(zero, failing_at_three, Context());
  EXPECT_EQ(r.status(), absl::DataLossError("bad row 3"));
  // The chain's own error.
  ReduceFunction sum = [](const Element& s,
                          Element e) -> absl::StatusOr<Element> {
    return MakeElement(
        {Tensor::Scalar<int64_t>(Int(s.tensor(0)) + Int(e.tensor(0)))});
  };
  const Dataset broken = Dataset::Failed(absl::NotFoundError("no input"));
  r = co_await broken.Reduce(zero, sum, Context());
  EXPECT_EQ(r.status(), absl::NotFoundError("no input"));
  // A state of another structure, as Scan refuses it.
  ReduceFunction to_float = [](const Element&,
                               Element) -> absl::StatusOr<Element> {
    return MakeElement({Tensor::Scalar<float>(1)});
  };
  r = co_await Dataset::Range(3).Reduce(zero, to_float, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "Scan(Reduce): the new state's component 0 is "
                                "a float tensor"))
      << r.status();
  // OutOfRange from the function is not the end of the input; a throw is
  // Internal; no function at all is InvalidArgument.
  ReduceFunction out_of_range = [](const Element&,
                                   Element) -> absl::StatusOr<Element> {
    return absl::OutOfRangeError("done early");
  };
  r = co_await Dataset::Range(3).Reduce(zero, out_of_range, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  ReduceFunction throwing = [](const Element&,
                               Element) -> absl::StatusOr<Element> {
    throw std::runtime_error("oops");
  };
  r = co_await Dataset::Range(3).Reduce(zero, throwing, Context());
  EXPECT_TRUE(absl::IsInternal(r.status())) << r.status();
  const ReduceFunction none;
  r = co_await Dataset::Range(3).Reduce(zero, none, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "Reduce: the reduce function is empty"))
      << r.status();
}

asio::awaitable<absl::StatusOr<Element>> ReduceOf(Dataset dataset,
                                                  ReduceFunction fn) {
  const Element zero = MakeElement({Tensor::Scalar<int64_t>(0)});
  co_return co_await dataset.Reduce(zero, std::move(fn), Context());
}

// Cancelling the coroutine that awaits a Reduce whose input waits (a
// channel nobody sends to) ends it with Cancelled, once.
CO_TEST(Pipeline, ACancelledReduceEndsWithCancelled) {
  auto channel = std::make_shared<ElementChannel>(TestRuntime().executor(), 2);
  ReduceFunction keep = [](const Element& s,
                           Element) -> absl::StatusOr<Element> { return s; };
  asio::cancellation_signal cancel;
  auto executor = co_await asio::this_coro::executor;
  Started<absl::StatusOr<Element>> reduced(
      executor, ReduceOf(FromChannel(channel), keep), cancel.slot());
  asio::post(executor,
             [&cancel] { cancel.emit(asio::cancellation_type::terminal); });
  absl::StatusOr<Element> r = co_await reduced.Get();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  channel->Close();
}

// ------------------------------------------------------------ combinators

CO_TEST(Pipeline, ConcatenateZipAndEnumerateAsTfData) {
  Dataset both = Dataset::Range(3).Concatenate(Dataset::Range(10, 12));
  CO_ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both.deterministic());
  EXPECT_EQ(ElementSpecString(*both.spec()), "(int64 [])");
  Drained d = co_await Drain(both, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 10, 11}));
  EXPECT_TRUE(d.end.ok()) << d.end;

  using Rows = std::vector<std::vector<int64_t>>;
  Dataset zipped = Dataset::Zip({Dataset::Range(3), Dataset::Range(10, 20)});
  EXPECT_EQ(ElementSpecString(*zipped.spec()), "(int64 [], int64 [])");
  d = co_await Drain(zipped, Context());
  EXPECT_EQ(d.elements, (Rows{{0, 10}, {1, 11}, {2, 12}}));  // the shortest
  EXPECT_TRUE(d.end.ok()) << d.end;

  Dataset numbered = Dataset::Range(10, 13).Enumerate(5);
  EXPECT_EQ(ElementSpecString(*numbered.spec()), "(int64 [], int64 [])");
  d = co_await Drain(numbered, Context());
  EXPECT_EQ(d.elements, (Rows{{5, 10}, {6, 11}, {7, 12}}));

  // Skip continues where an uninterrupted stream would (exact resume).
  auto it = both.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(4);
  CO_ASSERT_TRUE(skipped.ok() && *skipped == 4);
  d = co_await DrainIterator(**it);
  EXPECT_EQ(d.elements, Scalars({11}));
  it = zipped.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  skipped = co_await (*it)->Skip(5);
  CO_ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, 3);
  d = co_await DrainIterator(**it);
  EXPECT_TRUE(d.elements.empty());
  it = numbered.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  skipped = co_await (*it)->Skip(2);
  CO_ASSERT_TRUE(skipped.ok() && *skipped == 2);
  d = co_await DrainIterator(**it);
  EXPECT_EQ(d.elements, (Rows{{7, 12}}));

  // Specs must agree, as tf.data's concatenate requires.
  Dataset floats = Dataset::FromTensorSlices({Tensor::FromVector<float>({1})});
  Dataset mixed = Dataset::Range(3).Concatenate(floats);
  EXPECT_TRUE(absl::IsInvalidArgument(mixed.status())) << mixed.status();
  EXPECT_TRUE(absl::StrContains(mixed.status().message(), "Concatenate"))
      << mixed.status();
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Zip({}).status()));
}

// As tf.data's flat_map: each element's dataset in turn, e.g. a list of
// files into their lines.
CO_TEST(Pipeline, FlatMapYieldsEachElementsDatasetInTurn) {
  Dataset counting = Dataset::Range(1, 4).FlatMap(
      [](const Element& e) { return Dataset::Range(Int(e.tensor(0))); });
  Drained d = co_await Drain(counting, Context());
  EXPECT_EQ(d.elements, Scalars({0, 0, 1, 0, 1, 2}));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_TRUE(counting.deterministic());

  ScratchDir dir;
  const std::string a = dir.path() + "/a.txt", b = dir.path() + "/b.txt";
  WriteFile(a, "a1\na2\n");
  WriteFile(b, "b1\n");
  std::vector<Element> names(2);
  names[0].components.emplace_back(a);
  names[1].components.emplace_back(b);
  Dataset lines = Dataset::FromElements(names).FlatMap(
      [](const Element& e) { return Dataset::TextLines({e.text(0)}); });
  d = co_await Drain(lines, Context());
  EXPECT_EQ(d.texts, (std::vector<std::string>{"a1", "a2", "b1"}));

  // A failed dataset is the stream's error, naming the stage; the stream
  // goes on with the next element.
  Dataset failing = Dataset::Range(3).FlatMap(
      [](const Element& e) {
        if (Int(e.tensor(0)) == 1) {
          return Dataset::Failed(absl::NotFoundError("no shard 1"));
        }
        return Dataset::Range(1);
      },
      {.name = "shards"});
  auto it = failing.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  Drained first = co_await DrainIterator(**it);
  EXPECT_EQ(first.elements, Scalars({0}));
  EXPECT_TRUE(absl::IsNotFound(first.end)) << first.end;
  EXPECT_TRUE(absl::StrContains(first.end.message(), "FlatMap(shards)"))
      << first.end;
  Drained rest = co_await DrainIterator(**it);
  EXPECT_EQ(rest.elements, Scalars({0}));
  EXPECT_TRUE(rest.end.ok()) << rest.end;
}

CO_TEST(Pipeline, ShardGivesEachWorkerItsShare) {
  std::vector<int64_t> all;
  for (int64_t index = 0; index < 3; ++index) {
    Drained d = co_await Drain(Dataset::Range(10).Shard(3, index), Context());
    std::vector<int64_t> expected;
    for (int64_t v = index; v < 10; v += 3) expected.push_back(v);
    EXPECT_EQ(d.elements, Scalars(expected)) << index;
    for (const auto& e : d.elements) all.push_back(e[0]);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(Scalars(all), Scalars({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));

  // Skip counts the shard's elements: 1, 4 skipped, 7 next, then the end.
  auto it = Dataset::Range(10).Shard(3, 1).MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(2);
  CO_ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, 2);
  Drained rest = co_await DrainIterator(**it, 1);
  EXPECT_EQ(rest.elements, Scalars({7}));
  skipped = co_await (*it)->Skip(5);
  CO_ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, 0);

  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Range(4).Shard(0, 0).status()));
  Dataset bad = Dataset::Range(4).Shard(2, 2);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "Shard: index"))
      << bad.status();
}

CO_TEST(Pipeline, UnbatchSplitsElementsIntoTheirRows) {
  Dataset rows = Dataset::Range(7).Batch(3).Unbatch();
  CO_ASSERT_TRUE(rows.ok());
  EXPECT_EQ(ElementSpecString(*rows.spec()), "(int64 [])");
  Drained d = co_await Drain(rows, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(d.end.ok()) << d.end;

  // Every component is split along the same dimension 0.
  Element pair;
  pair.components.emplace_back(
      Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2}));
  pair.components.emplace_back(Tensor::FromVector<int64_t>({7, 8}));
  using Rows = std::vector<std::vector<int64_t>>;
  // (Named first: g++ 12 rejects a braced list inside a co_await.)
  Dataset pairs = Dataset::FromElements({pair}).Unbatch();
  d = co_await Drain(pairs, Context());
  EXPECT_EQ(d.elements, (Rows{{1, 2, 7}, {3, 4, 8}}));

  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Range(3).Unbatch().status()));
  Element ragged;
  ragged.components.emplace_back(Tensor::FromVector<int64_t>({1, 2}));
  ragged.components.emplace_back(Tensor::FromVector<int64_t>({1, 2, 3}));
  Dataset ragged_rows = Dataset::FromElements({ragged}).Unbatch();
  d = co_await Drain(ragged_rows, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(
      d.end.message(), "Component 0 had size 2 but component 1 had size 3."))
      << d.end;
}

// tf.data reads any negative count as -1: Repeat forever, Take all, Skip
// all.
CO_TEST(Pipeline, AnyNegativeCountMeansAllAsInTfData) {
  Drained d = co_await Drain(Dataset::Range(3).Repeat(-2).Take(7), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 0, 1, 2, 0}));
  d = co_await Drain(Dataset::Range(4).Take(-5), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3}));
  EXPECT_TRUE(d.end.ok()) << d.end;
  d = co_await Drain(Dataset::Range(4).Skip(-7), Context());
  EXPECT_TRUE(d.elements.empty());
  EXPECT_TRUE(d.end.ok()) << d.end;
}

TEST(Pipeline, BadArgumentsNameTheStage) {
  Dataset bad = Dataset::Range(10).Batch(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("Batch"), std::string::npos)
      << bad.status();
  // The first bad argument is kept through the rest of the chain.
  EXPECT_EQ(bad.Shuffle(4, 1).Take(2).status(), bad.status());
  EXPECT_FALSE(Dataset::Range(0, 10, 0).ok());
  EXPECT_FALSE(Dataset::Range(10).Prefetch(0).ok());
  EXPECT_FALSE(Dataset::Range(10).Shuffle(0, 1).ok());
}

CO_TEST(Pipeline, FromTensorSlicesAndBatch) {
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                                       TensorShape{5, 2});
  Tensor y = Tensor::FromVector<int32_t>({0, 1, 2, 3, 4});
  std::vector<Tensor> columns{x, y};
  Dataset slices = Dataset::FromTensorSlices(columns);
  CO_ASSERT_TRUE(slices.ok());
  CO_ASSERT_TRUE(slices.spec().has_value());
  EXPECT_EQ(ElementSpecString(*slices.spec()), "(float [2], int32 [])");
  Dataset batches = slices.Batch(2);
  EXPECT_EQ(ElementSpecString(*batches.spec()), "(float [?,2], int32 [?])");
  Drained d = co_await Drain(batches, Context());
  EXPECT_EQ(d.elements,
            (std::vector<std::vector<int64_t>>{
                {1, 2, 3, 4, 0, 1}, {5, 6, 7, 8, 2, 3}, {9, 10, 4}}));
  d = co_await Drain(slices.Batch(2, /*drop_remainder=*/true), Context());
  EXPECT_EQ(d.elements.size(), 2u);
  EXPECT_EQ(ElementSpecString(*slices.Batch(2, true).spec()),
            "(float [2,2], int32 [2])");
}

// Batch over FromTensorSlices is fused (blocks of rows copied at once):
// the same batches as stacking the slices one by one, and the same skips.
CO_TEST(Pipeline, BatchOverTensorSlicesGivesTheStackedBatches) {
  std::vector<float> xs;
  std::vector<int32_t> ys;
  std::vector<Element> one_by_one;
  for (int i = 0; i < 11; ++i) {
    xs.insert(xs.end(), {static_cast<float>(i), static_cast<float>(-i)});
    ys.push_back(10 * i);
    one_by_one.push_back(
        MakeElement({Tensor::FromVector<float>(
                         {static_cast<float>(i), static_cast<float>(-i)}),
                     Tensor::Scalar<int32_t>(10 * i)}));
  }
  Dataset slices = Dataset::FromTensorSlices(
      {Tensor::FromVector<float>(xs, TensorShape{11, 2}),
       Tensor::FromVector<int32_t>(ys)});
  Dataset stacked = Dataset::FromElements(one_by_one);
  for (bool drop : {false, true}) {
    Dataset fused = slices.Batch(4, drop);
    EXPECT_EQ(fused.DebugString(),
              absl::StrCat("FromTensorSlices(11).Batch(4",
                           drop ? ", drop_remainder" : "", ")"));
    Drained got = co_await Drain(fused, Context());
    Drained want = co_await Drain(stacked.Batch(4, drop), Context());
    EXPECT_EQ(got.elements, want.elements) << "drop " << drop;
    EXPECT_EQ(got.elements.size(), drop ? 2u : 3u);
    auto it = fused.MakeIterator(Context());
    CO_ASSERT_TRUE(it.ok());
    absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(1);
    CO_ASSERT_OK(skipped.status());
    EXPECT_EQ(*skipped, 1);
    Drained rest = co_await DrainIterator(**it);
    EXPECT_EQ(rest.elements,
              std::vector<std::vector<int64_t>>(want.elements.begin() + 1,
                                                want.elements.end()));
  }
}

CO_TEST(Pipeline, PaddedBatchPadsToTheLongest) {
  std::vector<Element> elements;
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({1})}));
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({2, 3, 4})}));
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({5, 6})}));
  Dataset padded = Dataset::FromElements(std::move(elements)).PaddedBatch(2);
  Drained d = co_await Drain(padded, Context());
  EXPECT_EQ(d.elements,
            (std::vector<std::vector<int64_t>>{{1, 0, 0, 2, 3, 4}, {5, 6}}));
  EXPECT_TRUE(d.end.ok()) << d.end;
}

// Padding values and padded shapes checked at the batch when the input's
// spec is unknown (a map without output_spec), with TensorFlow's codes
// and sentences; a valid value pads.
CO_TEST(Pipeline, PaddedBatchChecksItsPaddingAtTheBatch) {
  auto unknown_spec = [] {
    std::vector<Element> elements;
    elements.push_back(MakeElement({Tensor::FromVector<int64_t>({1})}));
    elements.push_back(MakeElement({Tensor::FromVector<int64_t>({2, 3, 4})}));
    return Dataset::FromElements(std::move(elements))
        .Map([](Element e) -> absl::StatusOr<Element> { return e; });
  };
  // (Named: g++ 12 mishandles a braced list inside a coroutine's
  // co_await expression.)
  PaddedBatchOptions wrong_dtype;
  wrong_dtype.padded_shapes.push_back(TensorShape{3});
  wrong_dtype.padding_values.push_back(Tensor::Scalar<int32_t>(7));
  PaddedBatchOptions too_short;
  too_short.padded_shapes.push_back(TensorShape{2});
  PaddedBatchOptions sevens;
  sevens.padded_shapes.push_back(TensorShape{3});
  sevens.padding_values.push_back(Tensor::Scalar<int64_t>(7));

  Dataset mismatched = unknown_spec().PaddedBatch(2, wrong_dtype);
  Drained d = co_await Drain(mismatched, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(),
                                "Mismatched type between padding value 0"))
      << d.end;
  Dataset overlong = unknown_spec().PaddedBatch(2, too_short);
  d = co_await Drain(overlong, Context());
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(
      d.end.message(),
      "Attempted to pad to a smaller size than the input element"))
      << d.end;
  Dataset padded = unknown_spec().PaddedBatch(2, sevens);
  d = co_await Drain(padded, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.elements,
            (std::vector<std::vector<int64_t>>{{1, 7, 7, 2, 3, 4}}));
}

// tf.data's message (its batch tests match it), then the batch after it.
CO_TEST(Pipeline, BatchOfDifferentShapesFailsWithTensorFlowsMessage) {
  std::vector<Element> elements;
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({1, 2, 3})}));
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({4, 5, 6})}));
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({7, 8, 9, 10})}));
  elements.push_back(MakeElement({Tensor::FromVector<int64_t>({11, 12, 13})}));
  Dataset batched = Dataset::FromElements(std::move(elements)).Batch(3);
  auto it = batched.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  ElementIterator::Result first = co_await NextOf(**it);
  EXPECT_TRUE(absl::IsInvalidArgument(first.status())) << first.status();
  EXPECT_TRUE(absl::StrContains(
      first.status().message(),
      "Cannot batch tensors with different shapes in component 0. First "
      "element had shape [3] and element 2 had shape [4]."))
      << first.status();
  Drained rest = co_await DrainIterator(**it);
  EXPECT_EQ(rest.elements, (std::vector<std::vector<int64_t>>{{11, 12, 13}}));
}

// tf.data.AUTOTUNE: accepted by Map, Prefetch and Interleave, each picking
// a fixed value; other negative values stay errors.
CO_TEST(Pipeline, AutotuneIsAcceptedWhereTfDataAcceptsIt) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset mapped = TimesTen(Dataset::Range(10), kAutotune);
  CO_ASSERT_OK(mapped.status());
  Dataset prefetched = mapped.Prefetch(kAutotune);
  Drained d = co_await Drain(prefetched, Context(&coordinator));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.elements, Scalars({0, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
  std::vector<Dataset> inputs{Dataset::Range(0, 3), Dataset::Range(10, 13)};
  Dataset interleaved = Dataset::Interleave(inputs, kAutotune, 1);
  CO_ASSERT_OK(interleaved.status());
  d = co_await Drain(interleaved, Context());
  std::multiset<std::vector<int64_t>> got(d.elements.begin(), d.elements.end());
  const auto all = Scalars({0, 1, 2, 10, 11, 12});
  EXPECT_EQ(got, std::multiset<std::vector<int64_t>>(all.begin(), all.end()));
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Range(3).Prefetch(-2).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(TimesTen(Dataset::Range(3), -2).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(Dataset::Interleave(inputs, -2, 1).status()));
}

CO_TEST(Pipeline, ParallelMapKeepsOrderWhenDeterministic) {
  const std::vector<std::vector<int64_t>> expected =
      Scalars({0, 10, 20, 30, 40, 50, 60, 70, 80, 90});
  Drained d = co_await Drain(TimesTen(Dataset::Range(10), 1), Context());
  EXPECT_EQ(d.elements, expected);
  d = co_await Drain(TimesTen(Dataset::Range(10), 4), Context());
  EXPECT_EQ(d.elements, expected);
  // Non-deterministic: each result exactly once, in any order.
  d = co_await Drain(TimesTen(Dataset::Range(10), 4, false), Context());
  std::multiset<std::vector<int64_t>> got(d.elements.begin(), d.elements.end());
  EXPECT_EQ(got, std::multiset<std::vector<int64_t>>(expected.begin(),
                                                     expected.end()));
  EXPECT_FALSE(TimesTen(Dataset::Range(10), 4, false).deterministic());
}

CO_TEST(Pipeline, AsyncMapAndErrorsEndTheStream) {
  AsyncMapFunction plus_one =
      [](Element e) -> asio::awaitable<absl::StatusOr<Element>> {
    std::vector<Tensor> out{Tensor::Scalar<int64_t>(Int(e.tensor(0)) + 1)};
    co_return MakeElement(std::move(out));
  };
  Dataset async_mapped = Dataset::Range(4).Map(plus_one, {.parallelism = 2});
  Drained d = co_await Drain(async_mapped, Context());
  EXPECT_EQ(d.elements, Scalars({1, 2, 3, 4}));
  Dataset failing = Dataset::Range(5).Map(
      [](Element e) -> absl::StatusOr<Element> {
        if (Int(e.tensor(0)) == 3) return absl::InvalidArgumentError("three");
        return e;
      },
      {.parallelism = 2, .name = "picky"});
  d = co_await Drain(failing, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2}));
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("three"), std::string::npos) << d.end;
}

// A Batch takes its elements from Map and Range in bulk (TryTakeInto): the
// results are the same as element by element -- the batches before an
// error, the error, and the error again on every later call, whether the
// elements were taken in bulk (Batch) or one at a time (no Batch).
CO_TEST(Pipeline, AMapErrorEndsTheStreamTakenInBulkOrOneByOne) {
  auto fails_at_six = [](Element e) -> absl::StatusOr<Element> {
    if (Int(e.tensor(0)) == 6) return absl::DataLossError("six");
    return e;
  };
  Dataset mapped = Dataset::Range(20).Map(fails_at_six);
  for (Dataset d : {mapped.Batch(4), mapped}) {
    auto it = d.MakeIterator(Context());
    CO_ASSERT_TRUE(it.ok());
    Drained before = co_await DrainIterator(**it);
    EXPECT_TRUE(absl::IsDataLoss(before.end)) << before.end;
    for (int again = 0; again < 2; ++again) {
      ElementIterator::Result next = co_await NextOf(**it);
      EXPECT_TRUE(absl::IsDataLoss(next.status())) << next.status();
    }
    if (d.DebugString() == mapped.DebugString()) {
      EXPECT_EQ(before.elements, Scalars({0, 1, 2, 3, 4, 5}));
    } else {
      // The batch holding element 6 fails whole.
      EXPECT_EQ(before.elements,
                (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
    }
  }
}

// The same rule with a parallel map (whatever was in flight, and however
// the input's ready elements were grouped into runs) and with a coroutine
// function: the elements before the error, the error, then the error again.
CO_TEST(Pipeline, AMapErrorEndsTheStreamWithAnyParallelismOrFunction) {
  auto fails_at_six = [](Element e) -> absl::StatusOr<Element> {
    if (Int(e.tensor(0)) == 6) return absl::DataLossError("six");
    return e;
  };
  auto async_fails_at_six =
      [](Element e) -> asio::awaitable<absl::StatusOr<Element>> {
    if (Int(e.tensor(0)) == 6) co_return absl::DataLossError("six");
    co_return e;
  };
  const std::vector<Dataset> maps = {
      Dataset::Range(200).Map(fails_at_six, {.parallelism = 4}),
      Dataset::Range(200).Map(fails_at_six, {.parallelism = 2}).Batch(1),
      Dataset::Range(200).Map(async_fails_at_six),
      Dataset::Range(200).Map(async_fails_at_six, {.parallelism = 3}),
  };
  for (const Dataset& d : maps) {
    SCOPED_TRACE(d.DebugString());
    auto it = d.MakeIterator(Context());
    CO_ASSERT_TRUE(it.ok());
    Drained before = co_await DrainIterator(**it);
    EXPECT_TRUE(absl::IsDataLoss(before.end)) << before.end;
    EXPECT_EQ(before.elements, Scalars({0, 1, 2, 3, 4, 5}));
    for (int again = 0; again < 2; ++again) {
      ElementIterator::Result next = co_await NextOf(**it);
      EXPECT_TRUE(absl::IsDataLoss(next.status())) << next.status();
    }
  }
}

CO_TEST(Pipeline, ShuffleIsASeededPermutationReshuffledEachEpoch) {
  Dataset shuffled = Dataset::Range(20).Shuffle(8, /*seed=*/7).Repeat(2);
  Drained a = co_await Drain(shuffled, Context());
  Drained b = co_await Drain(shuffled, Context());
  CO_ASSERT_TRUE(a.elements.size() == 40u);
  EXPECT_EQ(a.elements, b.elements);  // the same seed, the same stream
  std::vector<std::vector<int64_t>> first(a.elements.begin(),
                                          a.elements.begin() + 20);
  std::vector<std::vector<int64_t>> second(a.elements.begin() + 20,
                                           a.elements.end());
  EXPECT_NE(first, second);  // each epoch its own order
  EXPECT_NE(first, Scalars({0,  1,  2,  3,  4,  5,  6,  7,  8,  9,
                            10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  std::multiset<std::vector<int64_t>> seen(first.begin(), first.end());
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_EQ(std::set<std::vector<int64_t>>(first.begin(), first.end()).size(),
            20u);
  // A buffer of n draws only among the next n: element 0 comes within the
  // first 8.
  bool zero_early = false;
  for (int i = 0; i < 8; ++i) zero_early |= first[i] == std::vector<int64_t>{0};
  EXPECT_TRUE(zero_early);
  Dataset other_seed = Dataset::Range(20).Shuffle(8, 8);
  Drained other = co_await Drain(other_seed, Context());
  EXPECT_NE(other.elements, first);
}

// Batch takes a Shuffle's draws in bulk (TryTakeInto, the buffer refilled
// from the input in bulk): the same stream as drawn one element at a time.
CO_TEST(Pipeline, AShuffleBatchedInBulkDrawsAsOneByOne) {
  for (int64_t buffer : {1, 7, 64, 1000}) {
    Dataset shuffled = Dataset::Range(100).Shuffle(buffer, /*seed=*/3);
    Drained one_by_one = co_await Drain(shuffled.Repeat(2), Context());
    Drained batched = co_await Drain(shuffled.Batch(9).Repeat(2), Context());
    std::vector<int64_t> flat;
    for (const auto& batch : batched.elements) {
      flat.insert(flat.end(), batch.begin(), batch.end());
    }
    std::vector<int64_t> expected;
    for (const auto& e : one_by_one.elements) expected.push_back(e[0]);
    EXPECT_EQ(flat, expected) << "buffer " << buffer;
    EXPECT_EQ(batched.elements.size(), 24u) << "buffer " << buffer;
  }
}

CO_TEST(Pipeline, InterleaveVisitsInputsInTurn) {
  std::vector<Dataset> three{Dataset::Range(0, 3), Dataset::Range(10, 12),
                             Dataset::Range(20, 21)};
  Dataset turns = Dataset::Interleave(three, /*cycle_length=*/2,
                                      /*block_length=*/1);
  Drained d = co_await Drain(turns, Context());
  // 0 and 10 alternate; when 10.. ends, 20.. takes its place.
  EXPECT_EQ(d.elements, Scalars({0, 10, 1, 11, 2, 20}));
  std::vector<Dataset> two{Dataset::Range(0, 4), Dataset::Range(10, 14)};
  Dataset blocks = Dataset::Interleave(two, 0, 2);
  d = co_await Drain(blocks, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 10, 11, 2, 3, 12, 13}));
}

// tf.data.Dataset.interleave's documented example: range(1, 6), each x
// repeated 6 times, cycle_length 2, block_length 4. An input that ends
// leaves its slot empty until the cycle comes back to it; only then does
// the next input open there.
CO_TEST(Pipeline, InterleaveFollowsTensorFlowsDocumentedOrder) {
  std::vector<Dataset> inputs;
  for (int64_t x = 1; x <= 5; ++x) {
    inputs.push_back(Dataset::Range(x, x + 1).Repeat(6));
  }
  Dataset interleaved = Dataset::Interleave(inputs, 2, 4);
  Drained d = co_await Drain(interleaved, Context());
  EXPECT_EQ(d.elements, Scalars({1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
  // Lengths 1, 2, 2 with cycle 2, block 1: the third input waits for the
  // cycle to return to the first slot.
  std::vector<Dataset> short_ones{Dataset::Range(0, 1), Dataset::Range(10, 12),
                                  Dataset::Range(20, 22)};
  d = co_await Drain(Dataset::Interleave(short_ones, 2, 1), Context());
  EXPECT_EQ(d.elements, Scalars({0, 10, 11, 20, 21}));
  // More slots than inputs: the empty ones are passed over.
  std::vector<Dataset> two{Dataset::Range(0, 2), Dataset::Range(10, 11)};
  d = co_await Drain(Dataset::Interleave(two, 5, 1), Context());
  EXPECT_EQ(d.elements, Scalars({0, 10, 1}));
}

// tf.data's interleave(map_func): the documented example written as TF
// writes it, range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
// cycle_length=2, block_length=4); each element's dataset is made only
// when it enters the cycle.
CO_TEST(Pipeline, InterleaveOfAFunctionMakesEachDatasetAsItEntersTheCycle) {
  auto calls = std::make_shared<int>(0);
  Dataset interleaved = Dataset::Range(1, 6).Interleave(
      [calls](const Element& e) {
        ++*calls;
        const int64_t x = Int(e.tensor(0));
        return Dataset::Range(x, x + 1).Repeat(6);
      },
      {.cycle_length = 2, .block_length = 4});
  CO_ASSERT_OK(interleaved.status());
  EXPECT_TRUE(interleaved.deterministic());
  auto it = interleaved.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  Drained head = co_await DrainIterator(**it, 5);
  EXPECT_EQ(head.elements, Scalars({1, 1, 1, 1, 2}));
  EXPECT_EQ(*calls, 2);  // 3, 4 and 5 not yet opened
  Drained rest = co_await DrainIterator(**it);
  EXPECT_TRUE(rest.end.ok()) << rest.end;
  EXPECT_EQ(rest.elements, Scalars({2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4,
                                    4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
  EXPECT_EQ(*calls, 5);
}

// Files whose names are lines of a file: the names and each file's lines
// are read on the pool, so both the upstream element and the inputs'
// elements are awaited.
struct NamedFiles {
  ScratchDir dir;
  std::string a = dir.path() + "/a.txt", b = dir.path() + "/b.txt",
              c = dir.path() + "/c.txt", list = dir.path() + "/list";
  NamedFiles() {
    WriteFile(a, "a1\na2\n");
    WriteFile(b, "b1\n");
    WriteFile(c, "c1\nc2\n");
    WriteFile(list, a + "\n" + b + "\n" + c + "\n");
  }
};

CO_TEST(Pipeline, InterleaveOfAFunctionAwaitsItsUpstreamAndItsInputs) {
  NamedFiles files;
  Dataset lines =
      Dataset::TextLines({files.list})
          .Interleave(
              [](const Element& e) { return Dataset::TextLines({e.text(0)}); },
              {.cycle_length = 2});
  Drained d = co_await Drain(lines, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts, (std::vector<std::string>{"a1", "b1", "a2", "c1", "c2"}));
}

// fn's failed dataset is the stream's error, naming the stage and the
// element's origin; the slot then takes the next element.
CO_TEST(Pipeline, InterleaveOfAFunctionNamesAFailedInputAndGoesOn) {
  NamedFiles files;
  Dataset failing =
      Dataset::TextLines({files.list})
          .Interleave(
              [&files](const Element& e) {
                if (e.text(0) == files.b) {
                  return Dataset::Failed(absl::NotFoundError("gone"));
                }
                return Dataset::TextLines({e.text(0)});
              },
              {.cycle_length = 2, .name = "files"});
  auto it = failing.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  Drained first = co_await DrainIterator(**it);
  EXPECT_EQ(first.texts, (std::vector<std::string>{"a1"}));
  EXPECT_TRUE(absl::IsNotFound(first.end)) << first.end;
  EXPECT_TRUE(absl::StrContains(first.end.message(), "Interleave(files)"))
      << first.end;
  EXPECT_TRUE(absl::StrContains(first.end.message(), files.list + ":2"))
      << first.end;
  Drained after = co_await DrainIterator(**it);
  EXPECT_TRUE(after.end.ok()) << after.end;
  EXPECT_EQ(after.texts, (std::vector<std::string>{"c1", "a2", "c2"}));
}

// The arguments tf.data takes: cycle_length >= 1 or AUTOTUNE (its
// default), block_length >= 1.
TEST(Pipeline, InterleaveOfAFunctionTakesTfDatasArguments) {
  auto same = [](const Element& e) { return Dataset::FromElements({e}); };
  EXPECT_TRUE(Dataset::Range(3).Interleave(same).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Range(3).Interleave(same, {.cycle_length = 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Range(3).Interleave(same, {.block_length = 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Range(3).Interleave(FlatMapFunction()).status()));
}

// With num_parallel_calls, the order is the sequential one: tf.data's
// documented example again, its inputs read ahead by a coordinator's tasks.
CO_TEST(Pipeline, InterleaveOfAFunctionInParallelKeepsTheOrder) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset interleaved = Dataset::Range(1, 6).Interleave(
      [](const Element& e) {
        const int64_t x = Int(e.tensor(0));
        return Dataset::Range(x, x + 1).Repeat(6);
      },
      {.cycle_length = 2, .block_length = 4, .num_parallel_calls = 2});
  Drained d = co_await Drain(interleaved, Context(&coordinator));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.elements, Scalars({1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// The two inputs of the read-ahead tests, fn(0) and fn(1): input 0 yields
// 0, then 1 once the test sends into `gate`, then ends; input 1 yields 10,
// 11 and 12 through a map that sends each call's count into `pulled`.
struct GatedInputs {
  using Signals =
      asio::experimental::concurrent_channel<void(error_code, int64_t)>;
  explicit GatedInputs(const asio::any_io_executor& loop)
      : gate(std::make_shared<Signals>(loop, 1)),
        pulled(std::make_shared<Signals>(loop, 16)) {
    auto held_pulls = std::make_shared<std::atomic<int64_t>>(0);
    fn = [gate = gate, pulled = pulled, held_pulls](const Element& e) {
      if (Int(e.tensor(0)) == 0) {
        return FromGenerator(
            [gate, held_pulls]() -> asio::awaitable<std::optional<Element>> {
              const int64_t n = (*held_pulls)++;
              if (n == 2) co_return std::nullopt;
              if (n == 1) co_await gate->async_receive(asio::use_awaitable);
              std::vector<Tensor> t{Tensor::Scalar<int64_t>(n)};
              co_return MakeElement(std::move(t));
            });
      }
      auto count = std::make_shared<std::atomic<int64_t>>(0);
      return Dataset::Range(10, 13).Map(
          [pulled, count](Element x) -> absl::StatusOr<Element> {
            pulled->try_send(error_code(), ++*count);
            return x;
          },
          {.output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)}});
    };
  }
  // Until input 1's map ran for all three elements (so 10 and 11 are in
  // its buffer, or taken), bounded by CO_TEST's limit.
  asio::awaitable<void> AwaitInputOnePulled() {
    int64_t seen = 0;
    while (seen < 3) {
      seen = co_await pulled->async_receive(asio::use_awaitable);
    }
  }
  void OpenGate() { gate->try_send(error_code(), 0); }

  std::shared_ptr<Signals> gate;
  std::shared_ptr<Signals> pulled;
  FlatMapFunction fn;
};

// While the visit waits on one input, the other open input is read ahead:
// input 0 holds its second element until the test opens a gate, and the
// test waits (bounded by CO_TEST's limit) for input 1's later elements to
// be pulled first. Read in turn, they would be pulled only after the gate.
CO_TEST(Pipeline, InterleaveOfAFunctionInParallelReadsTheOpenInputsAhead) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  GatedInputs inputs(loop);
  auto it =
      Dataset::Range(2)
          .Interleave(inputs.fn, {.cycle_length = 2, .num_parallel_calls = 2})
          .MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  Drained head = co_await DrainIterator(**it, 2);
  EXPECT_EQ(head.elements, Scalars({0, 10}));
  // Input 1's three elements are pulled while input 0 waits at its gate.
  co_await inputs.AwaitInputOnePulled();
  inputs.OpenGate();
  Drained rest = co_await DrainIterator(**it);
  EXPECT_TRUE(rest.end.ok()) << rest.end;
  EXPECT_EQ(rest.elements, Scalars({1, 11, 12}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// deterministic = false (tf.data's deterministic=False): while input 0
// waits at its gate (after its first element), every element of input 1
// comes, in its order, without the test waiting for it to be pulled: the
// visit takes what is ready and otherwise waits for whichever input gives
// first. Waiting on the visited input, it would hang at the gate (and the
// test fail on its time limit). Every element comes once.
CO_TEST(Pipeline, InterleaveOfAFunctionNotDeterministicTakesWhatIsReady) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  GatedInputs inputs(loop);
  Dataset sloppy = Dataset::Range(2).Interleave(
      inputs.fn,
      {.cycle_length = 2, .num_parallel_calls = 2, .deterministic = false});
  EXPECT_FALSE(sloppy.deterministic());
  auto it = sloppy.MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  Drained before_gate = co_await DrainIterator(**it, 4);
  CO_ASSERT_TRUE(before_gate.elements.size() == 4u);
  std::vector<std::vector<int64_t>> from_input_one;
  for (const std::vector<int64_t>& e : before_gate.elements) {
    if (e[0] >= 10) from_input_one.push_back(e);
  }
  EXPECT_EQ(from_input_one, Scalars({10, 11, 12}));
  std::sort(before_gate.elements.begin(), before_gate.elements.end());
  EXPECT_EQ(before_gate.elements, Scalars({0, 10, 11, 12}));
  inputs.OpenGate();
  Drained rest = co_await DrainIterator(**it);
  EXPECT_TRUE(rest.end.ok()) << rest.end;
  EXPECT_EQ(rest.elements, Scalars({1}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// deterministic = false, nothing ready: the visit waits for whichever
// input gives first. Input 0 (visited first) and input 1 each hold their
// first element behind a gate of their own; only input 1's opens, and its
// element must come while input 0 still waits (waiting on the visited input
// alone, the test would fail on its time limit). Input 1 is opened for the
// wait although the visit never reached its slot.
CO_TEST(Pipeline, InterleaveNotDeterministicWaitsForWhicheverInputGivesFirst) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  using Gate = asio::experimental::concurrent_channel<void(error_code, int)>;
  std::vector<std::shared_ptr<Gate>> gates{std::make_shared<Gate>(loop, 1),
                                           std::make_shared<Gate>(loop, 1)};
  FlatMapFunction fn = [gates](const Element& e) {
    const int64_t input = Int(e.tensor(0));
    auto made = std::make_shared<int64_t>(0);
    std::shared_ptr<Gate> gate = gates[input];
    return FromGenerator(
        [gate, made, input]() -> asio::awaitable<std::optional<Element>> {
          const int64_t n = (*made)++;
          if (n == 2) co_return std::nullopt;
          if (n == 0) co_await gate->async_receive(asio::use_awaitable);
          std::vector<Tensor> t{Tensor::Scalar<int64_t>(100 * input + n)};
          co_return MakeElement(std::move(t));
        });
  };
  InterleaveOptions options{
      .cycle_length = 2, .num_parallel_calls = 2, .deterministic = false};
  auto it = Dataset::Range(2)
                .Interleave(fn, options)
                .MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  Started<ElementIterator::Result> first(loop, NextOfPtr(it->get()));
  gates[1]->try_send(error_code(), 0);
  ElementIterator::Result got = co_await first.Get();
  CO_ASSERT_OK(got.status());
  CO_ASSERT_TRUE(got->has_value());
  EXPECT_EQ(Int((*got)->tensor(0)), 100);
  gates[0]->try_send(error_code(), 0);
  Drained rest = co_await DrainIterator(**it);
  EXPECT_TRUE(rest.end.ok()) << rest.end;
  std::sort(rest.elements.begin(), rest.elements.end());
  EXPECT_EQ(rest.elements, Scalars({0, 1, 101}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// An input's error, read ahead, comes after the input's elements before it
// and, as a Prefetch's, stops the coordinator.
CO_TEST(Pipeline, InterleaveOfAFunctionInParallelDeliversAnInputsError) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  FlatMapFunction fn = [](const Element& e) {
    const int64_t x = Int(e.tensor(0));
    return Dataset::Range(10 * x, 10 * x + 3)
        .Map(
            [](Element y) -> absl::StatusOr<Element> {
              if (Int(y.tensor(0)) == 12) {
                return absl::DataLossError("row 12 is corrupt");
              }
              return y;
            },
            {.output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)}});
  };
  // Named first: a braced argument inside a co_await expression is freed
  // wrongly by g++ 12 (docs/async_pitfalls.md, items 8 and 9).
  Dataset interleaved = Dataset::Range(2).Interleave(
      fn, {.cycle_length = 2, .block_length = 3, .num_parallel_calls = 2});
  Drained d = co_await Drain(interleaved, Context(&coordinator));
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 10, 11}));
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(), "row 12")) << d.end;
  absl::Status joined =
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(absl::IsDataLoss(joined)) << joined;
}

// num_parallel_calls as tf.data takes it: >= 1 or AUTOTUNE (then
// cycle_length), at most cycle_length; above 1 it needs a coordinator.
CO_TEST(Pipeline, InterleaveOfAFunctionInParallelTakesTfDatasArguments) {
  auto same = [](const Element& e) { return Dataset::FromElements({e}); };
  EXPECT_TRUE(Dataset::Range(3)
                  .Interleave(same, {.cycle_length = 2,
                                     .num_parallel_calls = kAutotune})
                  .ok());
  Dataset too_many = Dataset::Range(3).Interleave(
      same, {.cycle_length = 2, .num_parallel_calls = 3});
  EXPECT_TRUE(absl::IsInvalidArgument(too_many.status()));
  EXPECT_TRUE(
      absl::StrContains(too_many.status().message(), "num_parallel_calls"))
      << too_many.status();
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Range(3).Interleave(same, {.num_parallel_calls = 0}).status()));
  Dataset parallel = Dataset::Range(3).Interleave(
      same, {.cycle_length = 2, .num_parallel_calls = 2, .name = "files"});
  Drained without_coordinator = co_await Drain(parallel, Context());
  EXPECT_TRUE(absl::IsFailedPrecondition(without_coordinator.end))
      << without_coordinator.end;
  EXPECT_TRUE(
      absl::StrContains(without_coordinator.end.message(), "Interleave(files)"))
      << without_coordinator.end;
}

// tf.data's choose_from_datasets, its documented example in int64s: three
// endless inputs, the choices range(3).repeat(3).
CO_TEST(Pipeline, ChooseFromDatasetsTakesEachElementFromTheChosenInput) {
  std::vector<Dataset> inputs{Dataset::Range(0, 1).Repeat(),
                              Dataset::Range(1, 2).Repeat(),
                              Dataset::Range(2, 3).Repeat()};
  Dataset chosen =
      Dataset::ChooseFromDatasets(inputs, Dataset::Range(3).Repeat(3));
  CO_ASSERT_OK(chosen.status());
  EXPECT_TRUE(chosen.deterministic());
  Drained d = co_await Drain(chosen, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

// An input that ends: the stream ends there (stop_on_empty_dataset, the
// default), or the choices of it are passed over.
CO_TEST(Pipeline, ChooseFromDatasetsStopsOnAnEmptyInputOrPassesItOver) {
  std::vector<Dataset> inputs{Dataset::Range(0, 2), Dataset::Range(10, 13)};
  Dataset choices = Dataset::Range(2).Repeat(3);  // 0 1 0 1 0 1
  Drained stopped =
      co_await Drain(Dataset::ChooseFromDatasets(inputs, choices), Context());
  EXPECT_EQ(stopped.elements, Scalars({0, 10, 1, 11}));
  Dataset going = Dataset::ChooseFromDatasets(inputs, choices,
                                              /*stop_on_empty_dataset=*/false);
  Drained passed_over = co_await Drain(going, Context());
  EXPECT_EQ(passed_over.elements, Scalars({0, 10, 1, 11, 12}));
  EXPECT_TRUE(passed_over.end.ok()) << passed_over.end;
}

CO_TEST(Pipeline, ChooseFromDatasetsRefusesABadChoiceNamingIt) {
  std::vector<Dataset> inputs{Dataset::Range(0, 9), Dataset::Range(10, 19),
                              Dataset::Range(20, 29)};
  Drained out_of_range = co_await Drain(
      Dataset::ChooseFromDatasets(inputs, Dataset::Range(5)), Context());
  EXPECT_EQ(out_of_range.elements, Scalars({0, 10, 20}));
  EXPECT_TRUE(absl::IsInvalidArgument(out_of_range.end)) << out_of_range.end;
  EXPECT_TRUE(absl::StrContains(out_of_range.end.message(),
                                "Selector index out of range: 3 >= 3"))
      << out_of_range.end;
  std::vector<Element> words(2);
  words[0].components.emplace_back(std::string("zero"));
  words[1].components.emplace_back(std::string("one"));
  Dataset texts = Dataset::ChooseFromDatasets(
      inputs, Dataset::FromElements(std::move(words)));
  EXPECT_TRUE(absl::IsInvalidArgument(texts.status()));
  EXPECT_TRUE(absl::StrContains(texts.status().message(), "int64 scalars"))
      << texts.status();
}

// tf.data's sample_from_datasets: every element of every input once, each
// input's in its order, picked by weight; the same stream for the same
// seed.
CO_TEST(Pipeline, SampleFromDatasetsPicksByWeightWithItsSeed) {
  std::vector<Dataset> inputs{Dataset::Range(0, 100),
                              Dataset::Range(1000, 1100)};
  Dataset sampled =
      Dataset::SampleFromDatasets(inputs, {.weights = {0.75, 0.25}, .seed = 3});
  CO_ASSERT_OK(sampled.status());
  EXPECT_TRUE(sampled.deterministic());
  Drained d = co_await Drain(sampled, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  CO_ASSERT_TRUE(d.elements.size() == 200u);
  std::vector<int64_t> low, high;
  int64_t low_in_first_100 = 0;
  for (size_t i = 0; i < d.elements.size(); ++i) {
    const int64_t v = d.elements[i][0];
    (v < 1000 ? low : high).push_back(v);
    if (i < 100 && v < 1000) ++low_in_first_100;
  }
  std::vector<int64_t> want_low(100), want_high(100);
  std::iota(want_low.begin(), want_low.end(), 0);
  std::iota(want_high.begin(), want_high.end(), 1000);
  EXPECT_EQ(low, want_low);
  EXPECT_EQ(high, want_high);
  // 75 expected of the first 100 picks (a binomial's sd is 4.3).
  EXPECT_GE(low_in_first_100, 60);
  EXPECT_LE(low_in_first_100, 90);
  Dataset same_seed =
      Dataset::SampleFromDatasets(inputs, {.weights = {0.75, 0.25}, .seed = 3});
  Drained again = co_await Drain(same_seed, Context());
  EXPECT_EQ(again.elements, d.elements);
  EXPECT_FALSE(Dataset::SampleFromDatasets(inputs).deterministic());
}

// stop_on_empty_dataset ends the stream at the first pick of an ended
// input; without it, the others go on, and inputs that weigh 0 are never
// picked.
CO_TEST(Pipeline, SampleFromDatasetsOnAnEndedInput) {
  std::vector<Dataset> inputs{Dataset::Range(0, 2), Dataset::Range(10, 1000)};
  Dataset stopping = Dataset::SampleFromDatasets(
      inputs, {.seed = 1, .stop_on_empty_dataset = true});
  Drained stopped = co_await Drain(stopping, Context());
  CO_ASSERT_TRUE(stopped.elements.size() >= 2u);
  EXPECT_LT(stopped.elements.size(), 992u);
  Dataset going = Dataset::SampleFromDatasets(inputs, {.seed = 1});
  Drained all = co_await Drain(going, Context());
  EXPECT_EQ(all.elements.size(), 992u);
  std::vector<Dataset> weighed{Dataset::Range(0, 3), Dataset::Range(10, 13)};
  Dataset only_first =
      Dataset::SampleFromDatasets(weighed, {.weights = {1, 0}, .seed = 1});
  Drained first = co_await Drain(only_first, Context());
  EXPECT_EQ(first.elements, Scalars({0, 1, 2}));
  EXPECT_TRUE(first.end.ok()) << first.end;
}

// The same picks each pass of a Repeat, as tf.data's default, or others
// with rerandomize_each_iteration; bad weights are refused naming them.
CO_TEST(Pipeline, SampleFromDatasetsAcrossPassesAndItsArguments) {
  std::vector<Dataset> inputs{Dataset::Range(0, 10), Dataset::Range(10, 20)};
  auto passes = [](const Drained& d) {
    const std::vector<std::vector<int64_t>> first(d.elements.begin(),
                                                  d.elements.begin() + 20);
    const std::vector<std::vector<int64_t>> second(d.elements.begin() + 20,
                                                   d.elements.end());
    return first == second;
  };
  Dataset same = Dataset::SampleFromDatasets(inputs, {.seed = 5}).Repeat(2);
  Drained same_passes = co_await Drain(same, Context());
  CO_ASSERT_TRUE(same_passes.elements.size() == 40u);
  EXPECT_TRUE(passes(same_passes));
  Dataset other = Dataset::SampleFromDatasets(
                      inputs, {.seed = 5, .rerandomize_each_iteration = true})
                      .Repeat(2);
  Drained other_passes = co_await Drain(other, Context());
  CO_ASSERT_TRUE(other_passes.elements.size() == 40u);
  EXPECT_FALSE(passes(other_passes));

  Dataset negative =
      Dataset::SampleFromDatasets(inputs, {.weights = {1, -1}, .seed = 1});
  EXPECT_TRUE(absl::IsInvalidArgument(negative.status()));
  EXPECT_TRUE(absl::StrContains(negative.status().message(), "weights[1]"))
      << negative.status();
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::SampleFromDatasets(inputs, {.weights = {1}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::SampleFromDatasets(inputs, {.weights = {0, 0}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::SampleFromDatasets({}, {.seed = 1}).status()));
}

// ---------------------------------------------------------- file sources

// The names a dataset of file names yields.
asio::awaitable<std::vector<std::string>> Names(Dataset names,
                                                IteratorContext context) {
  Drained d = co_await Drain(std::move(names), std::move(context));
  EXPECT_TRUE(d.end.ok()) << d.end;
  co_return d.texts;
}

// tf.data's list_files: every match of the patterns, sorted (shuffle=False),
// listed when the iterator needs them.
CO_TEST(Pipeline, ListFilesYieldsTheMatchesOfEveryPatternSorted) {
  ScratchDir dir;
  WriteFile(dir / "b.csv", "x\n");
  WriteFile(dir / "a.csv", "x\n");
  WriteFile(dir / "c.txt", "x\n");
  WriteFile(dir / "notes.md", "x\n");
  std::filesystem::create_directory(dir / "sub");
  WriteFile(dir / "sub/d.csv", "x\n");
  Dataset csv = Dataset::ListFiles({dir / "*.csv"}, {.shuffle = false});
  EXPECT_TRUE(csv.deterministic());
  EXPECT_EQ(csv.spec(), ElementSpec{ComponentSpec::String()});
  std::vector<std::string> listed = co_await Names(csv, Context());
  EXPECT_EQ(listed, (std::vector<std::string>{dir / "a.csv", dir / "b.csv"}));
  // Several patterns: all their matches sorted together; any component
  // may hold a wildcard.
  Dataset two =
      Dataset::ListFiles({dir / "*.txt", dir / "*/*.csv"}, {.shuffle = false});
  listed = co_await Names(two, Context());
  EXPECT_EQ(listed,
            (std::vector<std::string>{dir / "c.txt", dir / "sub/d.csv"}));
  // A file made after the dataset is listed by its next iterator.
  WriteFile(dir / "0.csv", "x\n");
  listed = co_await Names(csv, Context());
  EXPECT_EQ(listed, (std::vector<std::string>{dir / "0.csv", dir / "a.csv",
                                              dir / "b.csv"}));
}

// Shuffled with a seed: a permutation of the matches, the same for the
// same seed, another for each pass of a Repeat; unseeded, not deterministic.
CO_TEST(Pipeline, ListFilesShufflesWithItsSeedEachPassAnew) {
  ScratchDir dir;
  std::vector<std::string> sorted;
  for (int i = 0; i < 12; ++i) {
    sorted.push_back(dir / absl::StrCat("part-", 10 + i, ".csv"));
    WriteFile(sorted.back(), "x\n");
  }
  Dataset shuffled = Dataset::ListFiles({dir / "part-*.csv"}, {.seed = 7});
  EXPECT_TRUE(shuffled.deterministic());
  std::vector<std::string> first = co_await Names(shuffled, Context());
  EXPECT_NE(first, sorted);
  std::vector<std::string> as_set = first;
  std::sort(as_set.begin(), as_set.end());
  EXPECT_EQ(as_set, sorted);
  Dataset same_seed = Dataset::ListFiles({dir / "part-*.csv"}, {.seed = 7});
  std::vector<std::string> again = co_await Names(same_seed, Context());
  EXPECT_EQ(again, first);
  std::vector<std::string> two_passes =
      co_await Names(shuffled.Repeat(2), Context());
  CO_ASSERT_TRUE(two_passes.size() == 24u);
  const std::vector<std::string> pass1(two_passes.begin(),
                                       two_passes.begin() + 12);
  const std::vector<std::string> pass2(two_passes.begin() + 12,
                                       two_passes.end());
  EXPECT_NE(pass1, pass2);
  EXPECT_FALSE(Dataset::ListFiles({dir / "part-*.csv"}).deterministic());
}

// No match is tf.data's InvalidArgument naming the patterns; bad arguments
// are refused when the chain is built.
CO_TEST(Pipeline, ListFilesWithoutAMatchNamesThePatterns) {
  ScratchDir dir;
  Dataset unmatched = Dataset::ListFiles({dir / "*.csv", dir / "*.gz"});
  Drained none = co_await Drain(unmatched, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(none.end)) << none.end;
  EXPECT_TRUE(absl::StrContains(
      none.end.message(), absl::StrCat("No files matched pattern: ",
                                       dir / "*.csv", ", ", dir / "*.gz")))
      << none.end;
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::ListFiles({}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::ListFiles({""}).status()));
}

// tf.data's usual reading of many files: list_files, then a parallel
// interleave of their lines.
CO_TEST(Pipeline, ListFilesThenAParallelInterleaveReadsEveryLine) {
  ScratchDir dir;
  WriteFile(dir / "a.txt", "a1\na2\n");
  WriteGzip(dir / "b.txt.gz", "b1\nb2\nb3\n");
  WriteFile(dir / "c.txt", "c1\n");
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset lines =
      Dataset::ListFiles({dir / "*.txt*"}, {.shuffle = false})
          .Interleave(
              [](const Element& e) { return Dataset::TextLines({e.text(0)}); },
              {.cycle_length = 2, .num_parallel_calls = 2});
  std::vector<std::string> texts = co_await Names(lines, Context(&coordinator));
  EXPECT_EQ(texts,
            (std::vector<std::string>{"a1", "b1", "a2", "b2", "b3", "c1"}));
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// tf.data's TextLineDataset(files, num_parallel_reads=2): the files a line
// at a time in Interleave's order, two open and read ahead at once.
CO_TEST(Pipeline, TextLinesWithParallelReadsInterleavesTheFilesByLine) {
  ScratchDir dir;
  WriteFile(dir / "a.txt", "a1\na2\na3\n");
  WriteGzip(dir / "b.gz", "b1\nb2\n");
  WriteFile(dir / "c.txt", "c1\n");
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset lines = Dataset::TextLines(
      {dir / "a.txt", dir / "b.gz", dir / "c.txt"}, {.num_parallel_reads = 2});
  CO_ASSERT_OK(lines.status());
  EXPECT_TRUE(lines.deterministic());
  EXPECT_EQ(lines.spec(), ElementSpec{ComponentSpec::String()});
  Drained d = co_await Drain(lines, Context(&coordinator));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts,
            (std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "c1"}));
  CO_ASSERT_TRUE(d.origins.size() == 6u);
  EXPECT_EQ(d.origins[1], dir / "b.gz:1");
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));

  // Reading ahead needs a coordinator; one file is read as it is.
  Drained without = co_await Drain(lines, Context());
  EXPECT_TRUE(absl::IsFailedPrecondition(without.end)) << without.end;
  Dataset one_file =
      Dataset::TextLines({dir / "c.txt"}, {.num_parallel_reads = 4});
  Drained one = co_await Drain(one_file, Context());
  EXPECT_EQ(one.texts, std::vector<std::string>{"c1"});
  EXPECT_TRUE(one.end.ok()) << one.end;
  Dataset none = Dataset::TextLines({dir / "c.txt"}, {.num_parallel_reads = 0});
  EXPECT_TRUE(absl::IsInvalidArgument(none.status()));
  EXPECT_TRUE(absl::StrContains(none.status().message(), "num_parallel_reads"))
      << none.status();
}

CO_TEST(Pipeline, TextLinesReadsPlainAndGzipInChunks) {
  ScratchDir dir;
  WriteFile(dir / "a.txt", "alpha\r\nbeta\n\ngamma");
  WriteGzip(dir / "b.gz", "delta\nepsilon\n");
  // Chunks of 3 bytes: every line spans chunks.
  Dataset lines =
      Dataset::TextLines({dir / "a.txt", dir / "b.gz"}, {.chunk_bytes = 3});
  Drained d = co_await Drain(lines, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts, (std::vector<std::string>{"alpha", "beta", "", "gamma",
                                               "delta", "epsilon"}));
  CO_ASSERT_TRUE(d.origins.size() == 6u);
  EXPECT_EQ(d.origins[3], dir / "a.txt:4");
  EXPECT_EQ(d.origins[5], dir / "b.gz:2");
}

CO_TEST(Pipeline, TextLinesErrorsNameTheFileAndLine) {
  ScratchDir dir;
  Dataset missing = Dataset::TextLines({dir / "missing.txt"});
  Drained d = co_await Drain(missing, Context());
  EXPECT_TRUE(absl::IsNotFound(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("missing.txt"), std::string::npos) << d.end;
  WriteFile(dir / "long.txt", "ok\n" + std::string(100, 'x') + "\n");
  Dataset long_lines =
      Dataset::TextLines({dir / "long.txt"}, {.max_line_bytes = 50});
  d = co_await Drain(long_lines, Context());
  EXPECT_EQ(d.texts, std::vector<std::string>{"ok"});
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("long.txt:2"), std::string::npos) << d.end;
  // A corrupt gzip stream is DataLoss.
  std::string packed;
  {
    WriteGzip(dir / "c.gz", std::string(4000, 'y') + "\n");
    packed = ReadBytes(dir / "c.gz");
  }
  WriteFile(dir / "cut.gz", packed.substr(0, packed.size() / 2));
  Dataset cut = Dataset::TextLines({dir / "cut.gz"});
  d = co_await Drain(cut, Context());
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
}

// Writes a.tfrecord (plain: an empty record, one of 1,000 bytes, one with
// a NUL) and b.gz (gzip) into `dir`; returns their records in order.
std::vector<std::string> WriteRecordFiles(const ScratchDir& dir) {
  using testing::TfRecordFrame;
  std::vector<std::string> a{"alpha", "", std::string(1000, 'L'),
                             std::string("nul\0byte", 8)};
  std::vector<std::string> b{"delta", "epsilon"};
  std::string bytes;
  for (const std::string& record : a) bytes += TfRecordFrame(record);
  WriteFile(dir / "a.tfrecord", bytes);
  bytes.clear();
  for (const std::string& record : b) bytes += TfRecordFrame(record);
  WriteGzip(dir / "b.gz", bytes);
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

CO_TEST(Pipeline, TFRecordsReadsPlainAndGzipRecordsAcrossChunks) {
  ScratchDir dir;
  const std::vector<std::string> want = WriteRecordFiles(dir);
  // Chunks of 5 bytes: every record spans chunks, one is 200 chunks long.
  Dataset records = Dataset::TFRecords({dir / "a.tfrecord", dir / "b.gz"},
                                       {.chunk_bytes = 5});
  CO_ASSERT_OK(records.status());
  EXPECT_TRUE(records.deterministic());
  EXPECT_EQ(records.spec(), ElementSpec{ComponentSpec::String()});
  for (int pass = 0; pass < 2; ++pass) {  // each iterator reads anew
    Drained d = co_await Drain(records, Context());
    EXPECT_TRUE(d.end.ok()) << d.end;
    EXPECT_EQ(d.texts, want);
    CO_ASSERT_TRUE(d.origins.size() == 6u);
    EXPECT_EQ(d.origins[2], dir / "a.tfrecord: record 3");
    EXPECT_EQ(d.origins[5], dir / "b.gz: record 2");
  }
  // An empty file has no records.
  WriteFile(dir / "empty.tfrecord", "");
  Dataset no_records = Dataset::TFRecords({dir / "empty.tfrecord"});
  Drained empty = co_await Drain(no_records, Context());
  EXPECT_TRUE(empty.end.ok()) << empty.end;
  EXPECT_TRUE(empty.texts.empty());
}

CO_TEST(Pipeline, TFRecordsReadsTheEventFilesTheLibraryWrites) {
  ScratchDir dir;
  std::string path;
  {
    auto writer = SummaryWriter::Create(dir.path());
    CO_ASSERT_OK(writer.status());
    (*writer)->AddScalar("loss", 0.5f, 1);
    (*writer)->AddScalar("loss", 0.25f, 2);
    CO_ASSERT_OK((*writer)->Flush());
    path = (*writer)->path();
  }
  Dataset events = Dataset::TFRecords({path});
  Drained d = co_await Drain(events, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  // The file's version event, then the two summaries: the records the
  // independent parser finds.
  EXPECT_EQ(d.texts, testing::ParseRecords(testing::ReadFileBytes(path)));
  EXPECT_EQ(d.texts.size(), 3u);
}

CO_TEST(Pipeline, TFRecordsErrorsNameTheFileRecordAndOffset) {
  ScratchDir dir;
  using testing::TfRecordFrame;
  // The dataset of one file, named before any co_await: g++ 12 frees
  // braced temporaries inside a co_await expression too early
  // (docs/async_pitfalls.md, item 8).
  auto records = [&](const std::string& name, TFRecordsOptions options = {}) {
    return Dataset::TFRecords({dir / name}, options);
  };
  auto mentions = [](const absl::Status& s, const std::string& text) {
    return absl::StrContains(s.message(), text);
  };
  Dataset dataset = records("missing.tfrecord");
  Drained d = co_await Drain(dataset, Context());
  EXPECT_TRUE(absl::IsNotFound(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end, "missing.tfrecord")) << d.end;

  // Record 2 starts at byte 17 (12 + 1 + 4): its data's CRC is damaged.
  std::string second = TfRecordFrame("bb");
  second[12] = 'X';
  WriteFile(dir / "data_crc.tfrecord", TfRecordFrame("a") + second);
  dataset = records("data_crc.tfrecord");
  d = co_await Drain(dataset, Context());
  EXPECT_EQ(d.texts, std::vector<std::string>{"a"});
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end, dir / "data_crc.tfrecord: record 2 at byte "
                                    "offset 17: data CRC mismatch"))
      << d.end;

  std::string bad_length = TfRecordFrame("cc");
  bad_length[0] = 9;  // the length no longer matches its CRC
  WriteFile(dir / "length_crc.tfrecord", bad_length);
  dataset = records("length_crc.tfrecord");
  d = co_await Drain(dataset, Context());
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end, "record 1 at byte offset 0: length CRC"))
      << d.end;

  // Cut inside record 2, in its data and in its header.
  const std::string two = TfRecordFrame("first") + TfRecordFrame("second");
  WriteFile(dir / "cut.tfrecord", two.substr(0, two.size() - 6));
  dataset = records("cut.tfrecord", {.chunk_bytes = 4});
  d = co_await Drain(dataset, Context());
  EXPECT_EQ(d.texts, std::vector<std::string>{"first"});
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end,
                       "record 2 at byte offset 21: truncated record: "
                       "the file ends after 16 of its 22 bytes"))
      << d.end;
  WriteFile(dir / "cut_header.tfrecord", two.substr(0, 21 + 5));
  dataset = records("cut_header.tfrecord");
  d = co_await Drain(dataset, Context());
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end, "the file ends after 5 of its 12 bytes"))
      << d.end;

  // A length above the limit is refused before its data is awaited.
  WriteFile(dir / "big.tfrecord", TfRecordFrame(std::string(11, 'b')));
  dataset = records("big.tfrecord", {.max_record_bytes = 10});
  d = co_await Drain(dataset, Context());
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_TRUE(mentions(d.end, "record length 11 exceeds the limit of 10"))
      << d.end;

  // After an error the iterator stays stopped at it.
  auto it =
      Dataset::TFRecords({dir / "data_crc.tfrecord"}).MakeIterator(Context());
  CO_ASSERT_OK(it.status());
  Drained first = co_await DrainIterator(**it);
  EXPECT_TRUE(absl::IsDataLoss(first.end)) << first.end;
  ElementIterator::Result again = co_await NextOf(**it);
  EXPECT_EQ(again.status(), first.end);

  // Options and file lists are checked when the dataset is made.
  for (const Dataset& bad :
       {Dataset::TFRecords({}), Dataset::TFRecords({""}),
        Dataset::TFRecords({dir / "a"}, {.chunk_bytes = 0}),
        Dataset::TFRecords({dir / "a"}, {.max_record_bytes = -1}),
        Dataset::TFRecords({dir / "a"}, {.num_parallel_reads = 0})}) {
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
    EXPECT_TRUE(mentions(bad.status(), "TFRecords: ")) << bad.status();
  }
}

// A Next() cancelled while its file is being opened (a FIFO with no
// writer: the open blocks on the pool) ends at once with Cancelled naming
// the file; the blocked open finishes on the pool once released.
CO_TEST(Pipeline, TFRecordsNextCancelledWhileItsFileOpensIsCancelled) {
  ScratchDir dir;
  testing::StalledInput input(dir, "stalled.tfrecord");
  Dataset records = Dataset::TFRecords({input.path()});
  absl::Status status = co_await StatusOfACancelledNext(records);
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), input.path())) << status;
  input.Release();
}

CO_TEST(Pipeline, TFRecordsWithParallelReadsInterleavesTheFilesByRecord) {
  ScratchDir dir;
  using testing::TfRecordFrame;
  WriteFile(dir / "a.tfrecord",
            TfRecordFrame("a1") + TfRecordFrame("a2") + TfRecordFrame("a3"));
  WriteGzip(dir / "b.gz", TfRecordFrame("b1") + TfRecordFrame("b2"));
  WriteFile(dir / "c.tfrecord", TfRecordFrame("c1"));
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset records =
      Dataset::TFRecords({dir / "a.tfrecord", dir / "b.gz", dir / "c.tfrecord"},
                         {.num_parallel_reads = 2});
  CO_ASSERT_OK(records.status());
  EXPECT_TRUE(records.deterministic());
  EXPECT_EQ(records.spec(), ElementSpec{ComponentSpec::String()});
  Drained d = co_await Drain(records, Context(&coordinator));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts,
            (std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "c1"}));
  CO_ASSERT_TRUE(d.origins.size() == 6u);
  EXPECT_EQ(d.origins[3], dir / "b.gz: record 2");
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// tf.data's compression_type, and detection that never misreads a plain
// file: one whose first record is 35,615 bytes long starts with gzip's
// magic number (its length's low bytes), and is plain by its header's CRC.
CO_TEST(Pipeline, TFRecordsReadTheirCompressionAndDetectGzipSafely) {
  ScratchDir dir;
  using testing::TfRecordFrame;
  const std::vector<std::string> want{std::string(35615, 'r'), "second"};
  const std::string bytes = TfRecordFrame(want[0]) + TfRecordFrame(want[1]);
  CO_ASSERT_TRUE(bytes.substr(0, 2) == "\x1f\x8b");
  WriteFile(dir / "plain.tfrecord", bytes);
  WriteGzip(dir / "gzip.tfrecord", bytes);
  WriteFile(dir / "zlib.tfrecord", testing::ZlibBytes(bytes));
  struct Case {
    std::string file;
    FileCompression compression;
    bool ok;
  };
  const std::vector<Case> cases{
      {"plain.tfrecord", FileCompression::kDetect, true},
      {"plain.tfrecord", FileCompression::kNone, true},
      {"gzip.tfrecord", FileCompression::kDetect, true},
      {"gzip.tfrecord", FileCompression::kGzip, true},
      {"zlib.tfrecord", FileCompression::kZlib, true},
      // The wrong compression named is DataLoss naming the file.
      {"plain.tfrecord", FileCompression::kGzip, false},
      {"gzip.tfrecord", FileCompression::kZlib, false},
      {"zlib.tfrecord", FileCompression::kNone, false},
  };
  for (const Case& c : cases) {
    const std::string path = dir / c.file;
    Dataset records = Dataset::TFRecords(
        {path}, {.chunk_bytes = 1000, .compression = c.compression});
    Drained d = co_await Drain(records, Context());
    const std::string what = absl::StrCat(c.file, " as compression ",
                                          static_cast<int>(c.compression));
    if (c.ok) {
      EXPECT_TRUE(d.end.ok()) << what << ": " << d.end;
      EXPECT_TRUE(d.texts == want) << what;
    } else {
      EXPECT_TRUE(absl::IsDataLoss(d.end)) << what << ": " << d.end;
      EXPECT_TRUE(absl::StrContains(d.end.message(), path)) << d.end;
      EXPECT_TRUE(d.texts.empty()) << what;
    }
  }
}

CO_TEST(Pipeline, TextLinesReadZlibWhenToldTo) {
  ScratchDir dir;
  WriteFile(dir / "a.zlib", testing::ZlibBytes("one\ntwo\n"));
  Dataset lines = Dataset::TextLines(
      {dir / "a.zlib"},
      {.chunk_bytes = 3, .compression = FileCompression::kZlib});
  Drained d = co_await Drain(lines, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts, (std::vector<std::string>{"one", "two"}));
}

CO_TEST(Pipeline, CsvRowsParseWithFileAndLineInErrors) {
  ScratchDir dir;
  WriteFile(dir / "rows.csv", "1,2,0\n\n3,4,1\n5,6,7\n");
  Dataset rows =
      CsvRows(Dataset::TextLines({dir / "rows.csv"}), {.num_columns = 3});
  CO_ASSERT_TRUE(rows.spec().has_value());
  EXPECT_EQ(ElementSpecString(*rows.spec()), "(float [2], int32 [])");
  Drained d = co_await Drain(rows, Context());
  EXPECT_EQ(d.elements, (std::vector<std::vector<int64_t>>{
                            {1, 2, 0}, {3, 4, 1}, {5, 6, 7}}));
  Dataset classes = CsvRows(Dataset::TextLines({dir / "rows.csv"}),
                            {.num_columns = 3, .num_classes = 5});
  d = co_await Drain(classes, Context());
  EXPECT_EQ(d.elements.size(), 2u);
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("rows.csv:4: column 3: label 7 is out of "
                                 "range [0, 5)"),
            std::string::npos)
      << d.end;
  WriteFile(dir / "bad.csv", "1,2,0\n1,x,0\n");
  Dataset bad =
      CsvRows(Dataset::TextLines({dir / "bad.csv"}), {.num_columns = 3});
  d = co_await Drain(bad, Context());
  EXPECT_NE(d.end.message().find("bad.csv:2: column 2: 'x' is not a number"),
            std::string::npos)
      << d.end;
}

// ------------------------------------------- CsvRows fused with Batch

// The same lines as elements of a source that is no LineSource: Batch over
// CsvRows stays unfused there, and is the reference for the fused stage.
Dataset UnfusedLines(const std::vector<std::string>& lines) {
  std::vector<Element> elements;
  for (const std::string& line : lines) {
    Element e;
    e.components.emplace_back(line);
    elements.push_back(std::move(e));
  }
  return Dataset::FromElements(std::move(elements));
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// Rows of three columns, the label last (i % 5), with blank lines between.
std::vector<std::string> NumberedRows(int n) {
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    lines.push_back(absl::StrCat(i, ",", 2 * i, ",", i % 5));
    if (i % 7 == 3) lines.push_back("  ");
  }
  return lines;
}

CO_TEST(Pipeline, BatchOverCsvRowsFromFilesGivesTheUnfusedBatches) {
  ScratchDir dir;
  const std::vector<std::string> lines = NumberedRows(53);
  // Two files: a batch spans both.
  const std::vector<std::string> first(lines.begin(), lines.begin() + 30);
  const std::vector<std::string> second(lines.begin() + 30, lines.end());
  WriteFile(dir / "a.csv", Joined(first));
  WriteFile(dir / "b.csv", Joined(second));
  for (int64_t parallelism : {1, 3}) {
    for (bool drop : {false, true}) {
      CsvRowOptions options{.num_columns = 3, .parallelism = parallelism};
      Dataset fused =
          CsvRows(Dataset::TextLines({dir / "a.csv", dir / "b.csv"}), options)
              .Batch(8, drop);
      Dataset unfused = CsvRows(UnfusedLines(lines), options).Batch(8, drop);
      EXPECT_EQ(fused.DebugString(),
                absl::StrCat("TextLines(", dir / "a.csv", ", ", dir / "b.csv",
                             ").Filter().Map(CsvRows).Batch(8",
                             drop ? ", drop_remainder" : "", ")"));
      EXPECT_EQ(ElementSpecString(*fused.spec()),
                ElementSpecString(*unfused.spec()));
      Drained got = co_await Drain(fused, Context());
      Drained want = co_await Drain(unfused, Context());
      EXPECT_TRUE(got.end.ok()) << got.end;
      EXPECT_EQ(got.elements, want.elements)
          << "parallelism " << parallelism << " drop " << drop;
      EXPECT_EQ(got.elements.size(), drop ? 6u : 7u);
    }
  }
}

CO_TEST(Pipeline, BatchOverCsvRowsNamesTheBadRowAfterTheBatchesBeforeIt) {
  ScratchDir dir;
  std::vector<std::string> lines = NumberedRows(40);
  lines[25] = "1,oops,2";  // line 26 of the file
  WriteFile(dir / "bad.csv", Joined(lines));
  for (int64_t parallelism : {1, 2}) {
    Dataset fused = CsvRows(Dataset::TextLines({dir / "bad.csv"}),
                            {.num_columns = 3, .parallelism = parallelism})
                        .Batch(4);
    Drained got = co_await Drain(fused, Context());
    // Line 26 holds row 22 (four blank lines before it): batches 0-4 come
    // whole, the one holding it fails.
    EXPECT_EQ(got.elements.size(), 5u) << "parallelism " << parallelism;
    EXPECT_TRUE(absl::IsInvalidArgument(got.end)) << got.end;
    EXPECT_NE(got.end.message().find("bad.csv:26: column 2: 'oops' is not a "
                                     "number"),
              std::string::npos)
        << got.end;
  }
}

CO_TEST(Pipeline, BatchOverCsvRowsSkipsWithoutParsing) {
  ScratchDir dir;
  std::vector<std::string> lines = NumberedRows(50);
  lines[2] = "not,a,row";  // skipped, so never parsed
  WriteFile(dir / "rows.csv", Joined(lines));
  Dataset fused =
      CsvRows(Dataset::TextLines({dir / "rows.csv"}), {.num_columns = 3})
          .Batch(8);
  auto it = fused.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(2);
  CO_ASSERT_OK(skipped.status());
  EXPECT_EQ(*skipped, 2);
  Drained rest = co_await DrainIterator(**it);
  EXPECT_TRUE(rest.end.ok()) << rest.end;
  // Named first: a braced argument inside a co_await expression
  // (docs/async_pitfalls.md, items 8 and 9).
  Dataset unskipped =
      CsvRows(UnfusedLines(NumberedRows(50)), {.num_columns = 3}).Batch(8);
  Drained all = co_await Drain(unskipped, Context());
  const std::vector<std::vector<int64_t>> after_two(all.elements.begin() + 2,
                                                    all.elements.end());
  EXPECT_EQ(rest.elements, after_two);
  // Past the end: the batches there were.
  auto short_it = fused.MakeIterator(Context());
  CO_ASSERT_TRUE(short_it.ok());
  skipped = co_await (*short_it)->Skip(100);
  CO_ASSERT_OK(skipped.status());
  EXPECT_EQ(*skipped, 7);  // 50 rows: 6 batches of 8 and one of 2
}

// ------------------------------------------------------ stream sources

// A connected pair of loopback sockets on the test's io_context.
struct SocketPair {
  std::shared_ptr<tcp::socket> reader;
  std::shared_ptr<tcp::socket> writer;
};

asio::awaitable<SocketPair> Connect() {
  auto executor = co_await asio::this_coro::executor;
  tcp::acceptor acceptor(executor, {asio::ip::address_v4::loopback(), 0});
  auto writer = std::make_shared<tcp::socket>(executor);
  auto reader = std::make_shared<tcp::socket>(executor);
  // A loopback connect to a listening socket completes in the kernel's
  // backlog, before the accept.
  writer->connect(acceptor.local_endpoint());
  co_await acceptor.async_accept(*reader, asio::use_awaitable);
  co_return SocketPair{reader, writer};
}

std::string Record(const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out{
      static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
      static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  return out + payload;
}

CO_TEST(Pipeline, ReadLinesFromASocketUntilItsEnd) {
  SocketPair pair = co_await Connect();
  const std::string text = "a,1\r\nbb,2\nccc";
  co_await asio::async_write(*pair.writer, asio::buffer(text),
                             asio::use_awaitable);
  pair.writer->shutdown(tcp::socket::shutdown_send);
  Dataset lines = ReadLines(pair.reader, {.name = "peer", .read_bytes = 2});
  Drained d = co_await Drain(lines, Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts, (std::vector<std::string>{"a,1", "bb,2", "ccc"}));
}

CO_TEST(Pipeline, ReadRecordsAndAPeerClosingMidRecord) {
  SocketPair pair = co_await Connect();
  const std::string bytes = Record("one") + Record("") + Record("three") +
                            Record("cut-off").substr(0, 6);
  co_await asio::async_write(*pair.writer, asio::buffer(bytes),
                             asio::use_awaitable);
  pair.writer->shutdown(tcp::socket::shutdown_send);
  Dataset records = ReadRecords(pair.reader, {.name = "peer"});
  Drained d = co_await Drain(records, Context());
  EXPECT_EQ(d.texts, (std::vector<std::string>{"one", "", "three"}));
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("peer: record 4 truncated: got 2 of 7 bytes"),
            std::string::npos)
      << d.end;
}

CO_TEST(Pipeline, APeerResetMidStreamIsUnavailableNamingThePeer) {
  SocketPair pair = co_await Connect();
  const std::string partial = "1,2\n3,";
  co_await asio::async_write(*pair.writer, asio::buffer(partial),
                             asio::use_awaitable);
  // A zero linger turns the close into a reset (RST), not an end (FIN).
  pair.writer->set_option(asio::socket_base::linger(true, 0));
  pair.writer->close();
  Dataset lines = ReadLines(pair.reader, {.name = "tcp peer:5000"});
  Drained d = co_await Drain(lines, Context());
  EXPECT_TRUE(absl::IsUnavailable(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("tcp peer:5000"), std::string::npos) << d.end;
  // What arrived before the reset was delivered, not a silent end.
  EXPECT_LE(d.texts.size(), 1u);
}

CO_TEST(Pipeline, EmptyInputsGiveEmptyStreams) {
  ScratchDir dir;
  WriteFile(dir / "empty.txt", "");
  std::vector<Dataset> empties{
      Dataset::Range(0),
      Dataset::Range(5).Take(0),
      Dataset::Range(5).Skip(-1),
      Dataset::Range(0).Batch(4),
      Dataset::Range(3).Batch(4, /*drop_remainder=*/true),
      Dataset::Range(0).Shuffle(8, 1),
      Dataset::Range(0).Repeat(),
      Dataset::Range(3).Repeat(0),
      Dataset::TextLines({dir / "empty.txt"}),
      TimesTen(Dataset::Range(0), 2)};
  for (const Dataset& empty : empties) {
    Drained d = co_await Drain(empty, Context());
    EXPECT_TRUE(d.end.ok()) << empty.DebugString() << ": " << d.end;
    EXPECT_TRUE(d.elements.empty()) << empty.DebugString();
  }
}

CO_TEST(Pipeline, AnOversizedRecordLengthIsRejectedBeforeReadingIt) {
  SocketPair pair = co_await Connect();
  const std::string header = Record(std::string(100, 'z')).substr(0, 4);
  co_await asio::async_write(*pair.writer, asio::buffer(header),
                             asio::use_awaitable);
  Dataset records =
      ReadRecords(pair.reader, {.name = "peer", .max_record_bytes = 64});
  Drained d = co_await Drain(records, Context());
  EXPECT_TRUE(absl::IsInvalidArgument(d.end)) << d.end;
  EXPECT_NE(d.end.message().find("record 1: length 100"), std::string::npos)
      << d.end;
}

CO_TEST(Pipeline, BatchOverCsvRowsFromASocketGivesTheUnfusedBatches) {
  SocketPair pair = co_await Connect();
  const std::vector<std::string> lines = NumberedRows(30);
  co_await asio::async_write(*pair.writer, asio::buffer(Joined(lines)),
                             asio::use_awaitable);
  pair.writer->shutdown(tcp::socket::shutdown_send);
  // Small reads: lines and batches straddle them.
  Dataset fused =
      CsvRows(ReadLines(pair.reader, {.name = "peer", .read_bytes = 7}),
              {.num_columns = 3})
          .Batch(4);
  Drained got = co_await Drain(fused, Context());
  EXPECT_TRUE(got.end.ok()) << got.end;
  Dataset unfused = CsvRows(UnfusedLines(lines), {.num_columns = 3}).Batch(4);
  Drained want = co_await Drain(unfused, Context());
  EXPECT_EQ(got.elements, want.elements);
}

CO_TEST(Pipeline, CancellingABatchOverCsvRowsCancelsTheSocketRead) {
  SocketPair pair = co_await Connect();  // the writer never writes
  // Named: braced lists inside a co_await expression are what g++ 12
  // mishandles (docs/async_pitfalls.md, item 8).
  Dataset batches =
      CsvRows(ReadLines(pair.reader, {.name = "quiet"}), {.num_columns = 3})
          .Batch(4);
  absl::Status status = co_await StatusOfACancelledNext(batches);
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
}

CO_TEST(Pipeline, CancellingNextCancelsTheSocketRead) {
  SocketPair pair = co_await Connect();  // the writer never writes
  Dataset lines = ReadLines(pair.reader, {.name = "quiet"});  // named: 8
  absl::Status status = co_await StatusOfACancelledNext(lines);
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
}

CO_TEST(Pipeline, TcpLinesConnectsAndAFailedConnectIsUnavailable) {
  auto executor = co_await asio::this_coro::executor;
  tcp::acceptor acceptor(executor, {asio::ip::address_v4::loopback(), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  Dataset lines = TcpLines("127.0.0.1", port);
  EXPECT_EQ(lines.DebugString(),
            absl::StrCat("TcpLines(127.0.0.1:", port, ")"));
  auto it = lines.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  ElementIterator* iterator = it->get();
  Started<ElementIterator::Result> pending(executor, NextOfPtr(iterator));
  tcp::socket server(executor);
  co_await acceptor.async_accept(server, asio::use_awaitable);
  co_await asio::async_write(server, asio::buffer(std::string("x\ny\n")),
                             asio::use_awaitable);
  server.close();
  ElementIterator::Result r = co_await pending.Get();
  CO_ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->text(0), "x");
  EXPECT_EQ((*r)->origin.ToString(),
            absl::StrCat("tcp 127.0.0.1:", port, ": line 1"));
  Drained rest = co_await DrainIterator(*iterator);
  EXPECT_EQ(rest.texts, std::vector<std::string>{"y"});
  acceptor.close();
  Dataset refused_lines = TcpLines("127.0.0.1", port);
  Drained refused = co_await Drain(refused_lines, Context());
  EXPECT_TRUE(absl::IsUnavailable(refused.end)) << refused.end;
  EXPECT_NE(refused.end.message().find(absl::StrCat("127.0.0.1:", port)),
            std::string::npos)
      << refused.end;
}

// ------------------------------------------------------- user sources

CO_TEST(Pipeline, FromChannelDrainsThenEndsAndIsBounded) {
  auto channel = std::make_shared<ElementChannel>(TestRuntime().executor(), 2);
  auto scalar = [](int64_t v) {
    std::vector<Tensor> t{Tensor::Scalar<int64_t>(v)};
    return MakeElement(std::move(t));
  };
  EXPECT_TRUE(channel->TrySend(scalar(1)));
  Element two = scalar(2);
  absl::Status sent = co_await channel->Send(std::move(two));
  CO_ASSERT_OK(sent);
  // Full: bounded.
  EXPECT_FALSE(channel->TrySend(scalar(3)));
  channel->Close();
  Element four = scalar(4);
  absl::Status after_close = co_await channel->Send(std::move(four));
  EXPECT_TRUE(absl::IsFailedPrecondition(after_close)) << after_close;
  Dataset fed = FromChannel(channel);
  Drained d = co_await Drain(fed, Context());
  EXPECT_EQ(d.elements, Scalars({1, 2}));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_TRUE(absl::IsFailedPrecondition(fed.MakeIterator(Context()).status()));
}

CO_TEST(Pipeline, FromGeneratorAwaitsTheUsersCoroutine) {
  auto count = std::make_shared<int64_t>(0);
  Dataset generated =
      FromGenerator([count]() -> asio::awaitable<std::optional<Element>> {
        if (*count == 3) co_return std::nullopt;
        std::vector<Tensor> t{Tensor::Scalar<int64_t>((*count)++)};
        co_return MakeElement(std::move(t));
      });
  EXPECT_FALSE(generated.deterministic());
  Drained d = co_await Drain(generated, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2}));
}

// As tf.data's from_generator: a factory is called for each iterator, so
// every pass of a Repeat restarts the stream.
CO_TEST(Pipeline, FromGeneratorFactoryRestartsPerIterator) {
  auto made = std::make_shared<int64_t>(0);
  ElementGeneratorFactory count_to_three = [made]() -> ElementGenerator {
    ++*made;
    auto count = std::make_shared<int64_t>(0);
    return [count]() -> asio::awaitable<std::optional<Element>> {
      if (*count == 3) co_return std::nullopt;
      std::vector<Tensor> t{Tensor::Scalar<int64_t>((*count)++)};
      co_return MakeElement(std::move(t));
    };
  };
  Drained d =
      co_await Drain(FromGenerator(count_to_three).Repeat(2), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(*made, 2);

  ElementGeneratorFactory throws = []() -> ElementGenerator {
    throw std::runtime_error("no input today");
  };
  auto it = FromGenerator(throws, "daily").MakeIterator(Context());
  CO_ASSERT_TRUE(!it.ok());
  EXPECT_NE(it.status().message().find("FromGenerator(daily)"),
            std::string::npos)
      << it.status();
  EXPECT_NE(it.status().message().find("no input today"), std::string::npos)
      << it.status();
}

// ------------------------------------------------------------ prefetch

// Range(n) through a map that counts the elements the input produced.
Dataset CountedRange(int64_t n, std::shared_ptr<std::atomic<int64_t>> made) {
  return Dataset::Range(n).Map(
      [made](Element e) -> absl::StatusOr<Element> {
        ++*made;
        return e;
      },
      {.output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)}});
}

// tf.data's cache(): the first full pass reads the input; the later passes,
// and later iterators, replay it without reading the input.
CO_TEST(Pipeline, CacheReplaysTheFirstFullPass) {
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  Dataset cached = CountedRange(4, made).Cache();
  CO_ASSERT_OK(cached.status());
  EXPECT_TRUE(cached.deterministic());
  Drained d = co_await Drain(cached.Repeat(3), Context());
  EXPECT_EQ(d.elements, Scalars({0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(made->load(), 4);
  auto it = cached.MakeIterator(Context());
  CO_ASSERT_TRUE(it.ok());
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(3);
  CO_ASSERT_TRUE(skipped.ok() && *skipped == 3);
  Drained rest = co_await DrainIterator(**it);
  EXPECT_EQ(rest.elements, Scalars({3}));
  EXPECT_EQ(made->load(), 4);
}

// A pass that stops early is not kept, so it never truncates the dataset
// (tf.data discards a partial cache).
CO_TEST(Pipeline, CacheKeepsNoPartialPass) {
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  Dataset cached = CountedRange(4, made).Cache();
  Drained two = co_await Drain(cached.Take(2), Context());
  EXPECT_EQ(two.elements, Scalars({0, 1}));
  Drained all = co_await Drain(cached, Context());
  EXPECT_EQ(all.elements, Scalars({0, 1, 2, 3}));
  EXPECT_EQ(made->load(), 2 + 4);
  Drained replayed = co_await Drain(cached, Context());
  EXPECT_EQ(replayed.elements, Scalars({0, 1, 2, 3}));
  EXPECT_EQ(made->load(), 6);
}

// Two iterators filling at once: each yields its whole pass, and the first
// to finish is what later iterators replay.
CO_TEST(Pipeline, CacheOfTwoFillingIteratorsKeepsTheFirstToFinish) {
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  Dataset cached = CountedRange(3, made).Cache();
  auto first = cached.MakeIterator(Context());
  auto second = cached.MakeIterator(Context());
  CO_ASSERT_TRUE(first.ok() && second.ok());
  Drained head = co_await DrainIterator(**first, 1);
  Drained b = co_await DrainIterator(**second);
  Drained a = co_await DrainIterator(**first);
  EXPECT_EQ(head.elements, Scalars({0}));
  EXPECT_EQ(a.elements, Scalars({1, 2}));
  EXPECT_EQ(b.elements, Scalars({0, 1, 2}));
  EXPECT_EQ(made->load(), 6);
  Drained replayed = co_await Drain(cached, Context());
  EXPECT_EQ(replayed.elements, Scalars({0, 1, 2}));
  EXPECT_EQ(made->load(), 6);
}

// max_bytes bounds what a filling iterator keeps: past it, the stream is
// ResourceExhausted naming the stage, and nothing is kept.
CO_TEST(Pipeline, CacheBeyondMaxBytesIsResourceExhausted) {
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  // int64 scalars, 8 bytes each: 20 bytes hold two.
  Dataset cached =
      CountedRange(5, made).Cache({.max_bytes = 20, .name = "small"});
  Drained d = co_await Drain(cached, Context());
  EXPECT_EQ(d.elements, Scalars({0, 1}));
  EXPECT_TRUE(absl::IsResourceExhausted(d.end)) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(), "Cache(small)")) << d.end;
  EXPECT_TRUE(absl::StrContains(d.end.message(), "max_bytes (20)")) << d.end;
  Drained again = co_await Drain(cached, Context());
  EXPECT_TRUE(absl::IsResourceExhausted(again.end)) << again.end;
  EXPECT_EQ(made->load(), 6);
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Range(3).Cache({.max_bytes = 0}).status()));
}

// The names of the files in `dir`, sorted.
std::vector<std::string> FilesIn(const ScratchDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The lines of `file` through a map that counts them.
Dataset CountedLines(const std::string& file,
                     std::shared_ptr<std::atomic<int64_t>> made) {
  return Dataset::TextLines({file}).Map(
      [made](Element e) -> absl::StatusOr<Element> {
        ++*made;
        return e;
      },
      {.output_spec = ElementSpec{ComponentSpec::String()}});
}

// tf.data's cache(filename): the first full pass writes the file; later
// passes, and a dataset made anew (a later run of the program), replay it
// without reading the input -- the same elements and origins.
CO_TEST(Pipeline, CacheToAFileReplaysItInALaterRun) {
  ScratchDir dir;
  WriteFile(dir / "in.txt", "alpha\nbeta\ngamma\n");
  const std::string cache = dir / "lines.cache";
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  Dataset cached =
      CountedLines(dir / "in.txt", made).Cache({.filename = cache});
  CO_ASSERT_OK(cached.status());
  EXPECT_EQ(cached.spec(), ElementSpec{ComponentSpec::String()});
  Drained d = co_await Drain(cached.Repeat(2), Context());
  EXPECT_TRUE(d.end.ok()) << d.end;
  EXPECT_EQ(d.texts.size(), 6u);
  EXPECT_EQ(made->load(), 3);
  EXPECT_EQ(FilesIn(dir), (std::vector<std::string>{"in.txt", "lines.cache"}));

  auto later = std::make_shared<std::atomic<int64_t>>(0);
  Dataset again =
      CountedLines(dir / "in.txt", later).Cache({.filename = cache});
  Drained replayed = co_await Drain(again, Context());
  EXPECT_TRUE(replayed.end.ok()) << replayed.end;
  std::vector<std::string> want;
  for (const char* line : {"alpha", "beta", "gamma"}) want.emplace_back(line);
  EXPECT_EQ(replayed.texts, want);
  CO_ASSERT_TRUE(replayed.origins.size() == 3u);
  EXPECT_EQ(replayed.origins[1], dir / "in.txt:2");
  EXPECT_EQ(later->load(), 0);

  // Tensors too: the file holds their dtypes, shapes and bytes.
  const std::string numbers = dir / "numbers.cache";
  Dataset batches = Dataset::Range(5).Batch(2).Cache({.filename = numbers});
  Drained first = co_await Drain(batches, Context());
  Drained second = co_await Drain(batches, Context());
  EXPECT_EQ(first.elements,
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(second.elements, first.elements);
  EXPECT_TRUE(second.end.ok()) << second.end;
}

// The file appears whole or not at all: a partial pass, or one whose
// input failed, leaves no file (nor a temporary one) behind.
CO_TEST(Pipeline, CacheToAFileKeepsNoPartialPass) {
  ScratchDir dir;
  WriteFile(dir / "in.txt", "a\nb\nc\n");
  const std::string cache = dir / "lines.cache";
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  Dataset cached =
      CountedLines(dir / "in.txt", made).Cache({.filename = cache});
  Drained two = co_await Drain(cached.Take(2), Context());
  EXPECT_EQ(two.texts.size(), 2u);
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"in.txt"});

  Dataset failing =
      Dataset::Range(4)
          .Map(
              [](Element e) -> absl::StatusOr<Element> {
                if (Int(e.tensor(0)) == 2) {
                  return absl::InvalidArgumentError("two is bad");
                }
                return e;
              },
              {.output_spec =
                   ElementSpec{ComponentSpec::Scalar(DType::kInt64)}})
          .Cache({.filename = cache});
  Drained failed = co_await Drain(failing, Context());
  EXPECT_EQ(failed.elements, Scalars({0, 1}));
  EXPECT_TRUE(absl::IsInvalidArgument(failed.end)) << failed.end;
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"in.txt"});

  Drained all = co_await Drain(cached, Context());
  EXPECT_EQ(all.texts.size(), 3u);
  EXPECT_EQ(made->load(), 2 + 3);
  EXPECT_EQ(FilesIn(dir), (std::vector<std::string>{"in.txt", "lines.cache"}));
}

// A file that is not this dataset's cache is refused, naming it.
CO_TEST(Pipeline, CacheToAFileRefusesAnotherDatasetsOrADamagedFile) {
  ScratchDir dir;
  const std::string cache = dir / "numbers.cache";
  Dataset numbers = Dataset::Range(3).Cache({.filename = cache});
  Drained filled = co_await Drain(numbers, Context());
  CO_ASSERT_OK(filled.end);

  WriteFile(dir / "in.txt", "a\n");
  Dataset lines =
      Dataset::TextLines({dir / "in.txt"}).Cache({.filename = cache});
  Drained other = co_await Drain(lines, Context());
  EXPECT_TRUE(absl::IsFailedPrecondition(other.end)) << other.end;
  EXPECT_TRUE(absl::StrContains(other.end.message(), cache)) << other.end;
  EXPECT_TRUE(absl::StrContains(other.end.message(), "(int64 [])"))
      << other.end;
  EXPECT_TRUE(absl::StrContains(other.end.message(), "(string)")) << other.end;

  // Its last element's bytes damaged: the record's CRC no longer matches.
  std::string bytes = testing::ReadFileBytes(cache);
  bytes[bytes.size() - 6] ^= 0x40;
  WriteFile(cache, bytes);
  Drained damaged = co_await Drain(numbers, Context());
  EXPECT_EQ(damaged.elements, Scalars({0, 1}));
  EXPECT_TRUE(absl::IsDataLoss(damaged.end)) << damaged.end;
  EXPECT_TRUE(absl::StrContains(damaged.end.message(), cache + ": record 4"))
      << damaged.end;

  WriteFile(cache, testing::TfRecordFrame("hello"));
  Drained foreign = co_await Drain(numbers, Context());
  EXPECT_TRUE(absl::IsDataLoss(foreign.end)) << foreign.end;
  EXPECT_TRUE(absl::StrContains(foreign.end.message(), "not a cosession cache"))
      << foreign.end;

  Dataset nowhere =
      Dataset::Range(3).Cache({.filename = dir / "missing/numbers.cache"});
  Drained unwritable = co_await Drain(nowhere, Context());
  EXPECT_TRUE(absl::IsNotFound(unwritable.end)) << unwritable.end;
  EXPECT_TRUE(absl::StrContains(unwritable.end.message(),
                                "Cache('" + dir / "missing/numbers.cache"))
      << unwritable.end;
}

CO_TEST(Pipeline, PrefetchWithoutCoordinatorIsFailedPrecondition) {
  Dataset prefetched = Dataset::Range(3).Prefetch(1);
  Drained d = co_await Drain(prefetched, Context());
  EXPECT_TRUE(absl::IsFailedPrecondition(d.end)) << d.end;
}

CO_TEST(Pipeline, PrefetchYieldsTheStreamAndItsEnd) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset prefetched = TimesTen(Dataset::Range(6), 2).Prefetch(2);
  Drained d = co_await Drain(prefetched, Context(&coordinator));
  EXPECT_EQ(d.elements, Scalars({0, 10, 20, 30, 40, 50}));
  EXPECT_TRUE(d.end.ok()) << d.end;
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// As tf.data's prefetch (and pipeline/detail/prefetcher.h): an error
// travels behind the elements buffered before it; none of them is lost.
CO_TEST(Pipeline, PrefetchDeliversTheElementsBufferedBeforeAnError) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset failing = Dataset::Range(6).Map(
      [](Element e) -> absl::StatusOr<Element> {
        if (Int(e.tensor(0)) == 3) return absl::DataLossError("element 3");
        return e;
      },
      {.output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)}});
  auto it = failing.Prefetch(8).MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  // The first call starts the producer; nothing is buffered yet.
  std::optional<ElementIterator::Result> started = (*it)->TryNext();
  EXPECT_FALSE(started.has_value());
  // The producer's task fails with the error, so the coordinator stops;
  // once joined, the producer has buffered everything it will.
  absl::Status joined =
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(absl::IsDataLoss(joined)) << joined;
  Drained d = co_await DrainIterator(**it);
  EXPECT_EQ(d.elements, Scalars({0, 1, 2}));
  EXPECT_TRUE(absl::IsDataLoss(d.end)) << d.end;
}

CO_TEST(Pipeline, PrefetchAppliesBackpressureAndStopsWithTheCoordinator) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  // Each call of the map reports its count; the test waits for the count
  // at which the producer must block, then stops it.
  using Calls =
      asio::experimental::concurrent_channel<void(error_code, int64_t)>;
  auto reported =
      std::make_shared<Calls>(co_await asio::this_coro::executor, 1000);
  constexpr int64_t kBuffer = 2;
  Dataset counted = Dataset::Range(1000000).Map(
      [calls, reported](Element e) -> absl::StatusOr<Element> {
        reported->try_send(error_code(), ++*calls);
        return e;
      },
      {.output_spec = ElementSpec{ComponentSpec::Scalar(DType::kInt64)}});
  auto it = counted.Prefetch(kBuffer).MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  ElementIterator::Result first = co_await NextOf(**it);
  CO_ASSERT_TRUE(first.ok() && first->has_value());
  // One taken, kBuffer buffered, one waiting to be sent.
  int64_t seen = 0;
  while (seen < 1 + kBuffer + 1) {
    auto [ec, n] =
        co_await reported->async_receive(asio::as_tuple(asio::use_awaitable));
    CO_ASSERT_TRUE(!ec);
    seen = n;
  }
  coordinator.RequestStop().IgnoreError();
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
  // Joined: the producer ended. Without backpressure it would have run on.
  EXPECT_LE(calls->load(), 1 + kBuffer + 1);
  ElementIterator::Result after = co_await NextOf(**it);
  EXPECT_TRUE(absl::IsCancelled(after.status())) << after.status();
}

// A socket that reports each read it starts, so that a test knows a read
// is pending (an AsyncReadStream, as ReadLines takes any).
class ReadReportingSocket {
 public:
  using executor_type = tcp::socket::executor_type;
  using Reads = asio::experimental::concurrent_channel<void(error_code)>;
  ReadReportingSocket(std::shared_ptr<tcp::socket> socket,
                      std::shared_ptr<Reads> reads)
      : socket_(std::move(socket)), reads_(std::move(reads)) {}
  executor_type get_executor() { return socket_->get_executor(); }
  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    reads_->try_send(error_code());
    return socket_->async_read_some(buffers, std::forward<Token>(token));
  }

 private:
  std::shared_ptr<tcp::socket> socket_;
  std::shared_ptr<Reads> reads_;
};

CO_TEST(Pipeline, AStopCancelsAPrefetchWaitingOnASocket) {
  SocketPair pair = co_await Connect();  // the writer never writes
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  auto reads = std::make_shared<ReadReportingSocket::Reads>(loop, 8);
  auto socket = std::make_shared<ReadReportingSocket>(pair.reader, reads);
  auto it = ReadLines(socket, {.name = "quiet"})
                .Prefetch(1)
                .MakeIterator(Context(&coordinator));
  CO_ASSERT_TRUE(it.ok());
  std::optional<ElementIterator::Result> ready = (*it)->TryNext();  // starts
  EXPECT_FALSE(ready.has_value());
  // The producer started its read (on its strand, where the stop's
  // cancellation is delivered after it): now stop.
  auto [read_ec] =
      co_await reads->async_receive(asio::as_tuple(asio::use_awaitable));
  CO_ASSERT_TRUE(!read_ec);
  coordinator.RequestStop().IgnoreError();
  // Join completes only once the producer's pending read was cancelled.
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
  ElementIterator::Result after = co_await NextOf(**it);
  EXPECT_TRUE(absl::IsCancelled(after.status())) << after.status();
}

CO_TEST(Pipeline, APipelineErrorStopsTheCoordinatorWithIt) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset missing =
      Dataset::TextLines({"/nonexistent/cosession/x.txt"}).Prefetch(2);
  Drained d = co_await Drain(missing, Context(&coordinator));
  EXPECT_TRUE(absl::IsNotFound(d.end)) << d.end;
  absl::Status joined =
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(absl::IsNotFound(joined)) << joined;
}

// ------------------------------------------------------- exact resume

CO_TEST(Pipeline, SkipResumesAShuffledParallelChainExactly) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset chain = TimesTen(Dataset::Range(50), 3)
                      .Shuffle(8, /*seed=*/11)
                      .Batch(4)
                      .Repeat(3)
                      .Prefetch(2);
  CO_ASSERT_TRUE(chain.deterministic());
  Drained whole = co_await Drain(chain, Context(&coordinator));
  CO_ASSERT_TRUE(whole.end.ok());
  CO_ASSERT_TRUE(whole.elements.size() == 39u);  // 13 batches per epoch
  for (int64_t position : {0, 1, 13, 20, 38, 39}) {
    auto it = chain.MakeIterator(Context(&coordinator));
    CO_ASSERT_TRUE(it.ok());
    absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(position);
    CO_ASSERT_TRUE(skipped.ok());
    EXPECT_EQ(*skipped, position);
    Drained rest = co_await DrainIterator(**it);
    EXPECT_EQ(rest.elements,
              std::vector<std::vector<int64_t>>(
                  whole.elements.begin() + position, whole.elements.end()))
        << "resumed at " << position;
  }
  coordinator.RequestStop().IgnoreError();
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

// ------------------------------------------------------- into the graph

CO_TEST(Pipeline, IteratorGetNextRunsADatasetInTheGraph) {
  Graph g;
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape{3, 2});
  Tensor y = Tensor::FromVector<int64_t>({7, 8, 9});
  std::vector<Output> xy =
      IteratorGetNext(g, Dataset::FromTensorSlices({x, y}).Batch(2), "batch");
  Session session(g, TestRuntime());
  CO_ASSERT_TRUE(xy.size() == 2u);
  EXPECT_TRUE(DatasetOfGetNext(xy[1]).ok());
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  CO_ASSERT_OK(StartDatasetIterator(session, coordinator, xy[0]));
  RunArgs args{.fetches = xy};
  auto first = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_TRUE(first.ok());
  EXPECT_EQ(Values((*first)[0]), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Values((*first)[1]), (std::vector<int64_t>{7, 8}));
  auto second = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_TRUE(second.ok());
  EXPECT_EQ(Values((*second)[1]), (std::vector<int64_t>{9}));
  auto end = co_await session.Run(args, asio::use_awaitable);
  EXPECT_TRUE(absl::IsOutOfRange(end.status())) << end.status();
  CO_ASSERT_OK(
      co_await coordinator.Join(std::chrono::seconds(10), asio::use_awaitable));
}

TEST(Pipeline, IteratorGetNextNeedsAKnownTensorSpec) {
  Graph g;
  EXPECT_THROW(IteratorGetNext(g, Dataset::TextLines({"x.txt"})), StatusError);
  Dataset unknown = Dataset::Range(3).Map(
      [](Element e) -> absl::StatusOr<Element> { return e; });
  EXPECT_THROW(IteratorGetNext(g, unknown), StatusError);
  EXPECT_THROW(IteratorGetNext(g, Dataset::Range(3).Batch(0)), StatusError);
}

}  // namespace
}  // namespace cosession::pipeline_test
