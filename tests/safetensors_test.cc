// Safetensors: what the writer produces (checked by an independent reader),
// round trips, and every kind of corruption the reader must report as
// DataLoss without crashing.
#include "cosession/io/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/crc32c.h"
#include "tests/independent_safetensors_reader.h"

namespace cosession::safetensors_test {
namespace {

using testing::BytesOf;
using testing::ReadIndependently;

constexpr char kSource[] = "mem.safetensors";

std::vector<std::pair<std::string, Tensor>> SampleTensors() {
  Tensor flags = Tensor::Allocate(DType::kBool, TensorShape{3});
  flags.mutable_flat<bool>()[0] = true;
  flags.mutable_flat<bool>()[1] = false;
  flags.mutable_flat<bool>()[2] = true;
  return {
      {"w",
       Tensor::FromVector<float>({1.5f, -2, 3, 4, 5, 6}, TensorShape{2, 3})},
      {"b", Tensor::FromVector<double>({0.25, -0.5, 1e300})},
      {"n", Tensor::Scalar<int32_t>(-7)},
      {"global_step", Tensor::Scalar<int64_t>(123456789012345)},
      {"flags", flags},
      {"empty", Tensor(DType::kFloat, TensorShape{0, 4})},
  };
}

std::string SampleFile() {
  auto file = BuildSafetensors(SampleTensors(), {{"global_step", "12"}});
  EXPECT_TRUE(file.ok()) << file.status();
  return SerializeSafetensors(*file);
}

// A file with a hand-written header (padded, length prefixed) and `data`,
// whose "crc32c" is right, so that only the defect under test is wrong.
std::string HandMadeFile(const std::string& tensors_json,
                         const std::string& data,
                         std::string metadata_json = "") {
  if (metadata_json.empty()) {
    metadata_json = absl::StrCat(R"({"crc32c":")", Crc32c(data), R"("})");
  }
  std::string header =
      absl::StrCat("{", tensors_json, tensors_json.empty() ? "" : ",",
                   R"("__metadata__":)", metadata_json, "}");
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

void ExpectDataLoss(const std::string& bytes, const std::string& hint) {
  auto parsed = ParseSafetensors(bytes, kSource);
  ASSERT_FALSE(parsed.ok()) << "accepted a file that should fail: " << hint;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss)
      << parsed.status();
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), kSource))
      << parsed.status();
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), hint))
      << "expected '" << hint << "' in: " << parsed.status();
}

std::string FourFloats() { return BytesOf(std::vector<float>{1, 2, 3, 4}); }

// ---- what the writer produces

TEST(Safetensors, WrittenFileIsReadByAnIndependentReader) {
  const std::string bytes = SampleFile();
  testing::MiniFile file = ReadIndependently(bytes);
  ASSERT_EQ(file.tensors.size(), 6u);
  EXPECT_EQ(file.tensors["w"].dtype, "F32");
  EXPECT_EQ(file.tensors["w"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.tensors["w"].bytes,
            BytesOf(std::vector<float>{1.5f, -2, 3, 4, 5, 6}));
  EXPECT_EQ(file.tensors["b"].dtype, "F64");
  EXPECT_EQ(file.tensors["b"].bytes,
            BytesOf(std::vector<double>{0.25, -0.5, 1e300}));
  EXPECT_EQ(file.tensors["n"].dtype, "I32");
  EXPECT_TRUE(file.tensors["n"].shape.empty());
  EXPECT_EQ(file.tensors["global_step"].dtype, "I64");
  EXPECT_EQ(file.tensors["global_step"].bytes,
            BytesOf(std::vector<int64_t>{123456789012345}));
  EXPECT_EQ(file.tensors["flags"].dtype, "BOOL");
  EXPECT_EQ(file.tensors["flags"].bytes, std::string("\x01\x00\x01", 3));
  EXPECT_EQ(file.tensors["empty"].shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(file.tensors["empty"].bytes.empty());
  EXPECT_EQ(file.metadata["global_step"], "12");
}

TEST(Safetensors, DataStartsEightByteAligned) {
  const std::string bytes = SampleFile();
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8 + n - 1] == ' ' || bytes[8 + n - 1] == '}', true);
}

