#include "cosession/serving/graph_json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/status.h"
#include "cosession/io/data_loss.h"

namespace cosession {
namespace {

using Json = nlohmann::json;

// ---- writing ----

bool IsNodeIdAttr(const OpDef& def, const std::string& attr) {
  return std::find(def.node_id_attrs.begin(), def.node_id_attrs.end(), attr) !=
         def.node_id_attrs.end();
}

Json ShapeToJson(const TensorShape& shape) {
  if (shape.unknown_rank()) return nullptr;
  Json dims = Json::array();
  for (int64_t d : shape.dim_sizes()) dims.push_back(d);
  return dims;
}

Json TensorToJson(const Tensor& tensor) {
  const std::string bytes(static_cast<const char*>(tensor.raw_data()),
                          tensor.TotalBytes());
  return Json{{"dtype", std::string(DTypeName(tensor.dtype()))},
              {"shape", ShapeToJson(tensor.shape())},
              {"data", absl::Base64Escape(bytes)}};
}

Json DoubleToJson(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

absl::StatusOr<Json> AttrToJson(const Graph& graph, const Node& node,
                                const std::string& name,
                                const AttrValue& value) {
  auto unwritable = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write op '", node.name(), "' (", node.type(),
                     "): attr '", name, "' ", why));
  };
  if (IsNodeIdAttr(node.op_def(), name)) {
    const int64_t* id = std::get_if<int64_t>(&value);
    if (id == nullptr || *id < 0 || *id >= graph.num_nodes()) {
      return unwritable("names no node of the graph");
    }
    return Json{{"node", graph.node(static_cast<int>(*id))->name()}};
  }
  return std::visit(
      [&](const auto& v) -> absl::StatusOr<Json> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return Json{{"int", v}};
        } else if constexpr (std::is_same_v<T, double>) {
          return Json{{"float", DoubleToJson(v)}};
        } else if constexpr (std::is_same_v<T, bool>) {
          return Json{{"bool", v}};
        } else if constexpr (std::is_same_v<T, std::string>) {
          Json text = v;
          try {
            (void)text.dump();  // throws on a string that is not UTF-8
          } catch (const Json::exception&) {
            return unwritable("is a string that is not valid UTF-8");
          }
          return Json{{"string", std::move(text)}};
        } else if constexpr (std::is_same_v<T, DType>) {
          return Json{{"dtype", std::string(DTypeName(v))}};
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return Json{{"ints", v}};
        } else if constexpr (std::is_same_v<T, TensorShape>) {
          return Json{{"shape", ShapeToJson(v)}};
        } else if constexpr (std::is_same_v<T, Tensor>) {
          return Json{{"tensor", TensorToJson(v)}};
        } else {
          static_assert(std::is_same_v<T, OpaqueAttr>);
          return unwritable(
              "is a host object (e.g. a dataset), which cannot be written; "
              "cut the graph above it with a placeholder");
        }
      },
      value);
}

// The ids of the ops `roots` need, without going through a cut tensor.
std::vector<bool> NeededNodes(const Graph& graph, const GraphJsonOptions& o) {
  std::vector<bool> needed(graph.num_nodes(), o.roots.empty());
  if (o.roots.empty()) return needed;
  absl::flat_hash_set<Output> cut;
  for (const PlaceholderCut& c : o.cuts) cut.insert(c.tensor);
  std::vector<const Node*> stack(o.roots.begin(), o.roots.end());
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (needed[node->id()]) continue;
    needed[node->id()] = true;
    for (const Output& input : node->inputs()) {
      if (!cut.contains(input)) stack.push_back(input.node());
    }
    for (Node* control : node->control_inputs()) stack.push_back(control);
    for (const std::string& attr : node->op_def().node_id_attrs) {
      const int64_t* id = node->FindAttr<int64_t>(attr);
      if (id != nullptr && *id >= 0 && *id < graph.num_nodes()) {
        stack.push_back(graph.node(static_cast<int>(*id)));
      }
    }
  }
  return needed;
}

// ---- reading ----

