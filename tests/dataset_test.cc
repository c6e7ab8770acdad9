// The input pipeline: CSV and gzip reading with exact errors, the
// deterministic batch stream (batching, epochs, seeded shuffle, kept rows,
// resuming at a batch), and the IteratorGetNext op through a plain Session
// and a MonitoredSession, including stops while the producer or GetNext
// waits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cosession/async/coordinator.h"
#include "cosession/async/monitored_session.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "cosession/io/csv_reader.h"
#include "cosession/pipeline/csv_dataset.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/training/dataset_hook.h"
#include "tests/co_test.h"
#include "tests/hook_test_util.h"
#include "tests/scratch_dir.h"
#include "tests/stalled_input.h"
#include "tests/test_files.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::dataset_test {
namespace {

namespace asio = boost::asio;
using testing::ReadBytes;
using testing::ScratchDir;
using testing::StalledInput;
using testing::TestRuntime;
using testing::WriteFile;
using testing::WriteGzip;

constexpr char kDigits[] = COSESSION_DIGITS_CSV;

// Rows "10*i, 10*i+1, i": the label names the row.
std::string NumberedRows(int64_t first, int64_t count) {
  std::string text;
  for (int64_t i = first; i < first + count; ++i) {
    text += absl::StrCat(10 * i, ",", 10 * i + 1, ",", i, "\n");
  }
  return text;
}

// A dataset over `rows` numbered rows in one scratch file.
struct NumberedData {
  explicit NumberedData(int64_t rows) {
    path = dir / "rows.csv";
    WriteFile(path, NumberedRows(0, rows));
  }
  CsvDatasetOptions Options() const {
    return {.files = {path},
            .num_columns = 3,
            .label_dtype = DType::kInt64,
            .batch_size = 4};
  }
  ScratchDir dir;
  std::string path;
};

std::shared_ptr<const CsvDataset> MakeDataset(CsvDatasetOptions options) {
  auto dataset = CsvDataset::Create(std::move(options));
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? *dataset : nullptr;
}

std::vector<int64_t> Labels(const Tensor& labels) {
  std::vector<int64_t> out;
  if (labels.dtype() == DType::kInt64) {
    for (int64_t v : labels.flat<int64_t>()) out.push_back(v);
  } else {
    for (int32_t v : labels.flat<int32_t>()) out.push_back(v);
  }
  return out;
}

using Batches = std::vector<std::vector<int64_t>>;

asio::awaitable<void> DrainBatches(Dataset batches, int64_t start,
                                   int64_t limit, Batches* out) {
  auto it = batches.MakeIterator({.pool = TestRuntime().executor()});
  if (!it.ok()) {
    ADD_FAILURE() << it.status();
    co_return;
  }
  absl::StatusOr<int64_t> skipped = co_await (*it)->Skip(start);
  if (!skipped.ok()) {
    ADD_FAILURE() << skipped.status();
    co_return;
  }
  while (static_cast<int64_t>(out->size()) < limit) {
    ElementIterator::Result next = co_await NextOf(**it);
    if (!next.ok()) {
      ADD_FAILURE() << next.status();
      co_return;
    }
    if (!next->has_value()) co_return;
    out->push_back(Labels((*next)->tensor(1)));
  }
}

// Runs `body` to its end on an io_context of its own, bounded in time; a
// hang ends the process, as a CO_TEST's does (work in flight refers to the
// caller's frame).
void RunBounded(asio::awaitable<void> body) {
  asio::io_context io;
  bool done = false;
  asio::co_spawn(io, std::move(body), [&done](std::exception_ptr e) {
    done = true;
    if (e) ADD_FAILURE() << "the test's coroutine threw";
  });
  io.run_for(co_test::kTimeLimit);
  if (!done) {
    std::fprintf(stderr, "RunBounded: the coroutine did not end in %llds\n",
                 static_cast<long long>(co_test::kTimeLimit.count()));
    std::_Exit(1);
  }
}

// Every batch (as its labels) of CsvBatches(dataset) from batch `start`
// (skipped by the iterator, as a resume does), until the end or `limit`.
Batches AllBatches(const std::shared_ptr<const CsvDataset>& dataset,
                   int64_t start = 0, int64_t limit = 100000) {
  Batches batches;
  RunBounded(DrainBatches(CsvBatches(dataset), start, limit, &batches));
  return batches;
}

// ---------------------------------------------------------------- CSV

TEST(CsvReader, ParsesPlainText) {
  ScratchDir dir;
  WriteFile(dir / "a.csv", "1,2.5,-3\n 4 , 5,6e1\r\n");
  auto table = ReadCsvFile(dir / "a.csv");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->num_columns, 3);
  EXPECT_EQ(table->num_rows(), 2);
  EXPECT_EQ(table->values, (std::vector<double>{1, 2.5, -3, 4, 5, 60}));
}

