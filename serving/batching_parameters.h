// ParseBatchingParameters: TensorFlow Serving's --batching_parameters_file,
// a BatchingParameters message in protobuf text format, as BatchingOptions:
//
//   max_batch_size { value: 128 }        # Int64Value fields: "{ value: N }"
//   batch_timeout_micros { value: 2000 }
//   max_enqueued_batches { value: 100 }
//   num_batch_threads { value: 2 }
//   allowed_batch_sizes: 32              # repeated int64
//   allowed_batch_sizes: 128
//
// Also accepted, as TensorFlow Serving's files carry them, and not used
// (the batcher has no such mode): thread_pool_name { value: "..." },
// pad_variable_length_inputs, enable_large_batch_splitting,
// max_execution_batch_size. Unset fields keep TensorFlow's scheduler
// defaults (DefaultBatchingOptions). `#` starts a comment; fields may be
// separated by newlines, spaces, commas or semicolons.
//
// Errors: InvalidArgument naming the source, the line and the field (an
// unknown field, a value of the wrong type or out of range, a syntax
// error), and BatchingSession::Create's checks of the result (e.g. the
// last of allowed_batch_sizes must equal max_batch_size).
// Thread safety: pure functions.
#ifndef COSESSION_SERVING_BATCHING_PARAMETERS_H_
#define COSESSION_SERVING_BATCHING_PARAMETERS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/serving/batching_session.h"

namespace cosession {

// TensorFlow's defaults for a batching queue: max_batch_size 1000 (its
// input batch size limit), batch_timeout 0, max_enqueued_batches 10,
// num_batch_threads = the number of CPUs.
BatchingOptions DefaultBatchingOptions();

absl::StatusOr<BatchingOptions> ParseBatchingParameters(
    absl::string_view text, absl::string_view source);

}  // namespace cosession

#endif  // COSESSION_SERVING_BATCHING_PARAMETERS_H_