TEST(Safetensors, ParseReturnsTheTensorsAndMetadataThatWereWritten) {
  auto parsed = ParseSafetensors(SampleFile(), kSource);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (const auto& [name, tensor] : SampleTensors()) {
    ASSERT_EQ(parsed->tensors.count(name), 1u) << name;
    EXPECT_TRUE(parsed->tensors.at(name).IsSameAs(tensor)) << name;
  }
  EXPECT_EQ(parsed->metadata.at("global_step"), "12");
  const std::string bytes = SampleFile();
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(parsed->metadata.at("crc32c"),
            absl::StrCat(Crc32c(bytes.substr(8 + n))));
}

TEST(Safetensors, HandMadeValidFileParses) {
  auto parsed = ParseSafetensors(
      HandMadeFile(R"("x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})",
                   FourFloats()),
      kSource);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors.at("x").flat<float>()[3], 4.0f);
}

TEST(Safetensors, BuildRejectsDuplicateAndReservedNames) {
  auto t = Tensor::Scalar<float>(1);
  EXPECT_EQ(BuildSafetensors({{"a", t}, {"a", t}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildSafetensors({{"__metadata__", t}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildSafetensors({{"a", t}}, {{"crc32c", "1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- corruption: each one DataLoss naming the source and the defect

TEST(Safetensors, EveryTruncationIsDataLoss) {
  const std::string bytes = SampleFile();
  for (size_t size = 0; size < bytes.size(); ++size) {
    auto parsed = ParseSafetensors(bytes.substr(0, size), kSource);
    ASSERT_FALSE(parsed.ok()) << "accepted a file cut to " << size << " bytes";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(Safetensors, FlippedDataByteIsACrcMismatch) {
  std::string bytes = SampleFile();
  bytes[bytes.size() - 30] ^= 0x10;  // inside w/b's data
  ExpectDataLoss(bytes, "CRC-32C");
}

TEST(Safetensors, FlippedHeaderBytesAreDataLoss) {
  const std::string good = SampleFile();
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  const std::string header = good.substr(8, n);
  // The opening brace, a quote, a digit of the data offsets.
  for (size_t at :
       {header.find('{'), header.find('"'), header.find("data_offsets") + 16}) {
    std::string bytes = good;
    bytes[8 + at] ^= 0x01;
    auto parsed = ParseSafetensors(bytes, kSource);
    ASSERT_FALSE(parsed.ok()) << "flip at header byte " << at;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(Safetensors, AnyFlippedBitIsRejectedOrChangesOnlyWhatTheHeaderNames) {
  // Every single-bit flip: DataLoss, or (a flip inside a name or a metadata
  // value, which no checksum covers) a file that still parses -- never a
  // crash, never other data.
  const std::string good = SampleFile();
  const auto original = *ParseSafetensors(good, kSource);
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = good;
      bytes[i] ^= static_cast<char>(1 << bit);
      auto parsed = ParseSafetensors(bytes, kSource);
      if (!parsed.ok()) {
        ASSERT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
        continue;
      }
      ASSERT_EQ(parsed->tensors.size(), original.tensors.size())
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST(Safetensors, HeaderLengthLargerThanTheFileIsDataLoss) {
  std::string bytes = SampleFile();
  uint64_t n = bytes.size();  // 8 more than what follows
  std::memcpy(bytes.data(), &n, 8);
  ExpectDataLoss(bytes, "past the end of the file");
}

TEST(Safetensors, HeaderLengthAboveTheLimitIsDataLoss) {
  std::string bytes = SampleFile();
  uint64_t n = ~uint64_t{0};
  std::memcpy(bytes.data(), &n, 8);
  ExpectDataLoss(bytes, "above the limit");
}

TEST(Safetensors, HeaderLengthTooSmallIsDataLoss) {
  std::string bytes = SampleFile();
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  n -= 16;
  std::memcpy(bytes.data(), &n, 8);
  ExpectDataLoss(bytes, "not valid JSON");
}

TEST(Safetensors, OverlappingOffsetsAreDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})",
                   FourFloats()),
      "overlap");
}

TEST(Safetensors, AGapBetweenTensorsIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})",
                   FourFloats()),
      "gap");
}

TEST(Safetensors, TrailingBytesAreDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})",
                   FourFloats()),
      "trailing bytes");
}

TEST(Safetensors, OffsetsOutOfBoundsAreDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[5],"data_offsets":[0,20]})",
                   FourFloats()),
      "beyond the data section");
}