TEST(CsvReader, ReadsGzipDetectedByContentNotName) {
  ScratchDir dir;
  WriteGzip(dir / "packed.csv", "1,2\n3,4\n");
  auto table = ReadCsvFile(dir / "packed.csv");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->values, (std::vector<double>{1, 2, 3, 4}));
}

TEST(CsvReader, WrongColumnCountNamesFileAndLine) {
  ScratchDir dir;
  const std::string path = dir / "short.csv";
  WriteFile(path, "1,2,3\n4,5\n");
  auto table = ReadCsvFile(path, {.num_columns = 3});
  EXPECT_TRUE(absl::IsInvalidArgument(table.status())) << table.status();
  EXPECT_EQ(table.status().message(),
            absl::StrCat(path, ":2: expected 3 columns, got 2"));
}

TEST(CsvReader, ColumnCountComesFromTheFirstRowWhenNotGiven) {
  ScratchDir dir;
  const std::string path = dir / "long.csv";
  WriteFile(path, "1,2\n3,4\n5,6,7\n");
  auto table = ReadCsvFile(path);
  EXPECT_EQ(table.status().message(),
            absl::StrCat(path, ":3: expected 2 columns, got 3"));
}

TEST(CsvReader, NotANumberNamesFileLineAndColumn) {
  ScratchDir dir;
  const std::string path = dir / "bad.csv";
  WriteFile(path, "1,2,3\n\n4,abc,6\n");  // the blank line still counts
  auto table = ReadCsvFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(table.status())) << table.status();
  EXPECT_EQ(table.status().message(),
            absl::StrCat(path, ":3: column 2: 'abc' is not a number"));
}

TEST(CsvReader, EmptyFieldsAndNonFiniteValuesAreNotNumbers) {
  ScratchDir dir;
  const std::string path = dir / "holes.csv";
  WriteFile(path, "1,,3\n");
  EXPECT_EQ(ReadCsvFile(path).status().message(),
            absl::StrCat(path, ":1: column 2: '' is not a number"));
  WriteFile(path, "1,2,nan\n");
  EXPECT_EQ(ReadCsvFile(path).status().message(),
            absl::StrCat(path, ":1: column 3: 'nan' is not a number"));
  WriteFile(path, "1,2,3x\n");
  EXPECT_EQ(ReadCsvFile(path).status().message(),
            absl::StrCat(path, ":1: column 3: '3x' is not a number"));
}

// Whatever path a field takes (small integers are read without
// from_chars), its value is std::from_chars's, bit for bit (-0 included),
// and what from_chars rejects stays rejected.
TEST(CsvReader, EveryFieldReadsAsFromCharsReadsIt) {
  const std::vector<std::string> numbers = {
      "0", "-0", "7", "007", "-42", "123456789012345", "-123456789012345",
      "1234567890123456",
      // over 2^53: the conversion rounds
      "9007199254740993", "-9999999999999999", "98765432109876543210", "1.5",
      "1.", ".5", "-0.0", "1e3", "-2.25e-1", "16", " 3 ", "\t12\t", "+4",
      "+-1"};
  for (const std::string& field : numbers) {
    std::vector<double> values;
    absl::Status s = ParseCsvFields(field, 1, ',', values);
    ASSERT_TRUE(s.ok()) << "'" << field << "': " << s;
    ASSERT_EQ(values.size(), 1u);
    std::string text = field;
    text.erase(0, text.find_first_not_of(" \t"));
    text.erase(text.find_last_not_of(" \t") + 1);
    if (text[0] == '+') text.erase(0, 1);
    double want = 0;
    std::from_chars(text.data(), text.data() + text.size(), want);
    EXPECT_EQ(std::memcmp(&values[0], &want, sizeof(double)), 0)
        << "'" << field << "' read as " << values[0] << ", from_chars " << want;
  }
  for (const char* field : {"1x", "0x10", "1-", "--1", "-", "1 2"}) {
    std::vector<double> values;
    absl::Status s = ParseCsvFields(field, 1, ',', values);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << "'" << field << "': " << s;
    EXPECT_NE(s.message().find("is not a number"), std::string::npos) << s;
  }
  // Rows of several fields mix both paths.
  std::vector<double> row;
  ASSERT_TRUE(ParseCsvFields("3,-0.5,12,1e2", 4, ',', row).ok());
  EXPECT_EQ(row, (std::vector<double>{3, -0.5, 12, 100}));
}

