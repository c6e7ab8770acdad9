// DataLossNaming: builds the DataLoss errors of one reader, each naming what
// is corrupt and where, so that every message of a file format reads the
// same way: `corrupt checkpoint file '/ckpt/model.ckpt-20.safetensors': ...`.
//
//   const DataLossNaming corrupt("corrupt checkpoint file", path);
//   if (bad) return corrupt("the header length ", n, " runs past the end");
//
// It refers to `what` and `source` without copying them: both must outlive
// it. Thread safety: immutable.
#ifndef COSESSION_IO_DATA_LOSS_H_
#define COSESSION_IO_DATA_LOSS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cosession {

class DataLossNaming {
 public:
  DataLossNaming(absl::string_view what, absl::string_view source)
      : what_(what), source_(source) {}
  template <typename... Args>
  absl::Status operator()(const Args&... details) const {
    return absl::DataLossError(
        absl::StrCat(what_, " '", source_, "': ", details...));
  }

 private:
  absl::string_view what_;
  absl::string_view source_;
};

}  // namespace cosession

#endif  // COSESSION_IO_DATA_LOSS_H_
