#include "cosession/graph/resource_manager.h"

#include "absl/strings/str_cat.h"

namespace cosession {

ResourceManager::VariableSlot& ResourceManager::Variable(const Node& node) {
  const int id = node.id();
  const int chunk_index = id >> kVariableChunkBits;
  const int in_chunk = id & (kVariableChunkSize - 1);
  if (chunk_index < kVariableChunks) {
    const VariableChunk* chunk =
        variable_chunks_[chunk_index].load(std::memory_order_acquire);
    if (chunk != nullptr) {
      VariableSlot* slot =
          chunk->slots[in_chunk].load(std::memory_order_acquire);
      if (slot != nullptr) return *slot;
    }
  } else {
    std::shared_lock lock(mu_);
    auto it = variables_.find(id);
    if (it != variables_.end()) return *it->second;
  }
  std::unique_lock lock(mu_);
  auto& slot = variables_[id];
  if (slot == nullptr) slot = std::make_unique<VariableSlot>();
  if (chunk_index < kVariableChunks) {
    VariableChunk* chunk =
        variable_chunks_[chunk_index].load(std::memory_order_relaxed);
    if (chunk == nullptr) {
      chunk =
          owned_variable_chunks_.emplace_back(std::make_unique<VariableChunk>())
              .get();
      variable_chunks_[chunk_index].store(chunk, std::memory_order_release);
    }
    chunk->slots[in_chunk].store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

absl::StatusOr<Tensor> ResourceManager::ReadVariable(const Node& variable) {
  VariableSlot& slot = Variable(variable);
  std::lock_guard lock(slot.mu);
  if (!slot.initialized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Attempting to use uninitialized value ", variable.name()));
  }
  return slot.value;
}

absl::StatusOr<Tensor> ResourceManager::UpdateVariable(
    const Node& variable,
    absl::FunctionRef<absl::StatusOr<Tensor>(const Tensor* current)> update) {
  VariableSlot& slot = Variable(variable);
  std::lock_guard lock(slot.mu);
  absl::StatusOr<Tensor> next =
      update(slot.initialized ? &slot.value : nullptr);
  if (!next.ok()) return next.status();
  slot.value = *next;
  slot.initialized = true;
  return next;
}

absl::Status ResourceManager::UpdateVariableInPlace(
    const Node& variable, absl::FunctionRef<absl::Status(Tensor& value)> fn) {
  VariableSlot& slot = Variable(variable);
  std::lock_guard lock(slot.mu);
  if (!slot.initialized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Attempting to use uninitialized value ", variable.name()));
  }
  // Under the lock nobody can take a new reference to slot.value, so a
  // count of one stays one while fn writes.
  if (slot.value.RefCountIsOne()) return fn(slot.value);
  Tensor copy = slot.value.Clone();
  absl::Status status = fn(copy);
  if (status.ok()) slot.value = std::move(copy);
  return status;
}

bool ResourceManager::IsInitialized(const Node& variable) {
  VariableSlot& slot = Variable(variable);
  std::lock_guard lock(slot.mu);
  return slot.initialized;
}

void ResourceManager::WithRandomEngine(
    const Node& node, uint64_t seed,
    absl::FunctionRef<void(std::mt19937_64&)> fn) {
  RandomSlot* slot;
  {
    std::unique_lock lock(mu_);
    auto& entry = random_[node.id()];
    if (entry == nullptr) {
      entry = std::make_unique<RandomSlot>();
      std::lock_guard slot_lock(entry->mu);
      entry->engine.seed(seed);
    }
    slot = entry.get();
  }
  std::lock_guard lock(slot->mu);
  fn(slot->engine);
}

}  // namespace cosession
