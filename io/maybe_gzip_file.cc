#include "cosession/io/maybe_gzip_file.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cosession {
namespace {

constexpr uint8_t kGzipMagic0 = 0x1f;
constexpr uint8_t kGzipMagic1 = 0x8b;
constexpr uint8_t kMethodDeflate = 8;
// A member header's flags (RFC 1952, 2.3.1).
constexpr uint8_t kFlagHeaderCrc = 0x02;
constexpr uint8_t kFlagExtra = 0x04;
constexpr uint8_t kFlagName = 0x08;
constexpr uint8_t kFlagComment = 0x10;
constexpr uint8_t kFlagsReserved = 0xe0;

// RFC 1950's header: CMF (method and window) and FLG.
constexpr uint8_t kZlibMethodMask = 0x0f;
constexpr uint8_t kZlibMaxWindowBits = 7;  // CINFO: a 32 KiB window
constexpr uint8_t kZlibFlagDictionary = 0x20;

// Room kept before the unconsumed input for the bytes the inflater read
// ahead past a stream's end (at most its 64-bit bit buffer), put back
// there for the next stream.
constexpr size_t kUnreadRoom = sizeof(uint64_t);

absl::Status Corrupt(const std::string& path, absl::string_view format,
                     absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat(path, ": corrupt ", format, " data: ", what));
}

}  // namespace

// The file descriptor (or the bytes in memory), the input read from it and
// not yet consumed, and, for a gzip stream, the inflater's state (87 KB, so
// only then).
struct MaybeGzipFile::Reader {
  enum class Kind { kUndecided, kPlain, kGzip, kZlib, kEnded };

