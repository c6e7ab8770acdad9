// One training step of a multi-layer perceptron: through cosession
// (BM_Train_*) and written by hand with Eigen (BM_Baseline_*_Eigen), in the
// same binary and with the same build flags.
//
// The step: logits = relu(x W1 + b1) W2 + b2; loss = mean sparse softmax
// cross-entropy; the gradients of W1, b1, W2, b2; plain gradient descent.
// Synthetic data, fed each step (the same batch; the cost does not depend on
// the values).
//
//   BM_Train_MLP / BM_Baseline_MLP_Eigen           784-128-10, batch 64
//   BM_Train_TinyMLP / BM_Baseline_TinyMLP_Eigen   4-8-3, batch 8
//   BM_Baseline_MLP_Eigen_TwoThreads               784-128-10 split by hand
//                                                  over two threads
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <atomic>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "cosession/async/monitored_session.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/ops.h"
#include "examples/mlp_classifier.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

struct MlpSize {
  int inputs;
  int hidden;
  int classes;
  int batch;
};
constexpr MlpSize kMlp{784, 128, 10, 64};
constexpr MlpSize kTinyMlp{4, 8, 3, 8};
constexpr float kLearningRate = 0.01f;

using Matrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::Matrix<float, 1, Eigen::Dynamic>;

// The buffers of the hand-written steps, preallocated, with random data,
// weights and labels (the same for both steps).
class EigenMlpState {
 protected:
  explicit EigenMlpState(const MlpSize& size)
      : size_(size),
        x_(size.batch, size.inputs),
        w1_(size.inputs, size.hidden),
        b1_(RowVector::Zero(size.hidden)),
        w2_(size.hidden, size.classes),
        b2_(RowVector::Zero(size.classes)),
        hidden_(size.batch, size.hidden),
        logits_(size.batch, size.classes),
        d_hidden_(size.batch, size.hidden),
        d_w1_(size.inputs, size.hidden),
        d_w2_(size.hidden, size.classes),
        labels_(size.batch) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::uniform_int_distribution<int> label(0, size.classes - 1);
    for (float& v : x_.reshaped()) v = normal(rng);
    for (float& v : w1_.reshaped()) v = normal(rng);
    for (float& v : w2_.reshaped()) v = normal(rng);
    for (int& l : labels_) l = label(rng);
  }

  MlpSize size_;
  Matrix x_, w1_;
  RowVector b1_;
  Matrix w2_;
  RowVector b2_;
  Matrix hidden_, logits_, d_hidden_, d_w1_, d_w2_;
  std::vector<int> labels_;
};

// The hand-written step: what a careful user writes with Eigen alone --
// products without temporaries, updates in place.
class EigenMlp : private EigenMlpState {
 public:
  explicit EigenMlp(const MlpSize& size) : EigenMlpState(size) {}

  float Step() {
    const float batch = static_cast<float>(x_.rows());
    // Forward.
    hidden_.noalias() = x_ * w1_;
    hidden_.rowwise() += b1_;
    hidden_ = hidden_.cwiseMax(0.0f);
    logits_.noalias() = hidden_ * w2_;
    logits_.rowwise() += b2_;
    // Softmax cross-entropy; logits_ becomes d loss / d logits.
    float loss = 0;
    for (Eigen::Index i = 0; i < logits_.rows(); ++i) {
      auto row = logits_.row(i);
      const float max = row.maxCoeff();
      row.array() = (row.array() - max).exp();
      const float sum = row.sum();
      loss += std::log(sum) - std::log(row(labels_[i]));
      row /= sum;
      row(labels_[i]) -= 1.0f;
      row /= batch;
    }
    // Backward.
    d_w2_.noalias() = hidden_.transpose() * logits_;
    const RowVector d_b2 = logits_.colwise().sum();
    d_hidden_.noalias() = logits_ * w2_.transpose();
    d_hidden_ = (hidden_.array() > 0.0f).select(d_hidden_, 0.0f);
    d_w1_.noalias() = x_.transpose() * d_hidden_;
    const RowVector d_b1 = d_hidden_.colwise().sum();
    // Gradient descent.
    w1_ -= kLearningRate * d_w1_;
    b1_ -= kLearningRate * d_b1;
    w2_ -= kLearningRate * d_w2_;
    b2_ -= kLearningRate * d_b2;
    return loss / batch;
  }
};

void RunEigenMlp(benchmark::State& state, const MlpSize& size) {
  EigenMlp mlp(size);
  for (auto _ : state) benchmark::DoNotOptimize(mlp.Step());
}

void BM_Baseline_MLP_Eigen(benchmark::State& state) {
  RunEigenMlp(state, kMlp);
}
BENCHMARK(BM_Baseline_MLP_Eigen)->UseRealTime();

