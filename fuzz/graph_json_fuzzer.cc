// libFuzzer target: the reader of an exported model's graph
// (serving/graph_json.h) must never crash, hang or allocate beyond the
// input's size on any bytes: they are parsed as JSON after the nesting
// check LoadSavedModel makes, then rebuilt through the op registry (every
// op's shape function sees what the fuzzer wrote), ending in OK, NotFound
// (an unknown op) or DataLoss. Seeds: fuzz/corpus/graph_json/.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "cosession/graph/graph.h"
#include "cosession/io/json_depth.h"
#include "cosession/serving/graph_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  if (cosession::JsonNestingDepth(text, 32) > 32) return 0;
  const nlohmann::json json =
      nlohmann::json::parse(text.begin(), text.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  cosession::Graph graph;
  const absl::Status s = cosession::GraphFromJson(json, "fuzz", graph);
  if (!s.ok() && !absl::IsDataLoss(s) && !absl::IsNotFound(s)) {
    __builtin_trap();
  }
  return 0;
}
