// HTTP load on loopback: kConnections keep-alive connections, each sending
// one-row predict requests for the 784-128-10 MLP (bench/served_mlp.h) in
// TensorFlow Serving's row format ({"instances": [[784 floats]]}, ~7 KB),
// one after another, as many clients each awaiting their answer would:
//
//   BM_Http_Predict_Unbatched  cosession_serve's stack (HttpServer in front
//                              of ModelServer), each request its own run
//   BM_Http_Predict_Batched/max_batch:M/timeout_us:T/threads:N
//                              the same with --enable_batching and those
//                              batching parameters (1000/0/2: the defaults,
//                              TensorFlow Serving's): requests that arrive
//                              while a batch runs form the next
//   BM_Baseline_HttpParseOnly  a hand-written Beast server that reads the
//                              same requests, reads their JSON's numbers
//                              into floats with Boost.JSON's event parser
//                              (no tree, no checks) and answers a fixed
//                              prediction without running a model: the
//                              HTTP path's own limit
//
// The server's io_context runs on a thread of its own (as in
// cosession_serve), graph runs on the Runtime's pool, the load generator on
// the benchmark's thread: all share the machine's cores, as a load
// generator on the same host does. The connections send without pause for
// the whole run, as wrk does (a connection's next request leaves as its
// answer arrives); an iteration lasts until kRequestsPerIteration more
// answers came back, so the load never drains between iterations. Items are
// requests (items_per_second is requests/s), and p50_us / p99_us are the
// latencies of the requests answered during the timed iterations, from
// writing the request to reading its whole answer.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/json_number_collector.h"
#include "bench/served_mlp.h"
#include "cosession/serving/batching_parameters.h"
#include "cosession/serving/http_server.h"
#include "cosession/serving/model_server.h"
#include "cosession/serving/saved_model.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using asio::ip::tcp;

constexpr int kConnections = 64;
constexpr int64_t kRequestsPerIteration = 512;
constexpr char kModelName[] = "mlp";

