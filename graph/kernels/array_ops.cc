// Placeholder until the kernels land.
#include "graph/op_registry.h"

namespace cosession {
void RegisterArrayOps(OpRegistry&) {}
}  // namespace cosession
