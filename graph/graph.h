// Graph: a dataflow graph of ops (Nodes) joined by data edges (an op's input
// is another op's Output) and control edges (an op runs only after its
// control inputs ran).
//
// Building: ops are added through the builders in graph/ops.h (or
// Graph::AddNode). Each new op's output dtypes and (possibly partial) shapes
// are inferred at once by the op's shape function; a mismatch throws
// StatusError naming the op. Names are unique: a taken name gets a suffix
// ("add", "add_1", "add_2"...).
//
// Finalize() freezes the graph: adding an op afterwards throws StatusError
// (FailedPrecondition) naming the op. Nodes are never removed, so a Node*,
// Output or Operation stays valid for the graph's lifetime.
//
// Thread safety: building is single-threaded. Once no thread adds ops (for
// instance after Finalize()), any number of threads may read the graph and
// sessions may run it. A graph must outlive every Session that runs it.
#ifndef COSESSION_GRAPH_GRAPH_H_
#define COSESSION_GRAPH_GRAPH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cosession/graph/attr_value.h"
#include "cosession/graph/dtype.h"
#include "cosession/graph/status.h"  // StatusError, thrown by the builders
#include "cosession/graph/tensor_shape.h"

namespace cosession {

class Graph;
class Node;
struct OpDef;

// One tensor produced by an op: output `index` of `node`.
struct Output {
  Output() = default;
  Output(Node* node, int index) : node_(node), index_(index) {}

  Node* node() const { return node_; }
  int index() const { return index_; }
  // "op:index", as TensorFlow names tensors.
  std::string name() const;
  DType dtype() const;
  const TensorShape& shape() const;
  bool valid() const { return node_ != nullptr; }

  friend bool operator==(const Output& a, const Output& b) {
    return a.node_ == b.node_ && a.index_ == b.index_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Output& o) {
    return H::combine(std::move(h), o.node_, o.index_);
  }

 private:
  Node* node_ = nullptr;
  int index_ = 0;
};

// An op used as a run target (run for its effect) or as a control input.
class Operation {
 public:
  Operation() = default;
  explicit Operation(Node* node) : node_(node) {}
  Node* node() const { return node_; }
  const std::string& name() const;
  Output output(int index) const { return Output(node_, index); }
  bool valid() const { return node_ != nullptr; }
  friend bool operator==(const Operation& a, const Operation& b) {
    return a.node_ == b.node_;
  }

 private:
  Node* node_ = nullptr;
};

// An op instance in a graph. Immutable once added.
class Node {
 public:
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  int id() const { return id_; }
  const std::string& name() const { return name_; }
  const std::string& type() const;  // the op's type, e.g. "MatMul"
  const OpDef& op_def() const { return *op_def_; }
  Graph& graph() const { return *graph_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Output& input(int i) const { return inputs_[i]; }
  absl::Span<const Output> inputs() const { return inputs_; }
  absl::Span<Node* const> control_inputs() const { return control_inputs_; }

  int num_outputs() const { return static_cast<int>(output_dtypes_.size()); }
  DType output_dtype(int i) const { return output_dtypes_[i]; }
  const TensorShape& output_shape(int i) const { return output_shapes_[i]; }

  const AttrMap& attrs() const { return attrs_; }
  // nullptr when absent or of another type. A scan of attr_list_: kernels
  // ask for attributes on every run, and a node has a few, for which
  // comparing names costs a fraction of hashing one.
  template <typename T>
  const T* FindAttr(absl::string_view name) const {
    for (const auto& [key, value] : attr_list_) {
      if (key == name) return std::get_if<T>(value);
    }
    return nullptr;
  }
  // Throws StatusError when absent or of another type (a graph-building bug).
  template <typename T>
  const T& attr(absl::string_view name) const {
    const T* value = FindAttr<T>(name);
    if (value == nullptr) ThrowMissingAttr(name);
    return *value;
  }

 private:
  friend class Graph;
  [[noreturn]] void ThrowMissingAttr(absl::string_view name) const;

  int id_ = 0;
  std::string name_;
  const OpDef* op_def_ = nullptr;
  Graph* graph_ = nullptr;
  // Inline for the common counts: a graph of 10,000 ops no longer fits the
  // cache, and each heap block of a Node is one more miss when a plan is
  // built from it or the graph is freed.
  absl::InlinedVector<Output, 2> inputs_;
  std::vector<Node*> control_inputs_;
  absl::InlinedVector<DType, 4> output_dtypes_;
  absl::InlinedVector<TensorShape, 1> output_shapes_;
  AttrMap attrs_;
  // attrs_' entries, in no particular order; they point into attrs_, which
  // never changes once the node is added (so Node is not copyable).
  absl::InlinedVector<std::pair<absl::string_view, const AttrValue*>, 4>
      attr_list_;
};

// What Graph::AddNode needs to add an op.
struct NodeSpec {
  std::string op{};    // registered op type
  std::string name{};  // requested name; empty = the op type
  std::vector<Output> inputs{};
  std::vector<Operation> control_inputs{};
  AttrMap attrs{};
};

class Graph {
 public:
  Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // Adds an op: checks its inputs and attrs, infers its outputs' dtypes and
  // shapes, gives it a unique name. Throws StatusError (naming the op) on any
  // error, including when the graph is finalized.
  Node* AddNode(NodeSpec spec);

