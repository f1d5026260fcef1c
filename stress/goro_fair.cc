// goro-fair: the fairness runner.
//
// Runs N CPU-bound goroutines on P processors for a while and reports how
// evenly they got work done: a table per goroutine (iterations, share of the
// iterations, and preemptions over the whole run), Jain's fairness index and
// the min/max of those shares, the
// preemption counters in the window and over the whole run, and the wake-up
// lateness of a goroutine that sleeps in a loop beside them.
//
//   goro-fair                                   16 call-free spinners on 2 Ps, 3 s
//   goro-fair --workload=asm --procs=1          spinners written in assembly
//   goro-fair --async_preemption=false          watch them starve instead
//   goro-fair --min_jain=0.999 --plot=fair.png  a threshold and a chart
//
// Workloads: spin (a C++ loop with no calls), asm (the same loop in assembly,
// stress/spin_x86_64_sysv_elf_gas.S), mixed (spinners beside goroutines that
// sleep, yield and use channels), fib (each goroutine computes fib(16) over
// and over with a goroutine per call).
//
// --turn_stats tells the scheduler's part of the result from the machine's:
// the spinners read the clock every 4096 iterations (so their loop has a call,
// into the vDSO) and record each turn on a P. It prints the turn lengths, the
// iteration rate from turn to turn, and the shares of time each goroutine held
// a P. Iterations measure work done, which also depends on how fast the CPU
// ran during each turn (another tenant, a busy hyperthread sibling); the time
// shares measure only what the scheduler hands out.
//
// The measured window opens after a warm-up of min(200 ms, seconds/10) that
// begins once every goroutine has started (WaitForStart), so that neither the
// runtime's start-up nor the first turns of goroutines queued behind others
// fall inside it.
//
// The report (and --json) gives the settings the runtime ran with, which the
// environment (GORODEBUG=timeslice, asyncpreemptoff) or the build may have
// changed from what the flags asked for; a line under the header says so.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "goro/goro.h"

ABSL_FLAG(int, procs, 2, "number of Ps (logical processors)");
ABSL_FLAG(int, goroutines, 16,
          "number of goroutines, at most 100000 (1000 with --workload=fib): all CPU-bound, except with "
          "--workload=mixed, where half are (the others sleep, yield or use channels)");
ABSL_FLAG(double, seconds, 3, "how long to measure");
ABSL_FLAG(absl::Duration, time_slice, absl::Milliseconds(10),
          "time slice, e.g. 10ms or 200us (GORODEBUG=timeslice overrides it)");
ABSL_FLAG(std::string, workload, "spin", "spin, asm, mixed or fib");
ABSL_FLAG(bool, async_preemption, true,
          "interrupt goroutines that reach no safe point (GORODEBUG=asyncpreemptoff=1 and TSan builds turn it off)");
ABSL_FLAG(bool, sleeper, true, "run a goroutine that sleeps in a loop and measures its lateness");
ABSL_FLAG(absl::Duration, sleep_interval, absl::Milliseconds(1), "the sleeper's sleep");
ABSL_FLAG(double, min_jain, 0, "exit with status 1 if Jain's index is below this (0 to 1; 0: no check)");
ABSL_FLAG(double, min_share_ratio, 0, "exit with status 1 if min/max share is below this (0 to 1; 0: no check)");
ABSL_FLAG(double, max_p99_ms, 0,
          "exit with status 1 if the sleeper's p99 lateness is above this, or if it never woke (0: no limit)");
ABSL_FLAG(std::string, plot, "",
          "write a PNG chart of the CPU-bound goroutines' shares of the iterations and, unless --sleeper=false, the "
          "sleeper's lateness CDF here (needs gnuplot; a file already there is replaced only if it is a PNG, an "
          "earlier chart)");
ABSL_FLAG(bool, json, false,
          "also print the summary as one JSON line (async_preemptions, cooperative_preemptions and signals count "
          "the whole run, window_async_preemptions, window_cooperative_preemptions and window_signals the window; "
          "window_s is the window's length and window_cpu_s the CPU time the whole process used in it; "
          "p50_ms, p99_ms and max_ms are null when the sleeper never woke or there is none)");
ABSL_FLAG(int, table_rows, 32, "print at most this many goroutine rows");
ABSL_FLAG(bool, turn_stats, false,
          "spin workload: time every turn on a P and report turn lengths, iteration rates and time shares");

extern "C" uint64_t goro_fair_spin_asm(uint64_t* counter, const uint8_t* stop);

