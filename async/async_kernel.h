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
#include <utility>

#include "absl/status/status.h"
#include "cosession/graph/kernel.h"

namespace cosession {

class CoroutineKernel : public AsyncKernel {
 public:
  using Fn =
      std::function<boost::asio::awaitable<absl::Status>(KernelContext&)>;

  explicit CoroutineKernel(Fn fn) : fn_(std::move(fn)) {}

  // The coroutine for one execution; `context` must outlive it.
  boost::asio::awaitable<absl::Status> Run(KernelContext& context) const {
    return fn_(context);
  }

 private:
  Fn fn_;
};

inline std::shared_ptr<const AsyncKernel> MakeAsyncKernel(
    CoroutineKernel::Fn fn) {
  return std::make_shared<const CoroutineKernel>(std::move(fn));
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_ASYNC_KERNEL_H_
