#include "cosession/pipeline/generator_source.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

class GeneratorIterator : public ElementIterator {
 public:
  GeneratorIterator(ElementGenerator next, std::string name)
      : next_(std::move(next)), name_(std::move(name)) {}

  asio::awaitable<Result> Next() override {
    if (!failure_.ok()) co_return failure_;
    if (ended_) co_return std::optional<Element>();
    std::optional<Element> element;
    std::exception_ptr thrown;
    try {
      element = co_await next_();
    } catch (...) {
      thrown = std::current_exception();
    }
    if (thrown) {
      failure_ = StatusFromException(thrown, name_);
      co_return failure_;
    }
    if (!element.has_value()) ended_ = true;
    co_return std::move(element);
  }

 private:
  ElementGenerator next_;
  std::string name_;
  absl::Status failure_;
  bool ended_ = false;
};

class GeneratorDataset : public DatasetNode {
 public:
  GeneratorDataset(ElementGeneratorFactory make_next, std::string name)
      : make_next_(std::move(make_next)),
        name_(absl::StrCat("FromGenerator(", name, ")")) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    ElementGenerator next;
    std::exception_ptr thrown;
    try {
      next = make_next_();
    } catch (...) {
      thrown = std::current_exception();
    }
    if (thrown) return StatusFromException(thrown, name_);
    if (!next) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": the factory returned an empty function"));
    }
    return std::make_unique<GeneratorIterator>(std::move(next), name_);
  }
  std::optional<ElementSpec> spec() const override { return std::nullopt; }
  bool deterministic() const override { return false; }
  std::string DebugString() const override { return name_; }

 private:
  ElementGeneratorFactory make_next_;
  std::string name_;
};

class ChannelIterator : public ElementIterator {
 public:
  explicit ChannelIterator(std::shared_ptr<ElementChannel> channel)
      : channel_(std::move(channel)) {}

  std::optional<Result> TryNext() override {
    if (ended_) return Result(std::optional<Element>());
    std::optional<std::optional<Element>> received;
    channel_->channel().try_receive(
        [&](error_code ec, std::optional<Element> element) {
          if (!ec) received = std::move(element);
        });
    if (received.has_value()) {
      if (!received->has_value()) ended_ = true;
      return Result(*std::move(received));
    }
    // Closed while full: the end marker could not be queued.
    if (channel_->closed() && !channel_->channel().ready()) {
      ended_ = true;
      return Result(std::optional<Element>());
    }
    return std::nullopt;
  }

  asio::awaitable<Result> Next() override {
    if (std::optional<Result> ready = TryNext()) co_return *std::move(ready);
    auto [ec, element] = co_await channel_->channel().async_receive(
        asio::as_tuple(asio::use_awaitable));
    if (ec) {
      co_return absl::CancelledError(
          "FromChannel: the wait for the next element was cancelled");
    }
    if (!element.has_value()) ended_ = true;
    co_return std::move(element);
  }

 private:
  std::shared_ptr<ElementChannel> channel_;
  bool ended_ = false;
};

class ChannelDataset : public DatasetNode {
 public:
  ChannelDataset(std::shared_ptr<ElementChannel> channel, std::string name)
      : channel_(std::move(channel)), name_(std::move(name)) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext&) const override {
    if (taken_.exchange(true)) {
      return absl::FailedPreconditionError(
          absl::StrCat(DebugString(),
                       ": a channel has one receiver; it has an iterator "
                       "already (a Repeat or a second iterator)"));
    }
    return std::make_unique<ChannelIterator>(channel_);
  }
  std::optional<ElementSpec> spec() const override { return std::nullopt; }
  bool deterministic() const override { return false; }
  std::string DebugString() const override {
    return absl::StrCat("FromChannel(", name_, ")");
  }

 private:
  std::shared_ptr<ElementChannel> channel_;
  std::string name_;
  mutable std::atomic<bool> taken_{false};
};

}  // namespace

Dataset FromGenerator(ElementGenerator next, std::string name) {
  if (!next) {
    return Dataset::Failed(
        absl::InvalidArgumentError("FromGenerator: the function is empty"));
  }
  // Every iterator calls this one function object, so that the state the
  // user's lambda captured is shared, not copied per iterator.
  auto shared = std::make_shared<const ElementGenerator>(std::move(next));
  ElementGeneratorFactory same = [shared]() -> ElementGenerator {
    return [shared] { return (*shared)(); };
  };
  return Dataset::FromNode(
      std::make_shared<GeneratorDataset>(std::move(same), std::move(name)));
}

Dataset FromGenerator(ElementGeneratorFactory make_next, std::string name) {
  if (!make_next) {
    return Dataset::Failed(
        absl::InvalidArgumentError("FromGenerator: the factory is empty"));
  }
  return Dataset::FromNode(std::make_shared<GeneratorDataset>(
      std::move(make_next), std::move(name)));
}

ElementChannel::ElementChannel(Runtime::executor_type executor,
                               int64_t capacity)
    : channel_(std::move(executor),
               static_cast<size_t>(std::max<int64_t>(capacity, 1))) {}

asio::awaitable<absl::Status> ElementChannel::Send(Element element) {
  if (closed()) {
    co_return absl::FailedPreconditionError("ElementChannel: Send after Close");
  }
  auto [ec] = co_await channel_.async_send(
      error_code(), std::optional<Element>(std::move(element)),
      asio::as_tuple(asio::use_awaitable));
  if (ec) co_return absl::CancelledError("ElementChannel: Send was cancelled");
  co_return absl::OkStatus();
}

bool ElementChannel::TrySend(Element element) {
  if (closed()) return false;
  return channel_.try_send(error_code(),
                           std::optional<Element>(std::move(element)));
}

void ElementChannel::Close() {
  if (closed_.exchange(true)) return;
  // Wakes a receiver waiting on an empty queue; when full, the receiver
  // sees closed() once it drained the queue.
  (void)channel_.try_send(error_code(), std::optional<Element>());
}

Dataset FromChannel(std::shared_ptr<ElementChannel> channel, std::string name) {
  if (channel == nullptr) {
    return Dataset::Failed(
        absl::InvalidArgumentError("FromChannel: the channel is null"));
  }
  return Dataset::FromNode(
      std::make_shared<ChannelDataset>(std::move(channel), std::move(name)));
}

}  // namespace cosession