namespace {

enum class Role { kSpin, kAsm, kSleep, kYield, kChan, kFib };

const char* RoleName(Role r) {
  switch (r) {
    case Role::kSpin: return "spin";
    case Role::kAsm: return "asm";
    case Role::kSleep: return "sleep";
    case Role::kYield: return "yield";
    case Role::kChan: return "chan";
    case Role::kFib: return "fib";
  }
  return "?";
}

// CPU-bound roles are the ones whose shares the fairness figures compare.
bool CpuBound(Role r) { return r == Role::kSpin || r == Role::kAsm || r == Role::kFib; }

// One turn of a goroutine on a P, as the goroutine saw it: the first and last
// clock readings (CLOCK_MONOTONIC, ns) and the iteration counts at both.
struct Turn {
  int64_t start = 0, end = 0;
  uint64_t first = 0, last = 0;
};

// 128 bytes apart, not 64: Intel's L2 prefetcher fetches lines in 128-byte
// pairs, so two spinners on two CPUs writing counters in one pair can slow
// each other down, and the spinners running side by side are neighbours in
// the run queue's FIFO order. Two builds with 64-byte workers and the same
// spin loop, whose workers sat at different offsets, ran 2.9e9 and 5.3e9
// iterations/s; with 128-byte workers 5.3-5.6e9.
struct alignas(128) Worker {
  Role role = Role::kSpin;
  uint64_t count = 0;  // iterations; written by the worker, read racily by the timer
  int64_t id = 0;
  uint64_t preemptions = 0;
  std::vector<Turn> turns;  // --turn_stats only
};

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// CPU time of the whole process (every thread), ns.
int64_t ProcessCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// On its own cache lines: every spinner reads `stop` in its loop, and the
// neighbouring locals (the lateness vector the sleeper appends to) would
// otherwise make each of those reads a cache miss (half speed, seen here).
struct alignas(128) Shared {
  std::atomic<bool> stop{false};
  uint8_t stop_byte = 0;  // the asm loop reads a plain byte
  std::atomic<bool> measuring{false};
  // The CPU-bound goroutines and the sleeper that have begun to run: each
  // adds one as it starts, the timer thread reads it until the warm-up. On
  // lines of its own, so that a late starter does not touch the line of
  // `stop` that the running spinners read.
  alignas(128) std::atomic<int> started{0};
  char pad[128];
};

uint64_t LoadCount(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

// The spin workload's loop: a load, an increment, a store and a branch. It is
// a separate function so that its disassembly can be checked for calls
// (objdump -d goro-fair | grep -A12 SpinLoop): there are none. Aligned so
// that the loop never straddles a 32- or 64-byte boundary, where it ran at
// half speed in one build: its speed should not depend on where the linker
// put it.
__attribute__((noinline, aligned(64))) void SpinLoop(uint64_t* counter, const std::atomic<bool>* stop) {
  uint64_t n = *counter;
  while (!stop->load(std::memory_order_relaxed)) {
    ++n;
    __atomic_store_n(counter, n, __ATOMIC_RELAXED);
  }
}

// A clock reading taken within one turn: the preemption count is the same
// before and after it. (A preemption between the two would otherwise put a
// whole round of other goroutines' turns into this goroutine's turn.)
int64_t ReadClockInTurn(uint64_t* preemptions) {
  for (;;) {
    uint64_t p = goro::CurrentGoroutinePreemptions();
    int64_t t = MonotonicNs();
    if (goro::CurrentGoroutinePreemptions() == p) {
      *preemptions = p;
      return t;
    }
  }
}

// The spin loop with a clock reading every 4096 iterations; a change in the
// goroutine's preemption count between two readings starts a new turn.
void TimedSpinLoop(Worker* w, const std::atomic<bool>* stop) {
  uint64_t n = w->count;
  uint64_t seen = 0;
  int64_t t = ReadClockInTurn(&seen);
  Turn turn{t, t, n, n};
  while (!stop->load(std::memory_order_relaxed)) {
    for (int i = 0; i < 4096; ++i) {
      ++n;
      __atomic_store_n(&w->count, n, __ATOMIC_RELAXED);
    }
    uint64_t p = 0;
    t = ReadClockInTurn(&p);
    if (p != seen) {
      seen = p;
      w->turns.push_back(turn);
      turn = Turn{t, t, n, n};
    } else {
      turn.end = t;
      turn.last = n;
    }
  }
  w->turns.push_back(turn);
}

int Fib(int n) {
  if (n < 2) return n;
  int a = 0, b = 0;
  goro::WaitGroup wg;
  wg.Add(2);
  goro::Go([&] { a = Fib(n - 1); wg.Done(); });
  goro::Go([&] { b = Fib(n - 2); wg.Done(); });
  wg.Wait();
  return a + b;
}

void RunWorker(Worker* w, Shared* s, bool timed) {
  w->id = goro::GoroutineId();
  s->started.fetch_add(1);
  switch (w->role) {
    case Role::kSpin:
      if (timed) {
        TimedSpinLoop(w, &s->stop);
      } else {
        SpinLoop(&w->count, &s->stop);
      }
      break;
    case Role::kAsm:
      goro_fair_spin_asm(&w->count, &s->stop_byte);
      break;
    case Role::kSleep:
      while (!s->stop.load(std::memory_order_relaxed)) {
        goro::SleepFor(absl::Microseconds(500));
        __atomic_store_n(&w->count, w->count + 1, __ATOMIC_RELAXED);
      }
      break;
    case Role::kYield:
      while (!s->stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 1000; ++i) __atomic_store_n(&w->count, w->count + 1, __ATOMIC_RELAXED);
        goro::Yield();
      }
      break;
    case Role::kChan: {
      goro::Chan<int> ping, pong;
      goro::Go([ping, pong]() mutable {  // handles by value: they outlive this frame
        while (auto v = ping.Recv()) pong.Send(*v + 1);
      });
      int v = 0;
      while (!s->stop.load(std::memory_order_relaxed)) {
        ping.Send(v);
        v = *pong.Recv();
        __atomic_store_n(&w->count, w->count + 1, __ATOMIC_RELAXED);
      }
      ping.Close();
      break;
    }
    case Role::kFib:
      while (!s->stop.load(std::memory_order_relaxed)) {
        if (Fib(16) != 987) {
          std::fprintf(stderr, "goro-fair: fib(16) computed wrongly\n");
          std::abort();
        }
        __atomic_store_n(&w->count, w->count + 1, __ATOMIC_RELAXED);
      }
      break;
  }
  w->preemptions = goro::CurrentGoroutinePreemptions();
}

std::vector<Role> Roles(const std::string& workload, int n) {
  std::vector<Role> roles(n);
  for (int i = 0; i < n; ++i) {
    if (workload == "spin") roles[i] = Role::kSpin;
    if (workload == "asm") roles[i] = Role::kAsm;
    if (workload == "fib") roles[i] = Role::kFib;
    if (workload == "mixed") {
      // One loop for every CPU-bound role: shares of iterations compare only
      // goroutines running the same code (the C++ and asm loops differ in
      // speed, and compared across, they measured code placement).
      static constexpr Role kMix[] = {Role::kSpin, Role::kSleep, Role::kSpin, Role::kYield,
                                      Role::kSpin, Role::kChan};
      roles[i] = kMix[i % 6];
    }
  }
  return roles;
}

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr, "goro-fair: %s\n", msg.c_str());
  std::exit(2);
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

