#include "cosession/io/graph_def_proto.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cosession/io/proto_wire.h"

namespace cosession {
namespace {

// The message is built once as a small tree and then written in either
// format, so that the two cannot disagree on what a graph holds.
struct ProtoMessage;

struct ProtoEnum {
  int number = 0;
  std::string name{};
};

struct ProtoField {
  std::string name{};
  uint32_t number = 0;
  std::variant<int64_t, float, bool, std::string, ProtoEnum,
               std::shared_ptr<ProtoMessage>>
      value{};
};

struct ProtoMessage {
  std::vector<ProtoField> fields{};

  void Add(std::string name, uint32_t number, auto value) {
    fields.push_back(ProtoField{std::move(name), number, std::move(value)});
  }
  ProtoMessage& AddMessage(std::string name, uint32_t number) {
    return AddMessage(std::move(name), number, ProtoMessage());
  }
  ProtoMessage& AddMessage(std::string name, uint32_t number,
                           ProtoMessage child) {
    auto shared = std::make_shared<ProtoMessage>(std::move(child));
    ProtoMessage& ref = *shared;
    fields.push_back(ProtoField{std::move(name), number, std::move(shared)});
    return ref;
  }
};

ProtoEnum TfDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return {1, "DT_FLOAT"};
    case DType::kDouble:
      return {2, "DT_DOUBLE"};
    case DType::kInt32:
      return {3, "DT_INT32"};
    case DType::kInt64:
      return {9, "DT_INT64"};
    case DType::kBool:
      return {10, "DT_BOOL"};
  }
  return {0, "DT_INVALID"};
}

void FillShape(ProtoMessage& shape, const TensorShape& s) {
  if (s.unknown_rank()) {
    shape.Add("unknown_rank", 3, true);
    return;
  }
  for (int64_t size : s.dim_sizes()) {
    shape.AddMessage("dim", 2).Add("size", 1, size);
  }
}

void FillTensor(ProtoMessage& proto, const Tensor& t) {
  proto.Add("dtype", 1, TfDataType(t.dtype()));
  FillShape(proto.AddMessage("tensor_shape", 2), t.shape());
  if (t.TotalBytes() > 0) {
    proto.Add(
        "tensor_content", 4,
        std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes()));
  }
}

