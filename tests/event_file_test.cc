// Event files: what SummaryWriter writes, read back by the independent
// reader of tests/event_test_util.h; the library's RecordReader on corrupt
// bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/use_awaitable.hpp>
#include <cfloat>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <regex>
#include <thread>
#include <vector>

#include "cosession/io/crc32c.h"
#include "cosession/io/event_proto.h"
#include "cosession/io/record_reader.h"
#include "cosession/io/record_writer.h"
#include "cosession/io/summary_writer.h"
#include "tests/co_test.h"
#include "tests/event_test_util.h"

namespace cosession::event_file_test {
namespace {

namespace asio = boost::asio;
using testing::EventFiles;
using testing::FreshTempDir;
using testing::ReadEventsForTest;
using testing::ReadFileBytes;

std::shared_ptr<SummaryWriter> NewWriter(const std::string& dir,
                                         SummaryWriterOptions options = {}) {
  auto writer = SummaryWriter::Create(dir, std::move(options));
  EXPECT_TRUE(writer.ok()) << writer.status();
  return writer.ok() ? *writer : nullptr;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(EventFile, FileNameFollowsTensorFlowsPatternInACreatedDirectory) {
  const std::string dir = FreshTempDir("name") + "/not/yet/there";
  ManualClock clock(absl::FromUnixSeconds(1234567));
  auto writer = NewWriter(dir, {.clock = &clock});
  ASSERT_NE(writer, nullptr);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string name =
      std::filesystem::path(writer->path()).filename().string();
  const std::regex pattern(
      absl::StrCat(R"(events\.out\.tfevents\.0001234567\.)",
                   std::regex_replace(host, std::regex(R"([.\\])"), R"(\$&)"),
                   R"(\.)", getpid(), R"(\.\d+)"));
  EXPECT_TRUE(std::regex_match(name, pattern)) << name;
  EXPECT_EQ(std::filesystem::path(writer->path()).parent_path(), dir);
  EXPECT_TRUE(writer->Close().ok());
}

TEST(EventFile, FirstRecordIsFileVersionBrainEvent2) {
  const std::string dir = FreshTempDir("version");
  ManualClock clock(absl::FromUnixSeconds(1000) + absl::Milliseconds(500));
  auto writer = NewWriter(dir, {.clock = &clock});
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->Close().ok());
  auto events = ReadEventsForTest(writer->path());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time, 1000.5);
}

TEST(EventFile, ScalarsRoundTripWithTagValueStepAndWallTime) {
  const std::string dir = FreshTempDir("scalars");
  ManualClock clock(absl::FromUnixSeconds(2000));
  auto writer = NewWriter(dir, {.clock = &clock});
  ASSERT_NE(writer, nullptr);
  writer->AddScalar("loss", 0.25f, 7);
  clock.Advance(absl::Seconds(3));
  writer->AddScalar("accuracy", -1.5f, 1LL << 40);
  writer->AddScalar("zero", 0.0f, 0);
  ASSERT_TRUE(writer->Flush().ok());
  auto events = ReadEventsForTest(writer->path());
  ASSERT_EQ(events.size(), 4u);
  ASSERT_EQ(events[1].summary.size(), 1u);
  EXPECT_EQ(events[1].summary[0].tag, "loss");
  EXPECT_EQ(events[1].summary[0].simple_value, 0.25f);
  EXPECT_EQ(events[1].step, 7);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 2000);
  EXPECT_EQ(events[2].summary[0].tag, "accuracy");
  EXPECT_EQ(events[2].summary[0].simple_value, -1.5f);
  EXPECT_EQ(events[2].step, 1LL << 40);
  EXPECT_DOUBLE_EQ(events[2].wall_time, 2003);
  // A zero is still a value (the oneof is set).
  EXPECT_EQ(events[3].summary[0].simple_value, 0.0f);
  EXPECT_TRUE(writer->Close().ok());
}

