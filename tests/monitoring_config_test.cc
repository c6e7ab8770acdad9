// --monitoring_config_file (serving/monitoring_config.h): TensorFlow
// Serving's MonitoringConfig text format, and the errors naming the line.
#include "cosession/serving/monitoring_config.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace cosession::monitoring_config_test {
namespace {

std::string PathOf(absl::string_view text) {
  absl::StatusOr<MonitoringConfig> config =
      ParseMonitoringConfig(text, "monitoring.config");
  EXPECT_TRUE(config.ok()) << text << ": " << config.status();
  return config.ok() ? config->prometheus_path : "<error>";
}

TEST(MonitoringConfig, ThePrometheusPageIsOnlyWhereEnabled) {
  EXPECT_EQ(PathOf("prometheus_config { enable: true }"),
            kDefaultPrometheusPath);
  EXPECT_EQ(PathOf("prometheus_config {\n  enable: true,\n"
                   "  path: \"/monitoring/prometheus/metrics\"\n}\n"),
            "/monitoring/prometheus/metrics");
  EXPECT_EQ(PathOf("prometheus_config: { enable: t path: '/m' }"), "/m");
  EXPECT_EQ(PathOf("prometheus_config { enable: false path: '/m' }"), "");
  EXPECT_EQ(PathOf("prometheus_config { path: '/m' }"), "");
  EXPECT_EQ(PathOf("# nothing enabled\n"), "");
}

TEST(MonitoringConfig, MistakesNameTheFileAndLine) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"prometheus_config { enable: yes }",
       "monitoring.config:1: field 'enable' must be true or false"},
      {"prometheus_config {\n enable: true\n path: 'metrics' }",
       "monitoring.config:3: path 'metrics' must start with '/'"},
      {"prometheus_config { enable: true }\nprometheus_config { }",
       "monitoring.config:2: field 'prometheus_config' given twice"},
      {"prometheus_config { enable: true port: 9 }",
       "monitoring.config:1: unknown field 'port' of PrometheusConfig"},
      {"\n\nstackdriver_config { }",
       "monitoring.config:3: unknown field 'stackdriver_config' of "
       "MonitoringConfig"},
      {"prometheus_config { enable: true", "monitoring.config:1:"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<MonitoringConfig> config =
        ParseMonitoringConfig(c.text, "monitoring.config");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(config.status())) << c.text;
    EXPECT_TRUE(absl::StrContains(config.status().message(), c.message))
        << c.text << ": " << config.status();
  }
}

}  // namespace
}  // namespace cosession::monitoring_config_test
