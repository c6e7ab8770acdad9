// cosession_stream_train: training fed over a socket while it runs, on one
// event loop.
//
// One io_context runs two coroutines side by side:
//   * a sender, standing for any producer of rows on the network: it
//     accepts one connection on a loopback port and writes the digits CSV
//     (data/digits.csv.gz, CC BY 4.0: see data/README.md) into it, chunk by
//     chunk -- TCP flow control holds it back whenever training reads
//     slower than it writes -- then closes the connection;
//   * the training loop: a MonitoredSession whose input is the pipeline
//     TcpLines -> CsvRows -> Batch(32) (pipeline/), read by the
//     IteratorGetNext op. The socket lives on this same event loop; the rows
//     are parsed and batched on the runtime's pool. When the sender closes
//     the connection the stream ends, the step that meets the end returns
//     OutOfRange and the session stops cleanly.
// It prints the loss now and then, and the number of steps trained.
//
//   cosession_stream_train
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/monitored_session.h"
#include "cosession/io/csv_reader.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/pipeline/stream_source.h"
#include "cosession/training/dataset_hook.h"
#include "examples/mlp_classifier.h"

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace cosession;

namespace {

// Accepts one connection and writes `text` into it in 4 KiB chunks.
asio::awaitable<absl::Status> SendRows(std::shared_ptr<tcp::acceptor> acceptor,
                                       std::string text) {
  tcp::socket peer(acceptor->get_executor());
  auto [accept_ec] = co_await acceptor->async_accept(
      peer, asio::as_tuple(asio::use_awaitable));
  if (accept_ec) co_return absl::UnavailableError(accept_ec.message());
  constexpr size_t kChunk = 4096;
  for (size_t at = 0; at < text.size(); at += kChunk) {
    const size_t n = std::min(kChunk, text.size() - at);
    auto [ec, written] =
        co_await asio::async_write(peer, asio::buffer(text.data() + at, n),
                                   asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::UnavailableError(ec.message());
  }
  // Closing ends the training's input stream.
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Train(uint16_t port) {
  Graph g;
  g.set_seed(1);
  Dataset rows = CsvRows(TcpLines("127.0.0.1", port),
                         {.num_columns = 65, .num_classes = 10});
  std::vector<Output> xy = IteratorGetNext(g, rows.Batch(32), "batch");
  absl::StatusOr<MlpClassifier> model =
      BuildMlpClassifier(g, xy[0], xy[1],
                         {.hidden_units = {64},
                          .input_scale = 1.0 / 16,
                          .optimizer = "adam",
                          .learning_rate = 3e-3});
  if (!model.ok()) co_return model.status();
  auto input = DatasetHook::Create({.get_next = xy[0]});
  if (!input.ok()) co_return input.status();
  MonitoredSession::Hooks hooks{*input};
  MonitoredSessionOptions options;
  auto created = co_await MonitoredSession::Create(
      g, hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) co_return created.status();
  MonitoredSession& session = **created;
  RunArgs step{.fetches = {model->loss}, .targets = {model->train}};
  int64_t steps = 0;
  absl::Status failure;
  while (!session.ShouldStop()) {
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (absl::IsOutOfRange(ran.status())) break;  // the sender closed
    if (!ran.ok()) {
      failure = ran.status();
      break;
    }
    if (++steps % 10 == 0) {
      std::printf("step %lld: loss %.4f\n", static_cast<long long>(steps),
                  (*ran)[0].scalar<float>());
    }
  }
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  if (!failure.ok()) co_return failure;
  if (!closed.ok()) co_return closed;
  std::printf("trained %lld steps on rows streamed over tcp 127.0.0.1:%u\n",
              static_cast<long long>(steps), static_cast<unsigned>(port));
  co_return absl::OkStatus();
}

}  // namespace

int main() {
  absl::StatusOr<std::string> text = ReadMaybeGzipFile(COSESSION_DIGITS_CSV);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", text.status().ToString().c_str());
    return 1;
  }
  asio::io_context io;
  auto acceptor = std::make_shared<tcp::acceptor>(
      io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const uint16_t port = acceptor->local_endpoint().port();
  absl::Status sent = absl::InternalError("the sender did not finish");
  absl::Status trained = absl::InternalError("training did not finish");
  asio::co_spawn(io, SendRows(acceptor, *std::move(text)),
                 [&](std::exception_ptr e, absl::Status s) {
                   sent = e ? absl::InternalError("the sender threw") : s;
                 });
  asio::co_spawn(io, Train(port), [&](std::exception_ptr e, absl::Status s) {
    trained = e ? absl::InternalError("training threw") : s;
    acceptor->close();  // a sender still waiting for its connection ends
  });
  io.run();
  for (const absl::Status& s : {sent, trained}) {
    if (!s.ok()) {
      std::fprintf(stderr, "cosession_stream_train: %s\n",
                   s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
