// Crash-safe file writes for checkpoints and their state file.
//
// WriteFileAtomically(path, pieces) writes the concatenation of `pieces` to a
// temporary file in the same directory ("<path>.tmp.<pid>.<n>"), fsyncs it,
// renames it over `path` and fsyncs the directory. A crash (or SIGKILL) at any
// instant leaves either the old file or the new one under `path`, never a
// mix; at worst a stray temporary file stays behind (RemoveStaleTempFiles
// cleans those of dead writers). On failure the temporary file is removed and
// `path` is untouched.
//
// Errors carry the errno's canonical code (absl::ErrnoToStatus) and name the
// path. Thread safety: thread-safe; concurrent writers of one path each
// produce a whole file, the last rename wins.
#ifndef COSESSION_IO_ATOMIC_FILE_H_
#define COSESSION_IO_ATOMIC_FILE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cosession {

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces);
inline absl::Status WriteFileAtomically(const std::string& path,
                                        absl::string_view contents) {
  return WriteFileAtomically(path, absl::MakeConstSpan(&contents, 1));
}

// WriteFileAtomically for contents that come piece by piece (a dataset
// cached in a file while its elements pass): Create opens the temporary
// file ("<path>.tmp.<pid>.<n>", as above), Append writes to it, Commit
// fsyncs it and puts it under `path`, then fsyncs the directory. Destroyed
// without a successful Commit, it removes the temporary file: `path` never
// holds part of the contents. Blocking I/O; errors as above.
// Thread-compatible.
class AtomicFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(
      std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Appends the concatenation of `pieces` (one writev per batch).
  absl::Status Append(absl::Span<const absl::string_view> pieces);
  absl::Status Append(absl::string_view bytes) {
    return Append(absl::MakeConstSpan(&bytes, 1));
  }

  // What Commit does when `path` exists already: kReplace renames over it
  // (as WriteFileAtomically); kKeepExisting keeps it, drops the file
  // written and returns OK -- the first of several writers of the same
  // contents wins, atomically (link(2) never replaces).
  enum class Existing { kReplace, kKeepExisting };
  absl::Status Commit(Existing existing);

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp, int fd);
  std::string path_;
  std::string temp_;
  int fd_;
  bool committed_ = false;
};

// The whole file. NotFound when it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Removes `path`; OK when it did not exist.
absl::Status RemoveFileIfExists(const std::string& path);

// Removes the temporary files that WriteFileAtomically left in `dir` for
// files whose names start with `name_prefix`, written by processes other
// than this one (a writer killed mid-write). Best effort: errors are
// ignored.
void RemoveStaleTempFiles(const std::string& dir,
                          absl::string_view name_prefix);

// "dir/name" (no doubled slash; `dir` empty = `name`).
std::string JoinPath(absl::string_view dir, absl::string_view name);

}  // namespace cosession

#endif  // COSESSION_IO_ATOMIC_FILE_H_
