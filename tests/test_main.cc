// main() for goro's test binaries.
//
// The runtime owns threads (Ms, sysmon), so death tests must re-execute the
// binary ("threadsafe" style) instead of forking a multi-threaded process.
#include "gtest/gtest.h"
#include "test_util.h"

#if defined(GORO_TEST_TSAN)
// ThreadSanitizer's built-in suppressions for the test binaries: the SIGQUIT
// dump knowingly calls malloc (dlopen of libunwind) in its signal handler and
// exits right after (core/dump.cc; docs/sanitizers.md).
extern "C" const char* __tsan_default_suppressions() { return "signal:QuitHandler\n"; }
#endif

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
