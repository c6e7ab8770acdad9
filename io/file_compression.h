// FileCompression: how a file's bytes are encoded, as the readers of files
// (io/maybe_gzip_file.h, and through it the input pipeline's TextLines and
// TFRecords sources) are told it -- tf.data's compression_type ("",
// "GZIP", "ZLIB"), plus detection by content, cosession's default.
//
// Thread safety: a value type.
#ifndef COSESSION_IO_FILE_COMPRESSION_H_
#define COSESSION_IO_FILE_COMPRESSION_H_

namespace cosession {

enum class FileCompression {
  kDetect,  // gzip when the file starts with gzip's magic number, else plain
  kNone,    // tf.data's ""
  kGzip,    // "GZIP": gzip members (RFC 1952)
  kZlib,    // "ZLIB": zlib streams (RFC 1950)
};

}  // namespace cosession

#endif  // COSESSION_IO_FILE_COMPRESSION_H_