// The most goroutines --workload=fib runs (main says why).
constexpr int kMaxFibGoroutines = 1000;

// How long the timer thread waits for the goroutines to start.
constexpr absl::Duration kStartLimit = absl::Seconds(10);

// How the wait before the warm-up ended: `started` goroutines had begun to
// run, and either that was all of them, or the rest were starved, or
// `timed_out`: they were still starting after kStartLimit.
struct StartWait {
  int started = 0;
  bool timed_out = false;
};

// The window must not open before the goroutines it measures run: the
// runtime takes 11-16 ms to start here, and on one P the last of n spinners
// first runs after n-1 slices of the others. So the timer thread waits until
// `want` goroutines have counted themselves in `started`, then warms up.
// Some never start: with async preemption off a call-free spinner keeps its
// P, and the goroutines queued behind it wait until the run ends. So with it
// off, once one goroutine has started and none has for max(100 ms, 4
// slices), the rest are taken as starved and the wait ends. With it on,
// every goroutine gets a turn, and a quiet spell means only that the OS ran
// something else (gaps of 190 ms between starts on this 2-core VM under load).
StartWait WaitForStart(const std::atomic<int>& started, int want) {
  const absl::Time begin = absl::Now();
  absl::Time grew = begin;  // when `seen` last changed
  int seen = 0;
  for (;;) {
    const int k = started.load();
    const absl::Time now = absl::Now();
    if (k >= want) return {k, false};
    if (k != seen) {
      seen = k;
      grew = now;
    }
    // A goroutine has run, so the runtime has started and GetOptions gives
    // the settings it uses.
    if (k > 0 && !goro::GetOptions().async_preemption &&
        now - grew >= std::max(absl::Milliseconds(100), 4 * goro::GetOptions().time_slice)) {
      return {k, false};
    }
    if (now - begin >= kStartLimit) return {k, true};
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// Jain's index and min/max of a set of amounts, with their sum and extremes.
struct Spread {
  double jain = 0, ratio = 0;
  double sum = 0, min = 0, max = 0;
};

Spread SpreadOf(const std::vector<double>& v) {
  double sum = 0, sumsq = 0, mn = 1e300, mx = 0;
  for (double d : v) {
    sum += d;
    sumsq += d * d;
    mn = std::min(mn, d);
    mx = std::max(mx, d);
  }
  Spread s;
  if (sumsq > 0) s.jain = sum * sum / (static_cast<double>(v.size()) * sumsq);
  if (mx > 0) s.ratio = mn / mx;
  s.sum = sum;
  s.min = v.empty() ? 0 : mn;
  s.max = mx;
  return s;
}

// --turn_stats: what the spinners recorded within the window [t0, t1].
struct TurnStats {
  int turns_min = 0, turns_max = 0;
  double len_p50 = 0, len_p99 = 0, len_max = 0;     // ms, turns wholly inside the window
  double rate_p10 = 0, rate_p50 = 0, rate_p90 = 0;  // iterations per microsecond
  Spread time;                                       // of the ns each goroutine held a P
};

TurnStats SummarizeTurns(const std::vector<Worker>& ws, int64_t t0, int64_t t1) {
  TurnStats r;
  std::vector<double> lens, rates, held;
  r.turns_min = INT32_MAX;
  for (const Worker& w : ws) {
    if (w.role != Role::kSpin) continue;
    double ns = 0;
    int whole = 0;
    for (const Turn& t : w.turns) {
      ns += static_cast<double>(std::max<int64_t>(0, std::min(t.end, t1) - std::max(t.start, t0)));
      if (t.start < t0 || t.end > t1) continue;
      ++whole;
      lens.push_back(static_cast<double>(t.end - t.start) / 1e6);
      if (t.end > t.start) rates.push_back(static_cast<double>(t.last - t.first) * 1e3 / static_cast<double>(t.end - t.start));
    }
    held.push_back(ns);
    r.turns_min = std::min(r.turns_min, whole);
    r.turns_max = std::max(r.turns_max, whole);
  }
  if (held.empty()) r.turns_min = 0;
  std::sort(lens.begin(), lens.end());
  std::sort(rates.begin(), rates.end());
  r.len_p50 = Percentile(lens, 0.50);
  r.len_p99 = Percentile(lens, 0.99);
  r.len_max = lens.empty() ? 0 : lens.back();
  r.rate_p10 = Percentile(rates, 0.10);
  r.rate_p50 = Percentile(rates, 0.50);
  r.rate_p90 = Percentile(rates, 0.90);
  r.time = SpreadOf(held);
  return r;
}

// A string as gnuplot reads it between single quotes (a quote is doubled).
std::string GnuplotQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += c;
  }
  return out + "'";
}

// The directory part of `path` ("." for a bare file name).
std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The file the chart goes to: `path`, or the file a symbolic link there
// points to (the chart replaces that file; the link stays).
std::string PlotTarget(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(path, ec)) return path;
  std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : target.string();
}