TEST(CsvReader, EmptyFileIsInvalidArgument) {
  ScratchDir dir;
  const std::string path = dir / "empty.csv";
  WriteFile(path, "");
  auto table = ReadCsvFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(table.status())) << table.status();
  EXPECT_EQ(table.status().message(), absl::StrCat(path, ": no rows"));
  WriteFile(path, "\n  \n");
  EXPECT_EQ(ReadCsvFile(path).status().message(),
            absl::StrCat(path, ": no rows"));
}

TEST(CsvReader, MissingFileIsNotFoundNamingIt) {
  ScratchDir dir;
  const std::string path = dir / "absent.csv";
  auto table = ReadCsvFile(path);
  EXPECT_TRUE(absl::IsNotFound(table.status())) << table.status();
  EXPECT_NE(table.status().message().find(path), absl::string_view::npos);
}

TEST(CsvReader, TruncatedOrCorruptGzipIsDataLoss) {
  ScratchDir dir;
  const std::string good = dir / "good.csv.gz";
  WriteGzip(good, NumberedRows(0, 2000));
  const std::string bytes = ReadBytes(good);
  ASSERT_GT(bytes.size(), 100u);

  const std::string truncated = dir / "truncated.csv.gz";
  WriteFile(truncated, bytes.substr(0, bytes.size() / 2));
  auto t = ReadCsvFile(truncated);
  EXPECT_TRUE(absl::IsDataLoss(t.status())) << t.status();
  EXPECT_NE(t.status().message().find(truncated), absl::string_view::npos);

  const std::string corrupt = dir / "corrupt.csv.gz";
  std::string damaged = bytes;
  for (size_t i = 20; i < 60; ++i) damaged[i] = static_cast<char>(~damaged[i]);
  WriteFile(corrupt, damaged);
  auto c = ReadCsvFile(corrupt);
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
}

