// Precompiled header of the graph layer: the heavy third-party headers its
// kernels include. Only speeds up builds; every file still includes what it
// uses.
#include <Eigen/Core>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
