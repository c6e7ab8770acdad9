// TensorFlow Serving's --monitoring_config_file: a MonitoringConfig message
// in text format, of which the Prometheus page is what a REST server has:
//
//   prometheus_config {
//     enable: true
//     path: "/monitoring/prometheus/metrics"   # optional: this default
//   }
//
// As in TensorFlow Serving, a file without `enable: true` turns the page
// off, and an empty path means the default one. (cosession_serve without
// the flag serves the page at the default path: its metrics are part of
// what it promises.) The message's other fields are not known to
// cosession and are refused, naming the line, rather than ignored.
//
// Thread safety: a pure function.
#ifndef COSESSION_SERVING_MONITORING_CONFIG_H_
#define COSESSION_SERVING_MONITORING_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosession {

inline constexpr char kDefaultPrometheusPath[] =
    "/monitoring/prometheus/metrics";

struct MonitoringConfig {
  // Where the Prometheus page is served; empty: nowhere.
  std::string prometheus_path{};
};

// Parses the file's `text`; `source` names it in errors
// ("<source>:<line>: ...", InvalidArgument).
absl::StatusOr<MonitoringConfig> ParseMonitoringConfig(
    absl::string_view text, absl::string_view source);

}  // namespace cosession

#endif  // COSESSION_SERVING_MONITORING_CONFIG_H_
