#include "cosession/hooks/nan_tensor_hook.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

template <typename T>
bool AnyNaN(const Tensor& t) {
  for (T v : t.flat<T>()) {
    if (std::isnan(v)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::shared_ptr<NanTensorHook>> NanTensorHook::Create(
    NanTensorHookOptions options) {
  if (!options.loss.valid()) {
    return absl::InvalidArgumentError("NanTensorHook: loss is an empty Output");
  }
  if (options.loss.dtype() != DType::kFloat &&
      options.loss.dtype() != DType::kDouble) {
    return absl::InvalidArgumentError(
        absl::StrCat("NanTensorHook: loss '", options.loss.name(),
                     "' must be float or double"));
  }
  options.sink = SinkOrStderr(std::move(options.sink));
  return std::shared_ptr<NanTensorHook>(new NanTensorHook(std::move(options)));
}

absl::Status NanTensorHook::BeforeRunSync(SessionRunContext&,
                                          SessionRunArgs& args) {
  args.fetches.push_back(options_.loss);
  return absl::OkStatus();
}

absl::Status NanTensorHook::AfterRunSync(SessionRunContext& context,
                                         const SessionRunValues& values) {
  const Tensor& loss = values.results.at(0);
  const bool nan = loss.dtype() == DType::kDouble ? AnyNaN<double>(loss)
                                                  : AnyNaN<float>(loss);
  if (!nan) return absl::OkStatus();
  options_.sink("Model diverged with loss = NaN.");
  if (options_.fail_on_nan_loss) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NaN loss during training. (tensor '", options_.loss.name(), "')"));
  }
  context.RequestStop("hook 'NanTensorHook' requested stop: loss is NaN");
  return absl::OkStatus();
}

}  // namespace cosession
