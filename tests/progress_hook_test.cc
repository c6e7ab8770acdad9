// ProgressHook: plain lines and the in-place bar (through a Console whose
// terminal is injected), steps/s and ETA from a ManualClock, a bar that fits
// the terminal's width, End's final line with the last step's metrics, and
// bad options.
#include "cosession/hooks/progress_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <string>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"
#include "tests/test_ops.h"

namespace cosession::progress_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

struct LossGraph : StepGraph {
  LossGraph() { loss = ops::Const(g, 0.1234f, "loss"); }
  Output loss;
};

// A Console whose output is kept: `out` for stdout, `err` for stderr.
struct CapturedConsole {
  explicit CapturedConsole(bool terminal, int width = 200)
      : console(Console::Options{
            .writer =
                [this](Console::Stream stream, absl::string_view bytes) {
                  (stream == Console::kStdout ? out : err)
                      .append(bytes.data(), bytes.size());
                },
            .status_on_terminal = terminal,
            .stdout_on_terminal = terminal,
            .stderr_on_terminal = terminal,
            .width = [width] { return width; }}) {}
  std::string out;
  std::string err;
  Console console;
};

std::shared_ptr<ProgressHook> MakeHook(ProgressHookOptions options) {
  auto hook = ProgressHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

// `steps` training steps, the clock one second further before each; then
// Close.
asio::awaitable<void> TrainAndClose(MonitoredSession& ms,
                                    const StepGraph& graph, ManualClock& clock,
                                    int steps) {
  for (int i = 0; i < steps; ++i) {
    clock.Advance(absl::Seconds(1));
    auto result = co_await ms.Run(graph.Train(), asio::use_awaitable);
    EXPECT_TRUE(result.ok()) << result.status();
  }
  absl::Status closed = co_await ms.Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
}

TEST(ProgressHook, CreateRejectsBadOptionsNamingEach) {
  struct Case {
    ProgressHookOptions options;
    std::string option;
  };
  std::vector<Case> cases = {
      {{.every_n_steps = 10, .every_n_secs = absl::Seconds(1)}, "every_n_secs"},
      {{.every_n_steps = 0}, "every_n_steps"},
      {{.every_n_secs = absl::Seconds(-1)}, "every_n_secs"},
      {{.bar_width = 0}, "bar_width"},
      {{.metrics = {Output()}}, "metrics"},
  };
  for (const auto& c : cases) {
    auto hook = ProgressHook::Create(c.options);
    EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument)
        << c.option;
    EXPECT_NE(hook.status().message().find(c.option), std::string::npos)
        << hook.status();
  }
}

TEST(ProgressHook, TheTerminalIsTheConsoles) {
  CapturedConsole plain(false), terminal(true);
  EXPECT_FALSE(MakeHook({.console = &plain.console})->is_terminal());
  EXPECT_TRUE(MakeHook({.console = &terminal.console})->is_terminal());
}

