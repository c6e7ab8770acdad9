#include "cosession/graph/tensor_shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosession {

TensorShape TensorShape::Unknown() {
  TensorShape shape;
  shape.unknown_rank_ = true;
  return shape;
}

bool TensorShape::IsCompatibleWith(const TensorShape& other) const {
  if (unknown_rank_ || other.unknown_rank_) return true;
  if (dims_.size() != other.dims_.size()) return false;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) {
      return false;
    }
  }
  return true;
}

std::string TensorShape::DebugString() const {
  if (unknown_rank_) return "<unknown>";
  return absl::StrCat("[",
                      absl::StrJoin(dims_, ",",
                                    [](std::string* out, int64_t d) {
                                      if (d < 0) {
                                        out->append("?");
                                      } else {
                                        absl::StrAppend(out, d);
                                      }
                                    }),
                      "]");
}

absl::Status TensorShape::Validate() const {
  if (unknown_rank_) return absl::OkStatus();
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (d < kUnknownDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("Invalid dimension ", d, " in shape ", DebugString()));
    }
    // A checked multiply rather than a division per dimension: every op's
    // output tensor validates its shape, and a 64-bit division costs more
    // than the rest of the check.
    if (d >= 0 && __builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Shape ", DebugString(), " has too many elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cosession
