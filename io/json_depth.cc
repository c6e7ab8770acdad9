#include "cosession/io/json_depth.h"

#include <algorithm>

#include "cosession/io/json_string_state.h"

namespace cosession {

int JsonNestingDepth(absl::string_view text, int limit) {
  int depth = 0, deepest = 0;
  JsonStringState strings;
  for (char c : text) {
    if (strings.InString(c)) continue;
    if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace cosession
