// goro_preempt_cost: what one asynchronous preemption costs the CPU it
// interrupts, from the last instruction of the preempted goroutine to the
// first of the next one, beside what a bare signal costs the same loop.
//
//   build-bench/goro_preempt_cost [--seconds=2] [--slice=200us] [--json]
//
// Each spinner is a call-free loop that reads the TSC and keeps the previous
// reading in a register; a jump of more than --gap between two readings ends
// a stretch of uninterrupted running and starts the next. Three runs:
//   1. quiet:  one plain thread spinning, nothing sent: the host's own
//              interruptions (timer ticks, the hypervisor), for scale;
//   2. signal: the same thread, sent SIGURG every --slice by another thread
//              (tgkill, as sysmon does) and handled by an empty handler
//              installed as goro installs its own (alternate stack, every
//              signal blocked while it runs): the kernel's part, the floor;
//   3. goro:   two spinners on one P at a --slice time slice: sysmon signals,
//              the handler diverts the goroutine into the trampoline, which
//              saves its state and parks it, and the other resumes. Merging
//              the two spinners' stretches by time, each hand-over from one
//              to the other is one preemption, and the time between the last
//              reading of one and the first of the other is its cost on the
//              CPU that ran them ("signal to resume").
// The CPU time of the signalling thread (run 2) and of sysmon (run 3) per
// signal is reported too: that is spent on the other CPU.
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <istream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "goro/goro.h"

ABSL_FLAG(double, seconds, 2.0, "length of each of the three runs");
ABSL_FLAG(absl::Duration, slice, absl::Microseconds(200),
          "goro's time slice in run 3, and the period of the bare signals in run 2");
ABSL_FLAG(absl::Duration, gap, absl::Nanoseconds(500),
          "a jump between two TSC readings longer than this ends a stretch of running");
ABSL_FLAG(bool, json, false, "also print one JSON line with the figures");

namespace {

constexpr size_t kMaxStretches = 1 << 17;

// A stretch of uninterrupted running, in TSC ticks.
struct Stretch {
  uint64_t first, last;
};

struct alignas(128) Spinner {
  size_t n = 0;  // stretches recorded
  Stretch* s = nullptr;
};

// The call-free loop: `prev` stays in a register, memory is written only
// when a stretch ends. The goroutine is preempted anywhere in it.
__attribute__((noinline)) void TscSpin(Spinner* sp, const std::atomic<bool>* stop, uint64_t gap_ticks) {
  uint64_t prev = __rdtsc();
  size_t n = 0;
  sp->s[0].first = prev;
  while (!stop->load(std::memory_order_relaxed)) {
    uint64_t t = __rdtsc();
    if (t - prev > gap_ticks) {
      sp->s[n].last = prev;
      if (n + 1 < kMaxStretches) ++n;
      sp->s[n].first = t;
    }
    prev = t;
  }
  sp->s[n].last = prev;
  sp->n = n + 1;
}

double TscPerNs() {
  uint64_t t0 = __rdtsc();
  absl::Time w0 = absl::Now();
  absl::SleepFor(absl::Milliseconds(100));
  uint64_t t1 = __rdtsc();
  absl::Time w1 = absl::Now();
  return static_cast<double>(t1 - t0) / absl::ToDoubleNanoseconds(w1 - w0);
}

struct Dist {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // µs
};

Dist DistOf(std::vector<double> us) {
  Dist d;
  d.n = us.size();
  if (us.empty()) return d;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  d.p50 = at(0.50);
  d.p90 = at(0.90);
  d.p99 = at(0.99);
  double sum = 0;
  for (double x : us) sum += x;
  d.mean = sum / static_cast<double>(us.size());
  return d;
}

// The jumps inside one spinner's stretches: each is one interruption.
std::vector<double> Gaps(const Spinner& sp, double tsc_per_us) {
  std::vector<double> us;
  for (size_t i = 1; i < sp.n; ++i) us.push_back(static_cast<double>(sp.s[i].first - sp.s[i - 1].last) / tsc_per_us);
  return us;
}

int64_t ThreadCpuNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// CPU time of this process's thread named `name` (ns on CPU, from
// /proc/self/task/*/schedstat), or -1 if there is none.
int64_t NamedThreadCpuNs(const std::string& name) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int64_t ns = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string comm;
    std::getline(std::ifstream(base + "/comm") >> std::ws, comm);
    if (comm != name) continue;
    std::ifstream(base + "/schedstat") >> ns;
    break;
  }
  closedir(dir);
  return ns;
}

