// The JSON of a predict request: which parser (issue: "chosen by
// measurement"), and what filling tensors adds. The body: 64 rows of 784
// floats in TensorFlow Serving's row format (~400 KB), as a client
// sending images would.
//   BM_RestJson_ParsePredict   ParsePredictRequest (its fast path, the
//                              tensor filled from Boost.JSON's events)
//   BM_RestJson_ParsePredictThroughTree
//                              the same through Boost.JSON's document tree,
//                              as every other body is parsed
//   BM_Baseline_BoostJsonEvents  Boost.JSON's event parser keeping every
//                              number as a float, no checks: the least a
//                              reader of the body can do
//   BM_Baseline_BoostJsonDom   Boost.JSON's parse into its DOM only
//   BM_Baseline_NlohmannDom    nlohmann::json's parse into its DOM only
//   BM_RestJson_RenderPredict  the response for 64 rows of 10 floats
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/json_number_collector.h"
#include "cosession/serving/rest_json.h"

namespace cosession {
namespace {

const std::string& Body() {
  static const std::string* body = [] {
    std::mt19937 random(3);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    std::string text = "{\"instances\": [";
    for (int r = 0; r < 64; ++r) {
      if (r > 0) text += ", ";
      text += '[';
      for (int i = 0; i < 784; ++i) {
        if (i > 0) text += ", ";
        absl::StrAppend(&text, pixel(random));
      }
      text += ']';
    }
    text += "]}";
    return new std::string(std::move(text));
  }();
  return *body;
}

std::map<std::string, Signature> Signatures() {
  std::map<std::string, Signature> sigs;
  sigs[kDefaultServingSignature].inputs["x"] = {.tensor = Output(),
                                                .dtype = DType::kFloat,
                                                .shape = TensorShape{-1, 784}};
  return sigs;
}

void BM_RestJson_ParsePredict(benchmark::State& state) {
  const auto sigs = Signatures();
  for (auto _ : state) {
    auto request = ParsePredictRequest(Body(), sigs);
    if (!request.ok()) state.SkipWithError(request.status().ToString().c_str());
    benchmark::DoNotOptimize(request);
  }
  state.SetBytesProcessed(state.iterations() * Body().size());
}
BENCHMARK(BM_RestJson_ParsePredict);

void BM_RestJson_ParsePredictThroughTree(benchmark::State& state) {
  const auto sigs = Signatures();
  for (auto _ : state) {
    auto request = ParsePredictRequestThroughTree(Body(), sigs);
    if (!request.ok()) state.SkipWithError(request.status().ToString().c_str());
    benchmark::DoNotOptimize(request);
  }
  state.SetBytesProcessed(state.iterations() * Body().size());
}
BENCHMARK(BM_RestJson_ParsePredictThroughTree);

void BM_Baseline_BoostJsonEvents(benchmark::State& state) {
  std::vector<float> numbers;
  for (auto _ : state) {
    numbers.clear();
    if (!bench::CollectJsonNumbers(Body(), numbers)) {
      state.SkipWithError("not valid JSON");
    }
    benchmark::DoNotOptimize(numbers.data());
  }
  state.SetBytesProcessed(state.iterations() * Body().size());
}
BENCHMARK(BM_Baseline_BoostJsonEvents);

void BM_Baseline_BoostJsonDom(benchmark::State& state) {
  for (auto _ : state) {
    boost::json::value v = boost::json::parse(Body());
    benchmark::DoNotOptimize(v);
  }
  state.SetBytesProcessed(state.iterations() * Body().size());
}
BENCHMARK(BM_Baseline_BoostJsonDom);

void BM_Baseline_NlohmannDom(benchmark::State& state) {
  for (auto _ : state) {
    nlohmann::json v = nlohmann::json::parse(Body());
    benchmark::DoNotOptimize(v);
  }
  state.SetBytesProcessed(state.iterations() * Body().size());
}
BENCHMARK(BM_Baseline_NlohmannDom);

void BM_RestJson_RenderPredict(benchmark::State& state) {
  std::vector<float> values(640);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f / (1 + i);
  NamedTensors outputs{
      {"probabilities", Tensor::FromVector(values, TensorShape{64, 10})}};
  for (auto _ : state) {
    auto body = RenderPredictResponse(PredictFormat::kRow, outputs);
    benchmark::DoNotOptimize(body);
  }
}
BENCHMARK(BM_RestJson_RenderPredict);

}  // namespace
}  // namespace cosession