TEST(EventFile, HistogramHasTensorFlowsFieldsAndDefaultBuckets) {
  const std::string dir = FreshTempDir("histogram");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  Tensor values = Tensor::FromVector<float>({1, 2, 2, 3, -1, 0});
  ASSERT_TRUE(writer->AddHistogram("weights", values, 5).ok());
  ASSERT_TRUE(writer->Close().ok());
  auto events = ReadEventsForTest(writer->path());
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[1].summary.size(), 1u);
  EXPECT_EQ(events[1].step, 5);
  EXPECT_EQ(events[1].summary[0].tag, "weights");
  ASSERT_TRUE(events[1].summary[0].histo.has_value());
  const auto& h = *events[1].summary[0].histo;
  EXPECT_EQ(h.min, -1);
  EXPECT_EQ(h.max, 3);
  EXPECT_EQ(h.num, 6);
  EXPECT_EQ(h.sum, 7);
  EXPECT_EQ(h.sum_squares, 19);
  ASSERT_EQ(h.bucket_limit.size(), h.bucket.size());
  EXPECT_EQ(std::accumulate(h.bucket.begin(), h.bucket.end(), 0.0), 6);
  // Every limit is one of TensorFlow's defaults, ascending, ending at DBL_MAX.
  const auto& defaults = DefaultHistogramBucketLimits();
  for (double limit : h.bucket_limit) {
    EXPECT_TRUE(std::binary_search(defaults.begin(), defaults.end(), limit))
        << limit;
  }
  EXPECT_TRUE(std::is_sorted(h.bucket_limit.begin(), h.bucket_limit.end()));
  EXPECT_EQ(h.bucket_limit.back(), DBL_MAX);
  // The bucket holding 2 (twice) ends at the first default limit above 2.
  const double above_two =
      *std::upper_bound(defaults.begin(), defaults.end(), 2.0);
  auto at = std::find(h.bucket_limit.begin(), h.bucket_limit.end(), above_two);
  ASSERT_NE(at, h.bucket_limit.end());
  EXPECT_EQ(h.bucket[at - h.bucket_limit.begin()], 2);
}

TEST(EventFile, DefaultBucketLimitsAreTensorFlows) {
  const auto& limits = DefaultHistogramBucketLimits();
  // 774 limits 1e-12 * 1.1^k below 1e20, plus DBL_MAX, mirrored, plus 0.
  EXPECT_EQ(limits.size(), 2 * (774 + 1) + 1);
  EXPECT_EQ(limits.front(), -DBL_MAX);
  EXPECT_EQ(limits.back(), DBL_MAX);
  EXPECT_EQ(limits[limits.size() / 2], 0.0);
  EXPECT_EQ(limits[limits.size() / 2 + 1], 1e-12);
}

TEST(EventFile, HistogramOfANaNIsInvalidArgumentNamingTheTag) {
  const std::string dir = FreshTempDir("nan");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  Tensor values = Tensor::FromVector<double>({1, std::nan("")});
  absl::Status added = writer->AddHistogram("bad_tag", values, 1);
  EXPECT_EQ(added.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(added.message().find("bad_tag"), std::string::npos) << added;
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_EQ(ReadEventsForTest(writer->path()).size(), 1u);
}

TEST(EventFile, SessionLogStartRoundTrips) {
  const std::string dir = FreshTempDir("session_log");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  writer->AddSessionLog(SessionLog::kStart, 42);
  writer->AddSessionLog(SessionLog::kCheckpoint, 50, "/ckpt/model-50");
  ASSERT_TRUE(writer->Close().ok());
  auto events = ReadEventsForTest(writer->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].session_log_status, 1);  // START
  EXPECT_EQ(events[1].step, 42);
  EXPECT_EQ(events[2].session_log_status, 3);  // CHECKPOINT
  EXPECT_EQ(events[2].checkpoint_path, "/ckpt/model-50");
}

TEST(EventFile, TaggedRunMetadataRoundTripsWithoutAStep) {
  const std::string dir = FreshTempDir("run_metadata");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  const std::string run_metadata("\x0a\x00", 2);  // bytes, a NUL included
  writer->AddEvent(Event{.what = TaggedRunMetadata{"step_7", run_metadata}});
  ASSERT_TRUE(writer->Close().ok());
  auto events = ReadEventsForTest(writer->path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].run_metadata_tag, "step_7");
  EXPECT_EQ(events[1].run_metadata, run_metadata);
  EXPECT_EQ(events[1].step, 0);
  EXPECT_GT(events[1].wall_time, 0);
}

