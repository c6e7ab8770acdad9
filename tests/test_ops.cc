#include "tests/test_ops.h"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cosession/async/async_kernel.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/status.h"
#include "tests/test_util.h"

namespace cosession::testing {
namespace asio = boost::asio;
namespace {

TestEvents* current_events = nullptr;

absl::Status FloatScalarOutput(InferenceContext& c) {
  c.AddOutput(DType::kFloat, TensorShape{});
  return absl::OkStatus();
}

absl::Status PairKernel(KernelContext& ctx) {
  TestEvents& events = TestEvents::Current();
  std::unique_lock lock(events.mu);
  const int arrival = ++events.pair_arrivals;  // 1-based
  const int partner_arrived = (arrival + 1) / 2 * 2;
  events.pair_arrived.notify_all();
  if (!events.pair_arrived.wait_for(lock, std::chrono::seconds(10), [&] {
        return events.pair_arrivals >= partner_arrived;
      })) {
    return absl::DeadlineExceededError(
        absl::StrCat("TestPair '", ctx.node().name(),
                     "' ran alone: no other TestPair ran at the same time"));
  }
  ctx.set_output(0, Tensor::Scalar<float>(1));
  return absl::OkStatus();
}

asio::awaitable<absl::Status> WaitKernel(KernelContext& ctx) {
  TestEvents& events = TestEvents::Current();
  co_await events.started.async_send({}, ctx.node().name(),
                                     asio::use_awaitable);
  co_await events.trigger.async_receive(asio::use_awaitable);
  ctx.set_output(0, Tensor::Scalar<float>(1));
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> NeverKernel(KernelContext& ctx) {
  TestEvents& events = TestEvents::Current();
  co_await events.started.async_send({}, ctx.node().name(),
                                     asio::use_awaitable);
  co_await events.never.async_receive(asio::use_awaitable);
  co_return absl::InternalError("TestNever received a token");
}

asio::awaitable<absl::Status> AsyncFailKernel(KernelContext& ctx) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return absl::UnavailableError(
      absl::StrCat("TestAsyncFail '", ctx.node().name(), "' failed"));
}

std::optional<absl::Status> MaybeReadyAttempt(KernelContext& ctx) {
  TestEvents& events = TestEvents::Current();
  std::lock_guard lock(events.mu);
  if (!events.ready_now) return std::nullopt;
  events.attempt_thread = std::this_thread::get_id();
  if (events.attempt_fails) {
    return absl::InternalError(
        absl::StrCat("TestMaybeReady '", ctx.node().name(), "' failed"));
  }
  ctx.set_output(0, Tensor::Scalar<float>(2));
  return absl::OkStatus();
}

asio::awaitable<absl::Status> MaybeReadyKernel(KernelContext& ctx) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  ctx.set_output(0, Tensor::Scalar<float>(1));
  co_return absl::OkStatus();
}

Output Add(Graph& g, const char* op, std::vector<Output> inputs,
           std::vector<Operation> controls, std::string name) {
  RegisterTestOps();
  return Output(
      g.AddNode(
          {op, std::move(name), std::move(inputs), std::move(controls), {}}),
      0);
}

}  // namespace

TestEvents::TestEvents()
    : started(TestRuntime().executor(), 64),
      trigger(TestRuntime().executor(), 64),
      never(TestRuntime().executor(), 1) {
  current_events = this;
}

TestEvents::~TestEvents() { current_events = nullptr; }

TestEvents& TestEvents::Current() { return *current_events; }

