// Fatal errors: one clear line on stderr, then the backtrace of the goroutine
// (or thread) that failed, then abort() so that a debugger or a core dump
// catches the process where it broke.
//
// None of these allocate: they also report running out of memory.
#ifndef GORO_CORE_FATAL_H_
#define GORO_CORE_FATAL_H_

#include "absl/strings/string_view.h"

namespace goro::internal {

struct G;

// Prints "fatal error: <msg>" and the caller's backtrace, and aborts.
[[noreturn]] void Fatal(absl::string_view msg);
// The same, but with every goroutine and its backtrace instead of the
// caller's alone (Go's deadlock report).
[[noreturn]] void FatalDumpAll(absl::string_view msg);
// The same from a signal handler: the backtrace of what the signal
// interrupted, from its context, which is on g's stack (the current
// goroutine's if g is null; another one's while the thread switches between
// goroutines).
[[noreturn]] void FatalSignal(absl::string_view msg, void* uctx, const G* g = nullptr);
// Prints "fatal error: goroutine N: <msg>" naming the calling goroutine (or
// "runtime thread MN" on a scheduler stack, "thread T (not a goroutine)" off
// the runtime) and aborts.
[[noreturn]] void FatalG(absl::string_view msg);
// Like Fatal, with the message formatted by snprintf into a fixed buffer (so
// that it can report an allocation that failed); longer messages are cut.
[[noreturn]] void FatalF(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Called first by each of the runtime's exit hooks (atexit handlers, and
// one registered before the program's static constructors run, so that it
// runs late in exit()): if another thread is reporting a fatal error, waits
// for that report's abort, as long as a second fatal error would (5 s), and
// then aborts itself. A process whose fatal error overlaps exit() so ends by
// SIGABRT, never with exit's status (in Go, main does not return while
// another goroutine panics). On the reporting thread itself (exit() called
// from the report): returns at once.
void AwaitFatalReportAtExit();
// Writes `msg` to stderr with one write(2); async-signal-safe.
void WriteStderr(absl::string_view msg);

}  // namespace goro::internal

#endif  // GORO_CORE_FATAL_H_
