// goro_env_probe: starts the runtime with default Options (so that the
// environment decides), runs one goroutine, and prints what it got on stdout:
//   procs=N ran=1
// Arguments: --max_procs=N sets Options::max_procs; --hold_ms=N keeps the
// program alive N ms first, with one goroutine blocked in a channel receive
// (for schedtrace to show). It then prints what goro::GetOptions() says
// the runtime ran with:
//   procs=N ran=1 async=1 timeslice=10ms
// Anything the runtime says about the environment
// goes to stderr, which env_test checks.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "goro/goro.h"

int main(int argc, char** argv) {
  goro::Options opts;
  int hold_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--max_procs=", 12) == 0) {
      opts.max_procs = atoi(argv[i] + 12);
    } else if (strncmp(argv[i], "--hold_ms=", 10) == 0) {
      hold_ms = atoi(argv[i] + 10);
    } else {
      fprintf(stderr, "goro_env_probe: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  int ran = 0;
  goro::Run(
      [&] {
        if (hold_ms > 0) {
          goro::Chan<int> c;
          goro::WaitGroup wg;
          wg.Add(1);
          goro::Go([&] {
            c.Recv();
            wg.Done();
          });
          goro::SleepFor(absl::Milliseconds(hold_ms));
          c.Send(1);
          wg.Wait();
        }
        goro::SleepFor(absl::Milliseconds(1));
        ran = goro::GoroutineId() > 0 ? 1 : 0;
      },
      opts);
  goro::Options in_force = goro::GetOptions();
  printf("procs=%d ran=%d async=%d timeslice=%s\n", goro::GetStats().procs, ran, in_force.async_preemption ? 1 : 0,
         absl::FormatDuration(in_force.time_slice).c_str());
  fflush(stdout);
  return 0;
}
