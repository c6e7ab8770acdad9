#include "examples/mlp_classifier.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/optimizers.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(
    const MlpClassifierOptions& options) {
  if (options.optimizer == "adam") {
    return std::make_unique<AdamOptimizer>(
        AdamOptions{.learning_rate = options.learning_rate});
  }
  if (options.optimizer == "momentum") {
    return std::make_unique<MomentumOptimizer>(
        MomentumOptions{.learning_rate = options.learning_rate});
  }
  if (options.optimizer == "sgd") {
    return std::make_unique<GradientDescentOptimizer>(
        GradientDescentOptions{.learning_rate = options.learning_rate});
  }
  return absl::InvalidArgumentError(
      absl::StrCat("MlpClassifier: unknown optimizer '", options.optimizer,
                   "' (adam, momentum or sgd)"));
}

absl::Status CheckOptions(const MlpClassifierOptions& options,
                          const Output& features, const Output& labels) {
  if (options.hidden_units.empty()) {
    return absl::InvalidArgumentError(
        "MlpClassifier: hidden_units needs at least one layer");
  }
  for (int64_t units : options.hidden_units) {
    if (units < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MlpClassifier: every hidden_units entry must be >= 1, got ", units));
    }
  }
  if (options.num_classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlpClassifier: num_classes must be >= 2, got ", options.num_classes));
  }
  if (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlpClassifier: learning_rate must be > 0, got ",
                     options.learning_rate));
  }
  if (!features.valid() || features.dtype() != DType::kFloat ||
      features.shape().dims() != 2 || features.shape().dim_size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlpClassifier: features must be float [batch, num_features], got '",
        features.valid() ? features.name() : std::string("<empty>"), "'"));
  }
  if (!labels.valid() || !IsInteger(labels.dtype()) ||
      labels.shape().dims() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlpClassifier: labels must be an integer vector [batch], got '",
        labels.valid() ? labels.name() : std::string("<empty>"), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MlpClassifier> BuildMlpClassifier(
    Graph& g, Output features, Output labels,
    const MlpClassifierOptions& options) {
  COSESSION_RETURN_IF_ERROR(CheckOptions(options, features, labels));
  COSESSION_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                             MakeOptimizer(options));
  MlpClassifier model;
  model.features = features;
  model.labels = labels;
  try {
    model.global_step = GetOrCreateGlobalStep(g);
    Output activations = features;
    if (options.input_scale != 1.0) {
      activations = ops::Mul(
          g, features,
          ops::Const(g, static_cast<float>(options.input_scale), "input_scale"),
          "scaled_features");
    }
    int64_t fan_in = features.shape().dim_size(1);
    std::vector<int64_t> sizes = options.hidden_units;
    sizes.push_back(options.num_classes);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::string layer = absl::StrCat("layer", k + 1);
      const int64_t fan_out = sizes[k];
      Output init = ops::TruncatedNormal(
          g, TensorShape{fan_in, fan_out}, DType::kFloat, 0.0,
          std::sqrt(2.0 / static_cast<double>(fan_in)), 0,
          layer + "/initial_weights");
      Output weights = ops::Variable(g, init, layer + "/weights");
      Output biases = ops::Variable(
          g, Tensor(DType::kFloat, TensorShape{fan_out}), layer + "/biases");
      model.weights.push_back(weights);
      model.biases.push_back(biases);
      activations = ops::Add(
          g,
          ops::MatMul(g, activations, weights, false, false, layer + "/matmul"),
          biases, layer + "/pre_activation");
      if (k + 1 < sizes.size()) {
        activations = ops::Relu(g, activations, layer + "/relu");
      }
      fan_in = fan_out;
    }
    model.logits = activations;
    Output labels64 = labels.dtype() == DType::kInt64
                          ? labels
                          : ops::Cast(g, labels, DType::kInt64, "labels_int64");
    std::vector<Output> cross_entropy =
        ops::SparseSoftmaxCrossEntropyWithLogits(g, model.logits, labels64,
                                                 "cross_entropy");
    model.loss = ops::Mean(g, cross_entropy[0], {}, false, "loss");
    model.predictions = ops::ArgMax(g, model.logits, 1, "predictions");
    model.accuracy = ops::Mean(
        g,
        ops::Cast(g, ops::Equal(g, model.predictions, labels64), DType::kFloat),
        {}, false, "accuracy");
  } catch (const StatusError& e) {
    return e.status();
  }
  COSESSION_ASSIGN_OR_RETURN(
      model.train,
      optimizer->Minimize(g, model.loss, model.global_step, {}, "train"));
  return model;
}

}  // namespace cosession
