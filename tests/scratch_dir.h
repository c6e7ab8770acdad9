// ScratchDir: a fresh directory under the system's temp directory, removed
// with everything in it when the object goes away. For tests that write
// files (checkpoints, event files, traces).
#ifndef COSESSION_TESTS_SCRATCH_DIR_H_
#define COSESSION_TESTS_SCRATCH_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace cosession::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "cosession_test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX"))
            .string();
    const char* made = ::mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Empty if the directory could not be made.
  const std::string& path() const { return path_; }
  // The path of `name` inside it.
  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_SCRATCH_DIR_H_
