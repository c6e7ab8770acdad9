// Kernels: the CPU implementations of ops, and the context they run in.
//
// A kernel is either
//   * a SyncKernel: a plain function that reads its inputs and sets every
//     output before returning. It must not block on other ops or I/O. Long
//     loops may poll stop_requested() to give up early.
//   * an AsyncKernel: for ops that wait (on I/O, a channel, a timer). graph/
//     only carries it: its body is a coroutine, defined and run by the async
//     layer (async/async_kernel.h), which documents how it is cancelled.
// A kernel reports failure by returning a non-OK status; an exception that
// escapes a kernel is turned into an Internal status naming the op.
//
// Lifetime: the context, its inputs and its outputs live until the kernel
// returns (for an AsyncKernel, until its coroutine completes).
//
// Buffer forwarding: an elementwise kernel may write its output into the
// buffer of an input that nothing else can see any more, instead of
// allocating one (KernelContext::ForwardInputOrAllocateOutput, TensorFlow's
// forward_input_or_allocate_output). For a chain of small ops that saves an
// allocation and a free per op, a fifth of the executor's cost per op
// (BM_Executor_Chain); for big tensors, memory traffic.
//
// Intra-op parallelism: a SyncKernel with a lot of work (a big MatMul, an
// AddN of many tensors) may split it with KernelContext::ParallelFor, which
// runs the pieces on the session runtime's threads and returns when all are
// done. Pieces must write disjoint parts of the output.
#ifndef COSESSION_GRAPH_KERNEL_H_
#define COSESSION_GRAPH_KERNEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/resource_manager.h"
#include "cosession/graph/tensor.h"

namespace cosession {

// Runs a loop's pieces on several threads. Implemented by the session's
// Runtime (async/runtime.h); graph/ only sees this interface.
class ParallelRunner {
 public:
  virtual ~ParallelRunner() = default;
  // Calls fn(begin, end) on disjoint ranges that cover [0, n), possibly on
  // several threads at once, and returns once every call returned.
  // `cost_per_unit` (element operations per index) decides how many pieces
  // pay for the threads' wake-ups; small loops run as one call, here.
  virtual void ParallelFor(
      int64_t n, int64_t cost_per_unit,
      absl::FunctionRef<void(int64_t begin, int64_t end)> fn) = 0;
};

class KernelContext {
 public:
  // `exclusive_inputs`: bit i set when input i is this op's alone -- it is
  // the value's only reader, nothing fetches it, and *inputs[i] is a
  // non-const Tensor the op may take (ForwardInputOrAllocateOutput). Inputs
  // beyond 31 are never exclusive.
  KernelContext(const Node& node, absl::Span<const Tensor* const> inputs,
                Tensor* outputs, ResourceManager& resources,
                const std::atomic<bool>* stop_requested,
                ParallelRunner* parallel = nullptr,
                uint32_t exclusive_inputs = 0)
      : node_(node),
        inputs_(inputs),
        outputs_(outputs),
        resources_(resources),
        stop_requested_(stop_requested),
        parallel_(parallel),
        exclusive_inputs_(exclusive_inputs) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Tensor& input(int i) const { return *inputs_[i]; }
  void set_output(int i, Tensor value) { outputs_[i] = std::move(value); }
  // Sets output `output` to a tensor of `dtype` with the shape of `like`,
  // for the kernel to write (through the reference returned): the first of
  // `candidates` (input indices) this op may take over, else a new,
  // uninitialised one. An input is taken over when nothing else can see
  // it: it is exclusive (see the constructor), no other tensor shares its
  // buffer, and it has `dtype` and like's shape. A taken input is left
  // empty, so read its data pointer (still valid: the buffer now is the
  // output's) and its shape before the call. Only a kernel that writes
  // each element after reading the same element of its inputs may use it.
  Tensor& ForwardInputOrAllocateOutput(std::initializer_list<int> candidates,
                                       int output, DType dtype,
                                       const Tensor& like) {
    Tensor& out = outputs_[output];
    for (int i : candidates) {
      if (i < 0 || i >= 32 || ((exclusive_inputs_ >> i) & 1u) == 0) continue;
      // The executor's slot: a non-const object (see the constructor).
      Tensor& in = const_cast<Tensor&>(*inputs_[i]);
      if (in.dtype() != dtype || !in.RefCountIsOne()) continue;
      if (&in != &like && in.shape() != like.shape()) continue;
      out = std::move(in);
      return out;
    }
    out = Tensor::AllocateWithShapeOf(dtype, like);
    return out;
  }
  const Tensor& output(int i) const { return outputs_[i]; }
  ResourceManager& resources() const { return resources_; }
  // True once the run was cancelled or failed elsewhere.
  bool stop_requested() const {
    return stop_requested_ != nullptr &&
           stop_requested_->load(std::memory_order_relaxed);
  }
  // See ParallelRunner::ParallelFor; without a runner, one call on this
  // thread.
  void ParallelFor(int64_t n, int64_t cost_per_unit,
                   absl::FunctionRef<void(int64_t, int64_t)> fn) const {
    if (parallel_ != nullptr) {
      parallel_->ParallelFor(n, cost_per_unit, fn);
    } else if (n > 0) {
      fn(0, n);
    }
  }

 private:
  const Node& node_;
  absl::Span<const Tensor* const> inputs_;
  Tensor* outputs_;
  ResourceManager& resources_;
  const std::atomic<bool>* stop_requested_;
  ParallelRunner* parallel_;
  uint32_t exclusive_inputs_;
};

using SyncKernel = std::function<absl::Status(KernelContext&)>;
// The kernel of an op that waits. An opaque handle here, so that graph/
// needs no Asio: async/async_kernel.h defines the one implementation
// (CoroutineKernel) and the executor runs it.
class AsyncKernel {
 public:
  virtual ~AsyncKernel() = default;
};

// Estimated work of one execution, in "element operations" (a float add is
// 1, a multiply-add of a MatMul is 1). The executor runs ops whose estimate is
// below its inline threshold on the thread that made them ready, and hands
// bigger ones to the thread pool. When every input and output shape of an op
// is known when the graph is built, the executor asks once per execution
// plan and keeps the answer: the estimate must then follow from those
// shapes (and attributes) alone.
using CostFn = int64_t (*)(const KernelContext&);

}  // namespace cosession

#endif  // COSESSION_GRAPH_KERNEL_H_
