// A graph as TensorFlow's GraphDef protobuf (tensorflow/core/framework/
// graph.proto, node_def.proto, attr_value.proto), encoded by hand like the
// event protos: what TensorBoard's Graphs dashboard reads from an event
// file, and what TensorFlow's CheckpointSaverHook writes as graph.pbtxt.
//
//   GraphDef    { repeated NodeDef node = 1; VersionDef versions = 4; }
//   NodeDef     { string name = 1; string op = 2; repeated string input = 3;
//                 map<string, AttrValue> attr = 5; }
//   AttrValue   { oneof value { ListValue list = 1; bytes s = 2; int64 i = 3;
//                 float f = 4; bool b = 5; DataType type = 6;
//                 TensorShapeProto shape = 7; TensorProto tensor = 8; } }
//   MetaGraphDef { GraphDef graph_def = 2; }
//
// Nodes come in the order they were added, each input named as TensorFlow
// names it ("op" for output 0, "op:1", "^op" for a control input), the
// attributes sorted by name. An attribute that is no value (an OpaqueAttr,
// such as the dataset an input op reads) is left out. Every node also has
// TensorFlow's "_output_shapes" (as as_graph_def(add_shapes=True) writes),
// which TensorBoard shows on the edges. DTypes are TensorFlow's DataType
// numbers (DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_INT64 = 9,
// DT_BOOL = 10); a tensor's values are its little-endian tensor_content.
//
// Pure functions of a graph that no longer changes; thread safe as reading
// the graph is.
#ifndef COSESSION_IO_GRAPH_DEF_PROTO_H_
#define COSESSION_IO_GRAPH_DEF_PROTO_H_

#include <string>
#include <string_view>

#include "cosession/graph/graph.h"

namespace cosession {

// The GraphDef's wire-format bytes (an Event's graph_def).
std::string EncodeGraphDef(const Graph& graph);
// A MetaGraphDef holding only `graph_def`, EncodeGraphDef's bytes (an
// Event's meta_graph_def): the graph is encoded once for both events.
std::string EncodeMetaGraphDef(std::string_view graph_def);
// The GraphDef in protobuf's text format (graph.pbtxt).
std::string GraphDefText(const Graph& graph);

}  // namespace cosession

#endif  // COSESSION_IO_GRAPH_DEF_PROTO_H_