void BM_Baseline_TinyMLP_Eigen(benchmark::State& state) {
  RunEigenMlp(state, kTinyMlp);
}
BENCHMARK(BM_Baseline_TinyMLP_Eigen)->UseRealTime();

// The same step split by hand over two threads, the best split this author
// could write: each thread runs the forward pass, the softmax and the
// hidden layer's gradient for half of the batch (rows are independent up to
// there), then, after a barrier, the weight gradients and updates for half
// of each weight matrix's rows (W1's input rows, W2's hidden rows) and half
// of b1; the helper thread spins between phases instead of sleeping, so no
// wake-up is paid. The reference of BM_Train_MLP, which runs on two threads.
class EigenMlpTwoThreads : private EigenMlpState {
 public:
  explicit EigenMlpTwoThreads(const MlpSize& size) : EigenMlpState(size) {}

  // Rows [begin, end) of the batch: forward, softmax, d_hidden.
  float Forward(int half) {
    const auto [begin, count] = Half(size_.batch, half);
    const float batch = static_cast<float>(size_.batch);
    auto hidden = hidden_.middleRows(begin, count);
    auto logits = logits_.middleRows(begin, count);
    hidden.noalias() = x_.middleRows(begin, count) * w1_;
    hidden.rowwise() += b1_;
    hidden = hidden.cwiseMax(0.0f);
    logits.noalias() = hidden * w2_;
    logits.rowwise() += b2_;
    float loss = 0;
    for (Eigen::Index i = 0; i < count; ++i) {
      auto row = logits.row(i);
      const int label = labels_[begin + i];
      const float max = row.maxCoeff();
      row.array() = (row.array() - max).exp();
      const float sum = row.sum();
      loss += std::log(sum) - std::log(row(label));
      row /= sum;
      row(label) -= 1.0f;
      row /= batch;
    }
    auto d_hidden = d_hidden_.middleRows(begin, count);
    d_hidden.noalias() = logits * w2_.transpose();
    d_hidden = (hidden.array() > 0.0f).select(d_hidden, 0.0f);
    return loss;
  }

  // Half of each weight's rows: gradients and updates.
  void Backward(int half) {
    const auto [in_begin, in_count] = Half(size_.inputs, half);
    const auto [h_begin, h_count] = Half(size_.hidden, half);
    d_w2_.middleRows(h_begin, h_count).noalias() =
        hidden_.middleCols(h_begin, h_count).transpose() * logits_;
    w2_.middleRows(h_begin, h_count) -=
        kLearningRate * d_w2_.middleRows(h_begin, h_count);
    d_w1_.middleRows(in_begin, in_count).noalias() =
        x_.middleCols(in_begin, in_count).transpose() * d_hidden_;
    w1_.middleRows(in_begin, in_count) -=
        kLearningRate * d_w1_.middleRows(in_begin, in_count);
    b1_.segment(h_begin, h_count) -=
        kLearningRate * d_hidden_.middleCols(h_begin, h_count).colwise().sum();
    if (half == 0) b2_ -= kLearningRate * logits_.colwise().sum();
  }

 private:
  static std::pair<Eigen::Index, Eigen::Index> Half(int n, int half) {
    const int first = n / 2;
    return half == 0
               ? std::make_pair(Eigen::Index{0}, Eigen::Index{first})
               : std::make_pair(Eigen::Index{first}, Eigen::Index{n - first});
  }
};

void BM_Baseline_MLP_Eigen_TwoThreads(benchmark::State& state) {
  EigenMlpTwoThreads mlp(kMlp);
  // Iteration counters: the helper waits for started, the benchmark's
  // thread for forward_done and backward_done, the helper for
  // main_forward_done (the barrier between the phases).
  std::atomic<int64_t> started{0}, forward_done{0}, main_forward_done{0},
      backward_done{0};
  std::atomic<bool> quit{false};
  auto wait_for = [](const std::atomic<int64_t>& counter, int64_t value,
                     const std::atomic<bool>* quit_flag) {
    while (counter.load(std::memory_order_acquire) != value) {
      if (quit_flag != nullptr && quit_flag->load(std::memory_order_relaxed)) {
        return false;
      }
    }
    return true;
  };
  std::thread helper([&] {
    for (int64_t iteration = 1;; ++iteration) {
      if (!wait_for(started, iteration, &quit)) return;
      benchmark::DoNotOptimize(mlp.Forward(1));
      forward_done.store(iteration, std::memory_order_release);
      wait_for(main_forward_done, iteration, nullptr);
      mlp.Backward(1);
      backward_done.store(iteration, std::memory_order_release);
    }
  });
  int64_t iteration = 0;
  for (auto _ : state) {
    started.store(++iteration, std::memory_order_release);
    benchmark::DoNotOptimize(mlp.Forward(0));
    wait_for(forward_done, iteration, nullptr);
    main_forward_done.store(iteration, std::memory_order_release);
    mlp.Backward(0);
    wait_for(backward_done, iteration, nullptr);
  }
  quit.store(true, std::memory_order_relaxed);
  helper.join();
}
BENCHMARK(BM_Baseline_MLP_Eigen_TwoThreads)->UseRealTime();

