// ModelConfig: which models a server serves, from where, which of their
// versions, and the labels naming versions -- TensorFlow Serving's
// ModelServerConfig, read from its text format (--model_config_file):
//
//   model_config_list {
//     config {
//       name: 'digits'
//       base_path: '/models/digits'
//       model_platform: 'tensorflow'
//       model_version_policy { specific { versions: 1 versions: 2 } }
//       version_labels { key: 'stable' value: 1 }
//       version_labels { key: 'canary' value: 2 }
//     }
//     config { name: 'other' base_path: '/models/other' }
//   }
//
// model_version_policy is one of `latest { num_versions: N }` (the N
// highest versions; the default, with N = 1), `all {}` and
// `specific { versions: ... }`. model_platform may be "tensorflow" (what
// TensorFlow Serving's files say) or "cosession"; logging_config is
// accepted and not used. Errors: InvalidArgument "<file>:<line>: ..."
// naming the field: an unknown field, a second policy, a duplicate model
// name, a name with '/' or ':', a missing name or base_path, a label on a
// version a specific policy does not serve, custom_model_config (which
// names platforms cosession does not have).
// Thread safety: pure functions and plain values.
#ifndef COSESSION_SERVING_MODEL_SERVER_CONFIG_H_
#define COSESSION_SERVING_MODEL_SERVER_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosession {

struct ModelVersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t num_versions = 1;         // kLatest
  std::vector<int64_t> versions{};  // kSpecific
};

struct ModelConfig {
  std::string name{};
  std::string base_path{};
  ModelVersionPolicy version_policy{};
  std::map<std::string, int64_t> version_labels{};
};

absl::StatusOr<std::vector<ModelConfig>> ParseModelServerConfig(
    absl::string_view text, absl::string_view source);

// The versions `policy` serves out of `available` (ascending), ascending.
std::vector<int64_t> VersionsToServe(const ModelVersionPolicy& policy,
                                     const std::vector<int64_t>& available);

}  // namespace cosession

#endif  // COSESSION_SERVING_MODEL_SERVER_CONFIG_H_
