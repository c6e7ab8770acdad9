// The executor: runs the part of a graph that a run needs.
//
// ExecutionPlan::Build prunes the graph to the ops that the fetches and
// targets need given the feeds (a fed tensor cuts the graph: its producer
// does not run for it), and orders them. Plans are immutable and cached by
// the Session per (feeds, fetches, targets) signature.
//
// Execute runs one plan: each op once, after its data and control inputs.
// Scheduling follows TensorFlow's inline rule: an op whose estimated cost
// (OpDef::cost) is below Runtime::inline_cost_threshold() runs on the thread
// that made it ready; a bigger op goes to the runtime's pool, except that a
// pool thread keeps one ready big op for itself instead of bouncing it. So a
// graph of cheap ops runs entirely on the caller's thread, and independent
// expensive branches run in parallel. A run with
// RunOptions::inter_op_thread_pool = -1 hands no op to the pool: all run
// on the thread that started it (TensorFlow's "caller thread"), until an
// asynchronous kernel suspends it. A run's big ops wait in a queue of its
// own, which at most one task per pool thread drains: a fan-out of many big
// ops costs a few posts, not one per op. Asynchronous kernels run as coroutines
// on a strand of the pool (created only for plans that have them) and hold no
// thread while they wait.
//
// Stopping: the first kernel error, a cancellation delivered on `slot`, or the
// deadline (RunOptions::timeout) stops scheduling; ops already running finish
// (synchronous kernels may poll KernelContext::stop_requested()), async
// kernels get terminal cancellation, and the run completes with the first
// cause: the kernel's error, Cancelled or DeadlineExceeded. `slot` gets its
// handler when the run first hands work to another thread: as for any Asio
// initiating function, its signal must not be emitted during Execute, so a
// run that completes inside Execute never installs one.
//
// Memory: a run's state (a tensor slot per output and feed, an input pointer
// per input, two counters per op, and the run's own bookkeeping) is kept by
// its plan when the run is over, emptied -- no tensor, feed, status or trace
// left in it -- and the plan's next run starts from it instead of allocating
// and sizing a new one. Small tensors pass their slots on once read
// (ExecutionPlan::ShareSmallSlots), so a chain of small ops uses a few.
// A plan keeps at most one (runs at the same time make their own); it goes
// with the plan. Plans of fewer than 8 ops keep none: for so few ops the
// hand-over costs more than it saves. Thread safety: a state is handed from a
// finished run to the next with atomic exchanges, so any thread may run a plan.
//
// Completion: `done` is called exactly once, on whichever thread finished the
// last op -- possibly inline, inside Execute. Callers that owe a completion to
// an Asio handler post it themselves (see async/session.h).
#ifndef COSESSION_ASYNC_EXECUTOR_H_
#define COSESSION_ASYNC_EXECUTOR_H_

#include <atomic>
#include <boost/asio/cancellation_signal.hpp>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cosession/async/run_args.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/resource_manager.h"

namespace cosession {

class RunState;

class ExecutionPlan {
 public:
  // InvalidArgument when a feed, fetch or target is empty or belongs to
  // another graph, a tensor is fed twice, or a needed placeholder is not fed
  // (the message names the placeholder and what needs it).
  static absl::StatusOr<std::shared_ptr<const ExecutionPlan>> Build(
      const Graph& graph, absl::Span<const Output> feeds,
      absl::Span<const Output> fetches, absl::Span<const Operation> targets);

  // InvalidArgument naming the tensor when a feed value's dtype or shape does
  // not match what the graph declares for it.
  absl::Status ValidateFeeds(absl::Span<const Tensor> values) const;

  int num_ops() const { return static_cast<int>(steps_.size()); }
  // The tensor slots a run of this plan keeps: one per output and feed,
  // except that small tensors share (ShareSmallSlots).
  int num_slots() const { return num_slots_; }
  bool has_async_ops() const { return has_async_; }

  ExecutionPlan() = default;
  ExecutionPlan(const ExecutionPlan&) = delete;
  ExecutionPlan& operator=(const ExecutionPlan&) = delete;
  ~ExecutionPlan();

