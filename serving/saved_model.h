// An exported model: the graph a prediction needs, its variables' values and
// its named signatures, in a directory per version -- TensorFlow's
// SavedModel idea, in cosession's own files (docs/saved_model.md):
//
//   <export_dir>/<version>/model.json             the graph (serving/
//                                                 graph_json.h) and the
//                                                 signatures
//   <export_dir>/<version>/variables.safetensors  the variables, as a
//                                                 checkpoint (io/safetensors.h)
//
// A signature (TensorFlow's signature_def) names the tensors a client
// feeds and fetches: "serving_default" of the digits model maps input "x"
// (float [-1, 64]) and outputs "probabilities" (float [-1, 10]) and
// "classes" (int64 [-1]).
//
// ExportSavedModel writes only the ops the signatures' outputs need; a
// signature input that is not a Placeholder (the output of an input
// pipeline) becomes one, named after the input, with any batch size. The
// version directory appears whole or not at all: it is written under a
// temporary name and renamed into place, so a server watching
// <export_dir> never loads half a model.
//
// LoadSavedModel rebuilds the graph through the op registry, restores the
// variables into a new Session and resolves the signatures. Its errors name
// the file and what is wrong: NotFound for a missing file, an op type not
// registered in this process, or a variable missing from the variables
// file; DataLoss for a corrupt or truncated file (JSON that does not parse,
// a malformed node, attr or signature, a signature naming no tensor).
//
// Thread safety: the functions are reentrant. A SavedModel is immutable
// once loaded; its session runs are thread-safe (async/session.h).
#ifndef COSESSION_SERVING_SAVED_MODEL_H_
#define COSESSION_SERVING_SAVED_MODEL_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"

namespace cosession {

inline constexpr char kDefaultServingSignature[] = "serving_default";
inline constexpr char kPredictMethodName[] = "tensorflow/serving/predict";
inline constexpr char kClassifyMethodName[] = "tensorflow/serving/classify";
inline constexpr char kRegressMethodName[] = "tensorflow/serving/regress";
inline constexpr char kSavedModelGraphFile[] = "model.json";
inline constexpr char kSavedModelVariablesFile[] = "variables.safetensors";

// What ExportSavedModel is asked to write, per signature: tensors of the
// graph being exported, by the names clients use, and the API the
// signature answers (TensorFlow's method names). A classify signature's
// outputs are "classes" (integer labels [batch, k]) and/or "scores" (float
// [batch, k]); a regress signature's one output is "outputs" (float
// [batch] or [batch, 1]). Their inputs are the examples' features by name
// (serving/rest_json.h).
struct ExportSignature {
  std::map<std::string, Output> inputs{};
  std::map<std::string, Output> outputs{};
  std::string method_name = kPredictMethodName;
};

// One tensor of a loaded signature: where it is in the loaded graph, and
// its dtype and shape (a fed value must match them).
struct SignatureTensor {
  Output tensor{};
  DType dtype = DType::kFloat;
  TensorShape shape{};
};

struct Signature {
  std::string method_name = kPredictMethodName;
  std::map<std::string, SignatureTensor> inputs{};
  std::map<std::string, SignatureTensor> outputs{};
};

struct SavedModel {
  int64_t version = 0;
  std::string path{};                  // the version's directory
  std::unique_ptr<Graph> graph{};      // finalized
  std::unique_ptr<Session> session{};  // holds the restored variables
  std::map<std::string, Signature> signatures{};

  // nullptr when there is no signature of that name.
  const Signature* FindSignature(const std::string& name) const;
};

// The row count of `inputs` for `signature`: InvalidArgument naming the
// input for an unknown or missing input, a dtype or a shape that does not
// match the signature's (rows along the first dimension), inputs with
// different row counts, or no rows.
absl::StatusOr<int64_t> CheckSignatureInputs(
    const Signature& signature, const std::map<std::string, Tensor>& inputs);

// Writes <export_dir>/<version>/ from the graph of `session` and the values
// its variables hold now (read in one run of `session`). Returns the
// version's directory. InvalidArgument for no signature, a signature
// without outputs, a classify or regress signature whose outputs are not
// the ones named above, an empty name or tensor, or an op that cannot be
// written (naming it: e.g. one with a host-object attr still needed by an
// output); AlreadyExists when the version exists (a version, once written,
// never changes under a server); I/O errors naming the path.
boost::asio::awaitable<absl::StatusOr<std::string>> ExportSavedModel(
    Session& session, std::map<std::string, ExportSignature> signatures,
    std::string export_dir, int64_t version);

// Loads the version directory `path` (<export_dir>/<version>) on `runtime`
// (an overload, not a default argument: docs/async_pitfalls.md, 9).
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<SavedModel>>>
LoadSavedModel(std::string path, Runtime& runtime);
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<SavedModel>>>
LoadSavedModel(std::string path);

// The versions under `export_dir` (its subdirectories named by a
// non-negative integer), ascending; other entries are ignored. NotFound
// when `export_dir` does not exist.
absl::StatusOr<std::vector<int64_t>> ListSavedModelVersions(
    const std::string& export_dir);

}  // namespace cosession

#endif  // COSESSION_SERVING_SAVED_MODEL_H_
