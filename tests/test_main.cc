// main() for goro's test binaries.
//
// The runtime owns threads (Ms, sysmon), so death tests must re-execute the
// binary ("threadsafe" style) instead of forking a multi-threaded process.
#include "gtest/gtest.h"
#include "test_util.h"

#if defined(GORO_TEST_TSAN)
// ThreadSanitizer's built-in suppression for the test binaries: the SIGQUIT
// dump and the fatal-signal report knowingly call malloc and free in their
// signal handlers (dlopen, libunwind reading ELF images, demangling) and exit
// right after (core/dump.cc; docs/sanitizers.md). Every such report has a
// frame in core/dump.cc; the handler's own frame may be inlined away.
extern "C" const char* __tsan_default_suppressions() { return "signal:core/dump.cc\n"; }
#endif

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
