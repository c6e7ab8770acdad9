#include "cosession/graph/graph.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/status.h"

namespace cosession {

std::string Output::name() const {
  return absl::StrCat(node_->name(), ":", index_);
}
DType Output::dtype() const { return node_->output_dtype(index_); }
const TensorShape& Output::shape() const { return node_->output_shape(index_); }

const std::string& Operation::name() const { return node_->name(); }

const std::string& Node::type() const { return op_def_->name; }

void Node::ThrowMissingAttr(absl::string_view name) const {
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("Op '", name_, "' (", type(), ") has no attr '", name,
                   "' of the requested type")));
}

Graph::Graph() = default;
Graph::~Graph() = default;

std::string Graph::UniqueName(absl::string_view requested) {
  std::string name(requested);
  if (!by_name_.contains(name)) return name;
  int& counter = name_counters_[name];
  std::string candidate;
  do {
    candidate = absl::StrCat(requested, "_", ++counter);
  } while (by_name_.contains(candidate));
  return candidate;
}

Node* Graph::AddNode(NodeSpec spec) {
  const std::string shown_name = spec.name.empty() ? spec.op : spec.name;
  auto fail = [&](const absl::Status& status) {
    throw StatusError(absl::Status(
        status.code(), absl::StrCat("Cannot add op '", shown_name, "' (",
                                    spec.op, "): ", status.message())));
  };
  if (finalized_) {
    fail(absl::FailedPreconditionError(
        "the graph is finalized and cannot be modified"));
  }
  const OpDef* def = OpRegistry::Global().Find(spec.op);
  if (def == nullptr)
    fail(absl::NotFoundError("no op of this type is registered"));
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const Output& in = spec.inputs[i];
    if (!in.valid()) {
      fail(absl::InvalidArgumentError(absl::StrCat("input ", i, " is empty")));
    }
    if (&in.node()->graph() != this) {
      fail(absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " ('", in.name(), "') belongs to another graph")));
    }
    if (in.index() < 0 || in.index() >= in.node()->num_outputs()) {
      fail(absl::InvalidArgumentError(
          absl::StrCat("input ", i, " refers to output ", in.index(), " of '",
                       in.node()->name(), "', which has ",
                       in.node()->num_outputs(), " outputs")));
    }
  }
  for (const Operation& control : spec.control_inputs) {
    if (!control.valid() || &control.node()->graph() != this) {
      fail(absl::InvalidArgumentError(
          "a control input is empty or belongs to another graph"));
    }
  }
  InferenceContext inference(spec, *this);
  if (absl::Status s = def->shape_fn(inference); !s.ok()) fail(s);
  for (const TensorShape& shape : inference.output_shapes()) {
    if (absl::Status s = shape.Validate(); !s.ok()) fail(s);
  }

  if (num_nodes_ == static_cast<int>(node_chunks_.size()) * kNodeChunkSize) {
    node_chunks_.push_back(std::make_unique<Node[]>(kNodeChunkSize));
  }
  // Every field is assigned, not appended to: a slot an earlier AddNode
  // began to fill and then threw out of (an allocation failing) is reused.
  Node* node = this->node(num_nodes_);
  node->id_ = num_nodes_;
  node->name_ = UniqueName(shown_name);
  node->op_def_ = def;
  node->graph_ = this;
  node->inputs_.assign(spec.inputs.begin(), spec.inputs.end());
  node->control_inputs_.clear();
  for (const Operation& control : spec.control_inputs) {
    node->control_inputs_.push_back(control.node());
  }
  node->output_dtypes_.assign(inference.output_dtypes().begin(),
                              inference.output_dtypes().end());
  node->output_shapes_.assign(
      std::make_move_iterator(inference.output_shapes().begin()),
      std::make_move_iterator(inference.output_shapes().end()));
  node->attrs_ = std::move(spec.attrs);
  node->attr_list_.clear();
  for (const auto& [key, value] : node->attrs_) {
    node->attr_list_.emplace_back(key, &value);
  }
  by_name_[node->name_] = node;
  ++num_nodes_;
  return node;
}

Node* Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<Output> Graph::FindOutput(absl::string_view name) const {
  absl::string_view op_name = name;
  int index = 0;
  if (size_t colon = name.rfind(':'); colon != absl::string_view::npos) {
    op_name = name.substr(0, colon);
    absl::string_view digits = name.substr(colon + 1);
    auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size() ||
        digits.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Malformed tensor name '", name, "'"));
    }
  }
  Node* node = FindNode(op_name);
  if (node == nullptr) {
    return absl::NotFoundError(absl::StrCat("Tensor '", name,
                                            "' not found: no op named '",
                                            op_name, "' in the graph"));
  }
  if (index < 0 || index >= node->num_outputs()) {
    return absl::NotFoundError(
        absl::StrCat("Tensor '", name, "' not found: op '", op_name, "' has ",
                     node->num_outputs(), " outputs"));
  }
  return Output(node, index);
}

absl::StatusOr<Operation> Graph::FindOperation(absl::string_view name) const {
  Node* node = FindNode(name);
  if (node == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("Op '", name, "' not found in the graph"));
  }
  return Operation(node);
}

void Graph::AddToCollection(absl::string_view key, Node* node) {
  if (finalized_) {
    throw StatusError(absl::FailedPreconditionError(
        absl::StrCat("Cannot add '", node->name(), "' to collection '", key,
                     "': the graph is finalized")));
  }
  collections_[key].push_back(node);
}

std::vector<std::string> Graph::CollectionKeys() const {
  std::vector<std::string> keys;
  keys.reserve(collections_.size());
  for (const auto& [key, nodes] : collections_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

absl::Span<Node* const> Graph::GetCollection(absl::string_view key) const {
  auto it = collections_.find(key);
  if (it == collections_.end()) return {};
  return it->second;
}

}  // namespace cosession