TEST(CsvReader, RealDigitsFileHas1797RowsOf64FeaturesAndALabel) {
  auto table = ReadCsvFile(kDigits, {.num_columns = 65});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->num_rows(), 1797);
  std::set<int64_t> labels;
  for (int64_t r = 0; r < table->num_rows(); ++r) {
    auto row = table->row(r);
    for (int c = 0; c < 64; ++c) {
      ASSERT_GE(row[c], 0);
      ASSERT_LE(row[c], 16);
    }
    labels.insert(static_cast<int64_t>(row[64]));
  }
  EXPECT_EQ(labels, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// ---------------------------------------------------------------- dataset

TEST(CsvDataset, CreateRejectsBadOptionsNamingThem) {
  const CsvDatasetOptions good = {.files = {"x.csv"}, .num_columns = 3};
  ASSERT_TRUE(CsvDataset::Create(good).ok());
  auto expect_bad = [&](CsvDatasetOptions options, const std::string& name) {
    auto created = CsvDataset::Create(std::move(options));
    EXPECT_TRUE(absl::IsInvalidArgument(created.status()))
        << name << ": " << created.status();
    EXPECT_NE(created.status().message().find(name), absl::string_view::npos)
        << created.status();
  };
  CsvDatasetOptions o = good;
  o.files.clear();
  expect_bad(o, "files");
  o = good;
  o.num_columns = 1;
  expect_bad(o, "num_columns");
  o = good;
  o.label_column = 3;
  expect_bad(o, "label_column");
  o = good;
  o.feature_dtype = DType::kInt32;
  expect_bad(o, "feature_dtype");
  o = good;
  o.label_dtype = DType::kFloat;
  expect_bad(o, "label_dtype");
  o = good;
  o.keep_rows = std::vector<int64_t>{1, -2};
  expect_bad(o, "keep_rows");
  o = good;
  o.keep_rows = std::vector<int64_t>{1, 3, 1};
  expect_bad(o, "keep_rows");
  o = good;
  o.batch_size = 0;
  expect_bad(o, "batch_size");
  o = good;
  o.num_epochs = 0;
  expect_bad(o, "num_epochs");
  o = good;
  o.num_epochs = -2;
  expect_bad(o, "num_epochs");
  o = good;
  o.prefetch_batches = 0;
  expect_bad(o, "prefetch_batches");
}

TEST(CsvDataset, BatchesKeepTheLastSmallerBatch) {
  NumberedData data(10);
  auto dataset = MakeDataset(data.Options());
  EXPECT_EQ(AllBatches(dataset), (std::vector<std::vector<int64_t>>{
                                     {0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

TEST(CsvDataset, DropRemainderDropsTheLastSmallerBatch) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.drop_remainder = true;
  EXPECT_EQ(AllBatches(MakeDataset(options)),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(CsvDataset, BatchHoldsFeaturesInColumnOrderAndTypedLabels) {
  NumberedData data(3);
  CsvDatasetOptions options = data.Options();
  options.label_column = 0;  // the first column is the label now
  options.label_dtype = DType::kInt32;
  auto dataset = MakeDataset(options);
  auto batch = dataset->LoadBatch();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->features.shape(), (TensorShape{3, 2}));
  EXPECT_TRUE(batch->features.IsSameAs(
      Tensor::FromVector<float>({1, 0, 11, 1, 21, 2}, TensorShape{3, 2})));
  EXPECT_TRUE(batch->labels.IsSameAs(Tensor::FromVector<int32_t>({0, 10, 20})));
}

// Every element of `rows` as its features then its label; `path` is
// removed once the first element arrived (the rows are loaded by then).
asio::awaitable<void> DrainRowsRemovingTheFile(Dataset rows, std::string path,
                                               Batches* out) {
  auto it = rows.MakeIterator({.pool = TestRuntime().executor()});
  if (!it.ok()) {
    ADD_FAILURE() << it.status();
    co_return;
  }
  while (true) {
    ElementIterator::Result next = co_await NextOf(**it);
    if (!next.ok()) {
      ADD_FAILURE() << next.status();
      co_return;
    }
    if (!next->has_value()) co_return;
    if (out->empty()) std::remove(path.c_str());
    std::vector<int64_t> values;
    for (float v : (*next)->tensor(0).flat<float>()) {
      values.push_back(static_cast<int64_t>(v));
    }
    values.push_back(Labels((*next)->tensor(1))[0]);
    out->push_back(std::move(values));
  }
}

// The rows source: one element per kept row, features then label, with
// the specs IteratorGetNext relies on; the files are read once for every
// pass of a Repeat.
TEST(CsvDataset, RowsAreOneElementPerKeptRowReadOnceForEveryPass) {
  NumberedData data(5);
  CsvDatasetOptions options = data.Options();
  options.label_column = 0;
  options.keep_rows = std::vector<int64_t>{1, 3};
  Dataset rows = CsvDatasetRows(MakeDataset(options));
  ASSERT_TRUE(rows.spec().has_value());
  EXPECT_EQ(rows.spec()->size(), 2u);
  EXPECT_EQ((*rows.spec())[0].shape, (TensorShape{2}));
  EXPECT_EQ((*rows.spec())[1].shape, TensorShape{});
  EXPECT_TRUE(rows.deterministic());
  // Two passes: the file is removed after the first load, so a second read
  // would fail.
  Batches got;
  RunBounded(DrainRowsRemovingTheFile(rows.Repeat(2), data.path, &got));
  EXPECT_EQ(got, (Batches{{11, 1, 10}, {31, 3, 30}, {11, 1, 10}, {31, 3, 30}}));
}

TEST(CsvDataset, RepeatsForTheGivenEpochsWithoutCrossingEpochs) {
  NumberedData data(5);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = 3;
  const std::vector<int64_t> a = {0, 1, 2, 3}, b = {4};
  EXPECT_EQ(AllBatches(MakeDataset(options)),
            (std::vector<std::vector<int64_t>>{a, b, a, b, a, b}));
}

TEST(CsvDataset, ForeverKeepsGoing) {
  NumberedData data(5);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = -1;
  EXPECT_EQ(AllBatches(MakeDataset(options), 0, 1000).size(), 1000u);
}

TEST(CsvDataset, NoFullBatchWithDropRemainderIsAnEmptyStream) {
  NumberedData data(3);
  CsvDatasetOptions options = data.Options();
  options.drop_remainder = true;
  options.num_epochs = -1;
  EXPECT_TRUE(AllBatches(MakeDataset(options)).empty());
}

std::vector<int64_t> Flatten(const std::vector<std::vector<int64_t>>& batches,
                             size_t begin, size_t end) {
  std::vector<int64_t> rows;
  for (size_t i = begin; i < end; ++i) {
    rows.insert(rows.end(), batches[i].begin(), batches[i].end());
  }
  return rows;
}

TEST(CsvDataset, SeededShuffleIsAPermutationPerEpochAndReproducible) {
  NumberedData data(50);
  CsvDatasetOptions options = data.Options();
  options.batch_size = 5;
  options.num_epochs = 3;
  options.shuffle_seed = 7;
  auto batches = AllBatches(MakeDataset(options));
  ASSERT_EQ(batches.size(), 30u);
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[i] = i;
  std::vector<std::vector<int64_t>> epochs;
  for (size_t e = 0; e < 3; ++e) {
    epochs.push_back(Flatten(batches, e * 10, e * 10 + 10));
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e << " is not a permutation";
    EXPECT_NE(epochs.back(), identity) << "epoch " << e << " not shuffled";
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // The same seed in a fresh dataset: the same stream.
  EXPECT_EQ(AllBatches(MakeDataset(options)), batches);
  // Another seed: another stream.
  options.shuffle_seed = 8;
  EXPECT_NE(AllBatches(MakeDataset(options)), batches);
}

TEST(CsvDataset, KeepRowsKeepsOnlyThoseRowsAcrossFilesInFileOrder) {
  ScratchDir dir;
  WriteFile(dir / "a.csv", NumberedRows(0, 4));
  WriteGzip(dir / "b.csv.gz", NumberedRows(4, 4));
  CsvDatasetOptions options = {.files = {dir / "a.csv", dir / "b.csv.gz"},
                               .num_columns = 3,
                               .label_dtype = DType::kInt64,
                               .keep_rows = std::vector<int64_t>{6, 1, 3, 4},
                               .batch_size = 3};
  EXPECT_EQ(AllBatches(MakeDataset(options)),
            (std::vector<std::vector<int64_t>>{{1, 3, 4}, {6}}));
}

TEST(CsvDataset, KeepRowsPastTheLastRowIsInvalidArgumentAtLoad) {
  NumberedData data(5);
  CsvDatasetOptions options = data.Options();
  options.keep_rows = std::vector<int64_t>{0, 5};
  auto rows = MakeDataset(options)->Load();
  EXPECT_TRUE(absl::IsInvalidArgument(rows.status())) << rows.status();
  EXPECT_NE(rows.status().message().find("keep_rows"), absl::string_view::npos);
}

TEST(CsvDataset, NonIntegerLabelNamesFileLineAndColumn) {
  ScratchDir dir;
  const std::string path = dir / "labels.csv";
  WriteFile(path, "1,2,3\n4,5,6.5\n");
  auto rows = MakeDataset({.files = {path}, .num_columns = 3})->Load();
  EXPECT_TRUE(absl::IsInvalidArgument(rows.status())) << rows.status();
  EXPECT_EQ(rows.status().message().substr(0, path.size() + 13),
            absl::StrCat(path, ":2: column 3:"));
}

// A class label outside [0, num_classes) names its file and line -- also on
// a row that the dataset does not keep (a held-out row is checked before
// training starts, not when it is evaluated).
TEST(CsvDataset, ALabelOutOfRangeNamesFileAndLineEvenInARowNotKept) {
  ScratchDir dir;
  const std::string path = dir / "labels.csv";
  WriteFile(path, "1,2,3\n4,5,6\n7,8,15\n");
  auto rows = MakeDataset({.files = {path},
                           .num_columns = 3,
                           .num_classes = 10,
                           .keep_rows = std::vector<int64_t>{0}})
                  ->Load();
  EXPECT_TRUE(absl::IsInvalidArgument(rows.status())) << rows.status();
  EXPECT_EQ(rows.status().message(),
            absl::StrCat(path,
                         ":3: column 3: label 15 is out of range [0, 10) "
                         "(num_classes)"));
  auto fine =
      MakeDataset({.files = {path}, .num_columns = 3, .num_classes = 16})
          ->Load();
  EXPECT_TRUE(fine.ok()) << fine.status();
}

TEST(CsvDataset, StartAtBatchGivesExactlyTheTailOfTheStream) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.batch_size = 3;
  options.num_epochs = 3;
  options.shuffle_seed = 11;
  auto dataset = MakeDataset(options);
  auto all = AllBatches(dataset);
  ASSERT_EQ(all.size(), 12u);
  for (size_t start = 0; start <= all.size() + 2; ++start) {
    std::vector<std::vector<int64_t>> tail(
        all.begin() + std::min(start, all.size()), all.end());
    EXPECT_EQ(AllBatches(dataset, static_cast<int64_t>(start)), tail)
        << "start " << start;
  }
}

TEST(CsvDataset, RealDigitsLoadAs1797RowsOf64Features) {
  auto dataset = MakeDataset({.files = {kDigits}, .num_columns = 65});
  auto rows = dataset->Load();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)->size(), 1797);
  EXPECT_EQ((*rows)->num_features, 64);
  EXPECT_EQ((*rows)->features.size(), 1797u * 64u);
  EXPECT_EQ(*std::min_element((*rows)->labels.begin(), (*rows)->labels.end()),
            0);
  EXPECT_EQ(*std::max_element((*rows)->labels.begin(), (*rows)->labels.end()),
            9);
}

TEST(SeededRowSplit, SplitsAllRowsDisjointlyAndReproducibly) {
  auto split = SeededRowSplit(1797, 0.8, 42);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->first.size(), 1438u);
  EXPECT_EQ(split->second.size(), 359u);
  std::vector<int64_t> all = split->first;
  all.insert(all.end(), split->second.begin(), split->second.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 1797; ++i) ASSERT_EQ(all[i], i);
  auto again = SeededRowSplit(1797, 0.8, 42);
  EXPECT_EQ(again->first, split->first);
  auto other = SeededRowSplit(1797, 0.8, 43);
  EXPECT_NE(other->first, split->first);
  EXPECT_TRUE(absl::IsInvalidArgument(SeededRowSplit(10, 1.5, 1).status()));
}

// ---------------------------------------------------------------- the op

TEST(DatasetIteratorGetNext, OutputsHaveTheBatchShapes) {
  NumberedData data(4);
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(g, MakeDataset(data.Options()));
  EXPECT_EQ(x.dtype(), DType::kFloat);
  EXPECT_EQ(x.shape(), (TensorShape{kUnknownDim, 2}));
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.shape(), (TensorShape{kUnknownDim}));
  EXPECT_EQ(x.node()->type(), kIteratorGetNextOp);
  EXPECT_TRUE(DatasetOfGetNext(y).ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(DatasetOfGetNext(ops::Const(g, 1.0f)).status()));
}

CO_TEST(DatasetIterator, GetNextBeforeStartIsFailedPreconditionSayingWhatToDo) {
  NumberedData data(4);
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(g, MakeDataset(data.Options()));
  g.Finalize();
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {y}};
  auto result = co_await session.Run(args, asio::use_awaitable);
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_NE(result.status().message().find("StartDatasetIterator"),
            absl::string_view::npos);
}

CO_TEST(DatasetIterator, PlainSessionGetsTheWholeStreamThenOutOfRange) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = 2;
  options.shuffle_seed = 5;
  auto dataset = MakeDataset(options);
  const auto expected = AllBatches(dataset);
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(g, dataset);
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, x));
  std::vector<std::vector<int64_t>> got;
  absl::Status end;
  while (true) {
    RunArgs args{.fetches = {x, y}};
    auto values = co_await session.Run(args, asio::use_awaitable);
    if (!values.ok()) {
      end = values.status();
      break;
    }
    EXPECT_EQ((*values)[0].shape().dim_size(0), (*values)[1].NumElements());
    got.push_back(Labels((*values)[1]));
  }
  EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
  EXPECT_EQ(got, expected);
  RunArgs again{.fetches = {y}};
  auto after = co_await session.Run(again, asio::use_awaitable);
  EXPECT_TRUE(absl::IsOutOfRange(after.status())) << after.status();
  // The producer finished cleanly: it did not stop the coordinator.
  EXPECT_FALSE(coord.ShouldStop());
  coord.RequestStop().IgnoreError();
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
}

