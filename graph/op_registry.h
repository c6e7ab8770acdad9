// The op registry: for each op type, its definition (how to infer output
// dtypes and shapes at build time), its CPU kernel, a cost estimate for the
// executor, and a slot for its gradient function.
//
// The core ops are registered when OpRegistry::Global() is first used, by
// explicit calls (no static initialisers, so a static library keeps them).
// Programs and tests may register more ops at any time.
//
// Thread safety: thread-safe. An OpDef never moves or dies once registered;
// a registered op's gradient may be set once, before graphs use it.
#ifndef COSESSION_GRAPH_OP_REGISTRY_H_
#define COSESSION_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cosession/graph/attr_value.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/kernel.h"

namespace cosession {

// What a shape function sees of the op being added, and where it puts the
// outputs' dtypes and shapes.
class InferenceContext {
 public:
  InferenceContext(const NodeSpec& spec, const Graph& graph)
      : spec_(spec), graph_(graph) {}

  const std::string& op() const { return spec_.op; }
  const Graph& graph() const { return graph_; }
  int num_inputs() const { return static_cast<int>(spec_.inputs.size()); }
  const Output& input(int i) const { return spec_.inputs[i]; }
  DType input_dtype(int i) const { return spec_.inputs[i].dtype(); }
  const TensorShape& input_shape(int i) const {
    return spec_.inputs[i].shape();
  }

  // InvalidArgument naming the attr when it is absent or of another type.
  template <typename T>
  absl::StatusOr<T> attr(absl::string_view name) const {
    auto it = spec_.attrs.find(name);
    if (it == spec_.attrs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing attr '", name, "'"));
    }
    const T* value = std::get_if<T>(&it->second);
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("attr '", name, "' has the wrong type"));
    }
    return *value;
  }
  bool has_attr(absl::string_view name) const {
    return spec_.attrs.contains(name);
  }

  // Checks the input count.
  absl::Status ExpectInputs(int min, int max) const;
  // Checks that all inputs in [first, num_inputs) share one dtype.
  absl::Status ExpectSameDType(int first = 0) const;

  void AddOutput(DType dtype, TensorShape shape) {
    dtypes_.push_back(dtype);
    shapes_.push_back(std::move(shape));
  }
  std::vector<DType>& output_dtypes() { return dtypes_; }
  std::vector<TensorShape>& output_shapes() { return shapes_; }

 private:
  const NodeSpec& spec_;
  const Graph& graph_;
  std::vector<DType> dtypes_;
  std::vector<TensorShape> shapes_;
};

using ShapeFn = std::function<absl::Status(InferenceContext&)>;

// Which inputs of the op being differentiated the running Gradients() call
// uses the gradients of. A gradient function may return an invalid Output
// for the others instead of building ops nobody runs: that is how the
// gradient w.r.t. a first layer's input batch is never built.
class WantedInputs {
 public:
  // Every input wanted.
  WantedInputs() = default;
  explicit WantedInputs(std::vector<bool> wanted)
      : all_(false), wanted_(std::move(wanted)) {}
  bool operator[](int input) const {
    if (all_) return true;
    return input >= 0 && input < static_cast<int>(wanted_.size()) &&
           wanted_[input];
  }

 private:
  bool all_ = true;
  std::vector<bool> wanted_;
};

// Builds the gradients of an op's inputs from the gradients of its outputs
// (one per output, invalid Output = no gradient), one per input (invalid =
// none; `wanted` says which are used). Set for the differentiable core ops
// by RegisterGradients; used by Gradients() (graph/gradients.h), which
// documents the full contract.
using GradientFn = std::function<absl::StatusOr<std::vector<Output>>(
    Graph&, const Node& op, absl::Span<const Output> output_gradients,
    const WantedInputs& wanted)>;

struct OpDef {
  std::string name{};
  ShapeFn shape_fn{};
  // Exactly one of the two kernels is set.
  SyncKernel kernel{};
  std::shared_ptr<const AsyncKernel> async_kernel{};
  // nullptr = the sum of the input element counts.
  CostFn cost = nullptr;
  // Stateful ops (variables, random) are never cached or merged.
  bool stateful = false;
  GradientFn gradient{};
  // The int64 attrs that hold another node's id (the variable an Assign or
  // an Apply op updates). A graph written out (serving/graph_json.h) stores
  // them as that node's name, since ids change when a graph is pruned.
  std::vector<std::string> node_id_attrs{};
};

class OpRegistry {
 public:
  // The process-wide registry, with the core ops registered.
  static OpRegistry& Global();

  // AlreadyExists when an op of that name is registered; InvalidArgument when
  // `def` lacks a name, a shape function or a kernel.
  absl::Status Register(OpDef def);
  // nullptr when unknown.
  const OpDef* Find(absl::string_view name) const;
  // The names of every registered op, sorted.
  std::vector<std::string> OpNames() const;
  // NotFound when the op is unknown.
  absl::Status SetGradient(absl::string_view op, GradientFn gradient);

 private:
  // Not absl::Mutex: ThreadSanitizer cannot see into Debian's Abseil.
  mutable std::shared_mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_
      ABSL_GUARDED_BY(mu_);
};

// Registration entry points of the kernel files (graph/kernels/).
void RegisterCoreOps(OpRegistry& registry);
void RegisterMathOps(OpRegistry& registry);
void RegisterMatMulOp(OpRegistry& registry);
void RegisterArrayOps(OpRegistry& registry);
void RegisterRandomOps(OpRegistry& registry);
void RegisterTrainingOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);
void RegisterGradOps(OpRegistry& registry);
// Sets the gradient functions of the ops above (graph/op_gradients.cc);
// called after them.
void RegisterGradients(OpRegistry& registry);

}  // namespace cosession

#endif  // COSESSION_GRAPH_OP_REGISTRY_H_