  Reader(int descriptor, size_t buffer_bytes, FileCompression compression,
         PlainPrefix plain_prefix)
      : fd(descriptor),
        input(kUnreadRoom + std::max<size_t>(buffer_bytes, 64)),
        compression(compression),
        plain_prefix(plain_prefix) {}
  // Bytes in memory, copied into `input` a buffer at a time as a file's
  // would be read, so that both take the same paths.
  explicit Reader(absl::string_view bytes)
      : fd(-1),
        memory(bytes),
        input(kUnreadRoom + (size_t{1} << 16)),
        compression(FileCompression::kDetect),
        plain_prefix() {}
  ~Reader() {
    if (fd >= 0) ::close(fd);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  size_t buffered() const { return end - begin; }
  size_t capacity() const { return input.size() - kUnreadRoom; }
  absl::string_view format() const {
    return kind == Kind::kZlib ? "zlib" : "gzip";
  }
  absl::Status Corrupt(const std::string& path, absl::string_view what) const {
    return cosession::Corrupt(path, format(), what);
  }
  absl::Status Truncated(const std::string& path) const {
    return Corrupt(path, "the stream is truncated");
  }
  absl::Status InflateError(const std::string& path, int code) const {
    switch (code) {
      case ISAL_INVALID_BLOCK:
        return Corrupt(path, "invalid deflate block");
      case ISAL_INVALID_SYMBOL:
        return Corrupt(path, "invalid deflate symbol");
      case ISAL_INVALID_LOOKBACK:
        return Corrupt(path, "a back-reference before the start of the data");
      case ISAL_INCORRECT_CHECKSUM:
        return Corrupt(path, kind == Kind::kZlib ? "Adler-32 mismatch"
                                                 : "CRC-32 or length mismatch");
      default:
        return Corrupt(path, "inflate failed");
    }
  }
  const uint8_t* next() const { return input.data() + begin; }

  // Reads more input after what is buffered (moved to the front first);
  // sets `eof` at the end of the file.
  absl::Status Fill(const std::string& path) {
    if (eof) return absl::OkStatus();
    if (begin > kUnreadRoom) {
      std::memmove(input.data() + kUnreadRoom, next(), buffered());
      end = kUnreadRoom + buffered();
      begin = kUnreadRoom;
    }
    if (end == input.size()) return absl::OkStatus();
    ssize_t n;
    if (fd < 0) {
      const size_t k = std::min(input.size() - end, memory.size());
      if (k > 0) std::memcpy(input.data() + end, memory.data(), k);
      memory.remove_prefix(k);
      n = static_cast<ssize_t>(k);
    } else {
      do {
        n = ::read(fd, input.data() + end, input.size() - end);
      } while (n < 0 && errno == EINTR);
    }
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

  // Takes `n` (<= buffered()) bytes of a member's header off the input,
  // adding them to the header's CRC.
  void ConsumeHeader(size_t n) {
    header_crc = crc32_gzip_refl(header_crc, next(), n);
    begin += n;
  }

  // Takes `n` header bytes off the input, reading as needed.
  absl::Status SkipHeaderBytes(size_t n, const std::string& path) {
    while (n > 0) {
      if (absl::Status s = FillTo(1, path); !s.ok()) return s;
      if (buffered() == 0) return Truncated(path);
      const size_t k = std::min(n, buffered());
      ConsumeHeader(k);
      n -= k;
    }
    return absl::OkStatus();
  }

  // Takes a zero-terminated header field (a name or comment) off the input.
  absl::Status SkipHeaderString(const std::string& path) {
    while (true) {
      if (absl::Status s = FillTo(1, path); !s.ok()) return s;
      if (buffered() == 0) return Truncated(path);
      const void* zero = std::memchr(next(), 0, buffered());
      if (zero != nullptr) {
        ConsumeHeader(static_cast<const uint8_t*>(zero) - next() + 1);
        return absl::OkStatus();
      }
      ConsumeHeader(buffered());
    }
  }

  // Takes a member's header off the input and checks it as zlib does: the
  // method is deflate, no reserved flag is set, and the header's CRC (when
  // it has one) matches. The header is read here rather than by ISA-L,
  // whose reading of a header split across input buffers differs from its
  // reading of the same header whole (found by
  // fuzz/maybe_gzip_file_fuzzer.cc).
  absl::Status ReadMemberHeader(const std::string& path) {
    if (absl::Status s = FillTo(10, path); !s.ok()) return s;
    if (buffered() < 10) return Truncated(path);
    const uint8_t method = next()[2];
    const uint8_t flags = next()[3];
    if (method != kMethodDeflate) {
      return Corrupt(path, absl::StrCat("unsupported compression method ",
                                        static_cast<int>(method)));
    }
    if ((flags & kFlagsReserved) != 0) {
      return Corrupt(path, "invalid gzip header: reserved flags set");
    }
    header_crc = 0;
    ConsumeHeader(10);
    if ((flags & kFlagExtra) != 0) {
      if (absl::Status s = FillTo(2, path); !s.ok()) return s;
      if (buffered() < 2) return Truncated(path);
      const size_t extra_bytes = next()[0] | (size_t{next()[1]} << 8);
      ConsumeHeader(2);
      if (absl::Status s = SkipHeaderBytes(extra_bytes, path); !s.ok()) {
        return s;
      }
    }
    for (uint8_t field : {kFlagName, kFlagComment}) {
      if ((flags & field) == 0) continue;
      if (absl::Status s = SkipHeaderString(path); !s.ok()) return s;
    }
    if ((flags & kFlagHeaderCrc) != 0) {
      if (absl::Status s = FillTo(2, path); !s.ok()) return s;
      if (buffered() < 2) return Truncated(path);
      const uint32_t stored = next()[0] | (uint32_t{next()[1]} << 8);
      if (stored != (header_crc & 0xffff)) {
        return Corrupt(path, "header CRC mismatch");
      }
      begin += 2;
    }
    return absl::OkStatus();
  }

  absl::Status AllocateInflater(const std::string& path) {
    if (inflater != nullptr) return absl::OkStatus();
    try {
      inflater = std::make_unique<inflate_state>();
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot allocate the ", format(), " inflater"));
    }
    return absl::OkStatus();
  }

  // Reads a member's header and starts inflating the deflate data after it.
  absl::Status StartMember(const std::string& path) {
    kind = Kind::kGzip;
    if (absl::Status s = AllocateInflater(path); !s.ok()) return s;
    if (absl::Status s = ReadMemberHeader(path); !s.ok()) return s;
    isal_inflate_init(inflater.get());
    inflater->crc_flag = ISAL_GZIP_NO_HDR_VER;  // check the trailer
    return absl::OkStatus();
  }

  // Reads a zlib stream's two-byte header, checked as zlib checks it, and
  // starts inflating the deflate data after it.
  absl::Status StartZlibStream(const std::string& path) {
    kind = Kind::kZlib;
    if (absl::Status s = AllocateInflater(path); !s.ok()) return s;
    if (absl::Status s = FillTo(2, path); !s.ok()) return s;
    if (buffered() < 2) return Truncated(path);
    const uint8_t cmf = next()[0];
    const uint8_t flags = next()[1];
    if ((cmf & kZlibMethodMask) != kMethodDeflate) {
      return Corrupt(path, absl::StrCat("unsupported compression method ",
                                        cmf & kZlibMethodMask));
    }
    if ((cmf >> 4) > kZlibMaxWindowBits) {
      return Corrupt(path, "invalid window size");
    }
    if (((cmf << 8) | flags) % 31 != 0) {
      return Corrupt(path, "incorrect header check");
    }
    if ((flags & kZlibFlagDictionary) != 0) {
      return Corrupt(path, "the stream needs a preset dictionary");
    }
    begin += 2;
    isal_inflate_init(inflater.get());
    inflater->crc_flag = ISAL_ZLIB_NO_HDR_VER;  // check the Adler-32
    return absl::OkStatus();
  }

  // Decides how the file is read from its first bytes and the compression
  // asked for; an empty file is ended whatever it was to be.
  absl::Status Start(const std::string& path) {
    if (absl::Status s = FillTo(1, path); !s.ok()) return s;
    if (buffered() == 0) {
      kind = Kind::kEnded;
      return absl::OkStatus();
    }
    switch (compression) {
      case FileCompression::kNone:
        kind = Kind::kPlain;
        return absl::OkStatus();
      case FileCompression::kGzip:
        kind = Kind::kGzip;
        if (absl::Status s = FillTo(2, path); !s.ok()) return s;
        if (!StartsGzipMember()) {
          return Corrupt(path,
                         "not a gzip stream (it does not start with "
                         "gzip's magic number)");
        }
        return StartMember(path);
      case FileCompression::kZlib:
        return StartZlibStream(path);
      case FileCompression::kDetect:
        break;
    }
    // FillTo never asks for more than the buffer holds.
    const size_t look =
        std::min(std::max<size_t>(2, plain_prefix.bytes), capacity());
    if (absl::Status s = FillTo(look, path); !s.ok()) return s;
    const bool plain =
        !StartsGzipMember() || (plain_prefix.matches != nullptr &&
                                plain_prefix.matches(std::string_view(
                                    reinterpret_cast<const char*>(next()),
                                    std::min(buffered(), plain_prefix.bytes))));
    if (plain) {
      kind = Kind::kPlain;
      return absl::OkStatus();
    }
    return StartMember(path);
  }

  // The whole bytes the inflater holds in its bit buffer at a stream's end
  // were read past the stream (ISA-L reads ahead: after a zlib stream's
  // 4-byte trailer up to 4 bytes of what follows); they go back in front
  // of the input, from the bit buffer itself (the input they came from may
  // have been refilled since). There is room: begin is at least
  // kUnreadRoom after a refill, and a stream takes at least 8 bytes (a
  // zlib header, an empty deflate block, the Adler-32) beyond what it read
  // ahead.
  void UnreadInflaterLookahead() {
    const size_t k = static_cast<size_t>(inflater->read_in_length) / 8;
    for (size_t i = k; i > 0; --i) {
      input[--begin] = static_cast<uint8_t>(inflater->read_in >> (8 * (i - 1)));
    }
    inflater->read_in = 0;
    inflater->read_in_length = 0;
  }

  // After a stream's end (its trailer checked): starts the next one, or
  // ends the file.
  absl::Status StartNextStream(const std::string& path) {
    UnreadInflaterLookahead();
    if (kind == Kind::kZlib) {
      if (absl::Status s = FillTo(1, path); !s.ok()) return s;
      if (buffered() == 0) {
        kind = Kind::kEnded;
        return absl::OkStatus();
      }
      return StartZlibStream(path);
    }
    if (absl::Status s = FillTo(2, path); !s.ok()) return s;
    if (!StartsGzipMember()) {
      kind = Kind::kEnded;
      return absl::OkStatus();
    }
    return StartMember(path);
  }

  int fd;                    // -1: reading `memory`
  absl::string_view memory;  // what is left of the bytes read from memory
  std::vector<uint8_t> input;
  // [begin, end) is read and not yet consumed; begin >= kUnreadRoom.
  size_t begin = kUnreadRoom;
  size_t end = kUnreadRoom;
  bool eof = false;
  Kind kind = Kind::kUndecided;
  const FileCompression compression;
  const PlainPrefix plain_prefix;
  uint32_t header_crc = 0;  // of the member header read so far
  absl::Status failed;      // the error Read returned, returned again
  std::unique_ptr<inflate_state> inflater;
};

MaybeGzipFile::MaybeGzipFile(std::string path, std::unique_ptr<Reader> reader)
    : path_(std::move(path)), reader_(std::move(reader)) {}
MaybeGzipFile::MaybeGzipFile(MaybeGzipFile&& other) noexcept = default;
MaybeGzipFile& MaybeGzipFile::operator=(MaybeGzipFile&& other) noexcept =
    default;
MaybeGzipFile::~MaybeGzipFile() = default;

absl::StatusOr<MaybeGzipFile> MaybeGzipFile::Open(const std::string& path,
                                                  size_t buffer_bytes,
                                                  FileCompression compression,
                                                  PlainPrefix plain_prefix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  std::unique_ptr<Reader> reader;
  try {
    reader =
        std::make_unique<Reader>(fd, buffer_bytes, compression, plain_prefix);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate the read buffer"));
  }
  return MaybeGzipFile(path, std::move(reader));
}

MaybeGzipFile MaybeGzipFile::OpenBytes(std::string name,
                                       absl::string_view bytes) {
  return MaybeGzipFile(std::move(name), std::make_unique<Reader>(bytes));
}

absl::StatusOr<size_t> MaybeGzipFile::Read(char* data, size_t size) {
  if (!reader_->failed.ok()) return reader_->failed;
  absl::StatusOr<size_t> n = ReadOnce(data, size);
  if (!n.ok()) reader_->failed = n.status();
  return n;
}

absl::StatusOr<size_t> MaybeGzipFile::ReadOnce(char* data, size_t size) {
  Reader& r = *reader_;
  if (size == 0) return 0;
  if (r.kind == Reader::Kind::kUndecided) {
    if (absl::Status s = r.Start(path_); !s.ok()) return s;
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
      // The stream ended (its trailer checked): another one, or the end.
      if (absl::Status s = r.StartNextStream(path_); !s.ok()) return s;
      if (r.kind == Reader::Kind::kEnded) return 0;
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
    if (code < 0) return r.InflateError(path_, code);
    if (produced > 0) return produced;
    if (inflater.block_state == ISAL_BLOCK_FINISH || consumed > 0) continue;
    // No progress: the inflater needs more input than is buffered.
    if (r.eof) return r.Truncated(path_);
    if (r.buffered() == r.capacity()) {
      // A full buffer it takes nothing from: it cannot move on.
      return r.InflateError(path_, 0);
    }
    if (absl::Status s = r.Fill(path_); !s.ok()) return s;
  }
}

}  // namespace cosession