CO_TEST(DatasetIterator, StartAtBatchResumesTheStreamExactly) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.batch_size = 3;
  options.num_epochs = 2;
  options.shuffle_seed = 9;
  auto dataset = MakeDataset(options);
  const auto all = AllBatches(dataset);
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(g, dataset);
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, y, 5));
  std::vector<std::vector<int64_t>> got;
  while (true) {
    RunArgs args{.fetches = {y}};
    auto values = co_await session.Run(args, asio::use_awaitable);
    if (!values.ok()) break;
    got.push_back(Labels((*values)[0]));
  }
  EXPECT_EQ(got, std::vector<std::vector<int64_t>>(all.begin() + 5, all.end()));
  coord.RequestStop().IgnoreError();
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
}

CO_TEST(DatasetIterator, BadRowFailsGetNextAndStopsTheCoordinatorWithIt) {
  ScratchDir dir;
  const std::string path = dir / "bad.csv";
  WriteFile(path, "1,2,3\n4,5,6\n7,x,9\n");
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(
      g, MakeDataset({.files = {path}, .num_columns = 3}));
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, x));
  const std::string expected =
      absl::StrCat(path, ":3: column 2: 'x' is not a number");
  RunArgs args{.fetches = {x}};
  auto values = co_await session.Run(args, asio::use_awaitable);
  EXPECT_TRUE(absl::IsInvalidArgument(values.status())) << values.status();
  EXPECT_EQ(values.status().message(), expected);
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(absl::IsInvalidArgument(joined)) << joined;
  EXPECT_EQ(joined.message(), expected);
}

