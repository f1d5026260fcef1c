// goro_bench: micro-benchmarks of goro's scheduler, channels and sync
// primitives, the C++ half of the comparison with Go (bench/go is the other).
//
//   goro_bench --procs=N [--all] [--jsonl] [--watchdog=SECONDS] [benchmark flags]
//
// The runtime takes its Options only once, from the Run that starts it, so
// one process measures one procs count: --procs=N (else $GOROMAXPROCS, else
// the CPUs it may run on). Each workload is registered only for the procs
// counts it is meant for (--all registers every workload); the name carries
// the count, e.g. "spawn_complete/procs:2". bench/compare.sh runs the binary
// once per procs value.
//
// Every benchmark body runs inside goro::Run, on a goroutine: the
// `for (auto _ : state)` loop itself is goroutine code, so timing starts and
// stops on the goroutine. The goroutine may move between threads, so times
// are wall-clock (UseRealTime) and CPU time is the whole process's.
//
// Each workload reports one figure per operation (ns per goroutine, per
// Yield, per round trip, ...). With --jsonl they are printed to stdout as JSON
// lines (the format of bench/go), and the usual console table goes to stderr.
//
// Keep the workloads identical to bench/go/main.go.
#include <benchmark/benchmark.h>

#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/bench_common.h"
#include "goro/goro.h"

