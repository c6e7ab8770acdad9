// CoroutineKernel: the kernel of an op that waits (on I/O, a channel, a
// timer), written as a coroutine.
//
//   OpRegistry::Global().Register({
//       .name = "WaitForInput", .shape_fn = ...,
//       .async_kernel = MakeAsyncKernel(
//           [](KernelContext& ctx) -> asio::awaitable<absl::Status> {
//             ... co_await channel.async_receive(asio::use_awaitable) ...
//           })});
//
// Contract: the executor (async/executor.h) starts the coroutine on the
// run's strand of the session runtime's pool and holds no thread while it
// waits. When the run stops (cancelled, timed out, another op failed) the
// coroutine's cancellation state receives terminal cancellation: its waits
// must be cancellable, and it must then return promptly. An exception that
// escapes it becomes a status naming the op (Cancelled when it is Asio's
// cancellation error). The KernelContext, its inputs and outputs live until
// the coroutine completes.
//
// An op that often need not wait (a buffer that is usually full) may also
// give a synchronous attempt, `try_fn`: the executor calls it first, on the
// thread that made the op ready, like a plain kernel. It returns the op's
// status when it could finish without waiting, or nullopt -- having changed
// nothing -- when it must wait; then the coroutine runs as above. An op
// that completes without waiting thus costs its run no thread hop.
//
// graph/ sees only the opaque AsyncKernel handle (graph/kernel.h), so that
// the graph layer needs no Asio.
//
// Thread safety: `fn` may run in several runs at once; it must synchronise
// whatever it shares between them.
#ifndef COSESSION_ASYNC_ASYNC_KERNEL_H_
#define COSESSION_ASYNC_ASYNC_KERNEL_H_

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "cosession/graph/kernel.h"

namespace cosession {

class CoroutineKernel : public AsyncKernel {
 public:
  using Fn =
      std::function<boost::asio::awaitable<absl::Status>(KernelContext&)>;
  using TryFn = std::function<std::optional<absl::Status>(KernelContext&)>;

  explicit CoroutineKernel(Fn fn, TryFn try_fn = nullptr)
      : fn_(std::move(fn)), try_fn_(std::move(try_fn)) {}

  // The coroutine for one execution; `context` must outlive it.
  boost::asio::awaitable<absl::Status> Run(KernelContext& context) const {
    return fn_(context);
  }

  bool has_try() const { return static_cast<bool>(try_fn_); }
  // The synchronous attempt: the status, or nullopt when the op must wait
  // (always nullopt without a try_fn).
  std::optional<absl::Status> TryRun(KernelContext& context) const {
    if (!try_fn_) return std::nullopt;
    return try_fn_(context);
  }

 private:
  Fn fn_;
  TryFn try_fn_;
};

inline std::shared_ptr<const AsyncKernel> MakeAsyncKernel(
    CoroutineKernel::Fn fn, CoroutineKernel::TryFn try_fn = nullptr) {
  return std::make_shared<const CoroutineKernel>(std::move(fn),
                                                 std::move(try_fn));
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_ASYNC_KERNEL_H_