CO_TEST(DatasetIterator, MissingFileFailsGetNextWithNotFound) {
  ScratchDir dir;
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(
      g, MakeDataset({.files = {dir / "nope.csv"}, .num_columns = 3}));
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, x));
  RunArgs args{.fetches = {y}};
  auto values = co_await session.Run(args, asio::use_awaitable);
  EXPECT_TRUE(absl::IsNotFound(values.status())) << values.status();
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(10), asio::use_awaitable);
  EXPECT_TRUE(absl::IsNotFound(joined)) << joined;
}

CO_TEST(DatasetIterator, StopWhileTheProducerWaitsOnAFullChannelIsPrompt) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = -1;  // the producer never runs out
  options.prefetch_batches = 1;
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(g, MakeDataset(options));
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, x));
  RunArgs args{.fetches = {y}};
  auto first = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_OK(first.status());
  // Nobody consumes now: the producer fills its one slot and waits. Only a
  // stop can end it; a producer that ignored the stop would make Join wait
  // out the grace period and fail with DeadlineExceeded.
  coord.RequestStop().IgnoreError();
  const auto start = std::chrono::steady_clock::now();
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(15), asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The pipeline is over: GetNext says so instead of waiting forever.
  auto after = co_await session.Run(args, asio::use_awaitable);
  EXPECT_TRUE(absl::IsCancelled(after.status())) << after.status();
}