namespace goro_bench {
namespace {

// Batch sizes shared with bench/go/main.go.
constexpr int kSpawnBatch = 10000;   // goroutines spawned (and joined) per iteration
constexpr int kMutexWorkers = 4;     // goroutines contending for the mutex
constexpr int kMutexOpsPerGo = 2500; // lock/unlock pairs per worker per iteration
constexpr int kRWMutexWorkers = 4;     // goroutines sharing the RWMutex
constexpr int kRWMutexOpsPerGo = 2560; // lock/unlock pairs per worker per iteration
constexpr int kRWMutexWriteEvery = 64; // one in this many is Lock; the others RLock
static_assert(kRWMutexOpsPerGo % kRWMutexWriteEvery == 0, "writes per worker must be exact");
constexpr int kFibN = 27;
constexpr int64_t kFibWant = 196418;
constexpr size_t kBufferedChanCap = 128;
constexpr int kCondWaiters = 10000;          // goroutines waiting on the CondVar
constexpr int kCloseWakeGoroutines = 100000; // goroutines blocked on the closed channel
constexpr int kYieldManyGoroutines = 10000;
constexpr int kYieldManyRounds = 20;         // Yields per goroutine per iteration
constexpr int kSyscallGoroutines = 200;
constexpr int kSyscallsPerGo = 10;           // blocking calls per goroutine per iteration
constexpr int64_t kSyscallSleepNs = 2000000; // each call is a 2 ms nanosleep

int g_procs = 0;

goro::Options RuntimeOptions() {
  goro::Options opts;
  opts.max_procs = g_procs;
  return opts;
}

// Runs `body` as a goroutine (goro::Run) under the watchdog.
void InGoroutine(const char* name, absl::AnyInvocable<void() &&> body) {
  Watchdog::Arm(name);
  goro::Run(std::move(body), RuntimeOptions());
  Watchdog::Disarm();
}

// Marks the run failed: a wrong result means a broken runtime, and its time
// must not be reported as if it were fine.
void Fail(benchmark::State& state, const std::string& msg) {
  std::fprintf(stderr, "goro_bench: %s\n", msg.c_str());
  state.SkipWithError(msg.c_str());
}

// spawn_complete: start kSpawnBatch goroutines that only call wg.Done, then
// wait for all of them. Reported per goroutine.
void BM_SpawnComplete(benchmark::State& state) {
  InGoroutine("spawn_complete", [&state] {
    goro::WaitGroup wg;
    for (auto _ : state) {
      wg.Add(kSpawnBatch);
      for (int j = 0; j < kSpawnBatch; ++j) {
        goro::Go([&wg] { wg.Done(); });
      }
      wg.Wait();
    }
  });
}

// yield: this goroutine and a partner both call goro::Yield in a loop on one
// P. Reported per Yield, counting both goroutines' calls (the partner counts
// its own; with strict alternation that is two Yields per iteration). A
// partner that ran far less often than we yielded means Yield did not switch.
void BM_Yield(benchmark::State& state) {
  InGoroutine("yield", [&state] {
    std::atomic<bool> stop{false};
    int64_t partner_yields = 0;  // written by the partner before done.Done()
    goro::WaitGroup done;
    done.Add(1);
    goro::Go([&] {
      int64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        goro::Yield();
        ++n;
      }
      partner_yields = n;
      done.Done();
    });
    goro::Yield();  // let the partner reach its loop
    for (auto _ : state) {
      goro::Yield();
    }
    stop.store(true, std::memory_order_relaxed);
    done.Wait();
    const auto iters = static_cast<int64_t>(state.iterations());
    state.counters["ops_per_iter"] =
        static_cast<double>(iters + partner_yields) / static_cast<double>(iters);
    if (partner_yields < iters / 2) {
      Fail(state, absl::StrFormat("yield: the partner yielded %d times while we yielded %d: "
                                  "Yield does not alternate",
                                  partner_yields, iters));
    }
  });
}

// chan_unbuffered_pingpong: one round trip per iteration over two unbuffered
// channels.
void BM_ChanUnbufferedPingPong(benchmark::State& state) {
  InGoroutine("chan_unbuffered_pingpong", [&state] {
    goro::Chan<int64_t> ping, pong;
    goro::WaitGroup done;
    done.Add(1);
    goro::Go([&] {
      while (std::optional<int64_t> v = ping.Recv()) pong.Send(*v + 1);
      done.Done();
    });
    int64_t x = 0;
    for (auto _ : state) {
      ping.Send(x);
      x = pong.Recv().value_or(-1);
    }
    ping.Close();
    done.Wait();
    benchmark::DoNotOptimize(x);
    if (x != static_cast<int64_t>(state.iterations())) {
      Fail(state, absl::StrFormat("pingpong: %d round trips counted, want %d", x,
                                  static_cast<int64_t>(state.iterations())));
    }
  });
}

// chan_buffered128: a producer goroutine sends max_iterations values through a
// channel with room for 128; this goroutine receives them. Per element.
void BM_ChanBuffered128(benchmark::State& state) {
  InGoroutine("chan_buffered128", [&state] {
    goro::Chan<int64_t> ch(kBufferedChanCap);
    const int64_t n = static_cast<int64_t>(state.max_iterations);
    goro::Go([ch, n]() mutable {
      for (int64_t i = 0; i < n; ++i) ch.Send(i);
      ch.Close();
    });
    int64_t sum = 0;
    for (auto _ : state) {
      sum += ch.Recv().value_or(0);
    }
    benchmark::DoNotOptimize(sum);
    if (ch.Recv().has_value()) {
      Fail(state, "buffered: channel not drained");
    } else if (sum != n * (n - 1) / 2) {
      Fail(state, absl::StrFormat("buffered: sum %d, want %d", sum, n * (n - 1) / 2));
    }
  });
}

// mutex_contended4: kMutexWorkers goroutines each increment a shared counter
// kMutexOpsPerGo times under one goro::Mutex. Per lock/unlock pair.
void BM_MutexContended4(benchmark::State& state) {
  InGoroutine("mutex_contended4", [&state] {
    goro::Mutex mu;
    goro::WaitGroup wg;
    int64_t counter = 0;
    for (auto _ : state) {
      wg.Add(kMutexWorkers);
      for (int w = 0; w < kMutexWorkers; ++w) {
        goro::Go([&] {
          for (int k = 0; k < kMutexOpsPerGo; ++k) {
            mu.Lock();
            ++counter;
            mu.Unlock();
          }
          wg.Done();
        });
      }
      wg.Wait();
    }
    benchmark::DoNotOptimize(counter);
    const int64_t want =
        static_cast<int64_t>(state.iterations()) * kMutexWorkers * kMutexOpsPerGo;
    if (counter != want) {
      Fail(state, absl::StrFormat("mutex: counter %d, want %d", counter, want));
    }
  });
}

// rwmutex_read_mostly: kRWMutexWorkers goroutines share one goro::RWMutex
// and kRWMutexWorkers counters. Each does kRWMutexOpsPerGo operations: one in
// kRWMutexWriteEvery takes Lock and increments its own counter, the others
// take RLock and sum all the counters. Per lock/unlock pair of either kind.
void BM_RWMutexReadMostly(benchmark::State& state) {
  InGoroutine("rwmutex_read_mostly", [&state] {
    goro::RWMutex mu;
    goro::WaitGroup wg;
    int64_t counters[kRWMutexWorkers] = {};
    int64_t seen[kRWMutexWorkers] = {};  // each worker's sum of what it read
    for (auto _ : state) {
      wg.Add(kRWMutexWorkers);
      for (int w = 0; w < kRWMutexWorkers; ++w) {
        goro::Go([&, w] {
          int64_t sum = 0;
          for (int k = 0; k < kRWMutexOpsPerGo; ++k) {
            if (k % kRWMutexWriteEvery == 0) {
              mu.Lock();
              ++counters[w];
              mu.Unlock();
            } else {
              mu.RLock();
              for (int64_t c : counters) sum += c;
              mu.RUnlock();
            }
          }
          seen[w] += sum;
          wg.Done();
        });
      }
      wg.Wait();
    }
    benchmark::DoNotOptimize(seen);
    int64_t writes = 0;
    for (int64_t c : counters) writes += c;
    const int64_t want = static_cast<int64_t>(state.iterations()) * kRWMutexWorkers *
                         (kRWMutexOpsPerGo / kRWMutexWriteEvery);
    if (writes != want) {
      Fail(state, absl::StrFormat("rwmutex: counters sum to %d, want %d", writes, want));
    }
  });
}

// waitgroup_add_done_wait: Add(1), Done(), Wait() on one goroutine; Wait never
// blocks, so this is the cost of the three calls.
void BM_WaitGroupAddDoneWait(benchmark::State& state) {
  InGoroutine("waitgroup_add_done_wait", [&state] {
    goro::WaitGroup wg;
    for (auto _ : state) {
      wg.Add(1);
      wg.Done();
      wg.Wait();
    }
  });
}

// fib spawns a goroutine for each of fib(n-1) and fib(n-2) and joins them with
// a WaitGroup.
int64_t Fib(int n) {
  if (n < 2) return n;
  int64_t a = 0, b = 0;
  goro::WaitGroup wg;
  wg.Add(2);
  goro::Go([&] {
    a = Fib(n - 1);
    wg.Done();
  });
  goro::Go([&] {
    b = Fib(n - 2);
    wg.Done();
  });
  wg.Wait();
  return a + b;
}

// fib27_goroutines: one fib(27) per iteration (about 636,000 goroutines).
void BM_Fib27(benchmark::State& state) {
  InGoroutine("fib27_goroutines", [&state] {
    for (auto _ : state) {
      const int64_t v = Fib(kFibN);
      benchmark::DoNotOptimize(v);
      if (v != kFibWant) {
        Fail(state, absl::StrFormat("fib(%d) = %d, want %d", kFibN, v, kFibWant));
        break;
      }
    }
  });
}

// condvar_signalall: kCondWaiters goroutines wait on one CondVar under one
// Mutex. One iteration is one round: SignalAll wakes them all, each takes the
// Mutex, counts itself in and waits again, and the last one in signals this
// goroutine. Per woken goroutine. The waiters are started, and wait a first
// time, before the timed loop; a last untimed round lets them end. Every
// waiter must have woken once per round.
void BM_CondVarSignalAll(benchmark::State& state) {
  InGoroutine("condvar_signalall", [&state] {
    goro::Mutex mu;
    goro::CondVar cv;      // the waiters wait here for the next round
    goro::CondVar all_in;  // this goroutine waits here for the last waiter
    int64_t round = 0;     // guarded by mu
    int arrived = 0;       // guarded by mu: waiters waiting in this round
    bool stop = false;     // guarded by mu
    int64_t wakes = 0;     // guarded by mu: rounds seen, over all waiters
    goro::WaitGroup done;
    done.Add(kCondWaiters);
    for (int i = 0; i < kCondWaiters; ++i) {
      goro::Go([&] {
        mu.Lock();
        while (true) {
          const int64_t mine = round;
          if (++arrived == kCondWaiters) all_in.Signal();
          while (round == mine) cv.Wait(mu);
          ++wakes;
          if (stop) break;
        }
        mu.Unlock();
        done.Done();
      });
    }
    mu.Lock();
    while (arrived < kCondWaiters) all_in.Wait(mu);
    for (auto _ : state) {
      arrived = 0;
      ++round;
      cv.SignalAll();
      while (arrived < kCondWaiters) all_in.Wait(mu);
    }
    stop = true;
    ++round;
    cv.SignalAll();
    mu.Unlock();
    done.Wait();
    const int64_t want = (static_cast<int64_t>(state.iterations()) + 1) * kCondWaiters;
    if (wakes != want) {
      Fail(state, absl::StrFormat("condvar: %d wake-ups counted, want %d", wakes, want));
    }
  });
}

// chan_close_wake: kCloseWakeGoroutines goroutines each block receiving on one
// unbuffered channel; Close wakes them all and each ends with wg.Done. Per
// goroutine, from the Close to the last Done. Starting them and letting them
// block is not timed (the timer is paused, and a 20 ms sleep lets the last
// ones reach the receive). Every receive must see the channel closed.
void BM_ChanCloseWake(benchmark::State& state) {
  InGoroutine("chan_close_wake", [&state] {
    std::atomic<int64_t> got_value{0};
    for (auto _ : state) {
      state.PauseTiming();
      goro::Chan<int> ch;
      goro::WaitGroup ready, done;
      ready.Add(kCloseWakeGoroutines);
      done.Add(kCloseWakeGoroutines);
      for (int i = 0; i < kCloseWakeGoroutines; ++i) {
        goro::Go([&] {
          ready.Done();
          if (ch.Recv().has_value()) got_value.fetch_add(1, std::memory_order_relaxed);
          done.Done();
        });
      }
      ready.Wait();
      goro::SleepFor(absl::Milliseconds(20));
      state.ResumeTiming();
      ch.Close();
      done.Wait();
    }
    if (got_value.load() != 0) {
      Fail(state, absl::StrFormat("close_wake: %d receives got a value from a channel "
                                  "nobody sent on",
                                  got_value.load()));
    }
  });
}

// yield_many: one iteration starts kYieldManyGoroutines goroutines that each
// call goro::Yield kYieldManyRounds times, and waits for them. Per Yield (the
// spawns and the join are included). Each goroutine notes whether another
// started while it yielded; if fewer than half did, Yield did not switch.
void BM_YieldMany(benchmark::State& state) {
  InGoroutine("yield_many", [&state] {
    std::atomic<int64_t> started{0};
    std::atomic<int64_t> overtaken{0};  // goroutines that saw another start
    goro::WaitGroup wg;
    for (auto _ : state) {
      wg.Add(kYieldManyGoroutines);
      for (int i = 0; i < kYieldManyGoroutines; ++i) {
        goro::Go([&] {
          const int64_t me = started.fetch_add(1, std::memory_order_relaxed) + 1;
          for (int k = 0; k < kYieldManyRounds; ++k) goro::Yield();
          if (started.load(std::memory_order_relaxed) != me) {
            overtaken.fetch_add(1, std::memory_order_relaxed);
          }
          wg.Done();
        });
      }
      wg.Wait();
    }
    const int64_t total = static_cast<int64_t>(state.iterations()) * kYieldManyGoroutines;
    if (overtaken.load() < total / 2) {
      Fail(state, absl::StrFormat("yield_many: only %d of %d goroutines saw another start "
                                  "while they yielded: Yield does not switch",
                                  overtaken.load(), total));
    }
  });
}

// timer_reset: one goroutine resets one pending goro::Timer to a minute from
// now, over and over. Per Reset. Every Reset, and the final Stop, must find
// the timer pending.
void BM_TimerReset(benchmark::State& state) {
  InGoroutine("timer_reset", [&state] {
    goro::Timer t(absl::Minutes(1));
    int64_t not_pending = 0;
    for (auto _ : state) {
      if (!t.Reset(absl::Minutes(1))) ++not_pending;
    }
    const bool stopped = t.Stop();
    if (!stopped || not_pending != 0) {
      Fail(state, absl::StrFormat("timer_reset: %d Resets, or the Stop, found a timer that "
                                  "was not pending",
                                  not_pending));
    }
  });
}

// syscall_turns: one iteration starts kSyscallGoroutines goroutines that each
// make kSyscallsPerGo blocking 2 ms nanosleep calls in goro::Syscall, and
// waits for them. Per run; all sleeping at once would take 20 ms. A nanosleep
// cut short by a signal sleeps the rest; any other failure is reported.
void BM_SyscallTurns(benchmark::State& state) {
  InGoroutine("syscall_turns", [&state] {
    std::atomic<int64_t> failed{0};
    goro::WaitGroup wg;
    for (auto _ : state) {
      wg.Add(kSyscallGoroutines);
      for (int i = 0; i < kSyscallGoroutines; ++i) {
        goro::Go([&] {
          for (int r = 0; r < kSyscallsPerGo; ++r) {
            const int rc = goro::Syscall([] {
              timespec ts{0, kSyscallSleepNs};
              int rc;
              while ((rc = nanosleep(&ts, &ts)) != 0 && errno == EINTR) {
              }
              return rc;
            });
            if (rc != 0) failed.fetch_add(1, std::memory_order_relaxed);
          }
          wg.Done();
        });
      }
      wg.Wait();
    }
    if (failed.load() != 0) {
      Fail(state, absl::StrFormat("syscall_turns: %d nanosleep calls failed", failed.load()));
    }
  });
}

struct Workload {
  const char* name;
  std::vector<int> procs;  // the procs counts it is meant for
  double ops_per_iter;     // operations in one iteration (unless the
                           // benchmark sets the "ops_per_iter" counter)
  const char* unit;        // of the reported figure
  double scale;            // reported value = seconds per op * scale
  void (*fn)(benchmark::State&);
};

const std::vector<Workload>& Workloads() {
  static const std::vector<Workload> w = {
      {"spawn_complete", {1, 2}, kSpawnBatch, "ns/goroutine", 1e9, BM_SpawnComplete},
      {"yield", {1}, 2, "ns/yield", 1e9, BM_Yield},
      {"chan_unbuffered_pingpong", {1}, 1, "ns/roundtrip", 1e9, BM_ChanUnbufferedPingPong},
      {"chan_buffered128", {1, 2}, 1, "ns/element", 1e9, BM_ChanBuffered128},
      {"mutex_contended4", {2}, kMutexWorkers * kMutexOpsPerGo, "ns/lock+unlock", 1e9,
       BM_MutexContended4},
      {"rwmutex_read_mostly", {2}, kRWMutexWorkers * kRWMutexOpsPerGo, "ns/lock+unlock", 1e9,
       BM_RWMutexReadMostly},
      {"waitgroup_add_done_wait", {1, 2}, 1, "ns/op", 1e9, BM_WaitGroupAddDoneWait},
      {"fib27_goroutines", {1, 2}, 1, "ms/run", 1e3, BM_Fib27},
      {"condvar_signalall", {1, 2}, kCondWaiters, "ns/wake", 1e9, BM_CondVarSignalAll},
      {"chan_close_wake", {1, 2}, kCloseWakeGoroutines, "ns/goroutine", 1e9, BM_ChanCloseWake},
      {"yield_many", {1, 2}, kYieldManyGoroutines * kYieldManyRounds, "ns/yield", 1e9,
       BM_YieldMany},
      {"timer_reset", {1}, 1, "ns/reset", 1e9, BM_TimerReset},
      {"syscall_turns", {1, 2}, 1, "ms/run", 1e3, BM_SyscallTurns},
  };
  return w;
}

// The console table on stderr, plus one JSON line per run on stdout.
class JsonLinesReporter : public benchmark::ConsoleReporter {
 public:
  JsonLinesReporter() : ConsoleReporter(OO_Tabular) { SetOutputStream(&std::cerr); }

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      const std::string family = run.run_name.function_name;
      const Workload* w = Find(family);
      Result r;
      r.name = w != nullptr ? w->name : family;
      r.procs = g_procs;
      r.iters = static_cast<int64_t>(run.iterations);
      if (run.error_occurred) {
        r.error = run.error_message;
      } else if (w != nullptr && run.iterations > 0) {
        // A workload that counts its operations itself says so in a counter.
        double ops = w->ops_per_iter;
        if (auto it = run.counters.find("ops_per_iter"); it != run.counters.end()) {
          ops = it->second.value;
        }
        const double per_op =
            run.real_accumulated_time / static_cast<double>(run.iterations) / ops;
        const double cpu_per_op =
            run.cpu_accumulated_time / static_cast<double>(run.iterations) / ops;
        r.value = per_op * w->scale;
        r.unit = w->unit;
        r.cpu_value = cpu_per_op * w->scale;
      }
      Emit(r);
    }
  }

 private:
  static const Workload* Find(const std::string& family) {
    for (const Workload& w : Workloads()) {
      if (family == absl::StrFormat("%s/procs:%d", w.name, g_procs)) return &w;
    }
    return nullptr;
  }
};

}  // namespace
}  // namespace goro_bench

