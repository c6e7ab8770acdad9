// SetFlagsUsage: what --help and --version of an example program
// (cosession_train, cosession_serve) print.
//
// --help lists the flags defined in `source_file` (absl's default looks for
// files named after the program, and finds none); --version prints
// "<program> (cosession <version>)", the version being the CMake project's
// (absl's default prints whether absl itself was built with NDEBUG, which
// says nothing about the program).
// Thread safety: call once, from main, before the flags are parsed.
#ifndef COSESSION_EXAMPLES_FLAGS_USAGE_H_
#define COSESSION_EXAMPLES_FLAGS_USAGE_H_

#include <string>

namespace cosession {

void SetFlagsUsage(std::string program, std::string source_file);

}  // namespace cosession

#endif  // COSESSION_EXAMPLES_FLAGS_USAGE_H_
