#include "examples/flags_usage.h"

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cosession {

void SetFlagsUsage(std::string program, std::string source_file) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [source_file](absl::string_view file) {
    return absl::EndsWith(file, source_file);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [program] {
    return absl::StrCat(program, " (cosession ", COSESSION_VERSION, ")\n");
  };
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace cosession
