// TensorFlow Serving's --model_config_file: the ModelServerConfig text
// format into ModelConfigs, the errors naming the file, line and field,
// and which versions each policy serves.
#include "cosession/serving/model_server_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cosession/serving/text_proto.h"

namespace cosession::model_server_config_test {
namespace {

TEST(ModelServerConfig, ReadsModelsPoliciesAndLabels) {
  auto configs = ParseModelServerConfig(R"(
# two models
model_config_list {
  config {
    name: 'digits'
    base_path: "/models/digits"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 3 } }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 3 }
  }
  config: { name: "all", base_path: "/m/all", model_version_policy: { all {} } }
  config < name: "two" base_path: '/m/it\'s' model_version_policy {
             latest { num_versions: 2 } } >
  config { name: "plain" base_path: "/m/plain"
           model_version_policy { specific { versions: [4, 5] } } }
}
)",
                                        "models.config");
  ASSERT_TRUE(configs.ok()) << configs.status();
  ASSERT_EQ(configs->size(), 4u);
  const ModelConfig& digits = (*configs)[0];
  EXPECT_EQ(digits.name, "digits");
  EXPECT_EQ(digits.base_path, "/models/digits");
  EXPECT_EQ(digits.version_policy.kind, ModelVersionPolicy::Kind::kSpecific);
  EXPECT_EQ(digits.version_policy.versions, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(digits.version_labels.at("stable"), 1);
  EXPECT_EQ(digits.version_labels.at("canary"), 3);
  EXPECT_EQ((*configs)[1].version_policy.kind, ModelVersionPolicy::Kind::kAll);
  EXPECT_EQ((*configs)[2].base_path, "/m/it's");
  EXPECT_EQ((*configs)[2].version_policy.kind,
            ModelVersionPolicy::Kind::kLatest);
  EXPECT_EQ((*configs)[2].version_policy.num_versions, 2);
  EXPECT_EQ((*configs)[3].version_policy.versions,
            (std::vector<int64_t>{4, 5}));
}

TEST(ModelServerConfig, ErrorsNameTheFileTheLineAndTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model_config_list { config { name: 'a' base_path: '/a' }\n"
       "  config { name: 'b' base_path: '/b' bath_path: '/c' } }",
       "c.txt:2: unknown field 'bath_path' of config"},
      {"model_config_list { config { name: 'a' base_path: '/a' } }\n"
       "model_config_list { config { name: 'a' base_path: '/b' } }",
       "c.txt:2: model name 'a' is configured twice"},
      {"model_config_list { config { name: 'a' } }",
       "config 'a' has no base_path"},
      {"model_config_list { config { base_path: '/a' } }",
       "config has no name"},
      {"model_config_list { config { name: 'a/b' base_path: '/a' } }",
       "model name 'a/b' must be non-empty, without '/' or ':'"},
      {"model_config_list { config { name: 'a' base_path: '/a'\n"
       "  model_version_policy { all {} }\n"
       "  model_version_policy { all {} } } }",
       "c.txt:3: a second model_version_policy"},
      {"model_config_list { config { name: 'a' base_path: '/a'\n"
       "  model_version_policy { newest {} } } }",
       "c.txt:2: unknown field 'newest' of model_version_policy"},
      {"model_config_list { config { name: 'a' base_path: '/a'\n"
       "  model_version_policy { latest { num_versions: 0 } } } }",
       "field 'num_versions' wants an integer >= 1, got '0'"},
      {"model_config_list { config { name: 'a' base_path: '/a'\n"
       "  model_version_policy { specific { versions: 1 } }\n"
       "  version_labels { key: 'canary' value: 2 } } }",
       "c.txt:3: label 'canary' names version 2 of model 'a', which its "
       "policy does not serve"},
      {"model_config_list { config { name: 'a' base_path: '/a'\n"
       "  model_platform: 'pytorch' } }",
       "c.txt:2: model_platform 'pytorch'"},
      {"custom_model_config { }", "custom_model_config is not supported"},
      {"model_config_list { config { name: 'a\n base_path: '/a' } }",
       "c.txt:1: field 'name': unterminated string"},
      {"model_config_list { config { name: 'a' base_path: '/a' }",
       "missing '}'"},
      {"model_config_list { config { name 'a' } }",
       "field 'name' wants ':' or '{'"},
      {"", "no model"},
      {std::string(40, '{'), "expected a field name"},
      {"a {" + std::string(40, ' ') + "}", "unknown field 'a'"},
  };
  for (const auto& [text, message] : cases) {
    auto configs = ParseModelServerConfig(text, "c.txt");
    ASSERT_FALSE(configs.ok()) << text;
    EXPECT_EQ(configs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(configs.status().message(), message))
        << text << "\n  got: " << configs.status().message();
  }
  // Nesting is bounded: no stack to exhaust.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "m { ";
  auto parsed = ParseTextProto(deep, "deep");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StrContains(parsed.status().message(),
                                "nested deeper than 32 levels"))
      << parsed.status();
}

TEST(ModelServerConfig, EachPolicyServesItsVersions) {
  const std::vector<int64_t> available{1, 2, 5, 9};
  ModelVersionPolicy latest;
  EXPECT_EQ(VersionsToServe(latest, available), (std::vector<int64_t>{9}));
  latest.num_versions = 3;
  EXPECT_EQ(VersionsToServe(latest, available),
            (std::vector<int64_t>{2, 5, 9}));
  latest.num_versions = 10;
  EXPECT_EQ(VersionsToServe(latest, available), available);
  ModelVersionPolicy all{.kind = ModelVersionPolicy::Kind::kAll};
  EXPECT_EQ(VersionsToServe(all, available), available);
  ModelVersionPolicy specific{.kind = ModelVersionPolicy::Kind::kSpecific,
                              .versions = {9, 3, 1}};
  EXPECT_EQ(VersionsToServe(specific, available), (std::vector<int64_t>{1, 9}));
  EXPECT_TRUE(VersionsToServe(latest, {}).empty());
}

}  // namespace
}  // namespace cosession::model_server_config_test
