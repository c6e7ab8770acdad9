#include "cosession/pipeline/element_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace cosession::element_record_test {
namespace {

Element Sample() {
  Element e;
  e.components.emplace_back(Tensor::FromVector<float>(
      {1.5f, -2.0f, 0.0f, 3.25f, 1e30f, -0.0f}, TensorShape{2, 3}));
  e.components.emplace_back(Tensor::Scalar<double>(2.718281828459045));
  e.components.emplace_back(Tensor::Allocate(DType::kInt32, TensorShape{0, 5}));
  e.components.emplace_back(
      Tensor::FromVector<int64_t>({-1, 0, int64_t{1} << 40, 7}));
  e.components.emplace_back(Tensor::FromVector<bool>({true, false, true}));
  e.components.emplace_back(std::string("nul\0inside", 10));
  e.components.emplace_back(std::string());
  e.origin = {.kind = ElementOrigin::Kind::kFileLine,
              .source = std::make_shared<const std::string>("digits.csv"),
              .index = 17};
  return e;
}

std::string Encoded(const Element& e) {
  std::string bytes;
  AppendElementRecord(e, bytes);
  return bytes;
}

TEST(ElementRecord, RoundTripsEveryDtypeStringsAndTheOrigin) {
  const Element in = Sample();
  ElementRecordDecoder decoder;
  absl::StatusOr<Element> out = decoder.Decode(Encoded(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t c = 0; c < in.size(); ++c) {
    if (const Tensor* t = std::get_if<Tensor>(&in.components[c])) {
      const Tensor& back = out->tensor(c);
      EXPECT_EQ(back.dtype(), t->dtype()) << c;
      EXPECT_EQ(back.shape().DebugString(), t->shape().DebugString()) << c;
      ASSERT_EQ(back.TotalBytes(), t->TotalBytes()) << c;
      if (t->TotalBytes() > 0) {
        EXPECT_EQ(std::memcmp(back.raw_data(), t->raw_data(), t->TotalBytes()),
                  0)
            << c;
      }
    } else {
      EXPECT_EQ(out->text(c), in.text(c)) << c;
    }
  }
  EXPECT_EQ(out->origin.ToString(), "digits.csv:17");
  // Consecutive elements of one source share its name.
  absl::StatusOr<Element> again = decoder.Decode(Encoded(in));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->origin.source.get(), out->origin.source.get());
  // An element without an origin keeps none.
  Element plain;
  plain.components.emplace_back(Tensor::Scalar<int64_t>(3));
  absl::StatusOr<Element> bare = decoder.Decode(Encoded(plain));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->origin.kind, ElementOrigin::Kind::kNone);
  EXPECT_EQ(bare->tensor(0).scalar<int64_t>(), 3);
}

TEST(ElementRecord, EveryCutIsInvalidArgumentAndNothingIsTrusted) {
  const std::string bytes = Encoded(Sample());
  ElementRecordDecoder decoder;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    absl::StatusOr<Element> out = decoder.Decode(bytes.substr(0, cut));
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << cut;
  }
  auto refused = [&](std::string damaged, const std::string& message) {
    absl::StatusOr<Element> out = decoder.Decode(damaged);
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
    EXPECT_TRUE(absl::StrContains(out.status().message(), message))
        << out.status() << " lacks " << message;
  };
  refused(bytes + "x", "1 bytes follow the element");
  // Byte 4 is component 0's kind, byte 5 its dtype.
  std::string kind = bytes;
  kind[4] = 7;
  refused(kind, "component 0 has kind 7");
  std::string dtype = bytes;
  dtype[5] = 9;
  refused(dtype, "component 0 has dtype 9");
  // A rank, then dimensions that claim more bytes than the record holds.
  std::string rank = bytes;
  rank[6] = 100;
  refused(rank, "rank 100");
  std::string huge = bytes;
  const int64_t big = int64_t{1} << 40;
  std::memcpy(huge.data() + 10, &big, sizeof(big));
  refused(huge, "need more bytes than are left");
  const int64_t negative = -3;
  std::string minus = bytes;
  std::memcpy(minus.data() + 10, &negative, sizeof(negative));
  refused(minus, "dimension 0 of size -3");
  // A bool tensor holds only 0 and 1.
  Element flags;
  flags.components.emplace_back(Tensor::FromVector<bool>({true}));
  std::string bool_bytes = Encoded(flags);
  bool_bytes[4 + 1 + 1 + 4 + 8] = 2;
  refused(bool_bytes, "bool but holds the byte 2");
  // A component count above the bytes left.
  std::string count = bytes;
  count[3] = 0x7f;
  refused(count, "components in");
}

}  // namespace
}  // namespace cosession::element_record_test
