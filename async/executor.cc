#include "cosession/async/executor.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/base/attributes.h"
#include "absl/container/fixed_array.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/async_kernel.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/async/timer_executor.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace asio = boost::asio;

// ---------------------------------------------------------------- planning

absl::StatusOr<std::shared_ptr<const ExecutionPlan>> ExecutionPlan::Build(
    const Graph& graph, absl::Span<const Output> feeds,
    absl::Span<const Output> fetches, absl::Span<const Operation> targets) {
  auto check_output = [&](const Output& out,
                          absl::string_view role) -> absl::Status {
    if (!out.valid()) {
      return absl::InvalidArgumentError(absl::StrCat("An empty ", role));
    }
    if (&out.node()->graph() != &graph) {
      return absl::InvalidArgumentError(
          absl::StrCat(role, " '", out.name(), "' belongs to another graph"));
    }
    return absl::OkStatus();
  };

  auto plan = std::make_shared<ExecutionPlan>();
  absl::flat_hash_map<Output, int> fed;  // tensor -> feed index
  for (const Output& feed : feeds) {
    COSESSION_RETURN_IF_ERROR(check_output(feed, "feed"));
    if (!fed.emplace(feed, static_cast<int>(fed.size())).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor '", feed.name(), "' is fed more than once"));
    }
  }
  plan->feeds_.assign(feeds.begin(), feeds.end());
  // Most runs feed nothing: then no tensor needs hashing to learn it.
  auto is_fed = [&](const Output& out) {
    return !fed.empty() && fed.contains(out);
  };

  // A graph of 10,000 ops no longer fits the cache, so each needed Node is
  // read in two passes only, each in the order of the node ids (a run of
  // independent loads rather than a chase from node to input to input), and
  // what later passes need of it is copied into flat arrays.
  //
  // Node ids are a topological order: an op's inputs exist before it. So
  // one sweep from the last id down marks what the fetches and targets
  // need. `needed_by[id]` is the index in `roots` of the first root (in the
  // order given) that needs the op, to name it in an error; -1: not needed.
  const int n = graph.num_nodes();
  std::vector<std::string> roots;
  std::vector<int> needed_by(n, -1);
  auto need = [&](const Node* node, int root) {
    int& by = needed_by[node->id()];
    if (by < 0 || root < by) by = root;
  };
  for (const Output& fetch : fetches) {
    COSESSION_RETURN_IF_ERROR(check_output(fetch, "fetch"));
    if (is_fed(fetch)) continue;
    roots.push_back(fetch.name());
    need(fetch.node(), static_cast<int>(roots.size()) - 1);
  }
  for (const Operation& target : targets) {
    if (!target.valid() || &target.node()->graph() != &graph) {
      return absl::InvalidArgumentError(
          "A target is empty or belongs to another graph");
    }
    roots.push_back(target.name());
    need(target.node(), static_cast<int>(roots.size()) - 1);
  }
  const OpDef* placeholder = OpRegistry::Global().Find("Placeholder");
  // As in TensorFlow, feeding a placeholder replaces the whole op: a control
  // input on it is then satisfied by the feed, not a reason to run it.
  auto is_fed_placeholder = [&](Node* node) {
    return &node->op_def() == placeholder && is_fed(Output(node, 0));
  };
  int needed_ops = 0;
  for (int id = n - 1; id >= 0; --id) {
    const int root = needed_by[id];
    if (root < 0) continue;
    ++needed_ops;
    const Node* node = graph.node(id);
    if (&node->op_def() == placeholder) {
      return absl::InvalidArgumentError(
          absl::StrCat("You must feed a value for placeholder tensor '",
                       node->name(), ":0' (needed by '", roots[root], "')"));
    }
    for (const Output& in : node->inputs()) {
      if (!is_fed(in)) need(in.node(), root);
    }
    for (Node* control : node->control_inputs()) {
      if (!is_fed_placeholder(control)) need(control, root);
    }
  }

  // The second pass, in id order: the steps, their slots and inputs. A
  // step's inputs come from earlier steps, already seen. Feeds' slots
  // follow every step's outputs, so their number is known only at the end:
  // until then a fed input's slot is kept as -1 - its feed index.
  std::vector<int> step_of(n, -1);
  std::vector<bool> defined;  // per output slot: its shape is fully defined
  std::vector<bool> big;      // per slot: it may hold a big tensor
  auto may_be_big = [](const TensorShape& shape) {
    return !shape.IsFullyDefined() || shape.num_elements() >= kReleaseElements;
  };
  std::vector<bool> feed_defined(feeds.size());
  for (const auto& [output, index] : fed) {
    feed_defined[index] = output.shape().IsFullyDefined();
  }
  // Successors are known only once every later step was seen.
  std::vector<absl::InlinedVector<int, 2>> successors(needed_ops);
  plan->steps_.reserve(needed_ops);
  plan->initial_pending_.resize(needed_ops);
  int slot = 0;
  for (int id = 0; id < n; ++id) {
    if (needed_by[id] < 0) continue;
    const Node* node = graph.node(id);
    const int s = static_cast<int>(plan->steps_.size());
    step_of[id] = s;
    Step& step = plan->steps_.emplace_back(
        Step{.node = node, .op = &node->op_def(), .first_output_slot = slot});
    step.static_cost = !step.op->async_kernel;
    for (int out = 0; out < node->num_outputs(); ++out) {
      const TensorShape& shape = node->output_shape(out);
      defined.push_back(shape.IsFullyDefined());
      big.push_back(may_be_big(shape));
      step.static_cost = step.static_cost && defined.back();
    }
    slot += node->num_outputs();
    if (step.op->async_kernel) {
      if (dynamic_cast<const CoroutineKernel*>(step.op->async_kernel.get()) ==
          nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("Op '", node->name(), "' (", node->type(),
                         ") has an async kernel that is not a CoroutineKernel "
                         "(async/async_kernel.h)"));
      }
      plan->has_async_ = true;
    }
    step.first_input = static_cast<int>(plan->input_slots_.size());
    step.num_inputs = node->num_inputs();
    absl::InlinedVector<int, 8> predecessors;
    for (const Output& in : node->inputs()) {
      if (!fed.empty()) {
        if (auto it = fed.find(in); it != fed.end()) {
          plan->input_slots_.push_back(-1 - it->second);
          step.static_cost = step.static_cost && feed_defined[it->second];
          continue;
        }
      }
      const int from = step_of[in.node()->id()];
      const int in_slot = plan->steps_[from].first_output_slot + in.index();
      plan->input_slots_.push_back(in_slot);
      step.static_cost = step.static_cost && defined[in_slot];
      predecessors.push_back(from);
    }
    for (Node* control : node->control_inputs()) {
      if (!is_fed_placeholder(control)) {
        predecessors.push_back(step_of[control->id()]);
      }
    }
    if (predecessors.size() > 1) {
      std::sort(predecessors.begin(), predecessors.end());
      predecessors.erase(std::unique(predecessors.begin(), predecessors.end()),
                         predecessors.end());
    }
    plan->initial_pending_[s] = static_cast<int>(predecessors.size());
    for (int p : predecessors) successors[p].push_back(s);
    if (predecessors.empty()) plan->roots_.push_back(s);
  }
  plan->first_feed_slot_ = slot;
  plan->num_slots_ = slot + static_cast<int>(feeds.size());
  if (!fed.empty()) {
    for (int& in : plan->input_slots_) {
      if (in < 0) in = slot + (-1 - in);
    }
  }
  big.resize(plan->num_slots_);
  for (const auto& [output, index] : fed) {
    big[slot + index] = may_be_big(output.shape());
  }
  auto slot_of = [&](const Output& out) {
    if (!fed.empty()) {
      auto it = fed.find(out);
      if (it != fed.end()) return plan->first_feed_slot_ + it->second;
    }
    return plan->steps_[step_of[out.node()->id()]].first_output_slot +
           out.index();
  };
  auto outputs_of = [&](int s) {
    const int end = s + 1 < plan->num_ops()
                        ? plan->steps_[s + 1].first_output_slot
                        : plan->first_feed_slot_;
    return std::pair<int, int>(plan->steps_[s].first_output_slot, end);
  };
  auto append = [&](IntList& list, absl::Span<const int> values) {
    list.first = static_cast<int>(plan->lists_.size());
    list.size = static_cast<int>(values.size());
    plan->lists_.insert(plan->lists_.end(), values.begin(), values.end());
  };
  plan->num_inputs_ = static_cast<int>(plan->input_slots_.size());
  for (int s = 0; s < plan->num_ops(); ++s) {
    append(plan->steps_[s].successors, successors[s]);
  }
  plan->cost_cache_ =
      std::make_unique<std::atomic<int64_t>[]>(plan->steps_.size());
  for (size_t s = 0; s < plan->steps_.size(); ++s) {
    plan->cost_cache_[s].store(-1, std::memory_order_relaxed);
  }
  std::reverse(plan->roots_.begin(), plan->roots_.end());  // see Start
  for (const Output& fetch : fetches) {
    plan->fetch_slots_.push_back(slot_of(fetch));
  }
  // The last fetch of each slot takes its tensor; an earlier one of the same
  // slot (a caller may fetch a tensor twice) gets a copy.
  plan->fetch_takes_slot_.assign(plan->fetch_slots_.size(), 0);
  {
    std::vector<bool> taken(plan->num_slots_, false);
    for (size_t f = plan->fetch_slots_.size(); f-- > 0;) {
      const int slot = plan->fetch_slots_[f];
      plan->fetch_takes_slot_[f] = !taken[slot];
      taken[slot] = true;
    }
  }
  // Readers per slot: the big slots' counts of a run start there (plus one
  // when fetched); a small slot with one reader is dropped by it.
  std::vector<int> readers(plan->num_slots_, 0);
  for (int in : plan->input_slots_) ++readers[in];
  std::vector<bool> fetched(plan->num_slots_, false);
  for (int slot : plan->fetch_slots_) fetched[slot] = true;
  plan->slot_uses_.assign(plan->num_slots_, 0);
  for (int slot = 0; slot < plan->num_slots_; ++slot) {
    if (big[slot]) plan->slot_uses_[slot] = readers[slot] + fetched[slot];
  }
  for (int s = 0; s < plan->num_ops(); ++s) {
    Step& step = plan->steps_[s];
    absl::InlinedVector<int, 4> release, drop, dead;
    const absl::Span<const int> input_slots = plan->InputSlots(step);
    for (size_t i = 0; i < input_slots.size(); ++i) {
      const int in = input_slots[i];
      const bool only_reader = readers[in] == 1 && !fetched[in];
      if (only_reader && i < 16) {
        step.exclusive_inputs |= static_cast<uint16_t>(1u << i);
      }
      if (big[in]) {
        release.push_back(in);
      } else if (only_reader) {
        drop.push_back(in);
      }
    }
    const auto [first_out, end_out] = outputs_of(s);
    for (int out = first_out; out < end_out; ++out) {
      if (big[out] && plan->slot_uses_[out] == 0) dead.push_back(out);
    }
    append(step.release_inputs, release);
    append(step.drop_inputs, drop);
    append(step.dead_outputs, dead);
  }
  plan->ShareSmallSlots(big);
  return std::shared_ptr<const ExecutionPlan>(std::move(plan));
}