// The bytes of one predict request, serialised once (as wrk sends a
// prepared request): the first of the model's rows, printed as a client's
// JSON library would.
const std::string& RequestBytes() {
  static const std::string* bytes = [] {
    const Tensor& row = bench::Model().rows[0];
    std::string body = "{\"instances\": [[";
    bool first = true;
    for (float v : row.flat<float>()) {
      if (!first) body += ", ";
      first = false;
      absl::StrAppend(&body, v);
    }
    body += "]]}";
    http::request<http::string_body> req{
        http::verb::post, absl::StrCat("/v1/models/", kModelName, ":predict"),
        11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    std::ostringstream out;
    out << req;
    return new std::string(out.str());
  }();
  return *bytes;
}

asio::awaitable<void> Export(Session& session,
                             std::map<std::string, ExportSignature> signatures,
                             std::string dir,
                             absl::StatusOr<std::string>& written) {
  written = co_await ExportSavedModel(session, std::move(signatures),
                                      std::move(dir), /*version=*/1);
}

// The model exported once per process into a directory that lives as long.
const std::string& ExportedModelDir() {
  static bench::ScratchDir* dir = [] {
    auto* d = new bench::ScratchDir("cosession_http_bench");
    bench::ServedMlp& m = bench::Model();
    std::map<std::string, ExportSignature> signatures;
    signatures[kDefaultServingSignature] = {
        .inputs = {{"x", m.x}},
        .outputs = {{"probabilities", m.probabilities},
                    {"classes", m.classes}}};
    absl::StatusOr<std::string> written;
    bench::RunCoroutine(
        Export(*m.session, std::move(signatures), d->path(), written));
    if (!written.ok()) {
      std::fprintf(stderr, "http_bench: export: %s\n",
                   written.status().ToString().c_str());
      std::abort();
    }
    return d;
  }();
  return dir->path();
}

// An io_context on a thread of its own, kept running until destroyed.
class ServerThread {
 public:
  ServerThread()
      : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~ServerThread() { Join(); }
  // Lets run() return once the context has no work left, and waits for it.
  void Join() {
    guard_.reset();
    if (thread_.joinable()) thread_.join();
  }
  asio::io_context& io() { return io_; }
  // Runs `body` on the thread and waits for it. (Not a std::promise: its
  // set_value may still touch the promise after the waiter woke and
  // destroyed it.)
  void Run(asio::awaitable<void> body) {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(io_, std::move(body), [&](std::exception_ptr e) {
      std::lock_guard<std::mutex> lock(mutex);
      failure = e;
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
    if (failure) std::rethrow_exception(failure);
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// cosession_serve's two halves, started and stopped on the server thread.
struct ServingStack {
  std::shared_ptr<ModelServer> model;
  std::unique_ptr<HttpServer> http;
  absl::Status status;
};

asio::awaitable<void> StartServingStack(std::optional<BatchingOptions> batching,
                                        ServingStack& stack) {
  ModelServerOptions options;
  options.model_name = kModelName;
  options.model_base_path = ExportedModelDir();
  options.enable_batching = batching.has_value();
  if (batching) options.batching = *batching;
  options.file_system_poll_wait = std::chrono::milliseconds(0);
  auto started = co_await ModelServer::Start(options, Runtime::Default());
  if (!started.ok()) {
    stack.status = started.status();
    co_return;
  }
  stack.model = *started;
  std::shared_ptr<ModelServer> model = stack.model;
  HttpHandler handler = [model](HttpRequest r) {
    return model->Handle(std::move(r.method), std::move(r.target),
                         std::move(r.body));
  };
  // Named first: a braced temporary in an expression holding co_await is
  // miscompiled by g++ 12 (docs/async_pitfalls.md, 8).
  HttpServerOptions http_options;
  http_options.address = "127.0.0.1";
  http_options.port = 0;
  http_options.max_connections = 2 * kConnections;
  asio::any_io_executor executor = co_await asio::this_coro::executor;
  auto listening =
      HttpServer::Listen(executor, std::move(http_options), std::move(handler));
  if (!listening.ok()) {
    stack.status = listening.status();
    co_return;
  }
  stack.http = *std::move(listening);
  stack.http->Start();
}

asio::awaitable<void> StopServingStack(ServingStack& stack) {
  if (stack.http != nullptr) {
    stack.http->Stop();
    co_await stack.http->Drained();
    stack.http.reset();
  }
  if (stack.model != nullptr) stack.model->Stop();
  stack.model.reset();
}

// The baseline: the least a server must do for these requests. One
// coroutine per connection reads a request with Beast, reads its body's
// numbers into floats with Boost.JSON's event parser (no document tree, no
// checks of the body's form: bench/json_number_collector.h), and writes a
// fixed answer the size of the model's.
asio::awaitable<void> HandWrittenConnection(tcp::socket socket) {
  static const std::string kAnswer =
      "{\"predictions\": [{\"classes\": 3, \"probabilities\": [0.0921, "
      "0.1034, 0.0987, 0.1123, 0.0954, 0.1002, 0.0968, 0.1049, 0.0935, "
      "0.1027]}]}";
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  std::vector<float> pixels;
  for (;;) {
    http::request<http::string_body> req;
    auto [read_ec, read] = co_await http::async_read(
        stream, buffer, req, asio::as_tuple(asio::use_awaitable));
    if (read_ec) co_return;
    pixels.clear();
    const bool ok = bench::CollectJsonNumbers(req.body(), pixels);
    benchmark::DoNotOptimize(pixels.data());
    http::response<http::string_body> res{
        ok ? http::status::ok : http::status::bad_request, req.version()};
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    res.body() = ok ? kAnswer : "{\"error\": \"malformed\"}";
    res.prepare_payload();
    auto [write_ec, written] = co_await http::async_write(
        stream, res, asio::as_tuple(asio::use_awaitable));
    if (write_ec || !res.keep_alive()) co_return;
  }
}

asio::awaitable<void> HandWrittenAcceptLoop(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] =
        co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;  // closed
    asio::co_spawn(acceptor.get_executor(),
                   HandWrittenConnection(std::move(socket)), asio::detached);
  }
}

// The load generator's connections and what they measured. Touched only
// on the load generator's thread.
struct Load {
  std::vector<beast::tcp_stream> streams;
  // Of the requests answered while `timing`.
  std::vector<double> latencies_us;
  int64_t answered = 0;
  bool timing = false;
  bool stopping = false;  // each connection ends after its current request
  std::string error;
};

asio::awaitable<void> Connect(uint16_t port, Load& load) {
  const tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port);
  for (int i = 0; i < kConnections; ++i) {
    beast::tcp_stream stream(co_await asio::this_coro::executor);
    auto [ec] = co_await stream.async_connect(
        server, asio::as_tuple(asio::use_awaitable));
    if (ec) {
      load.error = absl::StrCat("connect: ", ec.message());
      co_return;
    }
    stream.socket().set_option(tcp::no_delay(true));
    load.streams.push_back(std::move(stream));
  }
}

// One connection's requests, one after another, until `load` stops or
// fails. By reference: RunLoad runs the client until every SendRequests
// returned, so `stream` and `load` outlive it.
asio::awaitable<void> SendRequests(beast::tcp_stream& stream, Load& load) {
  beast::flat_buffer buffer;
  while (!load.stopping && load.error.empty()) {
    const auto start = std::chrono::steady_clock::now();
    auto [write_ec, written] =
        co_await asio::async_write(stream, asio::buffer(RequestBytes()),
                                   asio::as_tuple(asio::use_awaitable));
    if (write_ec) {
      load.error = absl::StrCat("write: ", write_ec.message());
      co_return;
    }
    http::response<http::string_body> res;
    auto [read_ec, read] = co_await http::async_read(
        stream, buffer, res, asio::as_tuple(asio::use_awaitable));
    if (read_ec) {
      load.error = absl::StrCat("read: ", read_ec.message());
      co_return;
    }
    if (res.result() != http::status::ok) {
      load.error = absl::StrCat("HTTP ", res.result_int(), ": ", res.body());
      co_return;
    }
    const std::chrono::duration<double, std::micro> took =
        std::chrono::steady_clock::now() - start;
    ++load.answered;
    if (load.timing) load.latencies_us.push_back(took.count());
  }
}

double Percentile(std::vector<double>& values, double fraction) {
  if (values.empty()) return 0.0;
  const size_t k = std::min(
      values.size() - 1,
      static_cast<size_t>(fraction * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

// Drives the load against the server at `port` for the benchmark's
// iterations, then closes the connections.
void RunLoad(benchmark::State& state, uint16_t port) {
  asio::io_context client;
  Load load;
  asio::co_spawn(client, Connect(port, load), asio::detached);
  client.run();
  client.restart();
  if (load.error.empty()) {
    for (beast::tcp_stream& stream : load.streams) {
      asio::co_spawn(client, SendRequests(stream, load), asio::detached);
    }
  }
  load.timing = true;
  for (auto _ : state) {
    if (!load.error.empty()) break;  // reported once, below
    const int64_t target = load.answered + kRequestsPerIteration;
    while (load.answered < target && load.error.empty()) {
      if (client.run_one() == 0) {
        load.error = "every connection ended";
        break;
      }
    }
  }
  load.timing = false;
  load.stopping = true;
  client.run();  // the requests still in flight are answered
  if (!load.error.empty()) {
    state.SkipWithError(load.error.c_str());
  }
  for (beast::tcp_stream& stream : load.streams) {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
  }
  state.SetItemsProcessed(state.iterations() * kRequestsPerIteration);
  state.counters["p50_us"] = Percentile(load.latencies_us, 0.50);
  state.counters["p99_us"] = Percentile(load.latencies_us, 0.99);
}

void RunAgainstServingStack(benchmark::State& state,
                            std::optional<BatchingOptions> batching) {
  (void)RequestBytes();
  ServingStack stack;
  {
    ServerThread server;
    server.Run(StartServingStack(batching, stack));
    if (!stack.status.ok()) {
      state.SkipWithError(stack.status.ToString().c_str());
      server.Run(StopServingStack(stack));
      return;
    }
    RunLoad(state, stack.http->port());
    server.Run(StopServingStack(stack));
  }
}

void BM_Http_Predict_Unbatched(benchmark::State& state) {
  RunAgainstServingStack(state, std::nullopt);
}
BENCHMARK(BM_Http_Predict_Unbatched)->UseRealTime();

void BM_Http_Predict_Batched(benchmark::State& state) {
  BatchingOptions batching = DefaultBatchingOptions();
  batching.max_batch_size = state.range(0);
  batching.batch_timeout = std::chrono::microseconds(state.range(1));
  batching.num_batch_threads = static_cast<int>(state.range(2));
  RunAgainstServingStack(state, batching);
}
BENCHMARK(BM_Http_Predict_Batched)
    ->ArgNames({"max_batch", "timeout_us", "threads"})
    ->Args({1000, 0, 2})  // --enable_batching alone (TensorFlow Serving's)
    ->Args({64, 0, 1})
    ->Args({32, 500, 1})
    ->UseRealTime();

void BM_Baseline_HttpParseOnly(benchmark::State& state) {
  (void)RequestBytes();
  ServerThread server;
  tcp::acceptor acceptor(server.io(), {asio::ip::make_address("127.0.0.1"), 0});
  asio::co_spawn(server.io(), HandWrittenAcceptLoop(acceptor), asio::detached);
  RunLoad(state, acceptor.local_endpoint().port());
  // Closing on the server's thread ends the accept loop; the connections
  // end as the load generator closed them, so run() returns, before the
  // acceptor is destroyed.
  asio::post(server.io(), [&acceptor] { acceptor.close(); });
  server.Join();
}
BENCHMARK(BM_Baseline_HttpParseOnly)->UseRealTime();

}  // namespace
}  // namespace cosession