std::optional<int64_t> JsonInt64(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

std::optional<DType> DTypeFromName(const Json& value) {
  if (!value.is_string()) return std::nullopt;
  for (DType d : {DType::kFloat, DType::kDouble, DType::kInt32, DType::kInt64,
                  DType::kBool}) {
    if (value.get_ref<const std::string&>() == DTypeName(d)) return d;
  }
  return std::nullopt;
}

// A shape: null (unknown rank) or dims >= -1. `fully_defined` for tensors.
std::optional<TensorShape> ShapeFromJson(const Json& value,
                                         bool fully_defined) {
  if (value.is_null() && !fully_defined) return TensorShape::Unknown();
  if (!value.is_array() || value.size() > 64) return std::nullopt;
  TensorShape shape{};
  for (const Json& d : value) {
    std::optional<int64_t> size = JsonInt64(d);
    if (!size || *size < (fully_defined ? 0 : kUnknownDim)) return std::nullopt;
    shape.AddDim(*size);
  }
  return shape;
}

absl::StatusOr<Tensor> TensorFromJson(
    const Json& value,
    const std::function<absl::Status(absl::string_view)>& corrupt) {
  if (!value.is_object() || value.size() != 3 || !value.contains("dtype") ||
      !value.contains("shape") || !value.contains("data")) {
    return corrupt("a tensor needs exactly \"dtype\", \"shape\" and \"data\"");
  }
  std::optional<DType> dtype = DTypeFromName(value["dtype"]);
  if (!dtype) return corrupt("the tensor's dtype is unknown");
  std::optional<TensorShape> shape = ShapeFromJson(value["shape"], true);
  if (!shape) return corrupt("the tensor's shape is not a list of sizes >= 0");
  if (!value["data"].is_string())
    return corrupt("the tensor's data is not a string");
  std::string bytes;
  if (!absl::Base64Unescape(value["data"].get_ref<const std::string&>(),
                            &bytes)) {
    return corrupt("the tensor's data is not base64");
  }
  // The element count, checked against the bytes before anything is
  // allocated (a product of huge dimensions must not overflow).
  uint64_t elements = 1;
  for (int64_t d : shape->dim_sizes()) {
    if (d == 0) {
      elements = 0;
    } else if (elements > bytes.size() / static_cast<uint64_t>(d)) {
      return corrupt("the tensor's data is shorter than its shape needs");
    } else {
      elements *= static_cast<uint64_t>(d);
    }
  }
  if (elements * DTypeSize(*dtype) != bytes.size()) {
    return corrupt(absl::StrCat("the tensor's data has ", bytes.size(),
                                " bytes, its shape needs ",
                                elements * DTypeSize(*dtype)));
  }
  if (*dtype == DType::kBool &&
      std::any_of(bytes.begin(), bytes.end(),
                  [](char b) { return b != 0 && b != 1; })) {
    return corrupt("a bool tensor holds a byte other than 0 or 1");
  }
  Tensor tensor(*dtype, *std::move(shape));
  if (!bytes.empty())
    std::memcpy(tensor.raw_data(), bytes.data(), bytes.size());
  return tensor;
}

absl::StatusOr<AttrValue> AttrFromJson(
    const Graph& graph, const Json& value,
    const std::function<absl::Status(absl::string_view)>& corrupt) {
  if (!value.is_object() || value.size() != 1) {
    return corrupt("is not an object with one key naming its type");
  }
  const std::string& type = value.begin().key();
  const Json& v = value.begin().value();
  if (type == "int") {
    if (std::optional<int64_t> i = JsonInt64(v)) return AttrValue(*i);
    return corrupt("is not a 64-bit integer");
  }
  if (type == "float") {
    if (v.is_number()) return AttrValue(v.get<double>());
    if (v == "nan") return AttrValue(std::numeric_limits<double>::quiet_NaN());
    if (v == "inf") return AttrValue(std::numeric_limits<double>::infinity());
    if (v == "-inf") return AttrValue(-std::numeric_limits<double>::infinity());
    return corrupt("is not a number, \"nan\", \"inf\" or \"-inf\"");
  }
  if (type == "bool") {
    if (v.is_boolean()) return AttrValue(v.get<bool>());
    return corrupt("is not true or false");
  }
  if (type == "string") {
    if (v.is_string()) return AttrValue(v.get<std::string>());
    return corrupt("is not a string");
  }
  if (type == "dtype") {
    if (std::optional<DType> d = DTypeFromName(v)) return AttrValue(*d);
    return corrupt("is not a dtype name (float, double, int32, int64, bool)");
  }
  if (type == "ints") {
    if (!v.is_array()) return corrupt("is not a list of integers");
    std::vector<int64_t> ints;
    for (const Json& e : v) {
      std::optional<int64_t> i = JsonInt64(e);
      if (!i) return corrupt("is not a list of 64-bit integers");
      ints.push_back(*i);
    }
    return AttrValue(std::move(ints));
  }
  if (type == "shape") {
    if (std::optional<TensorShape> s = ShapeFromJson(v, false)) {
      return AttrValue(*std::move(s));
    }
    return corrupt("is not null or a list of sizes >= -1 (rank <= 64)");
  }
  if (type == "tensor") {
    COSESSION_ASSIGN_OR_RETURN(Tensor t, TensorFromJson(v, corrupt));
    return AttrValue(std::move(t));
  }
  if (type == "node") {
    const Node* target = v.is_string()
                             ? graph.FindNode(v.get_ref<const std::string&>())
                             : nullptr;
    if (target == nullptr) return corrupt("names no earlier node");
    return AttrValue(static_cast<int64_t>(target->id()));
  }
  return corrupt(absl::StrCat("has the unknown type \"", type, "\""));
}

const Json* Field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool IsStringList(const Json* value) {
  return value != nullptr && value->is_array() &&
         std::all_of(value->begin(), value->end(),
                     [](const Json& e) { return e.is_string(); });
}

absl::Status AddNodeFromJson(const Json& json, size_t index,
                             const DataLossNaming& corrupt,
                             absl::string_view source, Graph& graph) {
  if (!json.is_object()) return corrupt("node ", index, " is not an object");
  const Json* name = Field(json, "name");
  if (name == nullptr || !name->is_string() ||
      name->get_ref<const std::string&>().empty()) {
    return corrupt("node ", index, " has no \"name\" string");
  }
  const std::string& node_name = name->get_ref<const std::string&>();
  const std::string what = absl::StrCat("node '", node_name, "'");
  const Json* op = Field(json, "op");
  if (op == nullptr || !op->is_string()) {
    return corrupt(what, " has no \"op\" string");
  }
  const std::string& op_type = op->get_ref<const std::string&>();
  if (OpRegistry::Global().Find(op_type) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("graph in '", source, "': ", what, " has op type '",
                     op_type, "', which is not registered in this process"));
  }
  if (graph.FindNode(node_name) != nullptr) {
    return corrupt(what, " is defined twice");
  }
  const Json* inputs = Field(json, "inputs");
  const Json* controls = Field(json, "control_inputs");
  const Json* attrs = Field(json, "attrs");
  if (!IsStringList(inputs)) {
    return corrupt(what, ": \"inputs\" is not a list of strings");
  }
  if (controls != nullptr && !IsStringList(controls)) {
    return corrupt(what, ": \"control_inputs\" is not a list of strings");
  }
  if (attrs != nullptr && !attrs->is_object()) {
    return corrupt(what, ": \"attrs\" is not an object");
  }
  for (const auto& [key, value] : json.items()) {
    if (key != "name" && key != "op" && key != "inputs" &&
        key != "control_inputs" && key != "attrs") {
      return corrupt(what, " has the unknown field \"", key, "\"");
    }
  }
  NodeSpec spec{op_type, node_name, {}, {}, {}};
  for (const Json& input : *inputs) {
    const std::string& tensor = input.get_ref<const std::string&>();
    absl::StatusOr<Output> found = graph.FindOutput(tensor);
    if (!found.ok()) {
      return corrupt(what, ": input '", tensor, "' is no earlier op's output");
    }
    spec.inputs.push_back(*found);
  }
  if (controls != nullptr) {
    for (const Json& control : *controls) {
      const std::string& control_name = control.get_ref<const std::string&>();
      Node* found = graph.FindNode(control_name);
      if (found == nullptr) {
        return corrupt(what, ": control input '", control_name,
                       "' is no earlier op");
      }
      spec.control_inputs.emplace_back(found);
    }
  }
  if (attrs != nullptr) {
    for (const auto& [key, value] : attrs->items()) {
      auto attr_corrupt = [&](absl::string_view why) {
        return corrupt(what, ": attr '", key, "' ", why);
      };
      COSESSION_ASSIGN_OR_RETURN(AttrValue attr,
                                 AttrFromJson(graph, value, attr_corrupt));
      spec.attrs.emplace(key, std::move(attr));
    }
  }
  try {
    graph.AddNode(std::move(spec));
  } catch (const StatusError& e) {
    return corrupt(what, " (", op_type,
                   ") does not fit its op: ", e.status().message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Json> GraphToJson(const Graph& graph,
                                 const GraphJsonOptions& options) {
  const std::vector<bool> needed = NeededNodes(graph, options);
  Json nodes = Json::array();
  absl::flat_hash_map<Output, std::string> cut_names;
  for (const PlaceholderCut& cut : options.cuts) {
    if (!cut.tensor.valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot cut the graph at placeholder '",
                       cut.placeholder_name, "': the tensor is empty"));
    }
    const Node* taken = graph.FindNode(cut.placeholder_name);
    if (cut.placeholder_name.empty() ||
        (taken != nullptr && needed[taken->id()])) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot cut the graph at '", cut.tensor.name(),
                       "': the placeholder name '", cut.placeholder_name,
                       "' is empty or taken by an op that is written"));
    }
    TensorShape shape = cut.tensor.shape();
    if (cut.any_batch_size && shape.dims() > 0) shape.set_dim(0, kUnknownDim);
    cut_names[cut.tensor] = absl::StrCat(cut.placeholder_name, ":0");
    nodes.push_back(Json{
        {"name", cut.placeholder_name},
        {"op", "Placeholder"},
        {"inputs", Json::array()},
        {"control_inputs", Json::array()},
        {"attrs",
         {{"dtype", {{"dtype", std::string(DTypeName(cut.tensor.dtype()))}}},
          {"shape", {{"shape", ShapeToJson(shape)}}}}}});
  }
  for (int id = 0; id < graph.num_nodes(); ++id) {
    if (!needed[id]) continue;
    const Node& node = *graph.node(id);
    Json inputs = Json::array();
    for (const Output& input : node.inputs()) {
      auto cut = cut_names.find(input);
      inputs.push_back(cut != cut_names.end() ? cut->second : input.name());
    }
    Json controls = Json::array();
    for (const Node* control : node.control_inputs()) {
      controls.push_back(control->name());
    }
    Json attrs = Json::object();
    for (const auto& [name, value] : node.attrs()) {
      COSESSION_ASSIGN_OR_RETURN(attrs[name],
                                 AttrToJson(graph, node, name, value));
    }
    nodes.push_back(Json{{"name", node.name()},
                         {"op", node.type()},
                         {"inputs", std::move(inputs)},
                         {"control_inputs", std::move(controls)},
                         {"attrs", std::move(attrs)}});
  }
  Json collections = Json::object();
  for (const std::string& key : graph.CollectionKeys()) {
    Json members = Json::array();
    for (const Node* node : graph.GetCollection(key)) {
      if (needed[node->id()]) members.push_back(node->name());
    }
    if (!members.empty()) collections[key] = std::move(members);
  }
  Json out{{"format", std::string(kGraphJsonFormat)},
           {"format_version", kGraphJsonFormatVersion},
           {"nodes", std::move(nodes)},
           {"collections", std::move(collections)}};
  if (graph.seed().has_value()) out["seed"] = *graph.seed();
  return out;
}