void ExecutionPlan::ShareSmallSlots(const std::vector<bool>& big) {
  // Until now every output and feed has a slot of its own, and step s's
  // outputs are [its first_output_slot, step s + 1's): the loop reads the
  // next step's before it renumbers it. One pass in step order (a
  // topological one): each output gets a slot that a predecessor freed when
  // it can take one, else a new one.
  const int step_slots = first_feed_slot_;
  const int num_feeds = num_slots_ - step_slots;
  std::vector<int> slot_of(num_slots_);   // old slot -> new
  std::vector<int> producer(step_slots);  // old slot -> its step
  // Per step: how many of its drop_inputs were looked at for a successor.
  // Those after are free once it finished, and not yet given away.
  std::vector<int> given(steps_.size(), 0);
  auto take_freed_by = [&](int b) {
    const IntList drops = steps_[b].drop_inputs;
    while (given[b] < drops.size) {
      const int old = lists_[drops.first + given[b]++];
      if (old < step_slots) return slot_of[old];  // not a fed value
    }
    return -1;
  };
  int next = 0;
  for (int s = 0; s < num_ops(); ++s) {
    Step& step = steps_[s];
    const int first = step.first_output_slot;
    const int end =
        s + 1 < num_ops() ? steps_[s + 1].first_output_slot : step_slots;
    std::fill(producer.begin() + first, producer.begin() + end, s);
    int shared = -1;
    if (end - first == 1 && !big[first]) {
      for (int in : InputSlots(step)) {
        if (in >= step_slots) continue;  // fed
        shared = take_freed_by(producer[in]);
        if (shared >= 0) break;
      }
    }
    if (shared >= 0) {
      slot_of[first] = shared;
    } else {
      for (int out = first; out < end; ++out) slot_of[out] = next++;
    }
    // A step without outputs keeps a slot number past those so far, which
    // it never dereferences.
    step.first_output_slot = end > first ? slot_of[first] : next;
  }
  for (int f = 0; f < num_feeds; ++f) slot_of[step_slots + f] = next + f;

  for (int& in : input_slots_) in = slot_of[in];
  for (const Step& step : steps_) {
    for (IntList list :
         {step.release_inputs, step.drop_inputs, step.dead_outputs}) {
      for (int i = list.first; i < list.first + list.size; ++i) {
        lists_[i] = slot_of[lists_[i]];
      }
    }
  }
  for (int& slot : fetch_slots_) slot = slot_of[slot];
  // Only small slots are shared, and small slots count no uses.
  std::vector<int> slot_uses(next + num_feeds, 0);
  for (int old = 0; old < num_slots_; ++old) {
    if (slot_uses_[old] != 0) slot_uses[slot_of[old]] = slot_uses_[old];
  }
  slot_uses_ = std::move(slot_uses);
  first_feed_slot_ = next;
  num_slots_ = next + num_feeds;
}