// False for a value that has no AttrValue (an OpaqueAttr).
bool FillAttrValue(ProtoMessage& attr, const AttrValue& value) {
  return std::visit(
      [&]<typename T>(const T& v) {
        if constexpr (std::is_same_v<T, int64_t>) {
          attr.Add("i", 3, v);
        } else if constexpr (std::is_same_v<T, double>) {
          attr.Add("f", 4, static_cast<float>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
          attr.Add("b", 5, v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          attr.Add("s", 2, v);
        } else if constexpr (std::is_same_v<T, DType>) {
          attr.Add("type", 6, TfDataType(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          ProtoMessage& list = attr.AddMessage("list", 1);
          for (int64_t i : v) list.Add("i", 3, i);
        } else if constexpr (std::is_same_v<T, TensorShape>) {
          FillShape(attr.AddMessage("shape", 7), v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          FillTensor(attr.AddMessage("tensor", 8), v);
        } else {
          return false;
        }
        return true;
      },
      value);
}

std::string InputName(const Output& input) {
  if (input.index() == 0) return input.node()->name();
  return absl::StrCat(input.node()->name(), ":", input.index());
}

ProtoMessage GraphDefMessage(const Graph& graph) {
  ProtoMessage graph_def;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node* node = graph.node(id);
    if (node == nullptr) continue;
    ProtoMessage& node_def = graph_def.AddMessage("node", 1);
    node_def.Add("name", 1, node->name());
    node_def.Add("op", 2, node->type());
    for (const Output& input : node->inputs()) {
      node_def.Add("input", 3, InputName(input));
    }
    for (const Node* control : node->control_inputs()) {
      node_def.Add("input", 3, absl::StrCat("^", control->name()));
    }
    std::vector<std::pair<std::string, ProtoMessage>> attrs;
    for (const auto& [name, value] : node->attrs()) {
      ProtoMessage attr;
      if (FillAttrValue(attr, value)) attrs.emplace_back(name, std::move(attr));
    }
    if (node->num_outputs() > 0) {
      ProtoMessage shapes;
      ProtoMessage& list = shapes.AddMessage("list", 1);
      for (int i = 0; i < node->num_outputs(); ++i) {
        FillShape(list.AddMessage("shape", 7), node->output_shape(i));
      }
      attrs.emplace_back("_output_shapes", std::move(shapes));
    }
    std::sort(attrs.begin(), attrs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [name, value] : attrs) {
      ProtoMessage& entry = node_def.AddMessage("attr", 5);
      entry.Add("key", 1, name);
      entry.AddMessage("value", 2, std::move(value));
    }
  }
  // VersionDef.producer: TensorFlow checks it against its own range when it
  // imports a graph; TensorBoard only shows it.
  graph_def.AddMessage("versions", 4).Add("producer", 1, int64_t{134});
  return graph_def;
}

void AppendWire(std::string& out, const ProtoMessage& message) {
  using proto_wire::PutBytes;
  using proto_wire::PutFloat;
  using proto_wire::PutInt64;
  for (const ProtoField& field : message.fields) {
    std::visit(
        [&]<typename T>(const T& v) {
          if constexpr (std::is_same_v<T, int64_t>) {
            PutInt64(out, field.number, v);
          } else if constexpr (std::is_same_v<T, float>) {
            PutFloat(out, field.number, v);
          } else if constexpr (std::is_same_v<T, bool>) {
            PutInt64(out, field.number, v ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::string>) {
            PutBytes(out, field.number, v);
          } else if constexpr (std::is_same_v<T, ProtoEnum>) {
            PutInt64(out, field.number, v.number);
          } else {
            std::string child;
            AppendWire(child, *v);
            PutBytes(out, field.number, child);
          }
        },
        field.value);
  }
}

void AppendText(std::string& out, const ProtoMessage& message, int level) {
  for (const ProtoField& field : message.fields) {
    out.append(2 * level, ' ');
    out += field.name;
    std::visit(
        [&]<typename T>(const T& v) {
          if constexpr (std::is_same_v<T, int64_t>) {
            absl::StrAppend(&out, ": ", v, "\n");
          } else if constexpr (std::is_same_v<T, float>) {
            char buffer[32];
            auto written = std::to_chars(buffer, buffer + sizeof(buffer), v);
            absl::StrAppend(&out, ": ",
                            absl::string_view(buffer, written.ptr - buffer),
                            "\n");
          } else if constexpr (std::is_same_v<T, bool>) {
            absl::StrAppend(&out, ": ", v ? "true" : "false", "\n");
          } else if constexpr (std::is_same_v<T, std::string>) {
            absl::StrAppend(&out, ": \"", absl::CEscape(v), "\"\n");
          } else if constexpr (std::is_same_v<T, ProtoEnum>) {
            absl::StrAppend(&out, ": ", v.name, "\n");
          } else {
            out += " {\n";
            AppendText(out, *v, level + 1);
            out.append(2 * level, ' ');
            out += "}\n";
          }
        },
        field.value);
  }
}

}  // namespace

std::string EncodeGraphDef(const Graph& graph) {
  std::string out;
  AppendWire(out, GraphDefMessage(graph));
  return out;
}

std::string EncodeMetaGraphDef(std::string_view graph_def) {
  std::string out;
  proto_wire::PutBytes(out, 2, graph_def);
  return out;
}

std::string GraphDefText(const Graph& graph) {
  std::string out;
  AppendText(out, GraphDefMessage(graph), 0);
  return out;
}

}  // namespace cosession