int main(int argc, char** argv) {
  using namespace goro_bench;
  g_procs = ChooseProcs(TakeFlag(&argc, argv, "procs"), "goro_bench");
  const bool all = TakeBoolFlag(&argc, argv, "all");
  const bool jsonl = TakeBoolFlag(&argc, argv, "jsonl");
  double watchdog_s = 120;
  if (std::string v = TakeFlag(&argc, argv, "watchdog"); !v.empty()) {
    if (!absl::SimpleAtod(v, &watchdog_s) || watchdog_s <= 0) {
      Die("goro_bench: bad --watchdog=" + v + " (want seconds > 0)");
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  // Start the runtime once, with our procs count, before any benchmark.
  Watchdog::Start(watchdog_s);
  Watchdog::Arm("runtime start-up");
  goro::Run([] {}, RuntimeOptions());
  Watchdog::Disarm();
  CheckProcs(g_procs, "goro_bench");
  benchmark::AddCustomContext("goro_procs", std::to_string(g_procs));

  for (const Workload& w : Workloads()) {
    bool meant = all;
    for (int p : w.procs) meant = meant || p == g_procs;
    if (!meant) continue;
    benchmark::RegisterBenchmark(absl::StrFormat("%s/procs:%d", w.name, g_procs).c_str(), w.fn)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Unit(w.scale == 1e3 ? benchmark::kMillisecond : benchmark::kNanosecond);
  }

  if (jsonl) {
    JsonLinesReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}
