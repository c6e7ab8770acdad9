// AsyncOnPool<T>(pool, fn, token): runs fn() -- blocking work: a file read,
// a map function -- on a thread of `pool` and completes with its T through
// the handler's associated executor (async/completion.h), exactly once.
// Cancellation (any type, through the handler's slot) completes at once
// with T(absl::CancelledError(what)); fn still runs to its end on the pool
// and its result is dropped, so fn must own (or share) what it uses.
// T is an absl::Status or absl::StatusOr<...>.
#ifndef COSESSION_PIPELINE_DETAIL_ON_POOL_H_
#define COSESSION_PIPELINE_DETAIL_ON_POOL_H_

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "cosession/async/completion.h"
#include "cosession/async/runtime.h"

namespace cosession::detail {

// The one completion of an operation that two parties race to complete.
template <typename T>
class CompleteOnce {
 public:
  explicit CompleteOnce(absl::AnyInvocable<void(T)> done)
      : done_(std::move(done)) {}
  void Complete(T result) {
    absl::AnyInvocable<void(T)> taken;
    {
      std::lock_guard lock(mu_);
      taken = std::move(done_);
    }
    if (taken) taken(std::move(result));
  }

 private:
  std::mutex mu_;
  absl::AnyInvocable<void(T)> done_ ABSL_GUARDED_BY(mu_);
};

template <typename T, typename Fn, typename CompletionToken>
auto AsyncOnPool(Runtime::executor_type pool, Fn fn, std::string what,
                 CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(T)>(
      [](auto handler, Runtime::executor_type pool, Fn fn, std::string what) {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto once = std::make_shared<CompleteOnce<T>>(
            PostToHandler<T>(std::move(handler), [](T r) { return r; }));
        if (slot.is_connected()) {
          slot.assign(
              [once, what = std::move(what)](boost::asio::cancellation_type) {
                once->Complete(T(absl::CancelledError(what)));
              });
        }
        boost::asio::post(pool, [once, fn = std::move(fn)]() mutable {
          once->Complete(fn());
        });
      },
      token, std::move(pool), std::move(fn), std::move(what));
}

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_ON_POOL_H_