TEST(EventFile, NothingReachesTheFileBeforeAFlushWithinFlushEvery) {
  const std::string dir = FreshTempDir("buffered");
  auto writer = NewWriter(dir, {.flush_every = absl::Hours(1)});
  ASSERT_NE(writer, nullptr);
  writer->AddScalar("x", 1, 1);
  // Whatever the writer thread did meanwhile, stdio holds it until a flush.
  EXPECT_LT(ReadFileBytes(writer->path()).size(), 16u);
  ASSERT_TRUE(writer->Close().ok());
}

TEST(EventFile, CloseFlushesEveryQueuedEvent) {
  const std::string dir = FreshTempDir("close");
  auto writer = NewWriter(dir, {.flush_every = absl::Hours(1)});
  ASSERT_NE(writer, nullptr);
  for (int i = 0; i < 100; ++i) writer->AddScalar("x", i, i);
  ASSERT_TRUE(writer->Close().ok());
  auto scalars = testing::ScalarsTagged(ReadEventsForTest(writer->path()), "x");
  ASSERT_EQ(scalars.size(), 100u);
  EXPECT_EQ(scalars[99], std::make_pair(int64_t{99}, 99.0f));
}

TEST(EventFile, CloseIsIdempotentAndEventsAfterItAreDropped) {
  const std::string dir = FreshTempDir("idempotent");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  EXPECT_TRUE(writer->Close().ok());
  writer->AddScalar("late", 1, 1);
  EXPECT_TRUE(writer->Close().ok());
  EXPECT_TRUE(writer->Flush().ok());
  EXPECT_EQ(ReadEventsForTest(writer->path()).size(), 1u);
}

TEST(EventFile, EventsReachTheFileEveryFlushEveryWithoutAFlushCall) {
  const std::string dir = FreshTempDir("periodic");
  auto writer = NewWriter(dir, {.flush_every = absl::Milliseconds(20)});
  ASSERT_NE(writer, nullptr);
  writer->AddScalar("x", 1, 1);
  // Bounded wait for the periodic flush (nothing else flushes).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t records = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto parsed = ReadAllRecords(ReadFileBytes(writer->path()), writer->path());
    records = parsed.ok() ? parsed->size() : 0;
    if (records == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(records, 2u);
  ASSERT_TRUE(writer->Close().ok());
}

TEST(EventFile, TwoWritersInOneDirectoryWriteTwoFiles) {
  const std::string dir = FreshTempDir("two");
  ManualClock clock;  // same second for both
  auto a = NewWriter(dir, {.clock = &clock});
  auto b = NewWriter(dir, {.clock = &clock});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->path(), b->path());
  EXPECT_TRUE(a->Close().ok());
  EXPECT_TRUE(b->Close().ok());
  EXPECT_EQ(EventFiles(dir).size(), 2u);
}

TEST(EventFile, CacheReturnsOneWriterPerDirectory) {
  const std::string dir = FreshTempDir("cache");
  auto first = SummaryWriterCache::Get(dir);
  auto again = SummaryWriterCache::Get(dir + "/");
  auto other = SummaryWriterCache::Get(dir + "/other");
  ASSERT_TRUE(first.ok() && again.ok() && other.ok());
  EXPECT_EQ(*first, *again);
  EXPECT_NE(*first, *other);
  SummaryWriterCache::Clear();
  auto fresh = SummaryWriterCache::Get(dir);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(*fresh, *first);
  SummaryWriterCache::Clear();
}

TEST(EventFile, ARemovedDirectoryMakesFlushAndCloseReturnAnError) {
  const std::string dir = FreshTempDir("removed");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  std::filesystem::remove_all(dir);
  writer->AddScalar("x", 1, 1);
  absl::Status flushed = writer->Flush();
  EXPECT_EQ(flushed.code(), absl::StatusCode::kDataLoss) << flushed;
  EXPECT_NE(flushed.message().find(writer->path()), std::string::npos);
  EXPECT_EQ(writer->Close(), flushed);
}

TEST(EventFile, CreateInAnUncreatableDirectoryFailsNamingIt) {
  const std::string dir = FreshTempDir("blocked");
  WriteBytes(dir + "/file", "x");
  auto writer = SummaryWriter::Create(dir + "/file/sub");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(dir + "/file/sub"),
            std::string::npos)
      << writer.status();
}