// Why the chart may not replace what is at `target` now, as the rest of a
// sentence that begins "the file", or "" if it may: nothing is there, or a
// PNG is (an earlier chart). Anything else is a mistyped name (a source
// file, /etc/passwd), which --plot overwrote.
std::string ExistingFileProblem(const std::string& target) {
  struct stat st;
  if (stat(target.c_str(), &st) != 0) {
    return errno == ENOENT ? "" : absl::StrCat("cannot be looked at: ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return "is there and is not a regular file";
  static constexpr char kPngSignature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream f(target, std::ios::binary);
  if (!f) return absl::StrCat("is there and cannot be read to tell whether it is a PNG: ", std::strerror(errno));
  f.read(head, sizeof head);
  if (f.gcount() != sizeof head || std::memcmp(head, kPngSignature, sizeof head) != 0) {
    return "is there and is not a PNG";
  }
  return "";
}

// Writes the chart to `path` (through a symbolic link there) and returns "",
// or returns why it did not. gnuplot writes a temporary file beside the
// target, renamed over it only once gnuplot has succeeded, so that a failure
// leaves no half-written chart. A new chart gets `new_mode`, a replaced one
// keeps the old one's permissions. Without a sleeper there is no lateness
// panel; a sleeper that never woke has one that says so.
std::string WritePlot(const std::string& path, mode_t new_mode, const std::vector<Worker>& ws,
                      const std::vector<double>& shares, bool sleeper, const std::vector<double>& lateness_ms,
                      const std::string& title) {
  char dir[] = "/tmp/goro-fair-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::StrCat("cannot make a directory in /tmp: ", std::strerror(errno));
  std::string d(dir);
  const std::string target = PlotTarget(path);
  std::string out = DirOf(target) + "/.goro-fair-plot-XXXXXX";
  int fd = mkstemp(out.data());
  std::error_code ec;
  if (fd < 0) {
    std::filesystem::remove_all(d, ec);
    return absl::StrFormat("cannot make a temporary file in %s: %s", DirOf(target), std::strerror(errno));
  }
  close(fd);
  {
    // The CPU-bound goroutines only: the others (--workload=mixed) count
    // sleeps, yields and channel round trips, and have no share.
    std::ofstream f(d + "/shares.dat");
    int bar = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      if (CpuBound(ws[i].role)) f << bar++ << " " << shares[i] * 100 << " \"" << ws[i].id << "\"\n";
    }
  }
  {
    std::ofstream f(d + "/lateness.dat");
    for (size_t i = 0; i < lateness_ms.size(); ++i) {
      f << lateness_ms[i] << " " << static_cast<double>(i + 1) / static_cast<double>(lateness_ms.size()) << "\n";
    }
  }
  {
    std::ofstream f(d + "/plot.gp");
    f << "set terminal png size " << (sleeper ? 1200 : 700) << ",500\n"
      << "set output " << GnuplotQuoted(out) << "\n"
      << "set multiplot layout 1," << (sleeper ? 2 : 1) << " title " << GnuplotQuoted(title) << "\n"
      << "set title 'Share of the iterations, per CPU-bound goroutine'\nset ylabel 'share of the iterations (%)'\n"
      << "set xlabel 'goroutine id'\n"
      << "set style fill solid 0.6\nset boxwidth 0.8\nset yrange [0:*]\nunset key\n"
      << "plot '" << d << "/shares.dat' using 1:2:xtic(3) with boxes lc rgb '#4477aa'\n";
    if (sleeper) {
      f << "set title 'Sleeper wake-up lateness (CDF)'\nset ylabel 'fraction of wake-ups'\n"
        << "set xlabel 'lateness (ms)'\nset yrange [0:1]\nset xtics auto\nset grid\n";
      if (lateness_ms.empty()) {
        // No points: gnuplot would say "empty x range". An empty frame with
        // the reason, and a curve above the y range, so nothing is drawn.
        f << "set xrange [0:1]\nset label 1 'the sleeper never woke in the window' at graph 0.5,0.5 center\n"
          << "plot 2\n";
      } else {
        f << "plot '" << d << "/lateness.dat' using 1:2 with steps lw 2 lc rgb '#aa3377'\n";
      }
    }
    f << "unset multiplot\n";
  }
  // gnuplot's messages go to stderr, after the report already printed.
  std::fflush(stdout);
  std::string cmd = "gnuplot '" + d + "/plot.gp' 1>&2";
  int rc = std::system(cmd.c_str());
  std::filesystem::remove_all(d, ec);
  std::string problem;
  struct stat st;
  if (rc != 0) {
    problem = "gnuplot failed (its message is above)";
  } else if (std::filesystem::file_size(out, ec) == 0 || ec) {
    problem = "gnuplot wrote no chart";
  } else if (std::string p = ExistingFileProblem(target); !p.empty()) {
    // Checked before the run; something else made this file since. The
    // chart is whole: leave it for the user.
    return absl::StrFormat("%s changed during the run: the file %s; the chart is in %s", target, p, out);
  } else if (chmod(out.c_str(), stat(target.c_str(), &st) == 0 ? st.st_mode & 07777 : new_mode) != 0 ||
             rename(out.c_str(), target.c_str()) != 0) {
    problem = absl::StrFormat("cannot move the chart from %s to %s: %s", out, target, std::strerror(errno));
  }
  if (!problem.empty()) unlink(out.c_str());
  return problem;
}

bool InPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    std::string file = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (access(file.c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Checked before the run, so that a bad --plot does not cost the run.
// Returns the permissions for a new chart file: 0666 less the umask, as
// gnuplot would have created it (the temporary file it now writes is 0600).
mode_t CheckPlotPath(const std::string& path) {
  const std::string target = PlotTarget(path);
  const std::string dir = DirOf(target);
  auto control = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  if (std::any_of(path.begin(), path.end(), control) || std::any_of(target.begin(), target.end(), control)) {
    Usage(absl::StrFormat("--plot=%s: the file name holds a control character", absl::CHexEscape(path)));
  }
  if (path.back() == '/' || std::filesystem::is_directory(path)) {
    Usage(absl::StrFormat("--plot=%s: is a directory; give a file name such as %s/fair.png", path,
                          absl::StripSuffix(path, "/")));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    Usage(absl::StrFormat("--plot=%s: cannot write in %s: %s", path, dir, std::strerror(errno)));
  }
  if (std::string problem = ExistingFileProblem(target); !problem.empty()) {
    Usage(absl::StrFormat("--plot=%s: the file %s; give a new name (--plot replaces only an earlier chart)", path,
                          problem));
  }
  if (!InPath("gnuplot")) {
    Usage(absl::StrFormat("--plot=%s: gnuplot is not installed (apt-get install gnuplot-nox)", path));
  }
  // Before the runtime's threads: umask() sets the mask to read it.
  const mode_t mask = umask(0);
  umask(mask);
  return 0666 & ~mask;
}

// Abseil's parser ends the process with status 1 after a flag it cannot
// parse and after --help, and 1 is goro-fair's "below a threshold". While it
// runs, an atexit hook turns its exits into 2 (a usage error, like goro-fair's
// own) or, after a help flag, 0.
bool parsing_flags = false;
bool help_asked = false;

std::vector<char*> ParseFlags(int argc, char** argv) {
  // --help lists the flags of the files named like the program; the binary
  // is goro-fair, this file goro_fair.cc.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) { return absl::StrContains(file, "goro_fair"); };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.normalize_filename = [](absl::string_view file) {
    size_t at = file.rfind("stress/");
    return std::string(at == absl::string_view::npos ? file : file.substr(at));
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Runs CPU-bound goroutines on goro and reports how fairly they shared the CPU, as each one's share\n"
      "of the iterations they did in the window (--turn_stats: also of the time they held a P).\n"
      "Example: goro-fair --workload=spin --procs=2 --goroutines=16 --seconds=3\n"
      "The window opens min(200 ms, seconds/10) after every goroutine has started (with async preemption\n"
      "off, where call-free spinners starve the rest, once none has started for max(100 ms, 4 slices)).\n"
      "Exit status: 0 done, 1 below a threshold (--min_jain, --min_share_ratio, --max_p99_ms), 2 bad usage,\n"
      "nothing to measure (the goroutines were still starting after 10 s, or did no work in the window), or\n"
      "a --plot chart that could not be written after a run that met its thresholds (below one, it stays 1).");
  for (int i = 1; i < argc && absl::string_view(argv[i]) != "--"; ++i) {
    absl::string_view a(argv[i]);
    if (absl::StartsWith(a, "--")) a.remove_prefix(1);
    // Abseil's usage flags; --helpx is an unknown flag, not a help request.
    if (a == "-help" || a == "-helpfull" || a == "-helpshort" || a == "-helppackage" || a == "-version" ||
        absl::StartsWith(a, "-help=") || absl::StartsWith(a, "-helpon=") || absl::StartsWith(a, "-helpmatch=")) {
      help_asked = true;
    }
  }
  parsing_flags = true;
  std::atexit([] {
    if (!parsing_flags) return;
    std::cout.flush();  // the usage text; _exit flushes nothing
    std::cerr.flush();
    _exit(help_asked ? 0 : 2);
  });
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  parsing_flags = false;
  return rest;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = ParseFlags(argc, argv);
  if (rest.size() > 1) Usage(absl::StrFormat("unexpected argument \"%s\" (flags look like --procs=2)", rest[1]));

  const int procs = absl::GetFlag(FLAGS_procs);
  const int n = absl::GetFlag(FLAGS_goroutines);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const absl::Duration slice = absl::GetFlag(FLAGS_time_slice);
  const std::string workload = absl::GetFlag(FLAGS_workload);
  const absl::Duration interval = absl::GetFlag(FLAGS_sleep_interval);
  if (procs < 1 || procs > 1024) Usage(absl::StrFormat("--procs=%d: want 1 to 1024", procs));
  if (n < 1 || n > 100000) Usage(absl::StrFormat("--goroutines=%d: want 1 to 100000", n));
  if (!(seconds > 0 && seconds <= 3600)) Usage(absl::StrFormat("--seconds=%g: want more than 0, at most 3600", seconds));
  if (slice < absl::Microseconds(50) || slice > absl::Seconds(10)) {
    Usage(absl::StrFormat("--time_slice=%s: want 50us to 10s", absl::FormatDuration(slice)));
  }
  if (workload != "spin" && workload != "asm" && workload != "mixed" && workload != "fib") {
    Usage(absl::StrFormat("--workload=%s: want spin, asm, mixed or fib", workload));
  }
  // Each fib goroutine keeps a fib(16) tree of goroutines going, about 0.8 MB
  // of stacks in all (1000 of them: 785 MB), and the trees finish ever later
  // as they share the Ps: 1000 goroutines need minutes for ten fib(16) each.
  if (workload == "fib" && n > kMaxFibGoroutines) {
    Usage(absl::StrFormat("--goroutines=%d: want 1 to %d with --workload=fib (each keeps a tree of goroutines, "
                          "about 0.8 MB of stacks)",
                          n, kMaxFibGoroutines));
  }
  if (interval < absl::Microseconds(10) || interval > absl::Seconds(1)) {
    Usage(absl::StrFormat("--sleep_interval=%s: want 10us to 1s", absl::FormatDuration(interval)));
  }
  // A threshold that is negative, NaN (the negated comparisons catch it) or,
  // for Jain's index and the share ratio, above 1 is a mistake: 0 means "no
  // check", nothing else does.
  const double min_jain = absl::GetFlag(FLAGS_min_jain);
  const double min_share_ratio = absl::GetFlag(FLAGS_min_share_ratio);
  const double max_p99_ms = absl::GetFlag(FLAGS_max_p99_ms);
  const int table_rows = absl::GetFlag(FLAGS_table_rows);
  if (!(min_jain >= 0 && min_jain <= 1)) Usage(absl::StrFormat("--min_jain=%g: want 0 (no check) to 1", min_jain));
  if (!(min_share_ratio >= 0 && min_share_ratio <= 1)) {
    Usage(absl::StrFormat("--min_share_ratio=%g: want 0 (no check) to 1", min_share_ratio));
  }
  if (!(max_p99_ms >= 0)) Usage(absl::StrFormat("--max_p99_ms=%g: want 0 (no limit) or more", max_p99_ms));
  if (table_rows < 0) Usage(absl::StrFormat("--table_rows=%d: want 0 or more", table_rows));
  const bool turn_stats = absl::GetFlag(FLAGS_turn_stats);
  if (turn_stats && workload != "spin") {
    Usage(absl::StrFormat("--turn_stats: only the spin workload times its turns, not --workload=%s", workload));
  }
  const bool sleeper = absl::GetFlag(FLAGS_sleeper);
  if (max_p99_ms > 0 && !sleeper) Usage("--max_p99_ms: there is no sleeper to check (--sleeper=false)");
  const std::string plot = absl::GetFlag(FLAGS_plot);
  const mode_t plot_mode = plot.empty() ? 0 : CheckPlotPath(plot);

  goro::Options opts;
  opts.max_procs = procs;
  opts.time_slice = slice;
  opts.async_preemption = absl::GetFlag(FLAGS_async_preemption);

  std::vector<Worker> workers(n);
  std::vector<Role> roles = Roles(workload, n);
  for (int i = 0; i < n; ++i) workers[i].role = roles[i];
  Shared shared;
  std::vector<double> lateness_ms;
  std::vector<uint64_t> c0(n), c1(n);
  int64_t window_start = 0, window_end = 0;  // MonotonicNs
  int64_t cpu_start = 0, cpu_end = 0;        // ProcessCpuNs at the same moments
  goro::Stats st0, st1;                      // at the window's start and end
  uint64_t sleeper_preemptions = 0;
  const int want_started = n + (sleeper ? 1 : 0);
  StartWait start;

  // A plain thread keeps time, so that the run ends even when goroutines
  // starve everything else (--async_preemption=false on one P). It waits for
  // the goroutines to start, then warms up for min(200 ms, seconds/10).
  std::thread timer([&] {
    start = WaitForStart(shared.started, want_started);
    if (!start.timed_out) {
      absl::SleepFor(std::min(absl::Milliseconds(200), absl::Seconds(seconds / 10)));
      for (int i = 0; i < n; ++i) c0[i] = LoadCount(&workers[i].count);
      st0 = goro::GetStats();
      window_start = MonotonicNs();
      cpu_start = ProcessCpuNs();
      shared.measuring.store(true);
      absl::SleepFor(absl::Seconds(seconds));
      for (int i = 0; i < n; ++i) c1[i] = LoadCount(&workers[i].count);
      st1 = goro::GetStats();
      window_end = MonotonicNs();
      cpu_end = ProcessCpuNs();
      shared.measuring.store(false);
    }
    shared.stop_byte = 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    shared.stop.store(true);
  });

  goro::Run(
      [&] {
        goro::WaitGroup wg;
        wg.Add(n + (sleeper ? 1 : 0));
        for (int i = 0; i < n; ++i) {
          goro::Go([&, i] {
            RunWorker(&workers[i], &shared, turn_stats);
            wg.Done();
          });
        }
        if (sleeper) {
          goro::Go([&] {
            shared.started.fetch_add(1);
            while (!shared.stop.load()) {
              absl::Time t = absl::Now();
              goro::SleepFor(interval);
              absl::Duration late = absl::Now() - t - interval;
              if (shared.measuring.load()) lateness_ms.push_back(absl::ToDoubleMilliseconds(late));
            }
            sleeper_preemptions = goro::CurrentGoroutinePreemptions();
            wg.Done();
          });
        }
        wg.Wait();
      },
      opts);
  timer.join();
  if (start.timed_out && start.started == 0) {
    std::fprintf(stderr, "goro-fair: no goroutine had started after %s\n", absl::FormatDuration(kStartLimit).c_str());
    return 2;
  }
  if (start.timed_out) {
    std::fprintf(stderr,
                 "goro-fair: after %s only %d of %d goroutines had started, and more were still starting: a window "
                 "opened then would measure their start-up (fewer --goroutines, more --procs or a shorter "
                 "--time_slice)\n",
                 absl::FormatDuration(kStartLimit).c_str(), start.started, want_started);
    return 2;
  }
  const absl::Duration window = absl::Nanoseconds(window_end - window_start);

  // Shares of the CPU-bound goroutines within the measured window.
  std::vector<double> done;  // iterations of each CPU-bound goroutine
  for (int i = 0; i < n; ++i) {
    if (CpuBound(workers[i].role)) done.push_back(static_cast<double>(c1[i] - c0[i]));
  }
  const Spread spread = SpreadOf(done);
  const double total = spread.sum, jain = spread.jain, ratio = spread.ratio;
  const int ncpu = static_cast<int>(done.size());
  std::vector<double> shares(n, 0.0);
  for (int i = 0; i < n; ++i) {
    if (CpuBound(workers[i].role) && total > 0) shares[i] = static_cast<double>(c1[i] - c0[i]) / total;
  }
  // Nothing to compare: a Jain index of 0 would read as "one goroutine got
  // everything". (A window shorter than one fib(16), for instance.)
  if (total == 0) {
    std::fprintf(stderr,
                 "goro-fair: no work was measured in the window: the %d CPU-bound goroutines finished no iteration "
                 "in %.3f s (a longer --seconds?)\n",
                 ncpu, absl::ToDoubleSeconds(window));
    return 2;
  }
  std::sort(lateness_ms.begin(), lateness_ms.end());
  double p50 = Percentile(lateness_ms, 0.50), p99 = Percentile(lateness_ms, 0.99);
  double lmax = lateness_ms.empty() ? 0 : lateness_ms.back();
  const goro::Stats st = goro::GetStats();  // the whole run; st0 and st1 bound the window
  // What the runtime ran with: GORODEBUG may override the time slice and turn
  // async preemption off, and a TSan build or a CPU without XSAVE turns it off.
  const goro::Options used = goro::GetOptions();
  const absl::Duration used_slice = used.time_slice;
  const bool used_async = used.async_preemption;

  std::printf("goro-fair: workload=%s procs=%d goroutines=%d seconds=%g time_slice=%s async_preemption=%s\n",
              workload.c_str(), used.max_procs, n, seconds, absl::FormatDuration(used_slice).c_str(),
              used_async ? "on" : "off");
  if (used_slice != slice || used_async != opts.async_preemption) {
    std::printf("  (the flags asked for time_slice=%s async_preemption=%s: GORODEBUG, a TSan build or the CPU overrode them)\n",
                absl::FormatDuration(slice).c_str(), opts.async_preemption ? "on" : "off");
  }
  if (start.started < want_started) {
    std::printf("  (%d of %d goroutines had not started when the warm-up began: with async preemption off, none had "
                "for a while, so the rest were starved)\n",
                want_started - start.started, want_started);
  }
  std::printf("\n");
  // Iterations and shares count the window. A goroutine's preemption count
  // can be read only by the goroutine itself, which a call-free spinner does
  // when it stops, so that column counts the whole run. A fib goroutine is
  // the parent of its fib(16) trees and only waits: its count is always 0,
  // so the column is left out (the trees' preemptions are in the totals).
  const bool preemption_column = workload != "fib";
  std::printf("  %9s  %-5s  %15s  %7s%s\n", "goroutine", "role", "iterations", "share",
              preemption_column ? "  preemptions (whole run)" : "");
  int rows = std::min(n, table_rows);
  for (int i = 0; i < rows; ++i) {
    const Worker& w = workers[i];
    std::string share = CpuBound(w.role) ? absl::StrFormat("%6.2f%%", shares[i] * 100) : "     - ";
    std::string preemptions =
        preemption_column ? absl::StrFormat("  %23llu", static_cast<unsigned long long>(w.preemptions)) : "";
    std::printf("  %9lld  %-5s  %15llu  %7s%s\n", static_cast<long long>(w.id), RoleName(w.role),
                static_cast<unsigned long long>(c1[i] - c0[i]), share.c_str(), preemptions.c_str());
  }
  if (rows < n) std::printf("  ... %d more goroutines (--table_rows)\n", n - rows);
  double fair_share = ncpu > 0 ? 100.0 / ncpu : 0;
  std::printf("\nFairness over %d CPU-bound goroutines (fair share %.2f%%):\n", ncpu, fair_share);
  std::printf("  Jain's index      %.5f   (1 = perfectly fair, 1/n = one goroutine got everything)\n", jain);
  std::printf("  min/max share     %.3f     (min %.2f%%, max %.2f%%)\n", ratio,
              total > 0 ? spread.min / total * 100 : 0.0, total > 0 ? spread.max / total * 100 : 0.0);
  std::printf("  throughput        %.4g iterations/s over %.3f s\n", total / absl::ToDoubleSeconds(window),
              absl::ToDoubleSeconds(window));
  // Shares are counted in whole turns (spinners) or whole fib(16) trees
  // (fib), so a window that holds few of them cuts the last one short for
  // some goroutines, and the shares show where: say so below ten. Counted
  // from what the window held, not from the slice: in mixed the other roles
  // take some of the Ps' time, and a slice that ends late or a machine that
  // is busy elsewhere makes fewer turns. A spinner's turn ends in a
  // preemption when there are more CPU-bound goroutines than Ps; without
  // async preemption there are no turns, only starvation, which the shares
  // show as it is.
  constexpr double kFewestTurns = 10;
  const uint64_t window_preemptions = (st1.async_preemptions - st0.async_preemptions) +
                                      (st1.cooperative_preemptions - st0.cooperative_preemptions);
  // How long a window would hold twice kFewestTurns, at `per_s` of them a second.
  auto longer = [&](double per_s) {
    if (!(per_s > 0)) return std::string("a longer --seconds");
    const double need = 2 * kFewestTurns / per_s;
    if (!(need <= 3600)) return std::string("fewer --goroutines, as --seconds=3600 is too short");
    return absl::StrFormat("--seconds=%g or more", need >= 10 ? std::ceil(need) : std::ceil(need * 10) / 10);
  };
  const double window_s = absl::ToDoubleSeconds(window);
  if (workload == "fib" && spread.min < kFewestTurns) {
    // The fewest finished can be 0: the mean rate then gives a lower bound.
    const double per_s = (spread.min > 0 ? spread.min : total / ncpu) / window_s;
    std::printf("  (the goroutine that finished fewest fib(16) trees in the window finished %.0f: too few for "
                "Jain's index and the shares to mean anything; use %s)\n",
                spread.min, longer(per_s).c_str());
  } else if (workload != "fib" && used_async && ncpu > used.max_procs) {
    const double turns = static_cast<double>(window_preemptions) / ncpu;
    if (turns < kFewestTurns) {
      std::printf("  (the window holds %.1f turns on a P per CPU-bound goroutine, %llu preemptions for %d "
                  "goroutines: too few for Jain's index and the shares to mean anything; use %s)\n",
                  turns, static_cast<unsigned long long>(window_preemptions), ncpu, longer(turns / window_s).c_str());
    }
  }
  TurnStats ts;
  if (turn_stats) {
    ts = SummarizeTurns(workers, window_start, window_end);
    // At most one goroutine holds a P at a time, and one goroutine at most
    // one P, so the turns can account for at most all of the time of the Ps
    // there are spinners for; the rest went to switches and sampling.
    const int busy_ps = std::min(used.max_procs, ncpu);
    double accounted = ts.time.sum / (static_cast<double>(busy_ps) * static_cast<double>(window_end - window_start));
    std::printf("Turns on a P (--turn_stats; each spinner reads the clock every 4096 iterations):\n");
    const std::string of_ps =
        busy_ps == used.max_procs
            ? std::string("the Ps' time")
            : absl::StrFormat("%d P%s time (%d spinner%s, %d Ps)", busy_ps, busy_ps == 1 ? "'s" : "s'", ncpu,
                              ncpu == 1 ? "" : "s", used.max_procs);
    std::printf("  turns per goroutine  %d to %d, accounting for %.1f%% of %s\n", ts.turns_min, ts.turns_max,
                accounted * 100, of_ps.c_str());
    std::printf("  turn length          p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", ts.len_p50, ts.len_p99, ts.len_max);
    std::printf("  iterations per us    p10 %.0f, p50 %.0f, p90 %.0f   (the CPU's speed from turn to turn)\n",
                ts.rate_p10, ts.rate_p50, ts.rate_p90);
    std::printf("  time holding a P     Jain %.5f, min/max %.3f   (the scheduler's part of the fairness)\n",
                ts.time.jain, ts.time.ratio);
  }
  if (sleeper && lateness_ms.empty()) {
    std::printf("Sleeper (sleeps %s): never woke in the measured window (%s); preempted %llu times in the "
                "whole run\n",
                absl::FormatDuration(interval).c_str(),
                window <= interval ? "the window is no longer than one sleep" : "starved",
                static_cast<unsigned long long>(sleeper_preemptions));
  } else if (sleeper) {
    std::printf("Sleeper (sleeps %s, %zu wake-ups): lateness p50 %.3f ms, p99 %.3f ms, max %.3f ms; preempted %llu "
                "times in the whole run\n",
                absl::FormatDuration(interval).c_str(), lateness_ms.size(), p50, p99, lmax,
                static_cast<unsigned long long>(sleeper_preemptions));
  }
  std::printf("Preemptions in the window: %llu async (signal), %llu cooperative; %llu signals sent; %llu steals\n",
              static_cast<unsigned long long>(st1.async_preemptions - st0.async_preemptions),
              static_cast<unsigned long long>(st1.cooperative_preemptions - st0.cooperative_preemptions),
              static_cast<unsigned long long>(st1.preempt_signals_sent - st0.preempt_signals_sent),
              static_cast<unsigned long long>(st1.steals - st0.steals));
  std::printf("  in the whole run: %llu async (signal), %llu cooperative; %llu signals sent; %llu steals; %d threads\n",
              static_cast<unsigned long long>(st.async_preemptions),
              static_cast<unsigned long long>(st.cooperative_preemptions),
              static_cast<unsigned long long>(st.preempt_signals_sent),
              static_cast<unsigned long long>(st.steals), st.threads);

  if (absl::GetFlag(FLAGS_json)) {
    // No wake-up (no sleeper, or one that never woke) has no lateness: null,
    // not a perfect 0.
    auto ms = [&](double v) { return lateness_ms.empty() ? std::string("null") : absl::StrFormat("%.4f", v); };
    std::printf(
        "{\"workload\":\"%s\",\"procs\":%d,\"goroutines\":%d,\"time_slice_us\":%lld,\"async\":%s,"
        "\"jain\":%.6f,\"min_max\":%.6f,\"throughput\":%.6g,\"p50_ms\":%s,\"p99_ms\":%s,\"max_ms\":%s,"
        "\"wakeups\":%zu,\"async_preemptions\":%llu,\"cooperative_preemptions\":%llu,\"signals\":%llu,"
        "\"window_async_preemptions\":%llu,\"window_cooperative_preemptions\":%llu,\"window_signals\":%llu,"
        "\"window_s\":%.6f,\"window_cpu_s\":%.6f%s}\n",
        workload.c_str(), used.max_procs, n, static_cast<long long>(absl::ToInt64Microseconds(used_slice)),
        used_async ? "true" : "false", jain, ratio, total / absl::ToDoubleSeconds(window), ms(p50).c_str(),
        ms(p99).c_str(), ms(lmax).c_str(), lateness_ms.size(), static_cast<unsigned long long>(st.async_preemptions),
        static_cast<unsigned long long>(st.cooperative_preemptions),
        static_cast<unsigned long long>(st.preempt_signals_sent),
        static_cast<unsigned long long>(st1.async_preemptions - st0.async_preemptions),
        static_cast<unsigned long long>(st1.cooperative_preemptions - st0.cooperative_preemptions),
        static_cast<unsigned long long>(st1.preempt_signals_sent - st0.preempt_signals_sent), window_s,
        static_cast<double>(cpu_end - cpu_start) / 1e9,
        turn_stats ? absl::StrFormat(",\"time_jain\":%.6f,\"time_min_max\":%.6f,\"turn_p50_ms\":%.4f,"
                                     "\"turn_p99_ms\":%.4f,\"rate_p10\":%.1f,\"rate_p50\":%.1f,\"rate_p90\":%.1f",
                                     ts.time.jain, ts.time.ratio, ts.len_p50, ts.len_p99, ts.rate_p10, ts.rate_p50,
                                     ts.rate_p90)
                         .c_str()
                   : "");
  }

  int rc = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
    if (!ok) rc = 1;
  };
  if (min_jain > 0) {
    check(jain >= min_jain, absl::StrFormat("Jain's index %.5f >= --min_jain=%g", jain, min_jain));
  }
  if (min_share_ratio > 0) {
    check(ratio >= min_share_ratio,
          absl::StrFormat("min/max share %.4f >= --min_share_ratio=%g", ratio, min_share_ratio));
  }
  if (max_p99_ms > 0 && lateness_ms.empty()) {
    check(false, absl::StrFormat("the sleeper never woke, so its p99 lateness is not <= --max_p99_ms=%g", max_p99_ms));
  } else if (max_p99_ms > 0) {
    check(p99 <= max_p99_ms, absl::StrFormat("sleeper p99 lateness %.3f ms <= --max_p99_ms=%g", p99, max_p99_ms));
  }
  // After the verdicts, so that a gnuplot failure does not hide them.
  if (!plot.empty()) {
    std::fflush(stdout);
    std::string title = absl::StrFormat("goro-fair %s: %d goroutines on %d Ps, slice %s, Jain %.4f", workload, n,
                                        used.max_procs, absl::FormatDuration(used_slice), jain);
    if (std::string problem = WritePlot(plot, plot_mode, workers, shares, sleeper, lateness_ms, title);
        problem.empty()) {
      std::printf("Chart written to %s\n", plot.c_str());
    } else {
      std::fprintf(stderr, "goro-fair: could not write --plot=%s: %s\n", plot.c_str(), problem.c_str());
      // A FAIL above stays 1: the run measured what it was asked to, and
      // only the chart is missing.
      return rc != 0 ? rc : 2;
    }
  }
  return rc;
}