// ---- Through cosession: placeholders fed with the batch, the model of
// examples/mlp_classifier.h with plain gradient descent, a MonitoredSession
// without hooks, `co_await ms.Run(...)` per iteration.

Tensor RandomTensor(DType dtype, TensorShape shape, int classes,
                    std::mt19937& rng) {
  Tensor t = Tensor::Allocate(dtype, shape);
  if (dtype == DType::kFloat) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : t.mutable_flat<float>()) v = normal(rng);
  } else {
    std::uniform_int_distribution<int> label(0, classes - 1);
    for (int32_t& v : t.mutable_flat<int32_t>()) v = label(rng);
  }
  return t;
}

asio::awaitable<void> TrainSteps(benchmark::State& state, MlpSize size,
                                 Runtime* runtime,
                                 RunOptions run_options = {}) {
  Graph g;
  g.set_seed(42);
  Output x = ops::Placeholder(g, DType::kFloat,
                              TensorShape{size.batch, size.inputs}, "x");
  Output y = ops::Placeholder(g, DType::kInt32, TensorShape{size.batch}, "y");
  auto model = BuildMlpClassifier(g, x, y,
                                  {.hidden_units = {size.hidden},
                                   .num_classes = size.classes,
                                   .optimizer = "sgd",
                                   .learning_rate = kLearningRate});
  if (!model.ok()) {
    state.SkipWithError(model.status().ToString().c_str());
    co_return;
  }
  MonitoredSessionOptions options;
  options.runtime = runtime;
  auto created = co_await MonitoredSession::Create(
      g, {}, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) {
    state.SkipWithError(created.status().ToString().c_str());
    co_return;
  }
  std::mt19937 rng(42);
  RunArgs step{
      .targets = {model->train},
      .feeds = {{x, RandomTensor(DType::kFloat,
                                 TensorShape{size.batch, size.inputs},
                                 size.classes, rng)},
                {y, RandomTensor(DType::kInt32, TensorShape{size.batch},
                                 size.classes, rng)}},
      .options = run_options};
  MonitoredSession& session = **created;
  for (auto _ : state) {
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (!ran.ok()) {
      state.SkipWithError(ran.status().ToString().c_str());
      break;
    }
  }
  (void)co_await session.Close(asio::use_awaitable);
}

void BM_Train_MLP(benchmark::State& state) {
  bench::RunCoroutine(TrainSteps(state, kMlp, nullptr));
}
BENCHMARK(BM_Train_MLP)->UseRealTime();

// The same without intra-op parallelism: every kernel on one thread, as in
// the baseline.
void BM_Train_MLP_SerialKernels(benchmark::State& state) {
  Runtime runtime({.min_parallel_piece_cost = 0});
  bench::RunCoroutine(TrainSteps(state, kMlp, &runtime));
}
BENCHMARK(BM_Train_MLP_SerialKernels)->UseRealTime();

// The same two steps with every op on the benchmark's thread
// (RunOptions::inter_op_thread_pool = -1, TensorFlow's "caller thread"), as
// the Eigen baselines run: no hand-off to the pool and back, which on these
// VMs costs a wake-up of a sleeping thread each way.
void BM_Train_MLP_SerialKernels_CallerThread(benchmark::State& state) {
  Runtime runtime({.min_parallel_piece_cost = 0});
  bench::RunCoroutine(
      TrainSteps(state, kMlp, &runtime, {.inter_op_thread_pool = -1}));
}
BENCHMARK(BM_Train_MLP_SerialKernels_CallerThread)->UseRealTime();

void BM_Train_MLP_CallerThread(benchmark::State& state) {
  bench::RunCoroutine(
      TrainSteps(state, kMlp, nullptr, {.inter_op_thread_pool = -1}));
}
BENCHMARK(BM_Train_MLP_CallerThread)->UseRealTime();

void BM_Train_TinyMLP(benchmark::State& state) {
  bench::RunCoroutine(TrainSteps(state, kTinyMlp, nullptr));
}
BENCHMARK(BM_Train_TinyMLP)->UseRealTime();

}  // namespace
}  // namespace cosession
