#include "cosession/serving/saved_model.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/status.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/data_loss.h"
#include "cosession/io/json_depth.h"
#include "cosession/io/safetensors.h"
#include "cosession/io/saver.h"
#include "cosession/serving/graph_json.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::json;

constexpr absl::string_view kSavedModelFormat = "cosession.saved_model";
constexpr int kSavedModelFormatVersion = 1;
// model.json nests about 8 levels (an attr's tensor's shape); far deeper is
// not a model file.
constexpr int kMaxModelJsonDepth = 32;

Json ShapeJson(const TensorShape& shape) {
  if (shape.unknown_rank()) return nullptr;
  Json dims = Json::array();
  for (int64_t d : shape.dim_sizes()) dims.push_back(d);
  return dims;
}

// The outputs TensorFlow's classify and regress signatures have, so that a
// server can answer those APIs from them.
absl::Status CheckMethodOutputs(const std::string& sig_name,
                                const ExportSignature& sig) {
  const std::string where =
      absl::StrCat("signature '", sig_name, "' (", sig.method_name, ")");
  if (sig.method_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("signature '", sig_name, "' has an empty method_name"));
  }
  if (sig.method_name == kClassifyMethodName) {
    for (const auto& [key, tensor] : sig.outputs) {
      if (key != "classes" && key != "scores") {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " has output '", key,
            "': a classification's outputs are \"classes\" and \"scores\""));
      }
    }
  }
  if (sig.method_name == kRegressMethodName &&
      (sig.outputs.size() != 1 || !sig.outputs.contains("outputs"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a regression has one output, named \"outputs\""));
  }
  return absl::OkStatus();
}

// What an export writes, computed before any file is touched.
struct ExportPlan {
  Json model;                     // model.json
  std::vector<Output> variables;  // to fetch, in file order
  std::vector<std::string> variable_names;
};

std::string FreeName(const Graph& graph, const std::string& wanted,
                     const absl::flat_hash_set<std::string>& taken) {
  std::string name = wanted;
  for (int i = 1; graph.FindNode(name) != nullptr || taken.contains(name);
       ++i) {
    name = absl::StrCat(wanted, "_", i);
  }
  return name;
}

absl::StatusOr<ExportPlan> PlanExport(
    const Graph& graph, const std::map<std::string, ExportSignature>& sigs) {
  auto invalid = [](auto... what) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExportSavedModel: ", what...));
  };
  if (sigs.empty()) return invalid("no signature to export");
  GraphJsonOptions options;
  absl::flat_hash_map<Output, std::string> exported_name;  // signature tensors
  absl::flat_hash_set<std::string> cut_names;
  for (const auto& [sig_name, sig] : sigs) {
    if (sig_name.empty()) return invalid("a signature has an empty name");
    if (sig.outputs.empty()) {
      return invalid("signature '", sig_name, "' has no outputs");
    }
    if (absl::Status s = CheckMethodOutputs(sig_name, sig); !s.ok()) {
      return invalid(s.message());
    }
    for (const auto* tensors : {&sig.inputs, &sig.outputs}) {
      for (const auto& [key, tensor] : *tensors) {
        if (key.empty() || !tensor.valid() ||
            &tensor.node()->graph() != &graph) {
          return invalid("signature '", sig_name, "': tensor '", key,
                         "' is empty, unnamed or of another graph");
        }
      }
    }
    for (const auto& [key, tensor] : sig.inputs) {
      if (exported_name.contains(tensor)) continue;
      if (tensor.node()->type() == "Placeholder") {
        exported_name[tensor] = tensor.name();
        options.roots.push_back(tensor.node());
        continue;
      }
      const std::string name = FreeName(graph, key, cut_names);
      cut_names.insert(name);
      options.cuts.push_back({.tensor = tensor, .placeholder_name = name});
      exported_name[tensor] = absl::StrCat(name, ":0");
    }
    for (const auto& [key, tensor] : sig.outputs) {
      options.roots.push_back(tensor.node());
      if (!exported_name.contains(tensor)) {
        exported_name[tensor] = tensor.name();
      }
    }
  }
  COSESSION_ASSIGN_OR_RETURN(Json graph_json, GraphToJson(graph, options));

  // Read the graph back before writing it: what a server will load, and
  // where the signatures' dtypes and shapes (the batch size relaxed at the
  // cuts) come from.
  Graph reloaded;
  COSESSION_RETURN_IF_ERROR(
      GraphFromJson(graph_json, "the graph being exported", reloaded));
  Json signatures = Json::object();
  for (const auto& [sig_name, sig] : sigs) {
    Json inputs = Json::object(), outputs = Json::object();
    for (const auto& [tensors, json] :
         {std::pair{&sig.inputs, &inputs}, std::pair{&sig.outputs, &outputs}}) {
      for (const auto& [key, tensor] : *tensors) {
        const std::string& name = exported_name.at(tensor);
        COSESSION_ASSIGN_OR_RETURN(Output out, reloaded.FindOutput(name));
        (*json)[key] = Json{{"name", name},
                            {"dtype", std::string(DTypeName(out.dtype()))},
                            {"shape", ShapeJson(out.shape())}};
      }
    }
    signatures[sig_name] = Json{{"method_name", sig.method_name},
                                {"inputs", std::move(inputs)},
                                {"outputs", std::move(outputs)}};
  }
  ExportPlan plan;
  for (int id = 0; id < reloaded.num_nodes(); ++id) {
    const Node& node = *reloaded.node(id);
    if (node.type() != "Variable") continue;
    COSESSION_ASSIGN_OR_RETURN(Output original, graph.FindOutput(node.name()));
    plan.variables.push_back(original);
    plan.variable_names.push_back(node.name());
  }
  plan.model = Json{{"format", std::string(kSavedModelFormat)},
                    {"format_version", kSavedModelFormatVersion},
                    {"graph", std::move(graph_json)},
                    {"signatures", std::move(signatures)}};
  return plan;
}

