#include "cosession/hooks/feed_fn_hook.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<FeedFnHook>> FeedFnHook::Create(
    FeedFnHookOptions options) {
  if (!options.feed_fn) {
    return absl::InvalidArgumentError("FeedFnHook: feed_fn is empty");
  }
  return std::shared_ptr<FeedFnHook>(new FeedFnHook(std::move(options)));
}

absl::Status FeedFnHook::BeforeRunSync(SessionRunContext&,
                                       SessionRunArgs& args) {
  absl::StatusOr<Feeds> feeds;
  try {
    feeds = options_.feed_fn();
  } catch (...) {
    feeds =
        StatusFromException(std::current_exception(), "FeedFnHook: feed_fn");
  }
  if (!feeds.ok()) return feeds.status();
  args.feeds = *std::move(feeds);
  return absl::OkStatus();
}

}  // namespace cosession
