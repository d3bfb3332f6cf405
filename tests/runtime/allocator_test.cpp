// retain_freed_memory: after it, large blocks come from the heap and stay there when freed.
#include "hkfac/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hkfac {
namespace {

#if defined(__GLIBC__)
void *volatile g_sink; // keeps the compiler from eliding a malloc/free pair

TEST(RetainFreedMemory, LargeBlocksComeFromTheHeapAndAreKeptWhenFreed) {
#if defined(HKFAC_SANITIZE)
  // The sanitizer build's AddressSanitizer replaces malloc with its own allocator, which
  // glibc's mallopt settings and mallinfo2 counts do not describe.
  GTEST_SKIP() << "built with AddressSanitizer, whose allocator replaces glibc's malloc";
#endif
  constexpr size_t kBlock = 16u << 20;
  // glibc's defaults first (ctest runs this case in a process of its own): a 16 MB block is a
  // mapping of its own, so this checks that the probe can tell the two apart.
  const size_t mapped = mallinfo2().hblks;
  g_sink = std::malloc(kBlock);
  EXPECT_EQ(mallinfo2().hblks, mapped + 1) << "glibc's default did not map a 16 MB block";
  std::free(g_sink);

  retain_freed_memory();
  g_sink = std::malloc(2 * kBlock); // larger than the one freed: the default would map it too
  ASSERT_NE(g_sink, nullptr);
  std::memset(g_sink, 1, 2 * kBlock);
  EXPECT_EQ(mallinfo2().hblks, mapped) << "a 32 MB block was mapped on its own";
  std::free(g_sink);
  // Freed, it is the heap's top chunk, which is kept rather than trimmed back to the kernel.
  EXPECT_GE(mallinfo2().keepcost, 2 * kBlock) << "the freed block was returned to the kernel";
}
#endif

} // namespace
} // namespace hkfac
