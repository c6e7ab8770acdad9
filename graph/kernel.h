// Kernels: the CPU implementations of ops, and the context they run in.
//
// A kernel is either
//   * a SyncKernel: a plain function that reads its inputs and sets every
//     output before returning. It must not block on other ops or I/O. Long
//     loops may poll stop_requested() to give up early.
//   * an AsyncKernel: a coroutine, for ops that wait (on I/O, a channel, a
//     timer). It runs on the session runtime's pool without holding a thread
//     while it waits, and is cancelled (Asio terminal cancellation through the
//     coroutine's cancellation state) when the run stops: it must let its
//     waits be cancelled and then return promptly.
// A kernel reports failure by returning a non-OK status; an exception that
// escapes a kernel is turned into an Internal status naming the op.
//
// Lifetime: the context, its inputs and its outputs live until the kernel
// returns (for an AsyncKernel, until its coroutine completes).
#ifndef COSESSION_GRAPH_KERNEL_H_
#define COSESSION_GRAPH_KERNEL_H_

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "graph/graph.h"
#include "graph/resource_manager.h"
#include "graph/tensor.h"

namespace cosession {

class KernelContext {
 public:
  KernelContext(const Node& node, absl::Span<const Tensor* const> inputs,
                Tensor* outputs, ResourceManager& resources,
                const std::atomic<bool>* stop_requested)
      : node_(node),
        inputs_(inputs),
        outputs_(outputs),
        resources_(resources),
        stop_requested_(stop_requested) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Tensor& input(int i) const { return *inputs_[i]; }
  void set_output(int i, Tensor value) { outputs_[i] = std::move(value); }
  const Tensor& output(int i) const { return outputs_[i]; }
  ResourceManager& resources() const { return resources_; }
  // True once the run was cancelled or failed elsewhere.
  bool stop_requested() const {
    return stop_requested_ != nullptr &&
           stop_requested_->load(std::memory_order_relaxed);
  }

 private:
  const Node& node_;
  absl::Span<const Tensor* const> inputs_;
  Tensor* outputs_;
  ResourceManager& resources_;
  const std::atomic<bool>* stop_requested_;
};

using SyncKernel = std::function<absl::Status(KernelContext&)>;
using AsyncKernel =
    std::function<boost::asio::awaitable<absl::Status>(KernelContext&)>;

// Estimated work of one execution, in "element operations" (a float add is
// 1, a multiply-add of a MatMul is 1). The executor runs ops whose estimate is
// below its inline threshold on the thread that made them ready, and hands
// bigger ones to the thread pool.
using CostFn = int64_t (*)(const KernelContext&);

}  // namespace cosession

#endif  // COSESSION_GRAPH_KERNEL_H_
