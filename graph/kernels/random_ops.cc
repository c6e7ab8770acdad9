// Random ops: RandomUniform, RandomNormal, TruncatedNormal.
//
// Seeds follow TensorFlow's rules: a graph seed (Graph::seed()) or a non-zero
// op seed makes the stream reproducible; the missing half is the default
// graph seed 87654321 or the node's id. With neither, the generator is seeded
// from std::random_device. Each op's generator lives in the session's
// ResourceManager, so successive runs continue its stream (new values each
// run) and two sessions with the same seeds draw the same sequence.
//
// The samples are computed here from the raw 64-bit engine output (not with
// <random>'s distributions, whose algorithms differ between standard
// libraries), so a seed gives the same values everywhere.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/graph/kernels/kernel_util.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace {

constexpr int64_t kDefaultGraphSeed = 87654321;

enum class Distribution { kUniform, kNormal, kTruncatedNormal };

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t EffectiveSeed(const Node& node) {
  const std::optional<int64_t> graph_seed = node.graph().seed();
  const int64_t op_seed = node.attr<int64_t>("seed");
  if (!graph_seed.has_value() && op_seed == 0) {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  const int64_t g = graph_seed.value_or(kDefaultGraphSeed);
  const int64_t o = op_seed != 0 ? op_seed : node.id();
  return SplitMix64(SplitMix64(static_cast<uint64_t>(g)) ^
                    static_cast<uint64_t>(o));
}

// Uniform in [0, 1) with the full precision of T (never 1, unlike
// std::generate_canonical for float on some libraries).
template <typename T>
T UniformSample(std::mt19937_64& engine) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(engine() >> 40) * 0x1.0p-24f;
  } else {
    return static_cast<double>(engine() >> 11) * 0x1.0p-53;
  }
}

// Standard normal samples by the Box-Muller transform, two at a time.
class NormalSampler {
 public:
  explicit NormalSampler(std::mt19937_64& engine) : engine_(engine) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - UniformSample<double>(engine_);  // (0, 1]
    const double u2 = UniformSample<double>(engine_);
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  std::mt19937_64& engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

template <Distribution kDistribution>
absl::Status RandomShape(InferenceContext& c) {
  COSESSION_RETURN_IF_ERROR(c.ExpectInputs(0, 0));
  COSESSION_ASSIGN_OR_RETURN(TensorShape shape, c.attr<TensorShape>("shape"));
  COSESSION_ASSIGN_OR_RETURN(DType dtype, c.attr<DType>("dtype"));
  COSESSION_RETURN_IF_ERROR(c.attr<int64_t>("seed").status());
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shape must be fully defined, got ", shape.DebugString()));
  }
  if (!IsFloating(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(dtype),
                     " is not supported (expected float or double)"));
  }
  if constexpr (kDistribution != Distribution::kUniform) {
    COSESSION_RETURN_IF_ERROR(c.attr<double>("mean").status());
    COSESSION_ASSIGN_OR_RETURN(double stddev, c.attr<double>("stddev"));
    if (!(stddev >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stddev must be >= 0, got ", stddev));
    }
  }
  c.AddOutput(dtype, std::move(shape));
  return absl::OkStatus();
}

template <Distribution kDistribution>
absl::Status RandomKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const DType dtype = node.attr<DType>("dtype");
  Tensor out = Tensor::Allocate(dtype, node.attr<TensorShape>("shape"));
  double mean = 0, stddev = 1;
  if constexpr (kDistribution != Distribution::kUniform) {
    mean = node.attr<double>("mean");
    stddev = node.attr<double>("stddev");
  }
  absl::Status status = absl::OkStatus();
  ctx.resources().WithRandomEngine(
      node, EffectiveSeed(node), [&](std::mt19937_64& engine) {
        VisitDType(dtype, [&]<typename T>() {
          if constexpr (!std::is_floating_point_v<T>) {
            status = kernels::KernelError(
                ctx,
                absl::StrCat("dtype ", DTypeName(dtype), " is not supported"));
          } else {
            auto values = out.mutable_flat<T>();
            NormalSampler normal(engine);
            for (T& v : values) {
              if constexpr (kDistribution == Distribution::kUniform) {
                v = UniformSample<T>(engine);
              } else if constexpr (kDistribution == Distribution::kNormal) {
                v = static_cast<T>(mean + stddev * normal.Next());
              } else {
                double z = normal.Next();
                while (std::abs(z) > 2.0) z = normal.Next();
                v = static_cast<T>(mean + stddev * z);
              }
            }
          }
        });
      });
  COSESSION_RETURN_IF_ERROR(status);
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

int64_t OutputElementsCost(const KernelContext& ctx) {
  return ctx.node().output_shape(0).num_elements();
}

NodeSpec RandomSpec(const char* op, TensorShape shape, DType dtype,
                    int64_t seed, std::string name) {
  NodeSpec spec{op, std::move(name), {}, {}, {}};
  spec.attrs["shape"] = std::move(shape);
  spec.attrs["dtype"] = dtype;
  spec.attrs["seed"] = seed;
  return spec;
}

}  // namespace

void RegisterRandomOps(OpRegistry& r) {
  using kernels::SyncOpDef;
  auto must = [](absl::Status s) { ThrowIfError(std::move(s)); };
  must(
      r.Register(SyncOpDef("RandomUniform", RandomShape<Distribution::kUniform>,
                           RandomKernel<Distribution::kUniform>,
                           OutputElementsCost, /*stateful=*/true)));
  must(r.Register(SyncOpDef("RandomNormal", RandomShape<Distribution::kNormal>,
                            RandomKernel<Distribution::kNormal>,
                            OutputElementsCost, /*stateful=*/true)));
  must(r.Register(SyncOpDef("TruncatedNormal",
                            RandomShape<Distribution::kTruncatedNormal>,
                            RandomKernel<Distribution::kTruncatedNormal>,
                            OutputElementsCost, /*stateful=*/true)));
}

namespace ops {

Output RandomUniform(Graph& g, TensorShape shape, DType dtype, int64_t seed,
                     std::string name) {
  return Output(g.AddNode(RandomSpec("RandomUniform", std::move(shape), dtype,
                                     seed, std::move(name))),
                0);
}

Output RandomNormal(Graph& g, TensorShape shape, DType dtype, double mean,
                    double stddev, int64_t seed, std::string name) {
  NodeSpec spec = RandomSpec("RandomNormal", std::move(shape), dtype, seed,
                             std::move(name));
  spec.attrs["mean"] = mean;
  spec.attrs["stddev"] = stddev;
  return Output(g.AddNode(std::move(spec)), 0);
}

Output TruncatedNormal(Graph& g, TensorShape shape, DType dtype, double mean,
                       double stddev, int64_t seed, std::string name) {
  NodeSpec spec = RandomSpec("TruncatedNormal", std::move(shape), dtype, seed,
                             std::move(name));
  spec.attrs["mean"] = mean;
  spec.attrs["stddev"] = stddev;
  return Output(g.AddNode(std::move(spec)), 0);
}

}  // namespace ops
}  // namespace cosession
