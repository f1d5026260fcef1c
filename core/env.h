// The environment goro reads once, when the runtime starts. Every tunable that
// the environment can set is listed here, with its default in goro::Options.
//
//   GOROMAXPROCS=N             number of Ps (a positive integer)
//   GORODEBUG=key=value,...    asyncpreemptoff=1    no signal-driven preemption
//                              timeslice=DURATION   e.g. 10ms, 200us (absl format)
//                              schedtrace=MS        print scheduler state every MS ms
//                                                   (at most a day)
//                              scheddetail=1        more detail in schedtrace
//                              sigquitdump=0        no goroutine dump on SIGQUIT
//   GOROTRACE=path             an event trace of the whole run (read by
//                              core/trace.cc, not here)
//
// A key given more than once takes its last good value (as in Go's GODEBUG).
// A malformed value is reported on stderr in one line, naming the value used
// instead (the key's last good one, else the default), and ignored.
//
// goro::Options are checked here too (CheckOptions), against the same limits.
#ifndef GORO_CORE_ENV_H_
#define GORO_CORE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "goro/runtime.h"

namespace goro::internal {

// Limits of the tunables, for the environment and Options alike.
inline constexpr int kMaxProcsLimit = 1024;
// The shortest time slice (the floor GORODEBUG=timeslice always had).
inline constexpr absl::Duration kMinTimeSlice = absl::Microseconds(50);
inline constexpr size_t kMinStackSize = size_t{64} << 10;
// Go's limit is 10^9 bytes. The reservation of a batch of stacks
// (StackMapBatch) must not overflow either.
inline constexpr size_t kMaxStackSize = size_t{1} << 30;

struct EnvSettings {
  int max_procs = 0;  // 0: unset
  bool async_preempt_off = false;
  std::optional<absl::Duration> time_slice;
  int64_t schedtrace_ms = 0;  // 0 to a day (86400000)
  bool scheddetail = false;
  bool sigquit_dump = true;
};

// Parses the given values (nullptr: unset); warnings go to stderr.
EnvSettings ParseEnvironment(const char* maxprocs, const char* debug);
// Parses the process environment.
EnvSettings ReadEnvironment();

// The Options the runtime is started with, checked: a time_slice below
// kMinTimeSlice or a stack_size above kMaxStackSize cannot work and is a
// fatal error naming it. max_procs above kMaxProcsLimit is capped, and below
// 0 taken as 0 (the default), each with one line on stderr; a stack_size
// below kMinStackSize is raised to it, as documented.
Options CheckOptions(Options opts);

// Called by every Run with its Options, those the runtime was started with and
// those it runs with. Options are read once, by the call that starts the
// runtime, and that is not always a Run: Go, After, a Timer, a CondVar wait
// or an io call start it with the defaults. So that a Run's Options are not dropped
// without a word, it names on stderr, in one line and only the first time,
// each option the Run sets (not left at its default) that differs both from
// what started the runtime and from what it runs with.
void WarnIgnoredOptions(const Options& asked, const Options& started_with, const Options& in_force);

}  // namespace goro::internal

#endif  // GORO_CORE_ENV_H_
