#include "examples/strict_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cosession {

void ExitOnUnparsableFlags(const char* program, int argc, char** argv) {
  auto fail = [program](const std::string& message) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, message.c_str());
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      fail(absl::StrCat("unexpected argument '", argv[i], "'"));
    }
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    if (absl::StartsWith(name, "help") || name == "version" ||
        name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
        name == "undefok" || name == "only_check_args") {
      if (eq == absl::string_view::npos && !absl::StartsWith(name, "help") &&
          name != "version" && name != "only_check_args") {
        ++i;  // "--flagfile file"
      }
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") &&
        eq == absl::string_view::npos) {
      absl::CommandLineFlag* negated =
          absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) fail(absl::StrCat("unknown flag --", name));
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fail(absl::StrCat("--", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      fail(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
}

}  // namespace cosession