CO_TEST(ProgressHook, BeginFailsWithoutAGlobalStepNamingTheHook) {
  Graph g;
  ops::NoOp(g);
  CapturedConsole out(false);
  auto hook = MakeHook({.console = &out.console});
  auto created = co_await MonitoredSession::Create(g, HookList(hook), nullptr,
                                                   testing::HookTestOptions(),
                                                   asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(created.status().message().find("ProgressHook"), std::string::npos);
}

CO_TEST(ProgressHook, PlainOutputPrintsPeriodicLinesWithRateEtaAndMetrics) {
  LossGraph graph;
  ManualClock clock;
  CapturedConsole out(false);
  auto hook = MakeHook({.last_step = 10,
                        .metrics = {graph.loss},
                        .every_n_steps = 2,
                        .console = &out.console,
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await TrainAndClose(*ms, graph, clock, 10);
  EXPECT_EQ(out.out,
            "step 1/10, loss=0.1234\n"
            "step 3/10, 1.0 steps/s, eta 7s, loss=0.1234\n"
            "step 5/10, 1.0 steps/s, eta 5s, loss=0.1234\n"
            "step 7/10, 1.0 steps/s, eta 3s, loss=0.1234\n"
            "step 9/10, 1.0 steps/s, eta 1s, loss=0.1234\n"
            "step 10/10, 1.0 steps/s, loss=0.1234\n");
}

CO_TEST(ProgressHook, WithoutALastStepThereIsNoTotalAndNoEta) {
  StepGraph graph;
  ManualClock clock;
  CapturedConsole out(false);
  auto hook =
      MakeHook({.every_n_steps = 2, .console = &out.console, .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await TrainAndClose(*ms, graph, clock, 3);
  EXPECT_EQ(out.out,
            "step 1\n"
            "step 3, 1.0 steps/s\n"
            "step 3, 1.0 steps/s\n");
}

CO_TEST(ProgressHook, LongEtasShowHoursAndMinutes) {
  StepGraph graph;
  ManualClock clock;
  CapturedConsole out(false);
  auto hook = MakeHook({.last_step = 4000,
                        .every_n_steps = 2,
                        .console = &out.console,
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await TrainAndClose(*ms, graph, clock, 3);
  // 3997 steps left at 1 step/s.
  EXPECT_NE(out.out.find("step 3/4000, 1.0 steps/s, eta 1h06m\n"),
            std::string::npos)
      << out.out;
}

CO_TEST(ProgressHook, ATerminalGetsABarRedrawnInPlaceAndANewlineAtEnd) {
  LossGraph graph;
  ManualClock clock;
  CapturedConsole out(true);
  auto hook = MakeHook({.last_step = 4,
                        .metrics = {graph.loss},
                        .every_n_steps = 1,
                        .console = &out.console,
                        .bar_width = 10,
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_TRUE(hook->is_terminal());
  co_await TrainAndClose(*ms, graph, clock, 4);
  const std::string s = out.out;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 5) << s;  // 4 steps + End
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(s.rfind("\r[==>       ] 1/4 25%, loss=0.1234\x1b[K", 0), 0u) << s;
  EXPECT_NE(s.find("\r[=====>    ] 2/4 50%, 1.0 steps/s, eta 2s, "
                   "loss=0.1234\x1b[K"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("\r[==========] 4/4 100%, 1.0 steps/s, loss=0.1234\x1b[K\n"),
            std::string::npos)
      << s;
}

// A metric fed a new value in each step: the draws show the values of the
// steps they follow, and End's final line the last step's, not those of the
// last draw.
CO_TEST(ProgressHook, TheFinalLineShowsTheLastStepsMetrics) {
  testing::FedValueGraph graph("loss");
  ManualClock clock;
  CapturedConsole out(false);
  auto hook = MakeHook({.metrics = {graph.value},
                        .every_n_steps = 5,
                        .console = &out.console,
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  for (int i = 1; i <= 8; ++i) {
    clock.Advance(absl::Seconds(1));
    auto ran = co_await ms->Run(graph.TrainWith(static_cast<float>(i)),
                                asio::use_awaitable);
    CO_ASSERT_OK(ran.status());
  }
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(out.out,
            "step 1, loss=1\n"
            "step 6, 1.0 steps/s, loss=6\n"
            "step 8, 1.0 steps/s, loss=8\n");
}

// At 40 columns the bar narrows so that the line still fits on one row.
CO_TEST(ProgressHook, TheBarNarrowsToTheTerminalsWidth) {
  LossGraph graph;
  ManualClock clock;
  CapturedConsole out(true, /*width=*/40);
  auto hook = MakeHook({.last_step = 4,
                        .metrics = {graph.loss},
                        .every_n_steps = 1,
                        .console = &out.console,
                        .bar_width = 30,
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await TrainAndClose(*ms, graph, clock, 4);
  // Every drawn status: "\r" text "\x1b[K", the text at most 39 columns.
  size_t drawn = 0;
  for (size_t at = out.out.find('\r'); at != std::string::npos;
       at = out.out.find('\r', at + 1)) {
    const size_t end = out.out.find("\x1b[K", at);
    CO_ASSERT_TRUE(end != std::string::npos);
    EXPECT_LE(end - at - 1, 39u) << out.out.substr(at + 1, end - at - 1);
    ++drawn;
  }
  EXPECT_EQ(drawn, 5u);  // 4 steps + End
  EXPECT_NE(out.out.find("\r[=====] 4/4 100%"), std::string::npos) << out.out;
}

}  // namespace
}  // namespace cosession::progress_hook_test