absl::Status ErrorOf(const std::error_code& error, absl::string_view what) {
  return absl::ErrnoToStatus(error.value(), what);
}

// Writes the version under a temporary name, then renames it into place.
absl::StatusOr<std::string> WriteVersion(ExportPlan plan,
                                         const std::vector<Tensor>& values,
                                         const std::string& export_dir,
                                         int64_t version) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(export_dir, error);
  if (error) {
    return ErrorOf(error, absl::StrCat("cannot create the export directory '",
                                       export_dir, "'"));
  }
  const std::string final_dir = JoinPath(export_dir, absl::StrCat(version));
  if (fs::exists(final_dir, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat("version ", version, " already exists: '", final_dir,
                     "' (a version, once written, is never changed)"));
  }
  static std::atomic<int> counter{0};
  const std::string staging = JoinPath(
      export_dir,
      absl::StrCat(".tmp-", version, "-", getpid(), "-", counter.fetch_add(1)));
  fs::create_directories(staging, error);
  if (error) {
    return ErrorOf(error, absl::StrCat("cannot create '", staging, "'"));
  }
  auto written = [&]() -> absl::Status {
    plan.model["version"] = version;
    COSESSION_RETURN_IF_ERROR(WriteFileAtomically(
        JoinPath(staging, kSavedModelGraphFile), plan.model.dump(1)));
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t i = 0; i < values.size(); ++i) {
      named.emplace_back(plan.variable_names[i], values[i]);
    }
    COSESSION_ASSIGN_OR_RETURN(
        SafetensorsFile file,
        BuildSafetensors(
            named, {{std::string(kGlobalStepKey), absl::StrCat(version)}}));
    std::vector<absl::string_view> pieces{file.header};
    for (const Tensor& t : file.data) {
      if (t.TotalBytes() > 0) {
        pieces.emplace_back(static_cast<const char*>(t.raw_data()),
                            t.TotalBytes());
      }
    }
    COSESSION_RETURN_IF_ERROR(WriteFileAtomically(
        JoinPath(staging, kSavedModelVariablesFile), pieces));
    fs::rename(staging, final_dir, error);
    if (error == std::errc::directory_not_empty ||
        error == std::errc::file_exists) {
      return absl::AlreadyExistsError(absl::StrCat(
          "version ", version, " appeared meanwhile: '", final_dir, "'"));
    }
    if (error) {
      return ErrorOf(error, absl::StrCat("cannot rename '", staging, "' to '",
                                         final_dir, "'"));
    }
    return absl::OkStatus();
  }();
  if (!written.ok()) {
    fs::remove_all(staging, error);
    return written;
  }
  return final_dir;
}

// ---- loading ----