  void Finalize() { finalized_ = true; }
  bool finalized() const { return finalized_; }

  int num_nodes() const { return num_nodes_; }
  Node* node(int id) const {
    return &node_chunks_[id >> kNodeChunkBits][id & (kNodeChunkSize - 1)];
  }

  // nullptr when no op has that name.
  Node* FindNode(absl::string_view name) const;
  // "op" (output 0) or "op:i". NotFound names the missing tensor.
  absl::StatusOr<Output> FindOutput(absl::string_view name) const;
  absl::StatusOr<Operation> FindOperation(absl::string_view name) const;

  // Named lists of ops, as TensorFlow's collections ("variables",
  // "variable_initializers", ...). Adding to a finalized graph throws.
  void AddToCollection(absl::string_view key, Node* node);
  absl::Span<Node* const> GetCollection(absl::string_view key) const;
  // The keys of every collection, sorted.
  std::vector<std::string> CollectionKeys() const;

  // Graph-level random seed (TensorFlow's tf.set_random_seed): random ops
  // without an op seed derive theirs from it; unset = nondeterministic.
  void set_seed(int64_t seed) { seed_ = seed; }
  std::optional<int64_t> seed() const { return seed_; }

 private:
  std::string UniqueName(absl::string_view requested);

  // Nodes live in chunks of kNodeChunkSize, in id order, rather than one
  // heap block each: one allocation per chunk, and the passes over a graph
  // (planning a run, freeing it) read memory in order. A chunk is never
  // moved, so a Node* stays valid. Slots past num_nodes_ hold no op.
  static constexpr int kNodeChunkBits = 6;
  static constexpr int kNodeChunkSize = 1 << kNodeChunkBits;
  std::vector<std::unique_ptr<Node[]>> node_chunks_;
  int num_nodes_ = 0;
  absl::flat_hash_map<std::string, Node*> by_name_;
  absl::flat_hash_map<std::string, int> name_counters_;
  absl::flat_hash_map<std::string, std::vector<Node*>> collections_;
  std::optional<int64_t> seed_;
  bool finalized_ = false;
};

// Collection keys used by the library.
inline constexpr absl::string_view kVariablesCollection = "variables";
inline constexpr absl::string_view kVariableInitializersCollection =
    "variable_initializers";
// The variables optimizers update unless told otherwise (floating-point
// variables made with trainable = true).
inline constexpr absl::string_view kTrainableVariablesCollection =
    "trainable_variables";

}  // namespace cosession

#endif  // COSESSION_GRAPH_GRAPH_H_
