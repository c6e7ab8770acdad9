// The project's programs allocate with the allocator the build chose
// (COSESSION_MALLOC, CMakeLists.txt): tcmalloc in the release build, the
// sanitizer's own under ASan and TSan. A linker that drops a library no
// symbol refers to would silently leave glibc's malloc in place; a
// tcmalloc loaded next to a sanitizer would defeat it. Both are checked
// here, in the test binary, which links the allocator as every program of
// the project does.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

namespace {

TEST(Allocator, MallocIsTheOneTheBuildChose) {
  void* tc_malloc = dlsym(RTLD_DEFAULT, "tc_malloc");
#if defined(COSESSION_MALLOC_TCMALLOC)
  ASSERT_NE(tc_malloc, nullptr)
      << "COSESSION_MALLOC=tcmalloc, but libtcmalloc_minimal is not loaded";
  // gperftools defines malloc as an alias of tc_malloc. An assertion: the
  // size query below would read a foreign block's header.
  ASSERT_EQ(dlsym(RTLD_DEFAULT, "malloc"), tc_malloc)
      << "tcmalloc is loaded, but malloc resolves to another definition";
  // And a block from std::malloc is one tcmalloc answers for.
  auto owns = reinterpret_cast<size_t (*)(void*)>(
      dlsym(RTLD_DEFAULT, "tc_malloc_size"));
  ASSERT_NE(owns, nullptr);
  std::unique_ptr<char, decltype(&std::free)> block(
      static_cast<char*>(std::malloc(100)), &std::free);
  EXPECT_GE(owns(block.get()), 100u);
#else
  EXPECT_EQ(tc_malloc, nullptr)
      << "tcmalloc is loaded in a build that chose the system allocator "
         "(a sanitizer's or glibc's)";
#endif
}

}  // namespace
