// tensorflow_model_server's flags that cosession_serve takes so that
// TensorFlow Serving's command lines (its Docker image's, its deployments')
// run unchanged, but that have nothing to act on here: gRPC (cosession_serve
// has no gRPC API), TensorFlow's own runtime (sessions, XLA, GPUs, TPUs,
// TFLite, the profiler), SavedModel tags (cosession's exports have none),
// load retries and loader threads (a version is loaded once, on the
// runtime's pool). Each is parsed with its type and TensorFlow Serving's
// default, so a malformed value is still an error naming the flag; its
// value is not read. `cosession_serve --helpfull` lists them with the reason.
// The flags that act are in serve.cc.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

#define COSESSION_UNUSED(why)                                             \
  "tensorflow_model_server's flag, taken so that its command lines run; " \
  "unused: " why

ABSL_FLAG(std::string, grpc_socket_path, "", COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(std::string, grpc_channel_arguments, "",
          COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(int32_t, grpc_max_threads, 0, COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(bool, enable_grpc_healthcheck_service, false,
          COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(bool, use_alts_credentials, false, COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(std::string, ssl_config_file, "", COSESSION_UNUSED("no gRPC API"));
ABSL_FLAG(int32_t, num_load_threads, 0,
          COSESSION_UNUSED("versions load on the runtime's pool"));
ABSL_FLAG(int32_t, num_unload_threads, 0,
          COSESSION_UNUSED("versions unload on the runtime's pool"));
ABSL_FLAG(int32_t, max_num_load_retries, 5,
          COSESSION_UNUSED("a version that fails to load is reported (END) "
                           "and the next poll does not retry it"));
ABSL_FLAG(int64_t, load_retry_interval_micros, 60LL * 1000 * 1000,
          COSESSION_UNUSED("loads are not retried"));
ABSL_FLAG(bool, flush_filesystem_caches, true,
          COSESSION_UNUSED("no file system caches to flush"));
ABSL_FLAG(std::string, saved_model_tags, "",
          COSESSION_UNUSED("cosession's exports carry no tags"));
ABSL_FLAG(std::string, platform_config_file, "",
          COSESSION_UNUSED("one platform, cosession's exports"));
ABSL_FLAG(std::string, tensorflow_session_config_file, "",
          COSESSION_UNUSED("no TensorFlow session"));
ABSL_FLAG(float, per_process_gpu_memory_fraction, 0,
          COSESSION_UNUSED("no GPU"));
ABSL_FLAG(bool, xla_cpu_compilation_enabled, false, COSESSION_UNUSED("no XLA"));
ABSL_FLAG(bool, xla_gpu_compilation_enabled, false, COSESSION_UNUSED("no XLA"));
ABSL_FLAG(std::string, mixed_precision, "",
          COSESSION_UNUSED("graphs run in the types they were exported with"));
ABSL_FLAG(bool, skip_initialize_tpu, false, COSESSION_UNUSED("no TPU"));
ABSL_FLAG(bool, prefer_tflite_model, false, COSESSION_UNUSED("no TFLite"));
ABSL_FLAG(int32_t, num_tflite_pools, 0, COSESSION_UNUSED("no TFLite"));
ABSL_FLAG(int32_t, num_tflite_interpreters_per_pool, 1,
          COSESSION_UNUSED("no TFLite"));
ABSL_FLAG(bool, remove_unused_fields_from_bundle_metagraph, true,
          COSESSION_UNUSED("no MetaGraphDef is kept"));
ABSL_FLAG(bool, enable_serialization_as_tensor_content, false,
          COSESSION_UNUSED("answers are JSON"));
ABSL_FLAG(bool, enable_profiler, true, COSESSION_UNUSED("no profiler"));
ABSL_FLAG(std::string, thread_pool_factory_config_file, "",
          COSESSION_UNUSED("graphs run on the runtime's pool"));
ABSL_FLAG(bool, enable_per_model_batching_parameters, false,
          COSESSION_UNUSED("cosession's exports carry no batching "
                           "parameters of their own"));
ABSL_FLAG(int32_t, num_request_iterations_for_warmup, 0,
          COSESSION_UNUSED("no warm-up records (see --enable_model_warmup)"));
