// LineSource: what an iterator that yields lines (TextLines, ReadLines,
// TcpLines) offers a stage that consumes lines in bulk -- CsvRows fused
// with Batch (pipeline/csv_rows.cc): each line as a view into the source's
// own buffer, without an Element (and a copy of the line) per line.
//
// A consumer uses either this or the iterator's TryNext/Next, not both:
// they advance the same stream. Lines come in the same order, with the
// same numbering and errors, either way.
//
// Thread safety: as the iterator's (one caller at a time).
#ifndef COSESSION_PIPELINE_DETAIL_LINE_SOURCE_H_
#define COSESSION_PIPELINE_DETAIL_LINE_SOURCE_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/pipeline/element.h"

namespace cosession::detail {

class LineSource {
 public:
  struct Line {
    // Valid until the next call on the source.
    absl::string_view text{};
    // The line's origin index (its line number).
    int64_t index = 0;
  };
  enum class Progress { kLine, kMustWait, kEnd };

  virtual ~LineSource() = default;

  // The next line without waiting (kLine, `line` set); kMustWait when
  // WaitForLines must run first; kEnd after the last line. An error ends
  // the stream: every later call returns it again.
  virtual absl::StatusOr<Progress> TryNextLine(Line& line) = 0;
  // Does what TryNextLine said it waits for (opens the next file, reads a
  // chunk, reads from the socket); cancellable as the iterator's Next().
  virtual boost::asio::awaitable<absl::Status> WaitForLines() = 0;
  // Where the line with `index`, the one returned last, came from.
  virtual ElementOrigin OriginOf(int64_t index) const = 0;
};

// A dataset node whose iterators are LineSources: what a stage checks
// before it plans to take lines as views.
class LineSourceNode {
 public:
  virtual ~LineSourceNode() = default;
};

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_LINE_SOURCE_H_