absl::StatusOr<std::map<std::string, SignatureTensor>> SignatureTensors(
    const Json& json, const Graph& graph, const DataLossNaming& corrupt,
    const std::string& where) {
  if (!json.is_object()) return corrupt(where, " is not an object");
  std::map<std::string, SignatureTensor> tensors;
  for (const auto& [key, entry] : json.items()) {
    const std::string what = absl::StrCat(where, " '", key, "'");
    if (!entry.is_object() || !entry.contains("name") ||
        !entry["name"].is_string()) {
      return corrupt(what, " has no tensor \"name\"");
    }
    absl::StatusOr<Output> tensor =
        graph.FindOutput(entry["name"].get_ref<const std::string&>());
    if (!tensor.ok()) {
      return corrupt(what, " names the tensor '",
                     entry["name"].get_ref<const std::string&>(),
                     "', which is not in the graph");
    }
    if (entry.contains("dtype") &&
        entry["dtype"] != std::string(DTypeName(tensor->dtype()))) {
      return corrupt(what, " says dtype ", entry["dtype"].dump(),
                     " but the graph's tensor is ", DTypeName(tensor->dtype()));
    }
    tensors[key] = {
        .tensor = *tensor, .dtype = tensor->dtype(), .shape = tensor->shape()};
  }
  return tensors;
}

// The synchronous part of a load: the graph and signatures, not yet run.
absl::StatusOr<std::unique_ptr<SavedModel>> ReadModelFile(
    const std::string& path) {
  const std::string file = JoinPath(path, kSavedModelGraphFile);
  COSESSION_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  const DataLossNaming corrupt("corrupt model file", file);
  if (JsonNestingDepth(text, kMaxModelJsonDepth) > kMaxModelJsonDepth) {
    return corrupt("it nests deeper than ", kMaxModelJsonDepth, " levels");
  }
  Json model;
  try {
    model = Json::parse(text);
  } catch (const Json::exception& e) {
    return corrupt("not valid JSON (truncated?): ", e.what());
  }
  if (!model.is_object() ||
      model.value("format", "") != std::string(kSavedModelFormat)) {
    return corrupt("\"format\" is not \"", kSavedModelFormat, "\"");
  }
  if (model.value("format_version", Json()) != kSavedModelFormatVersion) {
    return corrupt("\"format_version\" is not ", kSavedModelFormatVersion);
  }
  auto saved = std::make_unique<SavedModel>();
  saved->path = path;
  const Json& version = model.value("version", Json());
  if (!version.is_number_integer() || version.get<int64_t>() < 0) {
    return corrupt("\"version\" is not a non-negative integer");
  }
  saved->version = version.get<int64_t>();
  if (!model.contains("graph")) return corrupt("it has no \"graph\"");
  saved->graph = std::make_unique<Graph>();
  COSESSION_RETURN_IF_ERROR(GraphFromJson(model["graph"], file, *saved->graph));
  const Json* signatures =
      model.contains("signatures") ? &model["signatures"] : nullptr;
  if (signatures == nullptr || !signatures->is_object() ||
      signatures->empty()) {
    return corrupt("\"signatures\" is not an object of signatures");
  }
  for (const auto& [name, sig] : signatures->items()) {
    const std::string where = absl::StrCat("signature '", name, "'");
    if (!sig.is_object() || !sig.contains("inputs") ||
        !sig.contains("outputs")) {
      return corrupt(where, " needs \"inputs\" and \"outputs\"");
    }
    Signature signature;
    if (sig.contains("method_name")) {
      if (!sig["method_name"].is_string()) {
        return corrupt(where, ": \"method_name\" is not a string");
      }
      signature.method_name = sig["method_name"].get<std::string>();
    }
    COSESSION_ASSIGN_OR_RETURN(
        signature.inputs,
        SignatureTensors(sig["inputs"], *saved->graph, corrupt,
                         absl::StrCat(where, " input")));
    COSESSION_ASSIGN_OR_RETURN(
        signature.outputs,
        SignatureTensors(sig["outputs"], *saved->graph, corrupt,
                         absl::StrCat(where, " output")));
    if (signature.outputs.empty()) return corrupt(where, " has no outputs");
    saved->signatures.emplace(name, std::move(signature));
  }
  return saved;
}

}  // namespace

