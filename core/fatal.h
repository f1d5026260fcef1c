// Fatal errors: one clear line on stderr, then the backtrace of the goroutine
// (or thread) that failed, then abort() so that a debugger or a core dump
// catches the process where it broke.
#ifndef GORO_CORE_FATAL_H_
#define GORO_CORE_FATAL_H_

#include "absl/strings/string_view.h"

namespace goro::internal {

// Prints "fatal error: <msg>" and the caller's backtrace, and aborts.
[[noreturn]] void Fatal(absl::string_view msg);
// The same, but with every goroutine and its backtrace instead of the
// caller's alone (Go's deadlock report).
[[noreturn]] void FatalDumpAll(absl::string_view msg);
// The same from a signal handler: the backtrace of what the signal
// interrupted, from its context.
[[noreturn]] void FatalSignal(absl::string_view msg, void* uctx);
// Prints "fatal error: goroutine N: <msg>" naming the calling goroutine (or
// "thread T (not a goroutine)" off one) and aborts.
[[noreturn]] void FatalG(absl::string_view msg);
// Writes `msg` to stderr with one write(2); async-signal-safe.
void WriteStderr(absl::string_view msg);

}  // namespace goro::internal

#endif  // GORO_CORE_FATAL_H_