absl::Status ExecutionPlan::ValidateFeeds(
    absl::Span<const Tensor> values) const {
  if (values.size() != feeds_.size()) {
    return absl::InternalError("feed count does not match the plan");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const Output& feed = feeds_[i];
    const Tensor& value = values[i];
    if (!value.IsInitialized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "The value fed for '", feed.name(), "' is an uninitialised tensor"));
    }
    if (value.dtype() != feed.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Cannot feed a value of dtype ",
                       DTypeName(value.dtype()), " for tensor '", feed.name(),
                       "', which has dtype ", DTypeName(feed.dtype())));
    }
    if (!feed.shape().IsCompatibleWith(value.shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Cannot feed a value of shape ", value.shape().DebugString(),
          " for tensor '", feed.name(), "', which has shape ",
          feed.shape().DebugString()));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- running

namespace {

// How errors name an op: "Op 'loss' (Mean)".
std::string OpLabel(const Node& node) {
  return absl::StrCat("Op '", node.name(), "' (", node.type(), ")");
}

uint64_t SmallThreadId() {
  static std::atomic<uint64_t> next{1};
  thread_local uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

}  // namespace

// The state of one execution. Shared by the threads and coroutines that work
// on it; the last of them to finish an op completes the run.
class RunState : public std::enable_shared_from_this<RunState> {
 public:
  using Step = ExecutionPlan::Step;
  using InputPtrs = absl::Span<const Tensor* const>;

