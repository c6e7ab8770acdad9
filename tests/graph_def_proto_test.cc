// GraphDef encoding: the text format TensorFlow's graph.pbtxt has, and wire
// bytes that decode to the same nodes, inputs and attributes.
#include "cosession/io/graph_def_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cosession/graph/ops.h"
#include "tests/event_test_util.h"

namespace cosession::graph_def_proto_test {
namespace {

using testing::ParseWire;
using testing::WireField;

TEST(GraphDefProto, TextIsTensorFlowsGraphPbtxt) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  ops::Identity(g, x, "y");
  // TensorShapeProto [-1, 2] in text format, `indent` spaces in.
  auto shape_m1_2 = [](int indent) {
    const std::string pad(indent, ' ');
    return pad + "shape {\n" + pad + "  dim {\n" + pad + "    size: -1\n" +
           pad + "  }\n" + pad + "  dim {\n" + pad + "    size: 2\n" + pad +
           "  }\n" + pad + "}\n";
  };
  const std::string output_shapes =
      "  attr {\n"
      "    key: \"_output_shapes\"\n"
      "    value {\n"
      "      list {\n" +
      shape_m1_2(8) +
      "      }\n"
      "    }\n"
      "  }\n";
  const std::string expected =
      "node {\n"
      "  name: \"x\"\n"
      "  op: \"Placeholder\"\n" +
      output_shapes +
      "  attr {\n"
      "    key: \"dtype\"\n"
      "    value {\n"
      "      type: DT_FLOAT\n"
      "    }\n"
      "  }\n"
      "  attr {\n"
      "    key: \"shape\"\n"
      "    value {\n" +
      shape_m1_2(6) +
      "    }\n"
      "  }\n"
      "}\n"
      "node {\n"
      "  name: \"y\"\n"
      "  op: \"Identity\"\n"
      "  input: \"x\"\n" +
      output_shapes +
      "}\n"
      "versions {\n"
      "  producer: 134\n"
      "}\n";
  EXPECT_EQ(GraphDefText(g), expected);
}

struct DecodedNode {
  std::string op;
  std::vector<std::string> inputs;
  std::map<std::string, std::vector<WireField>> attrs;  // AttrValue fields
};

std::map<std::string, DecodedNode> DecodeNodes(const std::string& graph_def) {
  std::map<std::string, DecodedNode> nodes;
  for (const WireField& f : ParseWire(graph_def)) {
    if (f.number != 1) continue;
    std::string name;
    DecodedNode node;
    for (const WireField& n : ParseWire(f.bytes)) {
      if (n.number == 1) name = n.bytes;
      if (n.number == 2) node.op = n.bytes;
      if (n.number == 3) node.inputs.push_back(n.bytes);
      if (n.number == 5) {
        std::string key;
        std::vector<WireField> value;
        for (const WireField& e : ParseWire(n.bytes)) {
          if (e.number == 1) key = e.bytes;
          if (e.number == 2) value = ParseWire(e.bytes);
        }
        node.attrs[key] = value;
      }
    }
    nodes[name] = std::move(node);
  }
  return nodes;
}

TEST(GraphDefProto, WireBytesHoldEveryNodeInputAndAttribute) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output c = ops::Const(g, Tensor::FromVector<float>({1.5f, -2.0f}), "c");
  Output sum = ops::Add(g, x, c, "sum");
  ops::WithControlDependencies(g, {Operation(c.node())}, sum, "out");

  const std::string bytes = EncodeGraphDef(g);
  std::map<std::string, DecodedNode> nodes = DecodeNodes(bytes);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes["sum"].op, "Add");
  EXPECT_EQ(nodes["sum"].inputs, (std::vector<std::string>{"x", "c"}));
  EXPECT_EQ(nodes["out"].inputs, (std::vector<std::string>{"sum", "^c"}));

  // dtype: AttrValue.type (field 6) = DT_FLOAT (1).
  const std::vector<WireField>& dtype = nodes["x"].attrs["dtype"];
  ASSERT_EQ(dtype.size(), 1u);
  EXPECT_EQ(dtype[0].number, 6u);
  EXPECT_EQ(dtype[0].integer, 1u);

  // value: AttrValue.tensor (8) = TensorProto {dtype 1, shape [2], content}.
  const std::vector<WireField>& value = nodes["c"].attrs["value"];
  ASSERT_EQ(value.size(), 1u);
  ASSERT_EQ(value[0].number, 8u);
  std::string content;
  uint64_t tensor_dtype = 0;
  for (const WireField& t : ParseWire(value[0].bytes)) {
    if (t.number == 1) tensor_dtype = t.integer;
    if (t.number == 4) content = t.bytes;
  }
  EXPECT_EQ(tensor_dtype, 1u);
  ASSERT_EQ(content.size(), 2 * sizeof(float));
  float values[2];
  std::memcpy(values, content.data(), sizeof(values));
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);

  // Every node has its output shapes; the MetaGraphDef wraps the GraphDef.
  for (const auto& [name, node] : nodes) {
    EXPECT_TRUE(node.attrs.contains("_output_shapes")) << name;
  }
  std::vector<WireField> meta = ParseWire(EncodeMetaGraphDef(bytes));
  ASSERT_EQ(meta.size(), 1u);
  EXPECT_EQ(meta[0].number, 2u);
  EXPECT_EQ(meta[0].bytes, bytes);
}

}  // namespace
}  // namespace cosession::graph_def_proto_test