void RegisterTestOps() {
  static const bool registered = [] {
    OpRegistry& r = OpRegistry::Global();
    ThrowIfError(r.Register({.name = "TestCount",
                             .shape_fn = FloatScalarOutput,
                             .kernel = [](KernelContext& ctx) {
                               TestEvents& events = TestEvents::Current();
                               std::lock_guard lock(events.mu);
                               ++events.run_counts[ctx.node().name()];
                               events.order.push_back(ctx.node().name());
                               ctx.set_output(0, Tensor::Scalar<float>(1));
                               return absl::OkStatus();
                             }}));
    ThrowIfError(r.Register({.name = "TestPair",
                             .shape_fn = FloatScalarOutput,
                             .kernel = PairKernel}));
    ThrowIfError(r.Register({.name = "TestFail",
                             .shape_fn = FloatScalarOutput,
                             .kernel = [](KernelContext& ctx) {
                               return absl::InternalError(
                                   absl::StrCat("TestFail '", ctx.node().name(),
                                                "' failed"));
                             }}));
    ThrowIfError(r.Register({.name = "TestThrow",
                             .shape_fn = FloatScalarOutput,
                             .kernel = [](KernelContext&) -> absl::Status {
                               throw std::runtime_error("kernel exploded");
                             }}));
    ThrowIfError(r.Register({.name = "TestWait",
                             .shape_fn = FloatScalarOutput,
                             .async_kernel = MakeAsyncKernel(WaitKernel)}));
    ThrowIfError(r.Register({.name = "TestNever",
                             .shape_fn = FloatScalarOutput,
                             .async_kernel = MakeAsyncKernel(NeverKernel)}));
    ThrowIfError(
        r.Register({.name = "TestAsyncFail",
                    .shape_fn = FloatScalarOutput,
                    .async_kernel = MakeAsyncKernel(AsyncFailKernel)}));
    ThrowIfError(r.Register(
        {.name = "TestMaybeReady",
         .shape_fn = FloatScalarOutput,
         .async_kernel = MakeAsyncKernel(MaybeReadyKernel, MaybeReadyAttempt)}));
    ThrowIfError(r.Register({.name = "TestKeep",
                             .shape_fn = FloatScalarOutput,
                             .kernel = [](KernelContext& ctx) {
                               TestEvents& events = TestEvents::Current();
                               std::lock_guard lock(events.mu);
                               events.kept = ctx.input(0);
                               ctx.set_output(0, Tensor::Scalar<float>(1));
                               return absl::OkStatus();
                             }}));
    ThrowIfError(r.Register({.name = "TestKeptIsSole",
                             .shape_fn = FloatScalarOutput,
                             .kernel = [](KernelContext& ctx) {
                               TestEvents& events = TestEvents::Current();
                               std::lock_guard lock(events.mu);
                               const bool sole = events.kept.RefCountIsOne();
                               ctx.set_output(0, Tensor::Scalar<float>(
                                                     sole ? 1.0f : 0.0f));
                               return absl::OkStatus();
                             }}));
    return true;
  }();
  (void)registered;
}

Output TestCount(Graph& g, std::vector<Output> inputs,
                 std::vector<Operation> control_inputs, std::string name) {
  return Add(g, "TestCount", std::move(inputs), std::move(control_inputs),
             std::move(name));
}
Output TestPair(Graph& g, std::vector<Output> inputs, std::string name) {
  return Add(g, "TestPair", std::move(inputs), {}, std::move(name));
}
Output TestFail(Graph& g, std::vector<Output> inputs, std::string name) {
  return Add(g, "TestFail", std::move(inputs), {}, std::move(name));
}
Output TestThrow(Graph& g, std::string name) {
  return Add(g, "TestThrow", {}, {}, std::move(name));
}
Output TestWait(Graph& g, std::string name) {
  return Add(g, "TestWait", {}, {}, std::move(name));
}
Output TestNever(Graph& g, std::string name) {
  return Add(g, "TestNever", {}, {}, std::move(name));
}
Output TestAsyncFail(Graph& g, std::string name) {
  return Add(g, "TestAsyncFail", {}, {}, std::move(name));
}

Output TestMaybeReady(Graph& g, std::string name) {
  return Add(g, "TestMaybeReady", {}, {}, std::move(name));
}

Output TestKeep(Graph& g, Output x, std::string name) {
  return Add(g, "TestKeep", {std::move(x)}, {}, std::move(name));
}
Output TestKeptIsSole(Graph& g, std::vector<Operation> control_inputs,
                      std::string name) {
  return Add(g, "TestKeptIsSole", {}, std::move(control_inputs),
             std::move(name));
}

}  // namespace cosession::testing
