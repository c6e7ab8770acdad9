// TensorFlow Serving's --batching_parameters_file, as BatchingOptions: its
// wrapper fields, repeated sizes, comments, the defaults of unset fields,
// and errors naming the file, line and field.
#include "cosession/serving/batching_parameters.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace cosession::batching_parameters_test {
namespace {

TEST(BatchingParameters, ReadsTensorFlowServingsTextFormat) {
  auto o = ParseBatchingParameters(R"(
      # as in TensorFlow Serving's serving_config.md
      max_batch_size { value: 128 }
      batch_timeout_micros { value: 2500 }
      max_enqueued_batches { value: 1000 }
      num_batch_threads { value: 4 }
      allowed_batch_sizes: 32
      allowed_batch_sizes: 128
      pad_variable_length_inputs: true
      thread_pool_name { value: "model_server_batch_threads" })",
                                   "batching.txt");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_batch_size, 128);
  EXPECT_EQ(o->batch_timeout, std::chrono::microseconds(2500));
  EXPECT_EQ(o->max_enqueued_batches, 1000);
  EXPECT_EQ(o->num_batch_threads, 4);
  EXPECT_EQ(o->allowed_batch_sizes, (std::vector<int64_t>{32, 128}));
}

TEST(BatchingParameters, UnsetFieldsKeepTensorFlowsDefaults) {
  auto o = ParseBatchingParameters("max_batch_size { value: 8 }", "b.txt");
  ASSERT_TRUE(o.ok()) << o.status();
  const BatchingOptions d = DefaultBatchingOptions();
  EXPECT_EQ(o->max_batch_size, 8);
  EXPECT_EQ(o->batch_timeout, d.batch_timeout);
  EXPECT_EQ(o->max_enqueued_batches, 10);
  EXPECT_EQ(o->num_batch_threads, d.num_batch_threads);
}

TEST(BatchingParameters, ErrorsNameTheFileLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }",
       "b.txt:2: unknown field 'max_batch_sise'"},
      {"max_batch_size: 8", "b.txt:1: field 'max_batch_size' wants { value"},
      {"max_batch_size { value: -3 }", "wants an integer >= 1, got '-3'"},
      {"\n\nallowed_batch_sizes: big", "b.txt:3: field 'allowed_batch_sizes'"},
      {"num_batch_threads { value: 4 ", "b.txt:1: field 'num_batch_threads'"},
  };
  for (const auto& [text, message] : cases) {
    auto o = ParseBatchingParameters(text, "b.txt");
    ASSERT_FALSE(o.ok()) << text;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(o.status().message(), message))
        << text << "\n  got: " << o.status().message();
  }
}

}  // namespace
}  // namespace cosession::batching_parameters_test
