// fit_line: fits y = w*x + b to points of y = 2x + 1 by gradient descent
// written out by hand (gradients arrive with the training issue), through
// MonitoredTrainingSession with the standard hooks. It shows the files the
// hooks write:
//   <dir>/model.ckpt-<step>.safetensors, <dir>/checkpoint   (checkpoints)
//   <dir>/events.out.tfevents.*                            (TensorBoard)
//   <dir>/timeline-<step>.json                             (Chrome trace)
// Run it twice with the same directory: the second run resumes from the
// saved step.
//
//   ./build/release/examples/fit_line [dir] [max_steps]
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cosession/graph/ops.h"
#include "cosession/hooks/logging_tensor_hook.h"
#include "cosession/hooks/nan_tensor_hook.h"
#include "cosession/hooks/profiler_hook.h"
#include "cosession/training/monitored_training_session.h"

namespace asio = boost::asio;
using namespace cosession;

struct Model {
  Model() {
    global_step = GetOrCreateGlobalStep(g);
    Output x = ops::Const(
        g, Tensor::FromVector<float>({-2, -1, 0, 1, 2, 3}, TensorShape({6})));
    Output y = ops::Const(
        g, Tensor::FromVector<float>({-3, -1, 1, 3, 5, 7}, TensorShape({6})));
    w = ops::Variable(g, Tensor::Scalar(0.0f), "w");
    b = ops::Variable(g, Tensor::Scalar(0.0f), "b");
    Output error = ops::Sub(g, ops::Add(g, ops::Mul(g, w, x), b), y, "error");
    loss = ops::Mean(g, ops::Square(g, error), {}, false, "loss");
    // d loss / d w = mean(2 * error * x), d loss / d b = mean(2 * error).
    Output rate = ops::Const(g, 0.05f);
    Output grad_w = ops::Mul(g, ops::Const(g, 2.0f),
                             ops::Mean(g, ops::Mul(g, error, x)), "grad_w");
    Output grad_b =
        ops::Mul(g, ops::Const(g, 2.0f), ops::Mean(g, error), "grad_b");
    train = ops::Group(
        g,
        {Operation(ops::AssignSub(g, w, ops::Mul(g, rate, grad_w)).node()),
         Operation(ops::AssignSub(g, b, ops::Mul(g, rate, grad_b)).node()),
         Operation(
             ops::AssignAdd(g, global_step, ops::Const(g, int64_t{1})).node())},
        "train");
  }
  Graph g;
  Output global_step, w, b, loss;
  Operation train;
};

asio::awaitable<int> Train(std::string dir, int64_t max_steps) {
  Model model;
  auto logging = LoggingTensorHook::Create(
      {.tensors = {model.loss, model.w, model.b}, .every_n_iter = 50});
  auto nan = NanTensorHook::Create({.loss = model.loss});
  auto profiler = ProfilerHook::Create({.save_steps = 100, .output_dir = dir});
  if (!logging.ok() || !nan.ok() || !profiler.ok()) {
    std::fprintf(stderr, "bad hook options\n");
    co_return 1;
  }
  MonitoredTrainingSessionOptions options;
  options.checkpoint_dir = dir;
  options.save_checkpoint_steps = 100;
  options.save_summaries_steps = 10;
  options.summary_scalars = {{"loss", model.loss}, {"w", model.w}};
  options.max_steps = max_steps;
  options.hooks = {*logging, *nan, *profiler};
  auto created =
      co_await MonitoredTrainingSession(model.g, options, asio::use_awaitable);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    co_return 1;
  }
  MonitoredSession& session = **created;
  RunArgs train{.targets = {model.train}};
  while (!session.ShouldStop()) {
    auto step = co_await session.Run(train, asio::use_awaitable);
    if (!step.ok()) {
      std::fprintf(stderr, "step failed: %s\n",
                   step.status().ToString().c_str());
      break;
    }
  }
  RunArgs read{.fetches = {model.w, model.b, model.global_step}};
  auto values = co_await session.raw_session().Run(read, asio::use_awaitable);
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  if (!values.ok() || !closed.ok()) {
    std::fprintf(stderr, "%s\n", closed.ToString().c_str());
    co_return 1;
  }
  std::printf("w=%.4f b=%.4f global_step=%lld (%s)\n",
              (*values)[0].scalar<float>(), (*values)[1].scalar<float>(),
              static_cast<long long>((*values)[2].scalar<int64_t>()),
              session.stop_reason().c_str());
  std::printf("checkpoints, events and traces are in %s\n", dir.c_str());
  co_return 0;
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/tmp/cosession_fit_line";
  int64_t max_steps = argc > 2 ? std::atoll(argv[2]) : 300;
  asio::io_context io;
  int result = 1;
  asio::co_spawn(io, Train(dir, max_steps),
                 [&](std::exception_ptr e, int r) { result = e ? 1 : r; });
  io.run();
  return result;
}