  // The state for a run of `plan`. A plan of kMinOpsToRecycle ops or more
  // keeps the state of its last finished run (its spare): the run takes it
  // when there is one, else makes a new one, and dropping the last
  // reference gives it back (Recycle). A smaller plan's run makes its own
  // state in one allocation, as the spare would save it less than it costs.
  // Either way the run starts from the same values.
  static std::shared_ptr<RunState> Make(
      std::shared_ptr<const ExecutionPlan> plan,
      std::shared_ptr<ResourceManager> resources, Runtime& runtime,
      const RunOptions& options, RunDoneCallback done) {
    if (plan->num_ops() < kMinOpsToRecycle) {
      return std::make_shared<RunState>(PassKey(), std::move(plan),
                                        std::move(resources), runtime, options,
                                        std::move(done));
    }
    RunState* spare =
        plan->spare_run_.exchange(nullptr, std::memory_order_acquire);
    if (spare == nullptr) spare = new RunState(PassKey(), *plan);
    spare->Begin(std::move(plan), std::move(resources), runtime, options,
                 std::move(done));
    // A new control block each run: enable_shared_from_this takes it, as
    // the previous run's has no owner left (it expired before Recycle ran).
    return std::shared_ptr<RunState>(spare, Recycle());
  }

  // Only Make constructs a state (make_shared needs a public constructor).
  class PassKey {
    friend class RunState;
    PassKey() = default;
  };

  // A state for one run of `plan`, deleted after it (a small plan's).
  RunState(PassKey, std::shared_ptr<const ExecutionPlan> plan,
           std::shared_ptr<ResourceManager> resources, Runtime& runtime,
           const RunOptions& options, RunDoneCallback done)
      : plan_(std::move(plan)),
        resources_(std::move(resources)),
        runtime_(&runtime),
        trace_(options.trace_level >= RunOptions::kFullTrace),
        on_caller_thread_(options.inter_op_thread_pool == -1),
        slots_(plan_->num_slots_),
        inputs_(plan_->num_inputs_),
        pending_(plan_->steps_.size()),
        slot_uses_(plan_->slot_uses_.size()),
        remaining_(plan_->num_ops()),
        done_(std::move(done)) {
    PointInputsAtSlots(*plan_);
    SetCounters(options);
  }

  // A state sized for runs of `plan`, to be recycled; Begin starts each run.
  RunState(PassKey, const ExecutionPlan& plan)
      : slots_(plan.num_slots_),
        inputs_(plan.num_inputs_),
        pending_(plan.steps_.size()),
        slot_uses_(plan.slot_uses_.size()) {
    PointInputsAtSlots(plan);
  }

  void Start(std::vector<Tensor> feed_values,
             const std::optional<std::chrono::nanoseconds>& timeout,
             asio::cancellation_slot slot) {
    for (size_t i = 0; i < feed_values.size(); ++i) {
      slots_[plan_->first_feed_slot_ + i] = std::move(feed_values[i]);
    }
    if (plan_->steps_.empty()) {
      Complete();
      return;
    }
    // The caller's cancellation handler is installed only when work leaves
    // this thread (Share). Until then the run is on the thread that started
    // it, where the caller's signal cannot be emitted (Asio emits a slot's
    // signal on the handler's executor, never during the initiation), so a
    // run that completes here never needs one -- and saves installing and
    // clearing it, a reference to this RunState taken and dropped.
    caller_slot_ = slot;
    if (timeout.has_value()) {
      deadline_set_ = true;
      StartDeadline(*timeout);
    }
    // RunInline pops from the back and the plan keeps its roots reversed,
    // so that they run in graph order, and an op whose inputs are the first
    // roots (a MatMul of two Consts) becomes ready, and reaches the pool, as
    // soon as they ran rather than after every root.
    ReadyList ready;
    Schedule(plan_->roots_, ready);
    RunInline(ready);
  }

 private:
  // Below this many ops a run's state is not recycled: the spare's two
  // atomic exchanges and separate control block cost more than the set-up
  // of so few slots saves (README, "Performance": a 3-op run was slower
  // with a spare, a 30-op run faster).
  static constexpr int kMinOpsToRecycle = 8;

  // What a run of a recycled state starts from. The rest already holds its
  // starting value: empty slots, no status, no stop, unshared (Park).
  void Begin(std::shared_ptr<const ExecutionPlan> plan,
             std::shared_ptr<ResourceManager> resources, Runtime& runtime,
             const RunOptions& options, RunDoneCallback done) {
    plan_ = std::move(plan);
    resources_ = std::move(resources);
    runtime_ = &runtime;
    trace_ = options.trace_level >= RunOptions::kFullTrace;
    on_caller_thread_ = options.inter_op_thread_pool == -1;
    remaining_.store(plan_->num_ops(), std::memory_order_relaxed);
    done_ = std::move(done);
    SetCounters(options);
  }

