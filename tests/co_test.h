// CO_TEST: a GoogleTest test whose body is a coroutine.
//
//   CO_TEST(Session, RunReturnsValues) {
//     auto values = co_await session.Run(args, asio::use_awaitable);
//     EXPECT_TRUE(values.ok());
//   }
//
// The body runs on a fresh io_context (reachable through co_test::Io()) and
// must finish within the time bound, and every piece of work it started on
// that context must finish too (the context is drained before it is
// destroyed); otherwise the test fails and the process exits: work still in
// flight may refer to the test's stack, so carrying on would be unsafe. Inside
// the body use EXPECT_*, or CO_ASSERT_* (which co_return instead of return).
#ifndef COSESSION_TESTS_CO_TEST_H_
#define COSESSION_TESTS_CO_TEST_H_

#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>

namespace cosession::co_test {

inline constexpr std::chrono::seconds kTimeLimit{20};

// The io_context the current CO_TEST body runs on.
boost::asio::io_context& Io();

// Runs make_body() to completion on a fresh io_context, bounded in time.
void Run(std::function<boost::asio::awaitable<void>()> make_body,
         std::chrono::milliseconds limit = kTimeLimit);

}  // namespace cosession::co_test

#define CO_TEST(suite, name)                                             \
  static boost::asio::awaitable<void> suite##_##name##_CoBody();         \
  TEST(suite, name) {                                                    \
    ::cosession::co_test::Run([] { return suite##_##name##_CoBody(); }); \
  }                                                                      \
  static boost::asio::awaitable<void> suite##_##name##_CoBody()

#define CO_ASSERT_TRUE(cond)                     \
  if (!(cond)) {                                 \
    ADD_FAILURE() << "Assertion failed: " #cond; \
    co_return;                                   \
  }
#define CO_ASSERT_OK(expr)                                        \
  if (auto co_assert_status_ = (expr); !co_assert_status_.ok()) { \
    ADD_FAILURE() << #expr << " failed: " << co_assert_status_;   \
    co_return;                                                    \
  }

#endif  // COSESSION_TESTS_CO_TEST_H_