CO_TEST(EventFile, AsyncFlushCompletesOnTheCallersExecutorAfterWriting) {
  const std::string dir = FreshTempDir("async");
  auto writer = NewWriter(dir, {.flush_every = absl::Hours(1)});
  CO_ASSERT_TRUE(writer != nullptr);
  writer->AddScalar("x", 3, 3);
  absl::Status flushed = co_await writer->AsyncFlush(asio::use_awaitable);
  EXPECT_TRUE(flushed.ok()) << flushed;
  EXPECT_TRUE(co_test::Io().get_executor().running_in_this_thread());
  EXPECT_EQ(ReadEventsForTest(writer->path()).size(), 2u);
  absl::Status closed = co_await writer->AsyncClose(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
}

// The writer thread held in on_batch after taking its first event, with
// max_pending events queued behind it: the next Add waits (SummaryWriter's
// queue is bounded), then every event reaches the file in order.
class HeldWriter {
 public:
  explicit HeldWriter(const std::string& dir) {
    writer_ = NewWriter(dir, {.flush_every = absl::Hours(1),
                              .max_queue = 1,
                              .max_pending = 4,
                              .on_batch = [this](size_t events) {
                                std::unique_lock lock(mu_);
                                batches_.push_back(events);
                                if (batches_.size() == 1) {
                                  holding_.set_value();
                                  cv_.wait(lock, [this] { return released_; });
                                }
                              }});
  }
  // A test that failed half-way must not leave the writer thread held nor
  // the adder running.
  ~HeldWriter() {
    Release();
    if (writer_ != nullptr) writer_->Close().IgnoreError();
    if (adder_.joinable()) adder_.join();
  }
  // Waits (bounded) until the writer thread holds its first batch (the
  // file-version event Create queued, alone, as nothing else was added);
  // then queues events 0..3 (max_pending of them) behind it, adds event 4 on
  // a thread of its own and waits (bounded) until that Add waits for room
  // or has returned. False when the writer could not be made or held.
  bool HoldThenFillAndAddOneMore() {
    if (writer_ == nullptr ||
        holding_.get_future().wait_for(std::chrono::seconds(20)) !=
            std::future_status::ready) {
      return false;
    }
    for (int i = 0; i < 4; ++i) writer_->AddScalar("x", i, i);
    added_ = added_promise_.get_future();
    adder_ = std::thread([this] {
      writer_->AddScalar("x", 4, 4);
      added_promise_.set_value();
    });
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (writer_->adds_waiting() == 0 && !AddReturned() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return true;
  }
  bool AddReturned(std::chrono::seconds within = std::chrono::seconds(0)) {
    return added_.wait_for(within) == std::future_status::ready;
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<size_t> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }
  SummaryWriter& writer() { return *writer_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::vector<size_t> batches_;
  std::promise<void> holding_;
  std::promise<void> added_promise_;
  std::future<void> added_;
  std::thread adder_;
  std::shared_ptr<SummaryWriter> writer_;
};

TEST(EventFile, AnAddWaitsWhileMaxPendingEventsWaitAndNoEventIsLost) {
  HeldWriter held(FreshTempDir("bounded"));
  ASSERT_TRUE(held.HoldThenFillAndAddOneMore());
  EXPECT_EQ(held.writer().adds_waiting(), 1u);
  EXPECT_FALSE(held.AddReturned());

  held.Release();
  EXPECT_TRUE(held.AddReturned(std::chrono::seconds(20)));
  ASSERT_TRUE(held.writer().Close().ok());
  const std::vector<size_t> batches = held.batches();
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches[0], 1u);  // the file version
  EXPECT_EQ(batches[1], 4u);  // the queue never held more than max_pending
  auto scalars =
      testing::ScalarsTagged(ReadEventsForTest(held.writer().path()), "x");
  ASSERT_EQ(scalars.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(scalars[i], std::make_pair(int64_t{i}, static_cast<float>(i)));
  }
}

TEST(EventFile, CloseReleasesAnAddWaitingForRoomAndDropsItsEvent) {
  HeldWriter held(FreshTempDir("bounded_close"));
  ASSERT_TRUE(held.HoldThenFillAndAddOneMore());
  ASSERT_EQ(held.writer().adds_waiting(), 1u);

  // Close, while the writer thread is still held: the waiting Add returns.
  std::future<absl::Status> closed =
      std::async(std::launch::async, [&] { return held.writer().Close(); });
  EXPECT_TRUE(held.AddReturned(std::chrono::seconds(20)));
  held.Release();
  ASSERT_EQ(closed.wait_for(std::chrono::seconds(20)),
            std::future_status::ready);
  EXPECT_TRUE(closed.get().ok());
  auto scalars =
      testing::ScalarsTagged(ReadEventsForTest(held.writer().path()), "x");
  ASSERT_EQ(scalars.size(), 4u);  // 0..3; 4 was still waiting at Close
  EXPECT_EQ(scalars[3], std::make_pair(int64_t{3}, 3.0f));
}

TEST(EventFile, AMaxPendingOfZeroIsInvalid) {
  auto writer =
      SummaryWriter::Create(FreshTempDir("zero_pending"), {.max_pending = 0});
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(writer.status().message().find("max_pending"), std::string::npos)
      << writer.status();
}

TEST(EventFile, AddingFromManyThreadsLosesNothing) {
  const std::string dir = FreshTempDir("threads");
  auto writer = NewWriter(dir, {.max_queue = 3});
  ASSERT_NE(writer, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&writer, t] {
      for (int i = 0; i < 250; ++i) writer->AddScalar("x", t, t * 1000 + i);
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(writer->Close().ok());
  EXPECT_EQ(
      testing::ScalarsTagged(ReadEventsForTest(writer->path()), "x").size(),
      1000u);
}

// ---- the library's reader

TEST(RecordReader, ReadsBackWhatAppendRecordFramed) {
  std::string bytes;
  AppendRecord(bytes, "first");
  AppendRecord(bytes, "");
  AppendRecord(bytes, std::string(1000, 'z'));
  auto records = ReadAllRecords(bytes, "mem");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(*records,
            (std::vector<std::string>{"first", "", std::string(1000, 'z')}));
}

TEST(RecordReader, AFlippedByteAnywhereGivesDataLossNamingTheFile) {
  const std::string dir = FreshTempDir("corrupt");
  auto writer = NewWriter(dir);
  ASSERT_NE(writer, nullptr);
  writer->AddScalar("loss", 1.5f, 3);
  ASSERT_TRUE(writer->Close().ok());
  const std::string good = ReadFileBytes(writer->path());
  ASSERT_TRUE(ReadRecordFile(writer->path()).ok());
  for (size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] ^= 0x20;
    WriteBytes(writer->path(), bad);
    auto records = ReadRecordFile(writer->path());
    ASSERT_EQ(records.status().code(), absl::StatusCode::kDataLoss)
        << "byte " << at;
    EXPECT_NE(records.status().message().find(writer->path()),
              std::string::npos);
  }
}

TEST(RecordReader, ATruncatedFileGivesDataLossAtTheRecordsOffset) {
  std::string bytes = FrameRecord("abc") + FrameRecord("defgh");
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    if (cut == FrameRecord("abc").size()) continue;  // a clean boundary
    auto records = ReadAllRecords(bytes.substr(0, cut), "cut.tfevents");
    ASSERT_EQ(records.status().code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_NE(records.status().message().find("cut.tfevents"),
              std::string::npos);
  }
  auto records = ReadAllRecords(bytes.substr(0, 12 + 3 + 4 + 5), "cut");
  EXPECT_NE(records.status().message().find("offset 19"), std::string::npos)
      << records.status();
}

TEST(RecordReader, AHugeLengthWithAValidCrcIsDataLossNotAnAllocation) {
  std::string header;
  for (int i = 0; i < 8; ++i) header.push_back(i == 7 ? '\x7f' : '\xff');
  const uint32_t crc = MaskCrc32c(Crc32c(header));
  for (int i = 0; i < 4; ++i)
    header.push_back(static_cast<char>(crc >> (8 * i)));
  auto records = ReadAllRecords(header + "data", "huge");
  EXPECT_EQ(records.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(records.status().message().find("exceeds"), std::string::npos)
      << records.status();
}

TEST(RecordReader, AReadErrorRepeatsAtTheSameRecord) {
  std::string bytes = FrameRecord("ok") + "garbage!";
  RecordReader reader(bytes, "g");
  auto first = reader.Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ(**first, "ok");
  auto bad = reader.Next();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(reader.Next().status(), bad.status());
}

}  // namespace
}  // namespace cosession::event_file_test
