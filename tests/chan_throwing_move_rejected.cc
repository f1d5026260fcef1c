// Must not compile: Chan<T> requires a noexcept move constructor
// (include/goro/chan.h). Built only by the test ChanCompileTest.
// ThrowingMoveIsRejected (tests/CMakeLists.txt), which checks that the build
// fails with chan.h's message.
#include "goro/chan.h"

namespace {

struct ThrowingMove {
  ThrowingMove() = default;
  ThrowingMove(ThrowingMove&&) {}  // not noexcept
};

}  // namespace

static_assert(sizeof(goro::Chan<ThrowingMove>) > 0);  // instantiates the class
