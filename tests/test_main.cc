// main() for goro's test binaries.
//
// The runtime owns threads (Ms, sysmon), so death tests must re-execute the
// binary ("threadsafe" style) instead of forking a multi-threaded process.
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