CO_TEST(DatasetIterator, StopWhileGetNextWaitsOnAnEmptyChannelIsPrompt) {
  ScratchDir dir;
  StalledInput input(dir);
  testing::TestEvents events;
  Graph g;
  auto [x, y] = DatasetIteratorGetNext(
      g, MakeDataset({.files = {input.path()}, .num_columns = 3}));
  Output marker = testing::TestNever(g, "marker");
  g.Finalize();
  Session session(g, TestRuntime());
  Coordinator coord(co_test::Io().get_executor());
  CO_ASSERT_OK(StartDatasetIterator(session, coord, x));

  using ResultChannel = asio::experimental::concurrent_channel<void(
      boost::system::error_code, Session::RunResult)>;
  ResultChannel results(co_test::Io().get_executor(), 1);
  RunArgs args{.fetches = {x, marker}};
  session.Run(args, [&](Session::RunResult r) {
    results.try_send(boost::system::error_code(), std::move(r));
  });
  // The run is in flight with its async kernels started.
  co_await events.started.async_receive(asio::use_awaitable);
  EXPECT_FALSE(results.ready());

  // The producer is stopped; GetNext, which waits on the empty channel,
  // ends with the pipeline's Cancelled instead of waiting forever.
  coord.RequestStop().IgnoreError();
  auto result = co_await results.async_receive(asio::use_awaitable);
  EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
  absl::Status joined =
      co_await coord.Join(std::chrono::seconds(15), asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
  input.Release();
}

// ---------------------------------------------------------------- monitored

class EndCountingHook : public SessionRunHook {
 public:
  boost::asio::awaitable<absl::Status> End(Session&) override {
    ++ends;
    co_return absl::OkStatus();
  }
  bool MaySuspend() const override { return false; }
  int ends = 0;
};

CO_TEST(DatasetHook, MonitoredSessionStepsUntilTheDataEndsThenStopsCleanly) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = 2;
  auto dataset = MakeDataset(options);
  const auto expected = AllBatches(dataset);
  testing::StepGraph graph;
  auto [x, y] = DatasetIteratorGetNext(graph.g, dataset);
  auto hook = DatasetHook::Create({.get_next = y});
  CO_ASSERT_OK(hook.status());
  auto ends = std::make_shared<EndCountingHook>();
  auto ms = co_await testing::CreateSessionOrFail(
      graph.g, testing::HookList(*hook, ends));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<std::vector<int64_t>> got;
  absl::Status last;
  while (!ms->ShouldStop()) {
    RunArgs args{.fetches = {y}, .targets = {Operation(graph.train_op.node())}};
    auto values = co_await ms->Run(args, asio::use_awaitable);
    if (!values.ok()) {
      last = values.status();
      break;
    }
    got.push_back(Labels((*values)[0]));
  }
  EXPECT_TRUE(absl::IsOutOfRange(last)) << last;
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(got, expected);
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
  EXPECT_EQ(ends->ends, 1);
}

// Sets the global step in AfterCreateSession, as a restore from a
// checkpoint would (it runs before the DatasetHook).
class SetStepHook : public SessionRunHook {
 public:
  SetStepHook(const testing::StepGraph& graph, int64_t step)
      : graph_(graph), step_(step) {}
  boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator&) override {
    auto set = co_await session.Run(graph_.SetStep(step_), asio::use_awaitable);
    co_return set.status();
  }

 private:
  const testing::StepGraph& graph_;
  int64_t step_;
};