absl::Status GraphFromJson(const Json& json, absl::string_view source,
                           Graph& graph) {
  const DataLossNaming corrupt("corrupt graph in", source);
  if (!json.is_object()) return corrupt("not a JSON object");
  const Json* format = Field(json, "format");
  const Json* version = Field(json, "format_version");
  if (format == nullptr || *format != std::string(kGraphJsonFormat)) {
    return corrupt("\"format\" is not \"", kGraphJsonFormat, "\"");
  }
  if (version == nullptr || JsonInt64(*version) != kGraphJsonFormatVersion) {
    return corrupt("\"format_version\" is not ", kGraphJsonFormatVersion,
                   " (the only version this build reads)");
  }
  if (const Json* seed = Field(json, "seed"); seed != nullptr) {
    std::optional<int64_t> value = JsonInt64(*seed);
    if (!value) return corrupt("\"seed\" is not a 64-bit integer");
    graph.set_seed(*value);
  }
  const Json* nodes = Field(json, "nodes");
  if (nodes == nullptr || !nodes->is_array()) {
    return corrupt("\"nodes\" is not a list");
  }
  for (size_t i = 0; i < nodes->size(); ++i) {
    COSESSION_RETURN_IF_ERROR(
        AddNodeFromJson((*nodes)[i], i, corrupt, source, graph));
  }
  const Json* collections = Field(json, "collections");
  if (collections != nullptr) {
    if (!collections->is_object()) {
      return corrupt("\"collections\" is not an object");
    }
    for (const auto& [key, members] : collections->items()) {
      if (!IsStringList(&members)) {
        return corrupt("collection '", key, "' is not a list of op names");
      }
      for (const Json& member : members) {
        Node* node = graph.FindNode(member.get_ref<const std::string&>());
        if (node == nullptr) {
          return corrupt("collection '", key, "' names the unknown op '",
                         member.get_ref<const std::string&>(), "'");
        }
        graph.AddToCollection(key, node);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cosession
