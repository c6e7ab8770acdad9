#include "cosession/pipeline/detail/chunk_read_ahead.h"

#include <boost/asio/post.hpp>

namespace cosession::detail {

ChunkReadAhead::ChunkReadAhead(std::shared_ptr<LineFileReader> reader,
                               Runtime::executor_type pool, size_t depth)
    : reader_(std::move(reader)),
      pool_(std::move(pool)),
      depth_(depth < 1 ? 1 : depth) {}

void ChunkReadAhead::Start() {
  std::lock_guard lock(mu_);
  StartReadingLocked();
}

void ChunkReadAhead::StartReadingLocked() {
  if (reading_ || finished_ || stopped_ || ready_.size() >= depth_) return;
  reading_ = true;
  boost::asio::post(pool_, [self = shared_from_this()] { ReadChunks(self); });
}

void ChunkReadAhead::ReadChunks(std::shared_ptr<ChunkReadAhead> self) {
  while (true) {
    std::string buffer;
    {
      std::lock_guard lock(self->mu_);
      if (self->finished_ || self->stopped_ ||
          self->ready_.size() >= self->depth_) {
        self->reading_ = false;
        return;
      }
      if (!self->spares_.empty()) {
        buffer = std::move(self->spares_.back());
        self->spares_.pop_back();
      }
    }
    absl::Status status = self->reader_->FillChunk(buffer);
    Waiter waiter;
    {
      std::lock_guard lock(self->mu_);
      if (!status.ok() || buffer.empty()) self->finished_ = true;
      self->ready_.push_back(Chunk{std::move(status), std::move(buffer)});
      waiter = std::move(self->waiter_);
      self->waiter_ = nullptr;
    }
    if (waiter) waiter(absl::OkStatus());
  }
}

std::optional<absl::Status> ChunkReadAhead::TryTake(std::string& buffer) {
  std::lock_guard lock(mu_);
  if (ready_.empty()) return std::nullopt;
  Chunk chunk = std::move(ready_.front());
  ready_.pop_front();
  if (buffer.capacity() > 0) spares_.push_back(std::move(buffer));
  buffer = std::move(chunk.bytes);
  StartReadingLocked();
  return chunk.status;
}

void ChunkReadAhead::AddWaiter(Waiter done, boost::asio::cancellation_slot slot,
                               std::string what) {
  {
    std::lock_guard lock(mu_);
    if (ready_.empty()) {
      if (slot.is_connected()) {
        slot.assign([weak = weak_from_this(),
                     what = std::move(what)](boost::asio::cancellation_type) {
          if (auto self = weak.lock()) self->CancelWaiter(what);
        });
      }
      waiter_ = std::move(done);
      return;
    }
  }
  done(absl::OkStatus());
}

void ChunkReadAhead::CancelWaiter(const std::string& what) {
  Waiter waiter;
  {
    std::lock_guard lock(mu_);
    waiter = std::move(waiter_);
    waiter_ = nullptr;
  }
  if (waiter) waiter(absl::CancelledError(what));
}

void ChunkReadAhead::Stop() {
  std::lock_guard lock(mu_);
  stopped_ = true;
}

}  // namespace cosession::detail
