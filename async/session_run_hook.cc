#include "cosession/async/session_run_hook.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace cosession {
namespace asio = boost::asio;

absl::Status SessionRunHook::Begin(Graph&) { return absl::OkStatus(); }

asio::awaitable<absl::Status> SessionRunHook::AfterCreateSession(Session&,
                                                                 Coordinator&) {
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<SessionRunArgs>> SessionRunHook::BeforeRun(
    SessionRunContext&) {
  co_return SessionRunArgs{};
}

asio::awaitable<absl::Status> SessionRunHook::AfterRun(
    SessionRunContext&, const SessionRunValues&) {
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> SessionRunHook::End(Session&) {
  co_return absl::OkStatus();
}

void SessionRunHook::OnError(const absl::Status&) {}

std::string SessionRunHook::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get())
                                  : std::string(mangled);
}

absl::Status SyncSessionRunHook::BeforeRunSync(SessionRunContext&,
                                               SessionRunArgs&) {
  return absl::OkStatus();
}

absl::Status SyncSessionRunHook::AfterRunSync(SessionRunContext&,
                                              const SessionRunValues&) {
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<SessionRunArgs>> SyncSessionRunHook::BeforeRun(
    SessionRunContext& context) {
  SessionRunArgs args;
  absl::Status s = BeforeRunSync(context, args);
  if (!s.ok()) co_return s;
  co_return args;
}

asio::awaitable<absl::Status> SyncSessionRunHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  co_return AfterRunSync(context, values);
}

}  // namespace cosession