void EmptyHandler(int, siginfo_t*, void*) {}

// Runs 1 or 2: one plain thread spinning for `seconds`, sent a signal every
// `period` unless period is zero. Returns the thread's gaps in µs and, via
// sender_cpu_ns, the signalling thread's CPU time.
std::vector<double> PlainRun(double seconds, absl::Duration period, uint64_t gap_ticks, double tsc_per_us,
                             int64_t* signals_sent, int64_t* sender_cpu_ns) {
  static Stretch stretches[kMaxStretches];
  Spinner sp;
  sp.s = stretches;
  std::atomic<bool> stop{false};
  std::atomic<pid_t> tid{0};
  std::thread spinner([&] {
    std::vector<char> altstack(64 * 1024);
    stack_t ss = {};
    ss.ss_sp = altstack.data();
    ss.ss_size = altstack.size();
    sigaltstack(&ss, nullptr);
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    TscSpin(&sp, &stop, gap_ticks);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  });
  while (tid.load() == 0) std::this_thread::yield();
  *signals_sent = 0;
  *sender_cpu_ns = 0;
  absl::Time end = absl::Now() + absl::Seconds(seconds);
  if (period > absl::ZeroDuration()) {
    int64_t cpu0 = ThreadCpuNs(CLOCK_THREAD_CPUTIME_ID);
    absl::Time next = absl::Now();
    while (next < end) {
      next += period;
      absl::SleepFor(next - absl::Now());
      syscall(SYS_tgkill, getpid(), tid.load(), SIGURG);
      ++*signals_sent;
    }
    *sender_cpu_ns = ThreadCpuNs(CLOCK_THREAD_CPUTIME_ID) - cpu0;
  } else {
    absl::SleepFor(end - absl::Now());
  }
  stop = true;
  spinner.join();
  return Gaps(sp, tsc_per_us);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("goro_preempt_cost: the CPU cost of one asynchronous preemption");
  absl::ParseCommandLine(argc, argv);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const absl::Duration slice = absl::GetFlag(FLAGS_slice);
  if (!(seconds > 0 && seconds <= 600)) {
    std::fprintf(stderr, "goro_preempt_cost: --seconds=%g: want a number of seconds in (0, 600]\n", seconds);
    return 2;
  }
  if (slice < absl::Microseconds(50) || slice > absl::Seconds(1)) {
    std::fprintf(stderr, "goro_preempt_cost: --slice=%s: want 50us to 1s\n", absl::FormatDuration(slice).c_str());
    return 2;
  }
  const double tsc_per_us = TscPerNs() * 1000;
  const uint64_t gap_ticks =
      static_cast<uint64_t>(absl::ToDoubleNanoseconds(absl::GetFlag(FLAGS_gap)) * tsc_per_us / 1000);

  // Runs 1 and 2, before goro installs its handler.
  struct sigaction sa = {}, old = {};
  sa.sa_sigaction = EmptyHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigfillset(&sa.sa_mask);
  sigaction(SIGURG, &sa, &old);
  int64_t sent = 0, sender_ns = 0;
  Dist quiet = DistOf(PlainRun(seconds, absl::ZeroDuration(), gap_ticks, tsc_per_us, &sent, &sender_ns));
  Dist bare = DistOf(PlainRun(seconds, slice, gap_ticks, tsc_per_us, &sent, &sender_ns));
  sigaction(SIGURG, &old, nullptr);

  // Run 3: two spinners on one P.
  static Stretch stretches[2][kMaxStretches];
  Spinner spinners[2];
  spinners[0].s = stretches[0];
  spinners[1].s = stretches[1];
  std::atomic<bool> stop{false};
  goro::Options opts;
  opts.max_procs = 1;
  opts.time_slice = slice;
  int64_t sysmon_ns = -1;
  goro::Stats before{}, after{};
  std::thread timer([&] {
    absl::SleepFor(absl::Seconds(seconds));
    stop = true;
  });
  goro::Run(
      [&] {
        // The counts cover the spinners' whole lives, as their stretches do.
        before = goro::GetStats();
        sysmon_ns = NamedThreadCpuNs("goro-sysmon");
        goro::WaitGroup wg;
        wg.Add(2);
        for (Spinner& sp : spinners) {
          goro::Go([&wg, &sp, &stop, gap_ticks] {
            TscSpin(&sp, &stop, gap_ticks);
            wg.Done();
          });
        }
        wg.Wait();
        after = goro::GetStats();
        int64_t end_ns = NamedThreadCpuNs("goro-sysmon");
        sysmon_ns = sysmon_ns >= 0 && end_ns >= 0 ? end_ns - sysmon_ns : -1;
      },
      opts);
  timer.join();

  // Merge the stretches by time: a hand-over from one spinner to the other is
  // a preemption; two stretches of one spinner in a row are an interruption
  // of some other kind (or a preemption after which it was picked again).
  struct Mark {
    Stretch s;
    int who;
  };
  std::vector<Mark> all;
  for (int i = 0; i < 2; ++i) {
    for (size_t k = 0; k < spinners[i].n; ++k) all.push_back({spinners[i].s[k], i});
  }
  std::sort(all.begin(), all.end(), [](const Mark& a, const Mark& b) { return a.s.first < b.s.first; });
  std::vector<double> handovers, others;
  size_t overlaps = 0;
  for (size_t k = 1; k < all.size(); ++k) {
    if (all[k].s.first < all[k - 1].s.last) {
      ++overlaps;  // two stretches at once: not one P's timeline (should not happen)
      continue;
    }
    double us = static_cast<double>(all[k].s.first - all[k - 1].s.last) / tsc_per_us;
    (all[k].who != all[k - 1].who ? handovers : others).push_back(us);
  }
  Dist goro_cost = DistOf(handovers);
  Dist goro_other = DistOf(others);
  uint64_t preemptions = after.async_preemptions - before.async_preemptions;
  uint64_t signals = after.preempt_signals_sent - before.preempt_signals_sent;

  auto row = [](const char* what, const Dist& d, const std::string& note) {
    std::printf("  %-38s %8zu  %6.2f  %6.2f  %6.2f  %6.2f  %s\n", what, d.n, d.p50, d.p90, d.p99, d.mean,
                note.c_str());
  };
  std::printf("goro_preempt_cost: %.1f s per run, %s slice / signal period; a stretch ends at a gap > %s\n",
              seconds, absl::FormatDuration(slice).c_str(), absl::FormatDuration(absl::GetFlag(FLAGS_gap)).c_str());
  std::printf("  %-38s %8s  %6s  %6s  %6s  %6s  (us)\n", "", "count", "p50", "p90", "p99", "mean");
  row("1. plain thread, no signal: gaps", quiet, "the host's own interruptions");
  row("2. plain thread, empty handler: gaps", bare,
      absl::StrFormat("%lld signals sent; sender CPU %.2f us/signal", static_cast<long long>(sent),
                      sent > 0 ? static_cast<double>(sender_ns) / 1e3 / static_cast<double>(sent) : 0.0));
  row("3. goro, 2 spinners on 1 P: hand-overs", goro_cost,
      absl::StrFormat("%llu async preemptions, %llu signals; sysmon CPU %s",
                      static_cast<unsigned long long>(preemptions), static_cast<unsigned long long>(signals),
                      sysmon_ns >= 0 && signals > 0
                          ? absl::StrFormat("%.2f us/signal", static_cast<double>(sysmon_ns) / 1e3 /
                                                                  static_cast<double>(signals))
                          : std::string("unknown")));
  row("   other gaps in goro's spinners", goro_other, "host interruptions, or a spinner picked again");
  std::printf("  goro's share of one preemption above the bare signal (p50): %.2f us\n", goro_cost.p50 - bare.p50);
  if (overlaps > 0) std::printf("  warning: %zu overlapping stretches (TSC not in step across CPUs?)\n", overlaps);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"slice_us\":%.1f,\"quiet_n\":%zu,\"quiet_p50_us\":%.3f,\"bare_n\":%zu,\"bare_p50_us\":%.3f,"
        "\"bare_p99_us\":%.3f,\"goro_n\":%zu,\"goro_p50_us\":%.3f,\"goro_p90_us\":%.3f,\"goro_p99_us\":%.3f,"
        "\"goro_mean_us\":%.3f,\"async_preemptions\":%llu}\n",
        absl::ToDoubleMicroseconds(slice), quiet.n, quiet.p50, bare.n, bare.p50, bare.p99, goro_cost.n,
        goro_cost.p50, goro_cost.p90, goro_cost.p99, goro_cost.mean, static_cast<unsigned long long>(preemptions));
  }
  return 0;
}
