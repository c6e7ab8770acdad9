// FeedFnHook: feeds tensors computed by a function before every step, as
// TensorFlow 1.x's tf.train.FeedFnHook.
//
//   auto hook = FeedFnHook::Create({.feed_fn = [&]() -> FeedFnHook::Feeds {
//     return {{x, NextBatch()}};
//   }});
//
// Behaviour kept from TensorFlow: feed_fn is called once in every BeforeRun
// and its feeds join the step. A tensor the caller (or another hook) also
// feeds makes the step InvalidArgument and nothing runs (MonitoredSession's
// rule).
//
// Additions: feed_fn returns a StatusOr, so it can end the input cleanly
// (OutOfRange: the step returns OutOfRange and the session stops cleanly) or
// fail the step with any other error; an exception thrown by feed_fn becomes
// Internal naming the hook.
//
// Errors: Create returns InvalidArgument when feed_fn is empty.
//
// Thread safety: feed_fn is called from the step coroutine, one step at a
// time.
#ifndef COSESSION_HOOKS_FEED_FN_HOOK_H_
#define COSESSION_HOOKS_FEED_FN_HOOK_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"

namespace cosession {

struct FeedFnHookOptions {
  using Feeds = std::vector<std::pair<Output, Tensor>>;
  std::function<absl::StatusOr<Feeds>()> feed_fn{};
};

class FeedFnHook : public SyncSessionRunHook {
 public:
  using Feeds = FeedFnHookOptions::Feeds;

  static absl::StatusOr<std::shared_ptr<FeedFnHook>> Create(
      FeedFnHookOptions options);

  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;

 private:
  explicit FeedFnHook(FeedFnHookOptions options)
      : options_(std::move(options)) {}
  FeedFnHookOptions options_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_FEED_FN_HOOK_H_
