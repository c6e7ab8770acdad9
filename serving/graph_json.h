// GraphToJson / GraphFromJson: a Graph, or the part of it some ops need,
// written as JSON and rebuilt through the op registry -- the graph file of
// an exported model (serving/saved_model.h).
//
// The format (docs/saved_model.md documents it with an example):
//   {"format": "cosession.graph", "format_version": 1,
//    "seed": 42,                                   (only when the graph has
//    one) "nodes": [{"name": "layer1/matmul", "op": "MatMul",
//               "inputs": ["x:0", "layer1/weights:0"],
//               "control_inputs": [],
//               "attrs": {"transpose_a": {"bool": false}, ...}}, ...],
//    "collections": {"variables": ["layer1/weights", ...], ...}}
// Nodes come in an order where every node follows its inputs (the graph's
// own order). An attr is an object with one key naming its type:
//   {"int": 3}  {"float": 0.5}  {"float": "nan" | "inf" | "-inf"}
//   {"bool": true}  {"string": "..."}  {"dtype": "float"}  {"ints": [0, 1]}
//   {"shape": [-1, 64]}  {"shape": null} (unknown rank)
//   {"tensor": {"dtype": "float", "shape": [2], "data": "<base64>"}}
//       (the elements row-major, little-endian, as in safetensors)
//   {"node": "layer1/weights"}
//       (an attr the op declares in OpDef::node_id_attrs: another node,
//        by name, since ids change when a graph is pruned)
// OpaqueAttr (a host object such as a dataset) cannot be written.
//
// Thread safety: pure functions of their arguments; the graph read must not
// change meanwhile, the graph built is owned by the caller.
#ifndef COSESSION_SERVING_GRAPH_JSON_H_
#define COSESSION_SERVING_GRAPH_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/graph/graph.h"

namespace cosession {

inline constexpr absl::string_view kGraphJsonFormat = "cosession.graph";
inline constexpr int kGraphJsonFormatVersion = 1;

// A tensor of the graph written as a Placeholder instead of the op that
// produces it: how a training graph's input pipeline is cut off when a
// model is exported. The placeholder has the tensor's dtype and shape, its
// first dimension unknown when `any_batch_size` (so that any number of rows
// can be fed).
struct PlaceholderCut {
  Output tensor;
  std::string placeholder_name;
  bool any_batch_size = true;
};

struct GraphJsonOptions {
  // Only the ops these need (through data inputs, control inputs and node
  // attrs, transitively). Empty = every op of the graph.
  std::vector<Node*> roots{};
  std::vector<PlaceholderCut> cuts{};
};

// InvalidArgument naming the op and attr for an attr that cannot be
// written (an OpaqueAttr, a string that is not UTF-8), a node-id attr that
// names no node, a cut's placeholder name taken by a written op, or a cut
// of an invalid tensor.
absl::StatusOr<nlohmann::json> GraphToJson(const Graph& graph,
                                           const GraphJsonOptions& options);

// Adds the ops of `json` to `graph` (which must not hold ops of the same
// names) through the global op registry (as Graph::AddNode does). `source` (a
// file path) is named in every error: NotFound for an op the registry does not
// know (naming the node and the op type); DataLoss for anything malformed
// (naming the node and the field or attr), including an op whose attrs or
// inputs its shape function rejects. On error the graph may hold some of the
// ops.
absl::Status GraphFromJson(const nlohmann::json& json, absl::string_view source,
                           Graph& graph);

}  // namespace cosession

#endif  // COSESSION_SERVING_GRAPH_JSON_H_
