#include "cosession/async/status_from_exception.h"

#include <boost/system/system_error.hpp>

#include "absl/strings/str_cat.h"
#include "cosession/async/detail/cancellation.h"
#include "cosession/graph/status.h"

namespace cosession {

absl::Status StatusFromException(std::exception_ptr error,
                                 absl::string_view where) {
  try {
    std::rethrow_exception(error);
  } catch (const StatusError& e) {
    return e.status();
  } catch (const boost::system::system_error& e) {
    if (detail::IsCancellation(e.code())) {
      return absl::CancelledError(absl::StrCat(where, " was cancelled"));
    }
    return absl::InternalError(absl::StrCat(where, " threw: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(where, " threw: ", e.what()));
  } catch (...) {
    return absl::InternalError(
        absl::StrCat(where, " threw a non-standard exception"));
  }
}

}  // namespace cosession