  // inputs_ points into slots_, which never move: set once per state.
  void PointInputsAtSlots(const ExecutionPlan& plan) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      inputs_[i] = &slots_[plan.input_slots_[i]];
    }
  }

  // The per-run counters from plan_, and the strand when the run needs one.
  void SetCounters(const RunOptions& options) {
    for (size_t s = 0; s < pending_.size(); ++s) {
      pending_[s].store(plan_->initial_pending_[s], std::memory_order_relaxed);
    }
    for (size_t i = 0; i < slot_uses_.size(); ++i) {
      slot_uses_[i].store(plan_->slot_uses_[i], std::memory_order_relaxed);
    }
    if (plan_->has_async_ops() || options.timeout.has_value()) {
      strand_.emplace(asio::make_strand(runtime_->executor()));
    }
  }

  // The deleter of Make's shared_ptr: runs when the last reference went,
  // so nothing else can see the state. It returns every member Begin and
  // the run set to its starting value and gives the state to its plan,
  // unless the plan already keeps one.
  struct Recycle {
    void operator()(RunState* state) const noexcept { state->Park(); }
  };

  void Park() noexcept {
    // Held to the end: the plan deletes its spare, possibly this one, when
    // this is its last reference.
    const std::shared_ptr<const ExecutionPlan> plan = std::move(plan_);
    resources_.reset();
    // Most slots are empty by now; a fetch that was copied, or a fed value
    // that no op read, still holds its tensor.
    for (Tensor& slot : slots_) {
      if (slot.IsInitialized()) slot = Tensor();
    }
    done_ = nullptr;
    caller_slot_ = asio::cancellation_slot();
    // A status or stats were kept only by a run that stopped or traced.
    if (trace_ || stopped()) {
      std::lock_guard lock(mu_);
      status_ = absl::OkStatus();
      node_stats_.clear();
    }
    shared_.store(false, std::memory_order_relaxed);
    stop_.store(false, std::memory_order_relaxed);
    deadline_set_ = false;
    async_started_.store(false, std::memory_order_relaxed);
    deadline_.reset();  // before the strand its wait completes on
    async_ops_.clear();
    strand_.reset();
    completed_ = false;
    // The queue of big steps is empty (queued_, queue_head_ and drainers_
    // back at their start): its last drainer emptied it before it let go.
    RunState* none = nullptr;
    if (!plan->spare_run_.compare_exchange_strong(
            none, this, std::memory_order_release, std::memory_order_relaxed)) {
      delete this;
    }
  }

  // The steps one thread will run, last first. A pool thread keeps at most
  // one expensive step in it, at the front so that the cheap ones run first;
  // `holds_expensive` remembers that across a pass, in which each finished
  // step schedules its own successors. Keeping one per Schedule call instead
  // let a thread that ran several cheap ops, each releasing an expensive
  // one, keep them all and run them in series while the pool sat idle.
  struct ReadyList {
    bool empty() const { return steps.empty(); }
    absl::InlinedVector<int, 16> steps;
    bool holds_expensive = false;
  };

  bool stopped() const { return stop_.load(std::memory_order_acquire); }

  // Records the first error and stops the run: no new op starts, async
  // kernels waiting now are cancelled.
  void Stop(absl::Status cause) {
    {
      std::lock_guard lock(mu_);
      if (status_.ok()) status_ = std::move(cause);
    }
    if (stop_.exchange(true, std::memory_order_acq_rel)) return;
    if (strand_.has_value()) {
      asio::post(*strand_, [self = shared_from_this()] {
        for (auto& [step, op] : self->async_ops_) {
          if (op->running) op->signal.emit(asio::cancellation_type::terminal);
        }
        if (self->deadline_.has_value()) self->deadline_->cancel();
      });
    }
  }

  void StartDeadline(std::chrono::nanoseconds timeout) {
    asio::dispatch(*strand_, [self = shared_from_this(), timeout] {
      if (self->stopped() || self->completed_) return;
      self->deadline_.emplace(TimerExecutor(), timeout);
      self->deadline_->async_wait(asio::bind_executor(
          *self->strand_, [self, timeout](boost::system::error_code ec) {
            if (ec) return;  // cancelled: the run finished first
            self->Stop(absl::DeadlineExceededError(absl::StrCat(
                "Run exceeded its timeout of ",
                std::chrono::duration_cast<std::chrono::milliseconds>(timeout)
                    .count(),
                " ms")));
          }));
    });
  }

  InputPtrs Inputs(const Step& step) const {
    return InputPtrs(inputs_.data() + step.first_input,
                     static_cast<size_t>(step.num_inputs));
  }

  // Whether step `s` is expensive, from its cached cost estimate, when it
  // has one: its shapes are all known at build time and a run asked before.
  ABSL_ATTRIBUTE_ALWAYS_INLINE std::optional<bool> CachedIsExpensive(
      const Step& step, int s) const {
    if (!step.static_cost) return std::nullopt;
    const int64_t known = plan_->cost_cache_[s].load(std::memory_order_relaxed);
    if (known < 0) return std::nullopt;
    return known >= runtime_->inline_cost_threshold();
  }

  bool IsExpensive(int s) {
    const Step& step = plan_->steps_[s];
    if (step.op->async_kernel) return false;  // it only starts a coroutine
    if (std::optional<bool> cached = CachedIsExpensive(step, s)) {
      return *cached;
    }
    int64_t cost = 0;
    if (step.op->cost == nullptr) {
      for (int slot : plan_->InputSlots(step)) {
        cost += slots_[slot].NumElements();
      }
    } else {
      InputPtrs inputs = Inputs(step);
      KernelContext ctx(*step.node, inputs,
                        slots_.data() + step.first_output_slot, *resources_,
                        &stop_);
      cost = step.op->cost(ctx);
    }
    cost = std::max<int64_t>(cost, 0);
    if (step.static_cost) {
      plan_->cost_cache_[s].store(cost, std::memory_order_relaxed);
    }
    return cost >= runtime_->inline_cost_threshold();
  }

  // Splits newly ready steps: cheap ones join `ready` (run on this thread),
  // expensive ones go to the pool -- but a pool thread keeps one for itself.
  void Schedule(absl::Span<const int> newly_ready, ReadyList& ready) {
    std::optional<bool> on_pool;
    for (int s : newly_ready) Schedule(s, ready, on_pool);
  }

  // `on_pool` is asked only for an expensive step, once per pass: most are
  // cheap, and the question walks a thread-local list. Inline, for the
  // common case of a step whose cost is known to be small (Finish calls
  // this for every op; a call cost ~20 instructions of each op's ~60 in
  // Schedule); the rest is ScheduleUncommon.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Schedule(int s, ReadyList& ready,
                                             std::optional<bool>& on_pool) {
    const Step& step = plan_->steps_[s];
    if (!step.op->async_kernel) {
      const std::optional<bool> expensive = CachedIsExpensive(step, s);
      if (expensive.has_value() && !*expensive) {
        ready.steps.push_back(s);
        return;
      }
    }
    ScheduleUncommon(s, ready, on_pool);
  }

  ABSL_ATTRIBUTE_NOINLINE void ScheduleUncommon(int s, ReadyList& ready,
                                                std::optional<bool>& on_pool) {
    if (stopped() || on_caller_thread_ || !IsExpensive(s)) {
      ready.steps.push_back(s);
      return;
    }
    if (!on_pool.has_value()) on_pool = runtime_->InPoolThread();
    if (*on_pool && !ready.holds_expensive) {
      ready.holds_expensive = true;
      ready.steps.insert(ready.steps.begin(), s);  // after the cheap ones
    } else {
      Enqueue(s);
    }
  }

  // Queues an expensive step for the pool, and posts drainers for it: at
  // most one per pool thread for this run, each running queued steps until
  // the queue is empty. One post per thread instead of one per op: a post
  // costs the posting thread ~0.3 µs and contends for the pool's lock with
  // the threads taking work from it, which made a fan-out of 64 MatMuls
  // start its last op ~17 µs after its first became ready.
  void Enqueue(int step) {
    int to_post;
    {
      std::lock_guard lock(queue_mu_);
      queued_.push_back(step);
      to_post = std::min(runtime_->num_threads() - drainers_,
                         static_cast<int>(queued_.size() - queue_head_));
      drainers_ += to_post;
    }
    if (to_post > 0) Share();
    for (int i = 0; i < to_post; ++i) {
      asio::post(runtime_->executor(),
                 [self = shared_from_this()] { self->Drain(); });
    }
  }

  // A drainer: runs queued steps, oldest first, until none is left. It
  // leaves under the queue's lock, so a step queued after it found the
  // queue empty also finds it gone and posts another.
  void Drain() {
    for (;;) {
      ReadyList ready;
      {
        std::lock_guard lock(queue_mu_);
        if (queue_head_ == queued_.size()) {
          --drainers_;
          return;
        }
        ready.steps.push_back(queued_[queue_head_++]);
        if (queue_head_ == queued_.size()) {
          queued_.clear();
          queue_head_ = 0;
        }
      }
      RunInline(ready);
    }
  }

  // Runs ready steps on this thread until none is left.
  void RunInline(ReadyList& ready) {
    int finished = 0;
    while (!ready.empty()) {
      const int s = ready.steps.back();
      ready.steps.pop_back();
      // The kept expensive step is the front one: it runs last.
      if (ready.empty()) ready.holds_expensive = false;
      const Step& step = plan_->steps_[s];
      if (step.op->async_kernel && !stopped() && !TryAsyncNow(step)) {
        StartAsync(s);  // finishes later, through AsyncDone
        continue;
      }
      if (!stopped() && !step.op->async_kernel) RunSync(step);
      Finish(s, ready);
      ++finished;
    }
    CountFinished(finished);
  }

  void RunSync(const Step& step) {
    InputPtrs inputs = Inputs(step);
    KernelContext ctx(*step.node, inputs,
                      slots_.data() + step.first_output_slot, *resources_,
                      &stop_, runtime_, step.exclusive_inputs);
    const auto start = trace_ ? std::chrono::steady_clock::now()
                              : std::chrono::steady_clock::time_point();
    absl::Status status;
    try {
      status = step.op->kernel(ctx);
    } catch (...) {
      status =
          StatusFromException(std::current_exception(), OpLabel(*step.node));
    }
    if (trace_) Record(step, start);
    if (!status.ok()) Stop(std::move(status));
  }

  // An async kernel's synchronous attempt (async/async_kernel.h): true when
  // the op finished on this thread (its error, if any, stops the run).
  bool TryAsyncNow(const Step& step) {
    const auto& kernel =
        static_cast<const CoroutineKernel&>(*step.op->async_kernel);
    if (!kernel.has_try()) return false;
    InputPtrs inputs = Inputs(step);
    KernelContext ctx(*step.node, inputs,
                      slots_.data() + step.first_output_slot, *resources_,
                      &stop_);
    const auto start = trace_ ? std::chrono::steady_clock::now()
                              : std::chrono::steady_clock::time_point();
    std::optional<absl::Status> status;
    try {
      status = kernel.TryRun(ctx);
    } catch (...) {
      status =
          StatusFromException(std::current_exception(), OpLabel(*step.node));
    }
    if (!status.has_value()) return false;
    if (trace_) Record(step, start);
    if (!status->ok()) Stop(*std::move(status));
    return true;
  }

  void Record(const Step& step, std::chrono::steady_clock::time_point start) {
    NodeExecStats stats{step.node->name(), step.node->type(), start,
                        std::chrono::steady_clock::now(), SmallThreadId()};
    std::lock_guard lock(mu_);
    node_stats_.push_back(std::move(stats));
  }

  // Step `s` is done (ran, failed or skipped): drop the tensors nobody
  // reads any more, then release its successors. Inline: RunInline calls
  // it for every op it runs, and the call cost ~45 of an op's ~500
  // instructions in a chain of scalar adds.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Finish(int s, ReadyList& ready) {
    const Step& step = plan_->steps_[s];
    for (int slot : plan_->Items(step.dead_outputs)) slots_[slot] = Tensor();
    for (int in : plan_->Items(step.drop_inputs)) slots_[in] = Tensor();
    for (int in : plan_->Items(step.release_inputs)) {
      if (CountDown(slot_uses_[in])) slots_[in] = Tensor();
    }
    std::optional<bool> on_pool;
    for (int next : plan_->Items(step.successors)) {
      if (CountDown(pending_[next])) Schedule(next, ready, on_pool);
    }
  }

  // Decrements one of the run's counters; true when it reached zero. While
  // the run is on one thread (`shared_` unset: nothing was handed to the
  // pool or the strand yet) a plain load and store do: a locked decrement
  // costs ~5 ns, and a chain of scalar ops made three per op. acq_rel once
  // shared: the last decrement's thread sees what the others wrote (the
  // inputs a step reads, the reads before a slot is dropped). The switch is
  // safe because only the thread that runs alone sets `shared_`, before the
  // post that lets another thread in, and re-reads it at every decrement.
  bool CountDown(std::atomic<int>& count) {
    if (!shared_.load(std::memory_order_relaxed)) {
      const int left = count.load(std::memory_order_relaxed) - 1;
      count.store(left, std::memory_order_relaxed);
      return left == 0;
    }
    return count.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

  // Before the first hand-off of work to another thread; the first call is
  // on the thread that started the run, inside Start.
  void Share() {
    if (!shared_.load(std::memory_order_relaxed)) {
      shared_.store(true, std::memory_order_relaxed);
      // Before the post that lets another thread in, which may complete the
      // run, and PostToHandler clear the slot, at any time after it.
      if (caller_slot_.is_connected()) {
        caller_slot_.assign(
            [self = shared_from_this()](asio::cancellation_type) {
              self->Stop(absl::CancelledError("Run was cancelled"));
            });
      }
    }
  }

  // Counts `finished` more steps done, and completes the run after the
  // last. Called once per pass of RunInline rather than once per step.
  void CountFinished(int finished) {
    if (finished > 0 &&
        remaining_.fetch_sub(finished, std::memory_order_acq_rel) == finished) {
      Complete();
    }
  }

  // ---- async kernels: started, tracked and cancelled on the strand.

  void StartAsync(int s) {
    async_started_.store(true, std::memory_order_relaxed);
    Share();
    asio::dispatch(*strand_, [self = shared_from_this(), s] {
      if (self->stopped()) {
        self->AsyncDone(s, absl::OkStatus());
        return;
      }
      auto& op = self->async_ops_[s];
      op = std::make_unique<AsyncOp>();
      asio::co_spawn(*self->strand_, RunAsyncKernel(self, s),
                     asio::bind_cancellation_slot(
                         op->signal.slot(), [self, s](std::exception_ptr error,
                                                      absl::Status status) {
                           if (error) {
                             status = StatusFromException(
                                 error, OpLabel(*self->plan_->steps_[s].node));
                           }
                           self->AsyncDone(s, std::move(status));
                         }));
    });
  }

  // A by-value coroutine (docs/async_pitfalls.md, 4 and 5): owns what it
  // uses for as long as it is suspended.
  static asio::awaitable<absl::Status> RunAsyncKernel(
      std::shared_ptr<RunState> self, int s) {
    const Step& step = self->plan_->steps_[s];
    InputPtrs inputs = self->Inputs(step);
    KernelContext ctx(*step.node, inputs,
                      self->slots_.data() + step.first_output_slot,
                      *self->resources_, &self->stop_);
    const auto start = std::chrono::steady_clock::now();
    absl::Status status;
    try {
      status =
          co_await static_cast<const CoroutineKernel&>(*step.op->async_kernel)
              .Run(ctx);
    } catch (...) {
      status =
          StatusFromException(std::current_exception(), OpLabel(*step.node));
    }
    if (self->trace_) self->Record(step, start);
    co_return status;
  }

  // On the strand.
  void AsyncDone(int s, absl::Status status) {
    // The signal stays alive with the RunState: co_spawn's machinery still
    // refers to its slot while this handler runs.
    if (auto it = async_ops_.find(s); it != async_ops_.end()) {
      it->second->running = false;
    }
    if (!status.ok()) Stop(std::move(status));
    ReadyList ready;
    Finish(s, ready);
    CountFinished(1);
    RunInline(ready);
  }

  void Complete() {
    // The result is built in place and handed on by reference: each move of
    // a RunOutputs is two vectors to move and destroy, on every run.
    absl::StatusOr<RunOutputs> result(absl::in_place);
    // Every op finished, so nothing records stats any more; a run that was
    // never stopped has no status to read (a Stop racing with this, from a
    // late cancellation, comes after the run's result was decided).
    if (trace_ || stopped()) {
      std::lock_guard lock(mu_);
      if (!status_.ok()) {
        result = status_;
      } else {
        result->metadata.step_stats.node_stats = std::move(node_stats_);
      }
    }
    // Only what runs on the strand -- a deadline, an async kernel's
    // coroutine -- needs to learn that the run completed; a run whose async
    // kernels all finished at once skips the post.
    if (strand_.has_value() &&
        (deadline_set_ || async_started_.load(std::memory_order_relaxed))) {
      asio::post(*strand_, [self = shared_from_this()] {
        self->completed_ = true;
        if (self->deadline_.has_value()) self->deadline_->cancel();
      });
    }
    RunDoneCallback done = std::move(done_);
    if (result.ok() && !plan_->fetch_slots_.empty()) {
      std::vector<Tensor>& values = result->values;
      values.reserve(plan_->fetch_slots_.size());
      // Every op finished: nothing reads slots_ any more, so a fetched
      // tensor is handed on without a reference count to take and drop.
      for (size_t f = 0; f < plan_->fetch_slots_.size(); ++f) {
        Tensor& slot = slots_[plan_->fetch_slots_[f]];
        if (plan_->fetch_takes_slot_[f]) {
          values.push_back(std::move(slot));
        } else {
          values.push_back(slot);
        }
      }
    }
    done(std::move(result));
  }

  // Set for one run, by the one-run constructor or by Begin; Park drops
  // the plan and the resources (a spare kept by the plan must not keep
  // the plan alive).
  std::shared_ptr<const ExecutionPlan> plan_;
  std::shared_ptr<ResourceManager> resources_;
  Runtime* runtime_ = nullptr;
  bool trace_ = false;
  // RunOptions::inter_op_thread_pool == -1: no op is handed to the pool.
  bool on_caller_thread_ = false;
  // slots_[i] is written by one op before it releases its successors
  // (acq_rel on pending_), and read only after.
  // Inline storage: a small plan's run state is a single allocation.
  absl::FixedArray<Tensor, 4> slots_;
  // Each step's inputs, &slots_[...], from its first_input on.
  absl::FixedArray<const Tensor*, 8> inputs_;
  absl::FixedArray<std::atomic<int>, 8> pending_;
  absl::FixedArray<std::atomic<int>, 8> slot_uses_;
  std::atomic<int> remaining_{0};  // steps not finished yet
  // Set once work was handed to another thread; see CountDown.
  std::atomic<bool> shared_{false};
  // The caller's, from Start; read only by the first Share, on the starting
  // thread.
  asio::cancellation_slot caller_slot_;
  std::atomic<bool> stop_{false};
  RunDoneCallback done_;

  // std::mutex: see graph/resource_manager.h on absl::Mutex's cost here.
  std::mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeExecStats> node_stats_ ABSL_GUARDED_BY(mu_);

  // Set before any op runs (deadline_set_) or before an async kernel's
  // coroutine is started; read by Complete, after every op finished.
  bool deadline_set_ = false;
  std::atomic<bool> async_started_{false};
  // Only for plans with async kernels or a deadline; the members below are
  // touched only on the strand.
  std::optional<asio::strand<Runtime::executor_type>> strand_;
  struct AsyncOp {
    asio::cancellation_signal signal;
    bool running = true;
  };
  absl::flat_hash_map<int, std::unique_ptr<AsyncOp>> async_ops_;
  std::optional<asio::steady_timer> deadline_;
  bool completed_ = false;

  // Expensive steps waiting for a pool thread (see Enqueue).
  std::mutex queue_mu_;
  // A vector, not a deque: libstdc++'s deque allocates when constructed,
  // and most runs never queue anything. Taken from queue_head_ on.
  std::vector<int> queued_ ABSL_GUARDED_BY(queue_mu_);
  size_t queue_head_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int drainers_ ABSL_GUARDED_BY(queue_mu_) = 0;  // posted, not yet left
};

ExecutionPlan::~ExecutionPlan() {
  delete spare_run_.load(std::memory_order_acquire);
}

void Execute(std::shared_ptr<const ExecutionPlan> plan,
             std::vector<Tensor> feed_values,
             std::shared_ptr<ResourceManager> resources, Runtime& runtime,
             const RunOptions& options, asio::cancellation_slot slot,
             RunDoneCallback done) {
  std::shared_ptr<RunState> state = RunState::Make(
      std::move(plan), std::move(resources), runtime, options, std::move(done));
  state->Start(std::move(feed_values), options.timeout, slot);
}

}  // namespace cosession
