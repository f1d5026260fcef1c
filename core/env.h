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
// A malformed value is reported on stderr in one line and ignored.
#ifndef GORO_CORE_ENV_H_
#define GORO_CORE_ENV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace goro::internal {

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

}  // namespace goro::internal

#endif  // GORO_CORE_ENV_H_
