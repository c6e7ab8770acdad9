#include "cosession/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cosession {
namespace {

constexpr absl::string_view kTempMarker = ".tmp.";

absl::Status ErrnoError(int error, absl::string_view what,
                        const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " '", path, "'"));
}

// Closes the descriptor on every path out.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::string_view DirName(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteAll(int fd, absl::Span<const absl::string_view> pieces,
                      const std::string& path) {
  // writev in batches of at most IOV_MAX pieces, resuming after short
  // writes (Linux writes at most ~2 GB per call).
  std::vector<iovec> iov;
  size_t next = 0;        // first piece not fully written
  size_t written_of = 0;  // bytes of pieces[next] already written
  while (next < pieces.size()) {
    iov.clear();
    for (size_t i = next; i < pieces.size() && iov.size() < IOV_MAX; ++i) {
      size_t skip = i == next ? written_of : 0;
      if (pieces[i].size() == skip) continue;
      iov.push_back({const_cast<char*>(pieces[i].data()) + skip,
                     pieces[i].size() - skip});
    }
    if (iov.empty()) break;
    ssize_t n = ::writev(fd, iov.data(), static_cast<int>(iov.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write", path);
    }
    size_t left = static_cast<size_t>(n);
    while (next < pieces.size() && left >= pieces[next].size() - written_of) {
      left -= pieces[next].size() - written_of;
      ++next;
      written_of = 0;
    }
    written_of += left;
  }
  return absl::OkStatus();
}

absl::Status FsyncDirectory(absl::string_view dir) {
  std::string d(dir);
  FileDescriptor fd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "cannot open directory", d);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) {
    return ErrnoError(errno, "cannot fsync directory", d);
  }
  return absl::OkStatus();
}

// "<path>.tmp.<pid>.<n>": unique among this process's writers, and
// recognisable by RemoveStaleTempFiles once the process is gone.
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, kTempMarker, ::getpid(), ".", counter.fetch_add(1));
}

}  // namespace

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer =
      AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(pieces); !s.ok()) return s;
  return (*writer)->Commit(AtomicFileWriter::Existing::kReplace);
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    std::string path) {
  std::string temp = TempPathFor(path);
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", temp);
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(std::move(path), std::move(temp), fd));
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp, int fd)
    : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

absl::Status AtomicFileWriter::Append(
    absl::Span<const absl::string_view> pieces) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", temp_, "' was committed or failed to close"));
  }
  return WriteAll(fd_, pieces, temp_);
}

absl::Status AtomicFileWriter::Commit(Existing existing) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", temp_, "' was committed or failed to close"));
  }
  if (::fsync(fd_) != 0) return ErrnoError(errno, "cannot fsync", temp_);
  // close can report a deferred write error on some file systems.
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return ErrnoError(errno, "cannot close", temp_);
  if (existing == Existing::kReplace) {
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
      return ErrnoError(errno, absl::StrCat("cannot rename '", temp_, "' to"),
                        path_);
    }
    committed_ = true;
  } else {
    if (::link(temp_.c_str(), path_.c_str()) != 0 && errno != EEXIST) {
      return ErrnoError(errno, absl::StrCat("cannot link '", temp_, "' to"),
                        path_);
    }
    // Linked, or another writer's file stands: either way the temporary
    // name goes.
    ::unlink(temp_.c_str());
    committed_ = true;
  }
  return FsyncDirectory(DirName(path_));
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return ErrnoError(errno, "cannot stat", path);
  std::string contents;
  if (st.st_size > 0) contents.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot read", path);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  return contents;
}

absl::Status RemoveFileIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "cannot remove", path);
  }
  return absl::OkStatus();
}

void RemoveStaleTempFiles(const std::string& dir,
                          absl::string_view name_prefix) {
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (d == nullptr) return;
  const std::string own_pid = absl::StrCat(::getpid());
  std::vector<std::string> stale;
  while (dirent* entry = ::readdir(d)) {
    absl::string_view name(entry->d_name);
    if (name.substr(0, name_prefix.size()) != name_prefix) continue;
    size_t marker = name.rfind(kTempMarker);
    if (marker == absl::string_view::npos) continue;
    // "<name>.tmp.<pid>.<n>"
    std::vector<absl::string_view> parts = absl::StrSplit(
        name.substr(marker + kTempMarker.size()), absl::MaxSplits('.', 1));
    uint64_t pid, n;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid) ||
        !absl::SimpleAtoi(parts[1], &n) || parts[0] == own_pid) {
      continue;
    }
    stale.emplace_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) {
    RemoveFileIfExists(JoinPath(dir, name)).IgnoreError();
  }
}

}  // namespace cosession