CO_TEST(DatasetHook, ResumesAtTheRestoredGlobalStep) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.batch_size = 3;
  options.num_epochs = 3;
  options.shuffle_seed = 21;
  auto dataset = MakeDataset(options);
  const auto all = AllBatches(dataset);
  testing::StepGraph graph;
  auto [x, y] = DatasetIteratorGetNext(graph.g, dataset);
  auto hook =
      DatasetHook::Create({.get_next = y, .resume_from_global_step = true});
  CO_ASSERT_OK(hook.status());
  auto restore = std::make_shared<SetStepHook>(graph, 7);
  auto ms = co_await testing::CreateSessionOrFail(
      graph.g, testing::HookList(restore, *hook));
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_EQ((*hook)->last_start_batch(), 7);
  std::vector<std::vector<int64_t>> got;
  while (!ms->ShouldStop()) {
    RunArgs args{.fetches = {y}, .targets = {Operation(graph.train_op.node())}};
    auto values = co_await ms->Run(args, asio::use_awaitable);
    if (!values.ok()) break;
    got.push_back(Labels((*values)[0]));
  }
  EXPECT_EQ(got, std::vector<std::vector<int64_t>>(all.begin() + 7, all.end()));
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
}

TEST(DatasetHook, CreateRejectsAnOutputOfAnotherOp) {
  Graph g;
  auto hook = DatasetHook::Create({.get_next = ops::Const(g, 1.0f)});
  EXPECT_TRUE(absl::IsInvalidArgument(hook.status())) << hook.status();
  EXPECT_NE(hook.status().message().find("get_next"), absl::string_view::npos);
  NumberedData data(4);
  auto [x, y] = DatasetIteratorGetNext(g, MakeDataset(data.Options()));
  auto negative = DatasetHook::Create({.get_next = x, .start_at_batch = -1});
  EXPECT_NE(negative.status().message().find("start_at_batch"),
            absl::string_view::npos);
}

CO_TEST(DatasetHook, CloseWhileTheProducerWaitsOnAFullChannelIsPromptAndEnds) {
  NumberedData data(10);
  CsvDatasetOptions options = data.Options();
  options.num_epochs = -1;
  options.prefetch_batches = 1;
  testing::StepGraph graph;
  auto [x, y] = DatasetIteratorGetNext(graph.g, MakeDataset(options));
  auto hook = DatasetHook::Create({.get_next = x});
  CO_ASSERT_OK(hook.status());
  auto ends = std::make_shared<EndCountingHook>();
  auto ms = co_await testing::CreateSessionOrFail(
      graph.g, testing::HookList(*hook, ends));
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args{.fetches = {y}};
  auto first = co_await ms->Run(args, asio::use_awaitable);
  CO_ASSERT_OK(first.status());
  const auto start = std::chrono::steady_clock::now();
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;  // the grace period is 5 s
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(ends->ends, 1);
}

CO_TEST(DatasetHook, CoordinatorStopWhileAStepWaitsForDataEndsTheStepPromptly) {
  ScratchDir dir;
  StalledInput input(dir);
  testing::TestEvents events;
  testing::StepGraph graph;
  auto [x, y] = DatasetIteratorGetNext(
      graph.g, MakeDataset({.files = {input.path()}, .num_columns = 3}));
  Output marker = testing::TestNever(graph.g, "marker");
  auto hook = DatasetHook::Create({.get_next = x});
  CO_ASSERT_OK(hook.status());
  auto ends = std::make_shared<EndCountingHook>();
  auto ms = co_await testing::CreateSessionOrFail(
      graph.g, testing::HookList(*hook, ends));
  CO_ASSERT_TRUE(ms != nullptr);

  using ResultChannel = asio::experimental::concurrent_channel<void(
      boost::system::error_code, MonitoredSession::RunResult)>;
  ResultChannel results(co_test::Io().get_executor(), 1);
  RunArgs args{.fetches = {x, marker}};
  ms->Run(args, [&](MonitoredSession::RunResult r) {
    results.try_send(boost::system::error_code(), std::move(r));
  });
  co_await events.started.async_receive(asio::use_awaitable);
  ms->coordinator().RequestStop().IgnoreError();
  auto result = co_await results.async_receive(asio::use_awaitable);
  EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
  EXPECT_TRUE(ms->ShouldStop());
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
  EXPECT_EQ(ends->ends, 1);
  input.Release();
}

}  // namespace
}  // namespace cosession::dataset_test
