// The model the serving benchmarks serve: a 784-128-10 MLP (relu, softmax)
// with random weights, its session and its serving_default signature (input
// `x` float [-1, 784]; outputs `probabilities` float [-1, 10], `classes`
// int64 [-1]), and kServedRows one-row inputs.
#ifndef COSESSION_BENCH_SERVED_MLP_H_
#define COSESSION_BENCH_SERVED_MLP_H_

#include <memory>
#include <random>
#include <vector>

#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "cosession/serving/saved_model.h"

namespace cosession::bench {

inline constexpr int kInputs = 784;
inline constexpr int kHidden = 128;
inline constexpr int kClasses = 10;
inline constexpr int kServedRows = 64;  // rows kept for requests

inline Tensor RandomWeights(TensorShape shape, std::mt19937& random) {
  Tensor t = Tensor::Allocate(DType::kFloat, shape);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& v : t.mutable_flat<float>()) v = normal(random);
  return t;
}

struct ServedMlp {
  ServedMlp() {
    std::mt19937 random(7);
    x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, kInputs}, "x");
    Output w1 = ops::Variable(
        g, RandomWeights(TensorShape{kInputs, kHidden}, random), "w1");
    Output b1 =
        ops::Variable(g, RandomWeights(TensorShape{kHidden}, random), "b1");
    Output w2 = ops::Variable(
        g, RandomWeights(TensorShape{kHidden, kClasses}, random), "w2");
    Output b2 =
        ops::Variable(g, RandomWeights(TensorShape{kClasses}, random), "b2");
    Output hidden = ops::Relu(g, ops::Add(g, ops::MatMul(g, x, w1), b1));
    Output logits = ops::Add(g, ops::MatMul(g, hidden, w2), b2);
    probabilities = ops::Softmax(g, logits, "probabilities");
    classes = ops::ArgMax(g, logits, 1, "classes");
    Operation init = GlobalVariablesInitializer(g);
    g.Finalize();
    session = std::make_unique<Session>(g, Runtime::Default());
    (void)session->RunBlocking({.targets = {init}});
    signature.inputs["x"] = {
        .tensor = x, .dtype = DType::kFloat, .shape = x.shape()};
    signature.outputs["probabilities"] = {.tensor = probabilities,
                                          .dtype = DType::kFloat,
                                          .shape = probabilities.shape()};
    signature.outputs["classes"] = {
        .tensor = classes, .dtype = DType::kInt64, .shape = classes.shape()};
    for (int i = 0; i < kServedRows; ++i) {
      rows.push_back(RandomWeights(TensorShape{1, kInputs}, random));
    }
  }
  Graph g;
  Output x, probabilities, classes;
  std::unique_ptr<Session> session;
  Signature signature;
  std::vector<Tensor> rows;  // one request's input each
};

// One per process, built on first use and never destroyed (benchmarks
// of several files share it).
inline ServedMlp& Model() {
  static ServedMlp* model = new ServedMlp;
  return *model;
}

}  // namespace cosession::bench

#endif  // COSESSION_BENCH_SERVED_MLP_H_
