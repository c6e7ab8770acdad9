// Precompiled header: the heavy third-party headers most translation units
// include. Only speeds up builds; every file still includes what it uses.
#include <Eigen/Core>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/channel.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
