// Delivering a result to an Asio completion handler the way every public
// async operation of cosession must: exactly once, through the handler's
// associated executor (never inline in the initiating call, never on a
// foreign thread), with outstanding work counted on that executor meanwhile,
// and with the handler's cancellation slot cleared before the handler runs.
#ifndef COSESSION_ASYNC_COMPLETION_H_
#define COSESSION_ASYNC_COMPLETION_H_

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <utility>

#include "absl/functional/any_invocable.h"

namespace cosession {

// Returns a callable that may be invoked once, from any thread, with a
// `From`; it posts handler(convert(from)) to the handler's executor.
template <typename From, typename Handler, typename Convert>
absl::AnyInvocable<void(From)> PostToHandler(Handler handler, Convert convert) {
  auto work =
      boost::asio::prefer(boost::asio::get_associated_executor(handler),
                          boost::asio::execution::outstanding_work.tracked);
  return [handler = std::move(handler), work = std::move(work),
          convert = std::move(convert)](From from) mutable {
    // Post through an untracked copy: once the handler is queued, the
    // handler's thread may run it and tear its context down, so this thread
    // must not touch the context again (destroying a tracked copy would).
    // The tracked `work` travels with the handler and dies on its thread.
    auto executor = boost::asio::prefer(
        work, boost::asio::execution::outstanding_work.untracked);
    // Convert before posting: the handler's own result is usually smaller.
    boost::asio::post(
        std::move(executor),
        [handler = std::move(handler), work = std::move(work),
         result = convert(std::move(from))]() mutable {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected()) slot.clear();
          std::move(handler)(std::move(result));
        });
  };
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_COMPLETION_H_
