// ExitOnUnparsableFlags: the command-line check the example programs
// (cosession_train, cosession_serve) run before absl::ParseCommandLine.
//
// absl's parser exits with 1 on a flag it cannot parse and names unknown
// flags only as a whole; a usage error is exit code 2 here (as for the
// shell's own commands), with a message naming the flag:
//   cosession_serve: --rest_api_port=x: Illegal value 'x' ... (see --help)
// Every "--name=value" is parsed first, through the flag's own parser.
// Thread safety: call once, from main, before other threads start.
#ifndef COSESSION_EXAMPLES_STRICT_FLAGS_H_
#define COSESSION_EXAMPLES_STRICT_FLAGS_H_

namespace cosession {

void ExitOnUnparsableFlags(const char* program, int argc, char** argv);

}  // namespace cosession

#endif  // COSESSION_EXAMPLES_STRICT_FLAGS_H_
