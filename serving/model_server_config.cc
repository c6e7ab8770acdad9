#include "cosession/serving/model_server_config.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"
#include "cosession/serving/text_proto.h"

namespace cosession {
namespace {

class ConfigReader {
 public:
  explicit ConfigReader(absl::string_view source) : source_(source) {}

  absl::Status Error(const TextProtoField& f, absl::string_view what) const {
    return TextProtoError(source_, f.line, what);
  }

  absl::StatusOr<std::string> String(const TextProtoField& f) const {
    return TextProtoString(f, source_);
  }
  absl::StatusOr<int64_t> Int(const TextProtoField& f, int64_t min) const {
    return TextProtoInt(f, min, source_);
  }
  absl::StatusOr<const TextProtoMessage*> Message(
      const TextProtoField& f) const {
    return TextProtoSubmessage(f, source_);
  }
  absl::Status Unknown(const TextProtoField& f,
                       absl::string_view message) const {
    return TextProtoUnknownField(f, message, source_);
  }

  absl::StatusOr<ModelVersionPolicy> Policy(const TextProtoField& field) const {
    COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* m, Message(field));
    if (m->fields.size() != 1) {
      return Error(field,
                   "model_version_policy wants one of latest { ... }, "
                   "all { } or specific { ... }");
    }
    const TextProtoField& kind = m->fields[0];
    COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* body, Message(kind));
    ModelVersionPolicy policy;
    if (kind.name == "latest") {
      for (const TextProtoField& f : body->fields) {
        if (f.name != "num_versions") return Unknown(f, "latest");
        COSESSION_ASSIGN_OR_RETURN(policy.num_versions, Int(f, 1));
      }
    } else if (kind.name == "all") {
      policy.kind = ModelVersionPolicy::Kind::kAll;
      if (!body->fields.empty()) return Unknown(body->fields[0], "all");
    } else if (kind.name == "specific") {
      policy.kind = ModelVersionPolicy::Kind::kSpecific;
      for (const TextProtoField& f : body->fields) {
        if (f.name != "versions") return Unknown(f, "specific");
        COSESSION_ASSIGN_OR_RETURN(int64_t v, Int(f, 0));
        policy.versions.push_back(v);
      }
      if (policy.versions.empty()) {
        return Error(kind, "specific { } names no versions");
      }
    } else {
      return Unknown(kind, "model_version_policy");
    }
    return policy;
  }

  absl::StatusOr<ModelConfig> Config(const TextProtoField& field) const {
    COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* m, Message(field));
    ModelConfig config;
    bool has_policy = false;
    std::vector<const TextProtoField*> labels;
    for (const TextProtoField& f : m->fields) {
      if (f.name == "name") {
        COSESSION_ASSIGN_OR_RETURN(config.name, String(f));
        if (config.name.empty() ||
            config.name.find_first_of("/:") != std::string::npos) {
          return Error(f, absl::StrCat("model name '", config.name,
                                       "' must be non-empty, without '/' "
                                       "or ':'"));
        }
      } else if (f.name == "base_path") {
        COSESSION_ASSIGN_OR_RETURN(config.base_path, String(f));
      } else if (f.name == "model_platform") {
        COSESSION_ASSIGN_OR_RETURN(std::string platform, String(f));
        if (platform != "tensorflow" && platform != "cosession") {
          return Error(f, absl::StrCat("model_platform '", platform,
                                       "': cosession serves \"tensorflow\" "
                                       "(its own exported models)"));
        }
      } else if (f.name == "model_version_policy") {
        if (has_policy) {
          return Error(f, "a second model_version_policy");
        }
        has_policy = true;
        COSESSION_ASSIGN_OR_RETURN(config.version_policy, Policy(f));
      } else if (f.name == "version_labels") {
        labels.push_back(&f);
      } else if (f.name == "logging_config") {
        COSESSION_RETURN_IF_ERROR(Message(f).status());
      } else {
        return Unknown(f, "config");
      }
    }
    if (config.name.empty()) return Error(field, "config has no name");
    if (config.base_path.empty()) {
      return Error(field,
                   absl::StrCat("config '", config.name, "' has no base_path"));
    }
    for (const TextProtoField* f : labels) {
      COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* label, Message(*f));
      std::string key;
      int64_t value = -1;
      for (const TextProtoField& kv : label->fields) {
        if (kv.name == "key") {
          COSESSION_ASSIGN_OR_RETURN(key, String(kv));
        } else if (kv.name == "value") {
          COSESSION_ASSIGN_OR_RETURN(value, Int(kv, 0));
        } else {
          return Unknown(kv, "version_labels");
        }
      }
      if (key.empty() || value < 0) {
        return Error(*f, "version_labels wants a key and a value");
      }
      const ModelVersionPolicy& p = config.version_policy;
      if (p.kind == ModelVersionPolicy::Kind::kSpecific &&
          std::find(p.versions.begin(), p.versions.end(), value) ==
              p.versions.end()) {
        return Error(*f, absl::StrCat("label '", key, "' names version ", value,
                                      " of model '", config.name,
                                      "', which its policy does not serve"));
      }
      if (!config.version_labels.emplace(key, value).second) {
        return Error(*f, absl::StrCat("label '", key, "' is given twice"));
      }
    }
    return config;
  }

 private:
  absl::string_view source_;
};

}  // namespace

absl::StatusOr<std::vector<ModelConfig>> ParseModelServerConfig(
    absl::string_view text, absl::string_view source) {
  COSESSION_ASSIGN_OR_RETURN(TextProtoMessage top,
                             ParseTextProto(text, source));
  ConfigReader reader(source);
  std::vector<ModelConfig> configs;
  std::set<std::string> names;
  for (const TextProtoField& f : top.fields) {
    if (f.name == "custom_model_config") {
      return reader.Error(f,
                          "custom_model_config is not supported: cosession "
                          "serves its own exported models (model_config_list)");
    }
    if (f.name != "model_config_list") {
      return reader.Unknown(f, "ModelServerConfig");
    }
    COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* list, reader.Message(f));
    for (const TextProtoField& c : list->fields) {
      if (c.name != "config") return reader.Unknown(c, "model_config_list");
      COSESSION_ASSIGN_OR_RETURN(ModelConfig config, reader.Config(c));
      if (!names.insert(config.name).second) {
        return reader.Error(c, absl::StrCat("model name '", config.name,
                                            "' is configured twice"));
      }
      configs.push_back(std::move(config));
    }
  }
  if (configs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": no model (model_config_list { config { name: "
                     "... base_path: ... } })"));
  }
  return configs;
}

std::vector<int64_t> VersionsToServe(const ModelVersionPolicy& policy,
                                     const std::vector<int64_t>& available) {
  switch (policy.kind) {
    case ModelVersionPolicy::Kind::kAll:
      return available;
    case ModelVersionPolicy::Kind::kSpecific: {
      std::vector<int64_t> served;
      for (int64_t v : available) {
        if (std::find(policy.versions.begin(), policy.versions.end(), v) !=
            policy.versions.end()) {
          served.push_back(v);
        }
      }
      return served;
    }
    case ModelVersionPolicy::Kind::kLatest:
      break;
  }
  const size_t n =
      std::min(available.size(), static_cast<size_t>(policy.num_versions));
  return std::vector<int64_t>(available.end() - static_cast<ptrdiff_t>(n),
                              available.end());
}

}  // namespace cosession
