#include "cosession/io/maybe_gzip_file.h"

#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

constexpr uint8_t kGzipMagic0 = 0x1f;
constexpr uint8_t kGzipMagic1 = 0x8b;

const char* InflateErrorText(int code) {
  switch (code) {
    case ISAL_INVALID_BLOCK:
      return "invalid deflate block";
    case ISAL_INVALID_SYMBOL:
      return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK:
      return "a back-reference before the start of the data";
    case ISAL_INVALID_WRAPPER:
      return "invalid gzip header";
    case ISAL_UNSUPPORTED_METHOD:
      return "unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM:
      return "CRC-32 or length mismatch";
    default:
      return "inflate failed";
  }
}

}  // namespace

// The file descriptor, the input read from it and not yet consumed, and,
// for a gzip stream, the inflater's state (87 KB, so only then).
struct MaybeGzipFile::Reader {
  enum class Kind { kUndecided, kPlain, kGzip, kEnded };

  explicit Reader(int descriptor, size_t buffer_bytes)
      : fd(descriptor), input(std::max<size_t>(buffer_bytes, 64)) {}
  ~Reader() { ::close(fd); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  size_t buffered() const { return end - begin; }
  const uint8_t* next() const { return input.data() + begin; }

  // Reads more input after what is buffered (moved to the front first);
  // sets `eof` at the end of the file.
  absl::Status Fill(const std::string& path) {
    if (eof) return absl::OkStatus();
    if (begin > 0) {
      std::memmove(input.data(), input.data() + begin, buffered());
      end -= begin;
      begin = 0;
    }
    if (end == input.size()) return absl::OkStatus();
    ssize_t n;
    do {
      n = ::read(fd, input.data() + end, input.size() - end);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::ErrnoToStatus(errno, path);
    if (n == 0) eof = true;
    end += static_cast<size_t>(n);
    return absl::OkStatus();
  }

  // At least `n` bytes buffered, or all that is left of the file.
  absl::Status FillTo(size_t n, const std::string& path) {
    while (buffered() < n && !eof) {
      if (absl::Status s = Fill(path); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  bool StartsGzipMember() const {
    return buffered() >= 2 && next()[0] == kGzipMagic0 &&
           next()[1] == kGzipMagic1;
  }

  // Starts inflating a member at the buffered input.
  void StartMember() {
    if (inflater == nullptr) inflater = std::make_unique<inflate_state>();
    isal_inflate_init(inflater.get());
    inflater->crc_flag = ISAL_GZIP;  // parse the header, check the trailer
    kind = Kind::kGzip;
  }

  int fd;
  std::vector<uint8_t> input;
  size_t begin = 0;  // [begin, end) is read and not yet consumed
  size_t end = 0;
  bool eof = false;
  Kind kind = Kind::kUndecided;
  std::unique_ptr<inflate_state> inflater;
};

MaybeGzipFile::MaybeGzipFile(std::string path, std::unique_ptr<Reader> reader)
    : path_(std::move(path)), reader_(std::move(reader)) {}
MaybeGzipFile::MaybeGzipFile(MaybeGzipFile&& other) noexcept = default;
MaybeGzipFile& MaybeGzipFile::operator=(MaybeGzipFile&& other) noexcept =
    default;
MaybeGzipFile::~MaybeGzipFile() = default;

absl::StatusOr<MaybeGzipFile> MaybeGzipFile::Open(const std::string& path,
                                                  size_t buffer_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  std::unique_ptr<Reader> reader;
  try {
    reader = std::make_unique<Reader>(fd, buffer_bytes);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate the read buffer"));
  }
  return MaybeGzipFile(path, std::move(reader));
}

absl::StatusOr<size_t> MaybeGzipFile::Read(char* data, size_t size) {
  Reader& r = *reader_;
  if (size == 0) return 0;
  if (r.kind == Reader::Kind::kUndecided) {
    if (absl::Status s = r.FillTo(2, path_); !s.ok()) return s;
    try {
      if (r.StartsGzipMember()) {
        r.StartMember();
      } else {
        r.kind = Reader::Kind::kPlain;
      }
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path_, ": cannot allocate the gzip inflater"));
    }
  }
  if (r.kind == Reader::Kind::kEnded) return 0;
  if (r.kind == Reader::Kind::kPlain) {
    if (r.buffered() == 0) {
      if (absl::Status s = r.Fill(path_); !s.ok()) return s;
    }
    const size_t n = std::min(size, r.buffered());
    std::memcpy(data, r.next(), n);
    r.begin += n;
    return n;
  }

  inflate_state& inflater = *r.inflater;
  const size_t want =
      std::min<size_t>(size, std::numeric_limits<uint32_t>::max());
  while (true) {
    if (inflater.block_state == ISAL_BLOCK_FINISH) {
      // The member ended (its trailer checked): another one, or the end.
      if (absl::Status s = r.FillTo(2, path_); !s.ok()) return s;
      if (!r.StartsGzipMember()) {
        r.kind = Reader::Kind::kEnded;
        return 0;
      }
      r.StartMember();
    }
    if (r.buffered() == 0) {
      if (absl::Status s = r.Fill(path_); !s.ok()) return s;
    }
    inflater.next_in = const_cast<uint8_t*>(r.next());
    inflater.avail_in = static_cast<uint32_t>(r.buffered());
    inflater.next_out = reinterpret_cast<uint8_t*>(data);
    inflater.avail_out = static_cast<uint32_t>(want);
    const int code = isal_inflate(&inflater);
    const size_t consumed = r.buffered() - inflater.avail_in;
    const size_t produced = want - inflater.avail_out;
    r.begin += consumed;
    if (code < 0) {
      return absl::DataLossError(
          absl::StrCat(path_, ": corrupt gzip data: ", InflateErrorText(code)));
    }
    if (produced > 0) return produced;
    if (inflater.block_state == ISAL_BLOCK_FINISH || consumed > 0) continue;
    // No progress: the inflater needs more input than is buffered.
    if (r.eof) {
      return absl::DataLossError(
          absl::StrCat(path_, ": corrupt gzip data: the stream is truncated"));
    }
    if (r.buffered() == r.input.size()) {
      // A full buffer it takes nothing from: it cannot move on.
      return absl::DataLossError(
          absl::StrCat(path_, ": corrupt gzip data: ", InflateErrorText(0)));
    }
    if (absl::Status s = r.Fill(path_); !s.ok()) return s;
  }
}

}  // namespace cosession
