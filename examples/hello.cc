// hello: builds a small graph, runs it in a Session from a coroutine, and
// prints the result.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>

#include "cosession/async/session.h"
#include "cosession/graph/ops.h"

namespace asio = boost::asio;
using namespace cosession;

asio::awaitable<int> Hello(Graph& graph, Output y, Output x) {
  Session session(graph);
  Tensor input = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2});
  // Named first: g++ 12 rejects a braced temporary inside co_await.
  RunArgs args{.fetches = {y}, .feeds = {{x, input}}};
  auto result = co_await session.Run(std::move(args), asio::use_awaitable);
  if (!result.ok()) {
    std::fprintf(stderr, "run failed: %s\n",
                 result.status().ToString().c_str());
    co_return 1;
  }
  std::printf("x = %s\n", input.DebugString().c_str());
  std::printf("y = x @ x + 1 = %s\n", (*result)[0].DebugString().c_str());
  co_return 0;
}

int main() {
  Graph graph;
  Output x = ops::Placeholder(graph, DType::kFloat, TensorShape{2, 2}, "x");
  Output y =
      ops::Add(graph, ops::MatMul(graph, x, x), ops::Const(graph, 1.0f), "y");
  graph.Finalize();

  asio::io_context io;
  int exit_code = 1;
  asio::co_spawn(io, Hello(graph, y, x), [&](std::exception_ptr e, int code) {
    exit_code = e ? 2 : code;
  });
  io.run();
  return exit_code;
}
