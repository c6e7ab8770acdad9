#include "hooks/feed_fn_hook.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<FeedFnHook>> FeedFnHook::Create(
    FeedFnHookOptions options) {
  if (!options.feed_fn) {
    return absl::InvalidArgumentError("FeedFnHook: feed_fn is empty");
  }
  return std::shared_ptr<FeedFnHook>(new FeedFnHook(std::move(options)));
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> FeedFnHook::BeforeRun(
    SessionRunContext&) {
  absl::StatusOr<Feeds> feeds;
  try {
    feeds = options_.feed_fn();
  } catch (const std::exception& e) {
    feeds = absl::InternalError(
        absl::StrCat("FeedFnHook: feed_fn threw: ", e.what()));
  } catch (...) {
    feeds = absl::InternalError("FeedFnHook: feed_fn threw a non-exception");
  }
  if (!feeds.ok()) co_return feeds.status();
  SessionRunArgs args;
  args.feeds = *std::move(feeds);
  co_return args;
}

}  // namespace cosession
