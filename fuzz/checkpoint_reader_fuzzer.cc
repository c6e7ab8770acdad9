// libFuzzer target: the safetensors checkpoint reader must never crash,
// hang or allocate beyond the input's size on any bytes; it returns the
// tensors or DataLoss. Seeds: fuzz/corpus/checkpoint_reader/.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cosession/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = cosession::ParseSafetensors(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!parsed.ok() && !absl::IsDataLoss(parsed.status())) __builtin_trap();
  if (parsed.ok()) {
    // Touch every element: the tensors must be whole.
    size_t bytes = 0;
    for (const auto& [name, tensor] : parsed->tensors)
      bytes += tensor.TotalBytes();
    if (bytes > size) __builtin_trap();
  }
  return 0;
}