absl::StatusOr<int64_t> CheckSignatureInputs(
    const Signature& signature, const std::map<std::string, Tensor>& inputs) {
  auto invalid = [](auto... what) {
    return absl::InvalidArgumentError(absl::StrCat(what...));
  };
  // Both maps are ordered by name: when they hold the same names, as every
  // valid request does, one walk in step pairs each input with its spec,
  // without a lookup per input.
  const bool same_names =
      inputs.size() == signature.inputs.size() &&
      std::equal(
          inputs.begin(), inputs.end(), signature.inputs.begin(),
          [](const auto& a, const auto& b) { return a.first == b.first; });
  if (!same_names) {
    for (const auto& [name, tensor] : inputs) {
      if (!signature.inputs.contains(name)) {
        std::vector<std::string> names;
        for (const auto& [known, spec] : signature.inputs) {
          names.push_back(known);
        }
        return invalid("unknown input '", name, "' (the signature's inputs: ",
                       absl::StrJoin(names, ", "), ")");
      }
    }
    for (const auto& [name, spec] : signature.inputs) {
      if (!inputs.contains(name)) return invalid("missing input '", name, "'");
    }
    return invalid("the request's input names differ from the signature's");
  }
  int64_t rows = -1;
  absl::string_view previous;
  auto given = inputs.begin();
  for (const auto& [name, spec] : signature.inputs) {
    const Tensor& t = (given++)->second;
    if (t.dtype() != spec.dtype) {
      return invalid("input '", name, "' has dtype ", DTypeName(t.dtype()),
                     "; the signature wants ", DTypeName(spec.dtype));
    }
    if (t.shape().dims() < 1 || !spec.shape.IsCompatibleWith(t.shape())) {
      return invalid("input '", name, "' has shape ", t.shape().DebugString(),
                     "; the signature wants ", spec.shape.DebugString(),
                     " (rows along the first dimension)");
    }
    const int64_t n = t.shape().dim_size(0);
    if (rows >= 0 && n != rows) {
      return invalid("input '", name, "' has ", n, " rows but input '",
                     previous, "' has ", rows,
                     "; every input needs the same number");
    }
    rows = n;
    previous = name;
  }
  if (rows < 1) return invalid("input '", previous, "' has no rows");
  return rows;
}

const Signature* SavedModel::FindSignature(const std::string& name) const {
  auto it = signatures.find(name);
  return it == signatures.end() ? nullptr : &it->second;
}

asio::awaitable<absl::StatusOr<std::string>> ExportSavedModel(
    Session& session, std::map<std::string, ExportSignature> signatures,
    std::string export_dir, int64_t version) {
  if (version < 0) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "ExportSavedModel: the version must be >= 0, got ", version));
  }
  absl::StatusOr<ExportPlan> plan = PlanExport(session.graph(), signatures);
  if (!plan.ok()) co_return plan.status();
  std::vector<Tensor> values;
  if (!plan->variables.empty()) {
    RunArgs read{.fetches = plan->variables};
    absl::StatusOr<std::vector<Tensor>> ran =
        co_await session.Run(std::move(read), asio::use_awaitable);
    if (!ran.ok()) {
      co_return absl::Status(
          ran.status().code(),
          absl::StrCat("ExportSavedModel: cannot read the variables: ",
                       ran.status().message()));
    }
    values = *std::move(ran);
  }
  co_return WriteVersion(*std::move(plan), values, export_dir, version);
}

asio::awaitable<absl::StatusOr<std::unique_ptr<SavedModel>>> LoadSavedModel(
    std::string path, Runtime& runtime) {
  absl::StatusOr<std::unique_ptr<SavedModel>> read = ReadModelFile(path);
  if (!read.ok()) co_return read.status();
  std::unique_ptr<SavedModel> model = *std::move(read);
  std::shared_ptr<Saver> saver;
  if (!model->graph->GetCollection(kVariablesCollection).empty()) {
    absl::StatusOr<std::shared_ptr<Saver>> created =
        Saver::Create(*model->graph);
    if (!created.ok()) co_return created.status();
    saver = *std::move(created);
  }
  model->graph->Finalize();
  model->session = std::make_unique<Session>(*model->graph, runtime);
  if (saver != nullptr) {
    absl::Status restored = co_await saver->Restore(
        *model->session, JoinPath(path, kSavedModelVariablesFile));
    if (!restored.ok()) co_return restored;
  }
  co_return std::move(model);
}

asio::awaitable<absl::StatusOr<std::unique_ptr<SavedModel>>> LoadSavedModel(
    std::string path) {
  co_return co_await LoadSavedModel(std::move(path), Runtime::Default());
}

absl::StatusOr<std::vector<int64_t>> ListSavedModelVersions(
    const std::string& export_dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::directory_iterator it(export_dir, error);
  if (error) {
    return ErrorOf(error, absl::StrCat("cannot list the model base path '",
                                       export_dir, "'"));
  }
  std::vector<int64_t> versions;
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    int64_t version;
    if (!name.empty() && name.size() <= 18 &&
        std::all_of(name.begin(), name.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(name, &version) && it->is_directory(error)) {
      versions.push_back(version);
    }
  }
  if (error) {
    return ErrorOf(error, absl::StrCat("cannot list the model base path '",
                                       export_dir, "'"));
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

}  // namespace cosession
