// Optimizers: build the ops that train variables from the gradients of a
// loss -- GradientDescent, Momentum and Adam, with TensorFlow 1.x's update
// rules, slot names and step semantics.
//
//   Output global_step = GetOrCreateGlobalStep(g);
//   AdamOptimizer adam({.learning_rate = 1e-3});
//   absl::StatusOr<Operation> train = adam.Minimize(g, loss, global_step);
//   ...  session.Run({.targets = {*train}})  // one step
//
// Minimize = ComputeGradients (graph/gradients.h) + ApplyGradients. The train
// op updates every variable that has a gradient with one fused op
// (graph/ops.h, "training_ops.cc"), then finishes (Adam advances its beta
// powers), then adds 1 to `global_step` when one is given. A run that
// fetches global_step together with the train op may read it before or after
// the increment: read it in a later run (as the standard hooks do).
//
// Slots are variables: Momentum's accumulator ("<var>/Momentum"), Adam's
// first and second moments ("<var>/Adam", "<var>/Adam_1") and Adam's
// "beta1_power"/"beta2_power" are non-trainable variables of the graph,
// created by ApplyGradients and initialised by GlobalVariablesInitializer
// (zeros; the powers to beta1 and beta2). So checkpoints (io/saver.h) save
// and restore them with the model, and a resumed run continues exactly.
//
// Errors (absl::Status, never a throw): InvalidArgument naming the optimizer
// and option for a bad hyperparameter (a negative or non-finite learning
// rate, a beta outside [0, 1), a non-positive epsilon); InvalidArgument for
// an entry of var_list that is not a float/double Variable, and when no
// variable gets a gradient (naming the variables); the errors of Gradients.
//
// Thread safety: building is not thread-safe, like building a Graph; an
// optimizer object may be used for several Minimize calls on one graph (each
// variable gets its slots once). The ops it builds are thread-safe.
#ifndef COSESSION_GRAPH_OPTIMIZERS_H_
#define COSESSION_GRAPH_OPTIMIZERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cosession/graph/graph.h"

namespace cosession {

struct GradientAndVariable {
  Output gradient{};  // invalid when the loss does not depend on the variable
  Output variable{};  // an output of a Variable op
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "GradientDescent", "Momentum", "Adam": prefixes op and slot names.
  const std::string& name() const { return name_; }

  // d loss / d variable for each variable of `var_list` (empty = the
  // "trainable_variables" collection).
  absl::StatusOr<std::vector<GradientAndVariable>> ComputeGradients(
      Graph& g, Output loss, std::vector<Output> var_list = {}) const;

  // The train op: applies each valid gradient to its variable, finishes,
  // then increments `global_step` (when valid) by one. Pairs without a
  // gradient are skipped; InvalidArgument when none has one.
  absl::StatusOr<Operation> ApplyGradients(
      Graph& g, absl::Span<const GradientAndVariable> grads_and_vars,
      Output global_step = {}, std::string name = "");

  absl::StatusOr<Operation> Minimize(Graph& g, Output loss,
                                     Output global_step = {},
                                     std::vector<Output> var_list = {},
                                     std::string name = "");

  // The slot `slot` of `variable` ("m"/"v" for Adam, "momentum" for
  // Momentum) once ApplyGradients created it; NotFound otherwise.
  absl::StatusOr<Output> GetSlot(Output variable, absl::string_view slot) const;

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}

  // InvalidArgument naming the bad hyperparameter.
  virtual absl::Status ValidateOptions() const = 0;
  // Adds the update of `variable` by `gradient` (same dtype and shape).
  virtual Operation ApplyDense(Graph& g, Output gradient, Output variable) = 0;
  // Runs after every update (Adam advances its beta powers); returns what
  // the global-step increment waits for. Default: the updates.
  virtual std::vector<Operation> Finish(Graph& g,
                                        std::vector<Operation> updates);

  // A zero-initialised, non-trainable variable shaped like `variable`,
  // named "<variable>/<suffix>", remembered as slot `slot`. Returns the
  // existing one when called again.
  Output ZerosSlot(Graph& g, Output variable, absl::string_view slot,
                   absl::string_view suffix);
  // A scalar constant of `dtype`: hyperparameters follow the variable's
  // dtype.
  static Output Scalar(Graph& g, double value, DType dtype,
                       absl::string_view name);

 private:
  std::string name_;
  absl::flat_hash_map<std::pair<const Node*, std::string>, Output> slots_;
};

// variable -= learning_rate * gradient.
struct GradientDescentOptions {
  double learning_rate = 0.01;
};
class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(GradientDescentOptions options)
      : Optimizer("GradientDescent"), options_(options) {}

 protected:
  absl::Status ValidateOptions() const override;
  Operation ApplyDense(Graph& g, Output gradient, Output variable) override;

 private:
  GradientDescentOptions options_;
};

// accumulation = momentum * accumulation + gradient;
// variable -= learning_rate * accumulation (Nesterov: learning_rate *
// (gradient + momentum * accumulation)).
struct MomentumOptions {
  double learning_rate = 0.01;
  double momentum = 0.9;
  bool use_nesterov = false;
};
class MomentumOptimizer : public Optimizer {
 public:
  explicit MomentumOptimizer(MomentumOptions options)
      : Optimizer("Momentum"), options_(options) {}

 protected:
  absl::Status ValidateOptions() const override;
  Operation ApplyDense(Graph& g, Output gradient, Output variable) override;

 private:
  MomentumOptions options_;
};

// Adam (Kingma & Ba), TensorFlow's formulation: epsilon is added to
// sqrt(v), and the bias correction folds into the step size.
struct AdamOptions {
  double learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
};
class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(AdamOptions options)
      : Optimizer("Adam"), options_(options) {}

 protected:
  absl::Status ValidateOptions() const override;
  Operation ApplyDense(Graph& g, Output gradient, Output variable) override;
  std::vector<Operation> Finish(Graph& g,
                                std::vector<Operation> updates) override;

 private:
  struct Powers {
    Output beta1_power{};
    Output beta2_power{};
  };
  // The beta powers for variables of `dtype`, created on first use.
  Powers PowersFor(Graph& g, DType dtype);

  AdamOptions options_;
  absl::flat_hash_map<DType, Powers> powers_;
  // The dtypes whose powers the current ApplyGradients call read.
  std::vector<DType> used_dtypes_;
};

}  // namespace cosession

#endif  // COSESSION_GRAPH_OPTIMIZERS_H_
