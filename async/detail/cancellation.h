// Recognising a cancellation: the error codes with which Asio reports a
// cancelled wait, and a coroutine's cancellation state.
#ifndef COSESSION_ASYNC_DETAIL_CANCELLATION_H_
#define COSESSION_ASYNC_DETAIL_CANCELLATION_H_

#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/channel_error.hpp>
#include <boost/system/error_code.hpp>

namespace cosession::detail {

// operation_aborted for sockets, timers and posts; channel_cancelled for
// experimental channels.
inline bool IsCancellation(const boost::system::error_code& ec) {
  return ec == boost::asio::error::operation_aborted ||
         ec == boost::asio::experimental::error::channel_cancelled;
}

// True once a coroutine's cancellation was delivered; used as
// IsCancelled(co_await asio::this_coro::cancellation_state), which costs no
// coroutine frame.
inline bool IsCancelled(const boost::asio::cancellation_state& state) {
  return state.cancelled() != boost::asio::cancellation_type::none;
}

}  // namespace cosession::detail

#endif  // COSESSION_ASYNC_DETAIL_CANCELLATION_H_
