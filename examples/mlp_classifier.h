// MlpClassifier: a multi-layer perceptron classifier built into a Graph --
// the model cosession_train trains on the digits, and that tests and
// benchmarks train too.
//
//   logits = dense_n(relu(... relu(dense_1(features * input_scale))))
//   loss   = mean sparse softmax cross-entropy(logits, labels)
//   train  = optimizer.Minimize(loss, global_step)
//
// Weights start He-initialised (truncated normal, stddev sqrt(2 / fan_in)),
// reproducibly when the graph has a seed; biases start at zero. Variables are
// named "layer<k>/weights" and "layer<k>/biases" (k from 1).
//
// `features` and `labels` may be the outputs of an input pipeline
// (pipeline/dataset_iterator.h) or placeholders. To evaluate on other data,
// feed those same tensors: a fed tensor cuts the graph, so the pipeline does
// not run for that step.
//
// Errors: InvalidArgument naming the option (no layers, a size < 1, an
// unknown optimizer, a non-positive learning rate) or the input (features not
// float [batch, num_features], labels not an integer vector); the errors of
// Optimizer::Minimize.
// Thread safety: a graph builder (single-threaded per graph).
#ifndef COSESSION_EXAMPLES_MLP_CLASSIFIER_H_
#define COSESSION_EXAMPLES_MLP_CLASSIFIER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/graph/graph.h"

namespace cosession {

struct MlpClassifierOptions {
  // Sizes of the hidden layers (relu); the input size is the features'
  // width.
  std::vector<int64_t> hidden_units = {128};
  int64_t num_classes = 10;
  // Multiplies the features first (1/16 maps the digits' 0..16 to 0..1).
  double input_scale = 1.0;
  // "adam", "momentum" (0.9) or "sgd".
  std::string optimizer = "adam";
  double learning_rate = 1e-3;
};

struct MlpClassifier {
  Output features;
  Output labels;
  Output global_step;
  Output logits;
  Output loss;         // scalar float
  Output predictions;  // int64 [batch]: the arg max of the logits
  Output accuracy;     // scalar float: the fraction of correct predictions
  Operation train;     // one optimizer step; adds 1 to global_step
  std::vector<Output> weights;
  std::vector<Output> biases;
};

absl::StatusOr<MlpClassifier> BuildMlpClassifier(
    Graph& g, Output features, Output labels,
    const MlpClassifierOptions& options);

}  // namespace cosession

#endif  // COSESSION_EXAMPLES_MLP_CLASSIFIER_H_
