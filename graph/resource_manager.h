// ResourceManager: the mutable state that ops keep across runs of one
// session: variable values, the generators of random ops, and opaque typed
// resources of other stateful ops (an input pipeline's iterator).
//
// A Session owns one; kernels reach it through KernelContext::resources().
// Graph nodes are immutable, so state lives here, keyed by node.
//
// Thread safety: thread-safe. Each variable has its own lock; an update runs
// its function under that lock, so a read-modify-write (AssignAdd) is atomic
// with respect to every other access of the same variable. A value is
// written in place only while nobody else holds its buffer (copy-on-write,
// see graph/tensor.h), so a read returns a snapshot that later updates do
// not change.
#ifndef COSESSION_GRAPH_RESOURCE_MANAGER_H_
#define COSESSION_GRAPH_RESOURCE_MANAGER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"

namespace cosession {

class ResourceManager {
 public:
  ResourceManager() = default;
  ResourceManager(const ResourceManager&) = delete;
  ResourceManager& operator=(const ResourceManager&) = delete;

  // The current value of the variable op `variable`; FailedPrecondition
  // ("uninitialized value <name>") before its first assignment.
  absl::StatusOr<Tensor> ReadVariable(const Node& variable);

  // Replaces the variable's value by update(current) atomically; `current`
  // is nullptr while uninitialised. Returns the new value.
  absl::StatusOr<Tensor> UpdateVariable(
      const Node& variable,
      absl::FunctionRef<absl::StatusOr<Tensor>(const Tensor* current)> update);

  // Updates the variable's value in place, atomically: fn gets the value to
  // write into -- the variable's own buffer when nothing else holds it
  // (no reader's snapshot, no run's intermediate), else a private copy that
  // then replaces it (copy-on-write). FailedPrecondition ("uninitialized
  // value <name>") before the first assignment; fn's error leaves the value
  // unchanged only when the buffer was copied, so fn should check its inputs
  // before writing.
  absl::Status UpdateVariableInPlace(
      const Node& variable, absl::FunctionRef<absl::Status(Tensor& value)> fn);

  bool IsInitialized(const Node& variable);

  // Runs fn(engine) under the lock of the random op `node`'s generator,
  // creating it from `seed` on first use. Each call advances the stream, so
  // successive runs draw new numbers, reproducibly for a fixed seed.
  void WithRandomEngine(const Node& node, uint64_t seed,
                        absl::FunctionRef<void(std::mt19937_64&)> fn);

  // The resource of type T that stateful op `node` keeps in this manager
  // (e.g. a dataset iterator), set by SetResource. nullptr when none is set
  // or it has another type. The resource lives as long as the manager or a
  // holder of the returned pointer.
  template <typename T>
  std::shared_ptr<T> LookupResource(const Node& node) {
    std::shared_lock lock(mu_);
    auto it = resources_.find(node.id());
    if (it == resources_.end() ||
        it->second.type != std::type_index(typeid(T))) {
      return nullptr;
    }
    return std::static_pointer_cast<T>(it->second.value);
  }
  // Sets (or replaces, or with nullptr removes) `node`'s resource; returns
  // the one it replaced, if any, so that the caller decides when it dies.
  template <typename T>
  std::shared_ptr<void> SetResource(const Node& node,
                                    std::shared_ptr<T> value) {
    std::shared_ptr<void> previous;
    std::unique_lock lock(mu_);
    auto it = resources_.find(node.id());
    if (it != resources_.end()) previous = std::move(it->second.value);
    if (value == nullptr) {
      if (it != resources_.end()) resources_.erase(it);
    } else {
      resources_.insert_or_assign(
          node.id(),
          OpaqueResource{std::move(value), std::type_index(typeid(T))});
    }
    return previous;
  }

 private:
  // std mutexes rather than absl::Mutex: Debian's Abseil is built with
  // deadlock detection, which costs ~1 µs per lock on this hot path.
  struct VariableSlot {
    std::mutex mu;
    Tensor value ABSL_GUARDED_BY(mu);
    bool initialized ABSL_GUARDED_BY(mu) = false;
  };
  struct RandomSlot {
    std::mutex mu;
    std::mt19937_64 engine ABSL_GUARDED_BY(mu);
  };
  VariableSlot& Variable(const Node& node);

  std::shared_mutex mu_;
  // Owns every variable's slot; slots are never removed.
  absl::flat_hash_map<int, std::unique_ptr<VariableSlot>> variables_
      ABSL_GUARDED_BY(mu_);
  // The same slots by node id, found without taking mu_: a training step
  // reads and updates each variable, and a shared lock's two atomic
  // operations cost more than the rest of the lookup. Chunks and slot
  // pointers are published under mu_ (release) and never change after.
  // Ids from kVariableChunks * kVariableChunkSize = 131,072 on (graphs of over
  // a hundred thousand ops) are found in variables_, under mu_.
  static constexpr int kVariableChunkBits = 10;
  static constexpr int kVariableChunkSize = 1 << kVariableChunkBits;
  static constexpr int kVariableChunks = 128;
  struct VariableChunk {
    std::array<std::atomic<VariableSlot*>, kVariableChunkSize> slots{};
  };
  std::array<std::atomic<VariableChunk*>, kVariableChunks> variable_chunks_{};
  std::vector<std::unique_ptr<VariableChunk>> owned_variable_chunks_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::unique_ptr<RandomSlot>> random_
      ABSL_GUARDED_BY(mu_);
  struct OpaqueResource {
    std::shared_ptr<void> value{};
    std::type_index type;
  };
  absl::flat_hash_map<int, OpaqueResource> resources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cosession

#endif  // COSESSION_GRAPH_RESOURCE_MANAGER_H_