TEST(Safetensors, OffsetsEndingBeforeTheyBeginAreDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[0],"data_offsets":[16,0]})",
                   FourFloats()),
      "end before they begin");
}

TEST(Safetensors, UnknownDtypeIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F16","shape":[8],"data_offsets":[0,16]})",
                   FourFloats()),
      "unknown dtype");
}

TEST(Safetensors, SizeThatDoesNotMatchTheShapeIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F64","shape":[3],"data_offsets":[0,16]})",
                   FourFloats()),
      "need 24");
}

TEST(Safetensors, NegativeDimensionIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]})",
                   FourFloats()),
      "invalid dimension");
}

TEST(Safetensors, OverflowingShapeIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[4294967296,4294967296,0],)"
                   R"("data_offsets":[0,0]},)"
                   R"("b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})",
                   FourFloats()),
      "overflows");
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F64","shape":[4611686018427387904],)"
                   R"("data_offsets":[0,16]})",
                   FourFloats()),
      "need");
}

TEST(Safetensors, BoolByteOtherThanZeroOrOneIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]})",
                   std::string("\x01\x02", 2)),
      "BOOL byte 2");
}

TEST(Safetensors, MissingOrMalformedCrcIsDataLoss) {
  const std::string tensors =
      R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})";
  ExpectDataLoss(HandMadeFile(tensors, FourFloats(), R"({"global_step":"1"})"),
                 "no crc32c");
  ExpectDataLoss(HandMadeFile(tensors, FourFloats(), R"({"crc32c":"0x12"})"),
                 "not an unsigned 32-bit decimal");
  ExpectDataLoss(
      HandMadeFile(tensors, FourFloats(), R"({"crc32c":"99999999999"})"),
      "not an unsigned 32-bit decimal");
}

TEST(Safetensors, MalformedHeaderStructureIsDataLoss) {
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],)"
                   R"("extra":1})",
                   FourFloats()),
      "unknown field 'extra'");
  ExpectDataLoss(HandMadeFile(R"("a":[1,2])", FourFloats()),
                 "not a JSON object");
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0]})",
                   FourFloats()),
      "data_offsets");
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]})",
                   FourFloats()),
      "invalid dimension");
  ExpectDataLoss(
      HandMadeFile(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})",
                   FourFloats(), R"({"crc32c":7})"),
      "not a string");
}

TEST(Safetensors, DeeplyNestedHeaderIsDataLossNotAStackOverflow) {
  std::string deep = absl::StrCat(R"("a":)", std::string(100000, '['),
                                  std::string(100000, ']'));
  ExpectDataLoss(HandMadeFile(deep, ""), "nests deeper");
}

TEST(Safetensors, HeaderThatIsNotAnObjectIsDataLoss) {
  std::string bytes(8, '\0');
  std::string header = "[1,2,3] ";
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  ExpectDataLoss(bytes + header, "does not start with '{'");
}

TEST(Safetensors, RandomMutationsNeverCrash) {
  const std::string good = SampleFile();
  std::mt19937 rng(20261130);
  for (int round = 0; round < 3000; ++round) {
    // Edited as a vector: g++ 12 warns falsely on std::string insert/erase.
    std::vector<char> edited(good.begin(), good.end());
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !edited.empty(); ++e) {
      size_t at = rng() % edited.size();
      switch (rng() % 3) {
        case 0:
          edited[at] = static_cast<char>(rng());
          break;
        case 1: {
          size_t count = std::min<size_t>(1 + rng() % 8, edited.size() - at);
          edited.erase(edited.begin() + at, edited.begin() + at + count);
          break;
        }
        default:
          edited.insert(edited.begin() + at, static_cast<char>(rng()));
      }
    }
    const std::string bytes(edited.begin(), edited.end());
    auto parsed = ParseSafetensors(bytes, kSource);
    if (!parsed.ok()) {
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss)
          << parsed.status();
    }
  }
}

TEST(Safetensors, ReadingAMissingFileIsNotFound) {
  auto read = ReadSafetensorsFile("/nonexistent/dir/x.safetensors");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(read.status().message(), "x.safetensors"));
}

}  // namespace
}  // namespace cosession::safetensors_test
