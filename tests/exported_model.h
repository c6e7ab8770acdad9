// ExportTestModel: a small exported model for the serving tests, written
// with ExportSavedModel as cosession_train writes its own.
#ifndef COSESSION_TESTS_EXPORTED_MODEL_H_
#define COSESSION_TESTS_EXPORTED_MODEL_H_

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "cosession/graph/ops.h"
#include "cosession/serving/saved_model.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::testing {

// Initialises the variables of `g` (not yet finalized), finalizes it and
// exports version `version` of it with `sigs` to `dir`.
inline boost::asio::awaitable<absl::Status> InitializeAndExport(
    Graph& g, std::map<std::string, ExportSignature> sigs, std::string dir,
    int64_t version) {
  Operation init = GlobalVariablesInitializer(g);
  g.Finalize();
  Session session(g, TestRuntime());
  RunArgs run_init{.targets = {init}};
  auto ran = co_await session.Run(run_init, boost::asio::use_awaitable);
  if (!ran.ok()) co_return ran.status();
  auto exported = co_await ExportSavedModel(session, sigs, dir, version);
  co_return exported.status();
}

// Exports version `version` of: doubled = x * w, classes = argmax(doubled),
// x float [-1, 2], w = `factor`; `gated`: each run waits for a trigger.
inline boost::asio::awaitable<absl::Status> ExportTestModel(std::string dir,
                                                            int64_t version,
                                                            float factor,
                                                            bool gated) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output w = ops::Variable(g, Tensor::Scalar<float>(factor), "w");
  Output y = ops::Mul(g, x, w, "doubled");
  if (gated) y = ops::Mul(g, y, TestWait(g, "gate"), "gated");
  Output classes = ops::ArgMax(g, y, 1, "classes");
  std::map<std::string, ExportSignature> sigs{
      {kDefaultServingSignature,
       {.inputs = {{"x", x}},
        .outputs = {{"doubled", y}, {"classes", classes}}}}};
  co_return co_await InitializeAndExport(g, std::move(sigs), std::move(dir),
                                         version);
}

// Exports version `version` of a model with a signature per API, over x
// float [-1, 2] and w = `factor`:
//   serving_default (predict): doubled = x * w
//   "classification" (classify): scores = x * w, classes = [0, 1] per row
//   "regression" (regress): outputs = sum(x * w) over each row
inline boost::asio::awaitable<absl::Status> ExportEveryApiModel(std::string dir,
                                                                int64_t version,
                                                                float factor) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output w = ops::Variable(g, Tensor::Scalar<float>(factor), "w");
  Output y = ops::Mul(g, x, w, "doubled");
  Output labels =
      ops::Add(g, ops::ZerosLike(g, ops::Cast(g, y, DType::kInt64)),
               ops::Const(g, Tensor::FromVector<int64_t>({0, 1})), "labels");
  Output sum = ops::Sum(g, y, {1}, false, "sum");
  std::map<std::string, ExportSignature> sigs{
      {kDefaultServingSignature,
       {.inputs = {{"x", x}}, .outputs = {{"doubled", y}}}},
      {"classification",
       {.inputs = {{"x", x}},
        .outputs = {{"classes", labels}, {"scores", y}},
        .method_name = kClassifyMethodName}},
      {"regression",
       {.inputs = {{"x", x}},
        .outputs = {{"outputs", sum}},
        .method_name = kRegressMethodName}}};
  co_return co_await InitializeAndExport(g, std::move(sigs), std::move(dir),
                                         version);
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_EXPORTED_MODEL_H_
