#include "cosession/graph/op_registry.h"

#include <algorithm>

namespace cosession {

absl::Status InferenceContext::ExpectInputs(int min, int max) const {
  const int n = num_inputs();
  if (n < min || n > max) {
    return absl::InvalidArgumentError(
        min == max
            ? absl::StrCat("expects ", min, " inputs, got ", n)
            : absl::StrCat("expects ", min, " to ", max, " inputs, got ", n));
  }
  return absl::OkStatus();
}

absl::Status InferenceContext::ExpectSameDType(int first) const {
  for (int i = first + 1; i < num_inputs(); ++i) {
    if (input_dtype(i) != input_dtype(first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " ('", input(i).name(), "') has dtype ",
          DTypeName(input_dtype(i)), " but input ", first, " ('",
          input(first).name(), "') has dtype ", DTypeName(input_dtype(first))));
    }
  }
  return absl::OkStatus();
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry;  // never destroyed: kernels may run at exit
    RegisterCoreOps(*r);
    RegisterMathOps(*r);
    RegisterMatMulOp(*r);
    RegisterArrayOps(*r);
    RegisterRandomOps(*r);
    RegisterTrainingOps(*r);
    RegisterNnOps(*r);
    RegisterGradOps(*r);
    RegisterGradients(*r);
    return r;
  }();
  return *registry;
}

absl::Status OpRegistry::Register(OpDef def) {
  if (def.name.empty()) {
    return absl::InvalidArgumentError("An op definition needs a name");
  }
  if (!def.shape_fn) {
    return absl::InvalidArgumentError(
        absl::StrCat("Op '", def.name, "' has no shape function"));
  }
  if (static_cast<bool>(def.kernel) == static_cast<bool>(def.async_kernel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Op '", def.name, "' needs exactly one of kernel and async_kernel"));
  }
  std::unique_lock lock(mu_);
  auto& slot = ops_[def.name];
  if (slot != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("Op '", def.name, "' is already registered"));
  }
  slot = std::make_unique<OpDef>(std::move(def));
  return absl::OkStatus();
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::vector<std::string> names;
  {
    std::shared_lock lock(mu_);
    names.reserve(ops_.size());
    for (const auto& [name, def] : ops_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status OpRegistry::SetGradient(absl::string_view op,
                                     GradientFn gradient) {
  std::unique_lock lock(mu_);
  auto it = ops_.find(op);
  if (it == ops_.end()) {
    return absl::NotFoundError(absl::StrCat("No op named '", op, "'"));
  }
  it->second->gradient = std::move(gradient);
  return absl::OkStatus();
}

}  // namespace cosession
