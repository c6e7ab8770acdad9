// Status helpers shared by every layer.
//
// Run-time errors travel as absl::Status with TensorFlow's canonical codes
// (docs/design.md, "Errors"). Building a graph wrong is a programming error
// and throws StatusError, which carries the same absl::Status so callers can
// still inspect the code.
//
// Thread safety: everything here is stateless.
#ifndef COSESSION_GRAPH_STATUS_H_
#define COSESSION_GRAPH_STATUS_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cosession {

// Thrown only while building a graph (never from a run): adding an op to a
// finalized graph, a dtype or shape mismatch detected at build time, an
// unknown op type.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Throws StatusError when `status` is not OK.
inline void ThrowIfError(absl::Status status) {
  if (!status.ok()) throw StatusError(std::move(status));
}

}  // namespace cosession

#define COSESSION_STATUS_CONCAT_INNER_(a, b) a##b
#define COSESSION_STATUS_CONCAT_(a, b) COSESSION_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define COSESSION_RETURN_IF_ERROR(expr)                    \
  do {                                                     \
    ::absl::Status cosession_status_ = (expr);             \
    if (!cosession_status_.ok()) return cosession_status_; \
  } while (false)

// `lhs = value of expr` or returns its error.
#define COSESSION_ASSIGN_OR_RETURN(lhs, expr) \
  COSESSION_ASSIGN_OR_RETURN_IMPL_(           \
      COSESSION_STATUS_CONCAT_(cosession_statusor_, __LINE__), lhs, expr)
#define COSESSION_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).status();         \
  lhs = std::move(tmp).value()

#endif  // COSESSION_GRAPH_STATUS_H_
