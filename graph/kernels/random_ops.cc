// Placeholder until the kernels land.
#include "graph/op_registry.h"

namespace cosession {
void RegisterRandomOps(OpRegistry&) {}
}  // namespace cosession
