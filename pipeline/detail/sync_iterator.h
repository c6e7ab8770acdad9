// SyncIterator: the base of iterators that never wait (in-memory sources):
// NextNow() answers TryNext() and Next() alike.
#ifndef COSESSION_PIPELINE_DETAIL_SYNC_ITERATOR_H_
#define COSESSION_PIPELINE_DETAIL_SYNC_ITERATOR_H_

#include <boost/asio/awaitable.hpp>
#include <optional>

#include "cosession/pipeline/dataset.h"

namespace cosession::detail {

class SyncIterator : public ElementIterator {
 public:
  virtual Result NextNow() = 0;
  std::optional<Result> TryNext() final { return NextNow(); }
  boost::asio::awaitable<Result> Next() final { co_return NextNow(); }
};

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_SYNC_ITERATOR_H_
