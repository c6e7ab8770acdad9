// StatusFromException: the one place where an exception escaping user code
// (a hook, a kernel, a coordinated task, a step function) becomes the
// absl::Status that crosses the library boundary instead.
//
//   try { s = co_await hook->AfterRun(ctx, values); }
//   catch (...) { s = StatusFromException(std::current_exception(),
//   "AfterRun"); }
//
// The mapping, `where` naming what threw ("AfterRun", "Op 'loss' (Mean)",
// "task 'loader'"):
//   StatusError (graph/status.h)            its own status
//   Asio's cancellation of a wait           Cancelled "<where> was cancelled"
//     (operation_aborted, channel_cancelled)
//   any other std::exception                Internal "<where> threw: <what()>"
//   anything else                           Internal "<where> threw a
//                                           non-standard exception"
//
// Thread safety: stateless.
#ifndef COSESSION_ASYNC_STATUS_FROM_EXCEPTION_H_
#define COSESSION_ASYNC_STATUS_FROM_EXCEPTION_H_

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cosession {

// `error` must not be null.
absl::Status StatusFromException(std::exception_ptr error,
                                 absl::string_view where);

}  // namespace cosession

#endif  // COSESSION_ASYNC_STATUS_FROM_EXCEPTION_H_
