#include "cosession/serving/monitoring_config.h"

#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"
#include "cosession/serving/text_proto.h"

namespace cosession {
namespace {

// A bool as protobuf's text format writes it.
absl::StatusOr<bool> TextProtoBool(const TextProtoField& field,
                                   absl::string_view source) {
  if (field.message == nullptr && !field.quoted) {
    const std::string& v = field.scalar;
    if (v == "true" || v == "True" || v == "t" || v == "1") return true;
    if (v == "false" || v == "False" || v == "f" || v == "0") return false;
  }
  return TextProtoError(
      source, field.line,
      absl::StrCat("field '", field.name, "' must be true or false"));
}

}  // namespace

absl::StatusOr<MonitoringConfig> ParseMonitoringConfig(
    absl::string_view text, absl::string_view source) {
  COSESSION_ASSIGN_OR_RETURN(TextProtoMessage message,
                             ParseTextProto(text, source));
  bool enable = false;
  std::string path;
  bool seen = false;
  for (const TextProtoField& f : message.fields) {
    if (f.name != "prometheus_config") {
      return TextProtoUnknownField(f, "MonitoringConfig", source);
    }
    if (seen) {
      return TextProtoError(source, f.line,
                            "field 'prometheus_config' given twice");
    }
    seen = true;
    COSESSION_ASSIGN_OR_RETURN(const TextProtoMessage* prometheus,
                               TextProtoSubmessage(f, source));
    for (const TextProtoField& p : prometheus->fields) {
      if (p.name == "enable") {
        COSESSION_ASSIGN_OR_RETURN(enable, TextProtoBool(p, source));
      } else if (p.name == "path") {
        COSESSION_ASSIGN_OR_RETURN(path, TextProtoString(p, source));
        if (!path.empty() && path[0] != '/') {
          return TextProtoError(
              source, p.line,
              absl::StrCat("path '", path, "' must start with '/'"));
        }
      } else {
        return TextProtoUnknownField(p, "PrometheusConfig", source);
      }
    }
  }
  MonitoringConfig config;
  if (enable)
    config.prometheus_path = path.empty() ? kDefaultPrometheusPath : path;
  return config;
}

}  // namespace cosession