 private:
  friend class RunState;
  // A list of ints kept in lists_ (which does not change once the plan is
  // built): lists_[first, first + size). Offsets rather than pointers: a
  // Step takes 64 bytes instead of 96, which a run over a plan of 100,000
  // ops reads from memory.
  struct IntList {
    int first = 0;
    int size = 0;
  };
  // One op of the plan. Its lists live in the plan's flat arrays rather than
  // in vectors of its own: a run walks them in order, so a plan of 100,000
  // ops reads a few contiguous arrays instead of chasing five heap blocks
  // per op (BM_Executor_Chain/100000).
  struct Step {
    const Node* node;
    const OpDef* op;
    int first_output_slot{};
    // Its input slots are input_slots_[first_input, first_input +
    // num_inputs); a run's flat array of input pointers has the same layout
    // (RunState: built once per run, not per op). num_inputs is the node's,
    // kept here so that a run reads no Node: in a plan of 100,000 ops each
    // Node is one more cache line to load per op.
    int first_input{};
    int num_inputs{};
    // Every input and output shape is known at build time, so the op's cost
    // estimate is the same every run: asked once, kept in cost_cache_.
    bool static_cost{};
    // Bit i: input i is this step's alone -- its slot has no other reader
    // and is not fetched -- so its kernel may write its output into that
    // tensor's buffer (KernelContext::ForwardInputOrAllocateOutput). Inputs
    // past the 16th are never marked (a Step fits a cache line).
    uint16_t exclusive_inputs{};
    IntList successors{};
    // Big slots (see slot_uses_) to drop once this step ran: inputs it reads
    // (when it is their last reader), and outputs nothing reads.
    IntList release_inputs{};
    IntList dead_outputs{};
    // Small slots this step is the only reader of (and that are not
    // fetched): dropped once it ran, with no count to keep.
    IntList drop_inputs{};
  };
  static_assert(sizeof(Step) <= 64);

  absl::Span<const int> Items(IntList list) const {
    return absl::MakeConstSpan(lists_.data() + list.first,
                               static_cast<size_t>(list.size));
  }

  // Gives the slot of a small tensor whose only reader ran to a later
  // output, so that a chain of small ops cycles through a few slots, hot in
  // the cache, instead of writing one more per op (and Park emptying them
  // all): BM_Executor_Chain/100000. The later op must be a successor of
  // that reader, which drops the tensor (Step::drop_inputs) before it
  // releases its successors, and have a single small output (a step's
  // outputs are consecutive slots). Big, fetched, fed and several times
  // read tensors keep slots of their own. Called last by Build, with `big`
  // per slot; renumbers every slot the plan names.
  void ShareSmallSlots(const std::vector<bool>& big);

  absl::Span<const int> InputSlots(const Step& step) const {
    return absl::MakeConstSpan(input_slots_.data() + step.first_input,
                               static_cast<size_t>(step.num_inputs));
  }

  std::vector<Output> feeds_;
  std::vector<Step> steps_;
  // Per step: how many predecessors it waits for.
  std::vector<int> initial_pending_;
  // Every step's input slots, in step order (Step::first_input).
  std::vector<int> input_slots_;
  // The steps' IntLists.
  std::vector<int> lists_;
  // Per slot that may hold a big tensor (static shape unknown or of at least
  // kReleaseElements elements): how many inputs of steps read it, plus one
  // when it is fetched; 0 for small slots. A run drops a big slot's tensor
  // when its count reaches zero, so that a variable's buffer read early in
  // a step is no longer shared by the time the step's optimizer updates it
  // (copy-on-write then writes in place; graph/resource_manager.h), and big
  // intermediates die early. Small slots are not counted (an atomic per
  // read would cost more than their memory); those with a single reader
  // are dropped by it (Step::drop_inputs), so that a long chain of small
  // ops reuses a few hot buffers instead of keeping one per op until the
  // run ends (BM_Executor_Chain/100000: 1.86 times the cost per op of
  // /1000 before, from cache misses and allocations).
  static constexpr int64_t kReleaseElements = 4096;
  std::vector<int> slot_uses_;
  std::vector<int> roots_;  // steps without predecessors, last first
  std::vector<int> fetch_slots_;
  // Per fetch: whether it is the last fetch of its slot (Complete moves the
  // tensor out of the slot for it, and copies it for the others).
  std::vector<char> fetch_takes_slot_;
  // Per step with static_cost: its cost estimate once a run asked, else -1.
  // Relaxed atomics: runs on several threads may ask at once, and all get
  // the same answer.
  std::unique_ptr<std::atomic<int64_t>[]> cost_cache_;
  int num_slots_ = 0;
  int num_inputs_ = 0;  // of all steps
  int first_feed_slot_ = 0;
  bool has_async_ = false;
  // The state of a run that finished, kept for this plan's next run: its
  // arrays (a tensor slot, an input pointer and two counters per op) are
  // sized and laid out for this plan, so a run that takes it skips making
  // them. At most one is kept -- runs at the same time make their own --
  // and it is deleted with the plan. Taken and given back with atomic
  // exchanges (acquire / release), so a run on one thread may reuse the
  // state of a run that finished on another.
  mutable std::atomic<RunState*> spare_run_{nullptr};
};

using RunDoneCallback = absl::AnyInvocable<void(absl::StatusOr<RunOutputs>)>;

// Runs `plan` with `feed_values` (validated, in the plan's feed order).
// `resources` and `runtime` must outlive the run; a connected `slot` gets a
// handler that stops the run, and must be cleared by the caller after `done`.
void Execute(std::shared_ptr<const ExecutionPlan> plan,
             std::vector<Tensor> feed_values,
             std::shared_ptr<ResourceManager> resources, Runtime& runtime,
             const RunOptions& options, boost::asio::cancellation_slot slot,
             RunDoneCallback done);

}  // namespace cosession

#endif  // COSESSION_ASYNC_EXECUTOR_H_
