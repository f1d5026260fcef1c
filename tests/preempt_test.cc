// Preemption: a goroutine that never reaches a safe point is interrupted by a
// signal; one that calls Checkpoint() yields cooperatively; with async
// preemption off, a loop with no calls starves the others. The hog loops below
// contain no calls (they are noinline functions over a relaxed atomic load, so
// the loop body is a load and a branch).
//
// Tests that need Options other than the binary's (async preemption off, a
// short time slice) or a GORODEBUG setting run in a child process.
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/runtime.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

// The assembly of arch/ (the unwind test below looks at their unwind info):
// goro::arch::goro_switch_context and goro_start_context come from
// arch/context.h (through core/runtime.h).
extern "C" void goro_async_preempt();

// libgcc's FDE lookup (unwind-dw2-fde.h, not installed): the unwind entry of
// the code at `pc`, and in bases->func the start of the code it covers.
struct DwarfEhBases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, DwarfEhBases* bases);


namespace {

using goro_test::Eventually;
using goro_test::RunBounded;

// A loop with no calls and no safe points.
__attribute__((noinline)) void HogUntil(const std::atomic<bool>* stop) {
  while (!stop->load(std::memory_order_relaxed)) {
  }
}

// The same loop with a safe point in it.
__attribute__((noinline)) void CooperativeHogUntil(const std::atomic<bool>* stop) {
  while (!stop->load(std::memory_order_relaxed)) goro::Checkpoint();
}

// A loop whose only calls are WaitGroup fast paths (no RuntimeScope): they
// are safe points all the same.
__attribute__((noinline)) void WaitGroupHogUntil(const std::atomic<bool>* stop) {
  goro::WaitGroup wg;
  while (!stop->load(std::memory_order_relaxed)) {
    wg.Add(1);
    wg.Done();
    wg.Wait();
  }
}

// Loops whose only calls are uncontended Mutex and RWMutex fast paths.
__attribute__((noinline)) void MutexHogUntil(const std::atomic<bool>* stop) {
  goro::Mutex mu;
  while (!stop->load(std::memory_order_relaxed)) {
    mu.Lock();
    mu.Unlock();
    if (mu.TryLock()) mu.Unlock();
  }
}
__attribute__((noinline)) void ReadLockHogUntil(const std::atomic<bool>* stop) {
  goro::RWMutex rw;
  while (!stop->load(std::memory_order_relaxed)) {
    rw.RLock();
    rw.RUnlock();
    if (rw.TryRLock()) rw.RUnlock();
  }
}
__attribute__((noinline)) void WriteLockHogUntil(const std::atomic<bool>* stop) {
  goro::RWMutex rw;
  while (!stop->load(std::memory_order_relaxed)) {
    rw.Lock();
    rw.Unlock();
    if (rw.TryLock()) rw.Unlock();
  }
}

// With max_procs=2, starts `hogs` goroutines running `hog`, then asks for the
// main goroutine to be scheduled again (a 20 ms sleep) and sets `stop`. Returns
// whether it managed to within `limit` (the child's plain-thread watchdog ends
// the wait). Exits the process: 0 when the outcome was `expect_stop`.
[[noreturn]] void HogScenarioInChild(const goro::Options& opts, void (*hog)(const std::atomic<bool>*),
                                     int hogs, bool expect_stop, absl::Duration limit) {
  static std::atomic<bool> stop{false};
  static std::atomic<int> hogs_running{0};
  static std::atomic<bool> expected{false};
  expected = expect_stop;
  // A plain thread decides the outcome if the runtime cannot.
  std::thread([limit] {
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(limit));
    fprintf(stderr, "after %s: stop %s set, %d hogs running\n", absl::FormatDuration(limit).c_str(),
            stop.load() ? "was" : "was not", hogs_running.load());
    _exit(expected.load() == stop.load() ? 0 : 10);
  }).detach();
  goro::Run(
      [hog, hogs] {
        for (int i = 0; i < hogs; ++i) {
          goro::Go([hog] {
            ++hogs_running;
            hog(&stop);
          });
        }
        // Let the hogs take both Ps, then ask to run again.
        goro::SleepFor(absl::Milliseconds(20));
        stop = true;
      },
      opts);
  goro::Stats s = goro::GetStats();
  fprintf(stderr,
          "stop set; async_preemptions=%llu cooperative_preemptions=%llu preempt_signals_sent=%llu\n",
          static_cast<unsigned long long>(s.async_preemptions),
          static_cast<unsigned long long>(s.cooperative_preemptions),
          static_cast<unsigned long long>(s.preempt_signals_sent));
  if (!expect_stop) _exit(11);
  if (!opts.async_preemption && s.async_preemptions != 0) _exit(12);
  if (opts.async_preemption && s.async_preemptions == 0) _exit(13);
  if (!opts.async_preemption && s.cooperative_preemptions == 0) _exit(14);
  _exit(0);
}

goro::Options TwoProcs(bool async) {
  goro::Options opts = goro_test::TestOptions();
  opts.async_preemption = async;
  return opts;
}

TEST(PreemptTest, TightLoopWithoutCallsIsPreemptedAsynchronously) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(true), HogUntil, 2, /*expect_stop=*/true, absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

TEST(PreemptTest, CheckpointHonoursPreemptionWithAsyncOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), CooperativeHogUntil, 2, /*expect_stop=*/true,
                                 absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

// Fails (the plain thread's verdict after 30 s) if a fast path skips the
// preemption request along with the RuntimeScope.
TEST(PreemptTest, WaitGroupFastPathsHonourPreemptionWithAsyncOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), WaitGroupHogUntil, 2, /*expect_stop=*/true,
                                 absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

// The same for Mutex and RWMutex, whose fast paths take no RuntimeScope
// either (internal::EnterFastPath).
TEST(PreemptTest, MutexFastPathsHonourPreemptionWithAsyncOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), MutexHogUntil, 2, /*expect_stop=*/true,
                                 absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

TEST(PreemptTest, RWMutexReadFastPathsHonourPreemptionWithAsyncOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), ReadLockHogUntil, 2, /*expect_stop=*/true,
                                 absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

TEST(PreemptTest, RWMutexWriteFastPathsHonourPreemptionWithAsyncOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), WriteLockHogUntil, 2, /*expect_stop=*/true,
                                 absl::Seconds(30)),
              ::testing::ExitedWithCode(0), "");
}

// An unlock's safe point comes after the release: a goroutine asked to yield
// inside its critical section is not set aside holding the lock. On 1 P with
// async preemption off, the main goroutine runs only while the hog is set
// aside, and then finds each lock free (TryLock).
TEST(PreemptTest, AnUnlockYieldsOnlyAfterItReleases) {
  EXPECT_EXIT(
      {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::seconds(30));
          fprintf(stderr, "the main goroutine did not run again in 30 s\n");
          _exit(10);
        }).detach();
        goro::Options opts = TwoProcs(false);
        opts.max_procs = 1;
        static goro::Mutex mu;
        static goro::RWMutex rw;
        static int failures = 0;
        goro::Run(
            [] {
              for (int kind = 0; kind < 3; ++kind) {
                std::atomic<bool> stop{false};
                goro::WaitGroup wg;
                wg.Add(1);
                goro::Go([&stop, &wg, kind] {
                  while (!stop.load(std::memory_order_relaxed)) {
                    if (kind == 0) mu.Lock();
                    if (kind == 1) rw.Lock();
                    if (kind == 2) rw.RLock();
                    goro_test::Spin(absl::Milliseconds(2));  // the request lands here
                    if (kind == 0) mu.Unlock();
                    if (kind == 1) rw.Unlock();
                    if (kind == 2) rw.RUnlock();
                  }
                  wg.Done();
                });
                for (int look = 0; look < 3; ++look) {
                  goro::SleepFor(absl::Milliseconds(15));  // back once the hog is set aside
                  bool free = kind == 0 ? mu.TryLock() : rw.TryLock();
                  if (!free) {
                    fprintf(stderr, "kind %d: the hog was set aside holding the lock\n", kind);
                    ++failures;
                  } else if (kind == 0) {
                    mu.Unlock();
                  } else {
                    rw.Unlock();
                  }
                }
                stop = true;
                wg.Wait();
              }
            },
            opts);
        _exit(failures == 0 ? 0 : 11);
      },
      ::testing::ExitedWithCode(0), "");
}

// A goroutine that yields straight to another (Yield, a Mutex hand-off) is
// queued on its P behind it. If that one then runs on with no safe point, an
// idle P must take the yielder: the spinner that the Ready before such a
// yield started may have looked at the queue before the yielder was in it,
// and gone to sleep. The seam holds the queuing until the other P is idle
// with nobody spinning, which makes that window certain; async preemption is
// off, so nothing else would ever run the yielder.
namespace yieldq {
std::atomic<bool> armed{false};
std::atomic<int> verdict{0};  // 1: the other P went idle first; 2: it did not within 10 s

void Hook() {
  if (!armed.exchange(false)) return;
  auto& sched = goro::internal::sched;
  auto idle = [&] { return sched.npidle.load() == 1 && sched.nmspinning.load() == 0; };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) seen = idle();
  // An M that has just stopped spinning looks at every queue once more
  // before it sleeps: give it time to, so that it cannot find the yielder.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  verdict = seen && idle() ? 1 : 2;
}
}  // namespace yieldq

TEST(PreemptTest, AYielderQueuedBehindAHogIsTakenByAnIdleP) {
  EXPECT_EXIT(
      {
        using namespace yieldq;
        static std::atomic<bool> stop{false};
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::seconds(30));
          fprintf(stderr, "the yielder did not run again in 30 s (verdict %d)\n", verdict.load());
          _exit(10);
        }).detach();
        goro::internal::yield_queue_hook.store(&Hook);
        goro::Run(
            [] {
              // A Yield goes straight to the hog (in this P's runnext) unless
              // the scheduler's every-16th turn sends it through g0: then again.
              for (int attempt = 0; attempt < 20 && verdict.load() == 0; ++attempt) {
                stop = false;
                goro::WaitGroup wg;
                wg.Add(1);
                goro::Go([&wg] {
                  HogUntil(&stop);
                  wg.Done();
                });
                armed = true;
                goro::Yield();
                stop = true;
                wg.Wait();
              }
            },
            TwoProcs(false));
        if (verdict.load() != 1) {
          fprintf(stderr, "the seam did not see the other P idle (verdict %d)\n", verdict.load());
          _exit(11);
        }
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The control for the first test: without the signal, nothing interrupts the
// hogs and the main goroutine never runs again.
TEST(PreemptTest, TightLoopStarvesOthersWithAsyncPreemptionOff) {
  EXPECT_EXIT(HogScenarioInChild(TwoProcs(false), HogUntil, 2, /*expect_stop=*/false,
                                 absl::Seconds(2)),
              ::testing::ExitedWithCode(0), "");
}

TEST(PreemptTest, GorodebugAsyncPreemptOffStarvesATightLoop) {
  EXPECT_EXIT(
      {
        setenv("GORODEBUG", "asyncpreemptoff=1", 1);
        HogScenarioInChild(TwoProcs(true), HogUntil, 2, /*expect_stop=*/false, absl::Seconds(2));
      },
      ::testing::ExitedWithCode(0), "");
}

// In the binary's own runtime (async on): more hogs than Ps, all finish.
TEST(PreemptTest, MoreHogsThanProcsAllMakeProgress) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  RunBounded([] {
    constexpr int kHogs = 4;
    std::atomic<bool> stop{false};
    std::atomic<int> started{0};
    goro::WaitGroup wg;
    wg.Add(kHogs);
    for (int i = 0; i < kHogs; ++i) {
      goro::Go([&] {
        ++started;
        HogUntil(&stop);
        wg.Done();
      });
    }
    // Every hog gets a turn although each would run forever.
    EXPECT_TRUE(Eventually([&] { return started.load() == kHogs; }, absl::Seconds(20)))
        << started.load() << " of " << kHogs << " hogs ever ran";
    stop = true;
    wg.Wait();
    EXPECT_GT(goro::GetStats().async_preemptions, 0u);
  }, absl::Seconds(40));  // without preemption this Run never gets its P back
}

// For the children below, whose hogs yield at Checkpoint(): 1 ms slices, no
// signals, and a watchdog that ends the child after 30 s (exit code 20).
goro::Options HogChildOptions(const std::atomic<int>* turns_started) {
  std::thread([turns_started] {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    fprintf(stderr, "timed out after 30 s with %d turns\n", turns_started->load());
    _exit(20);
  }).detach();
  goro::Options opts = goro_test::TestOptions();
  opts.time_slice = absl::Milliseconds(1);
  opts.async_preemption = false;
  return opts;
}

// A hog's loop for those children: Checkpoint() until `stop`, calling
// on_turn(n) whenever a new turn begins, n being its number among the turns
// all hogs have started.
template <typename OnTurn>
void HogLoop(const std::atomic<bool>& stop, std::atomic<int>& turns_started, OnTurn on_turn) {
  uint64_t seen = goro::CurrentGoroutinePreemptions();
  while (!stop.load(std::memory_order_relaxed)) {
    goro::Checkpoint();
    uint64_t now = goro::CurrentGoroutinePreemptions();
    if (now == seen) continue;
    seen = now;
    on_turn(turns_started.fetch_add(1));
  }
}

// Goroutines whose slices were spent take turns in order: a P takes a
// preempted goroutine from the global queue alone, never in a batch into its
// own queue (Go's globrunqget), which would let the goroutines in one P's
// batch run again before those in the other's. Twelve hogs with a safe point
// on 2 Ps, 1 ms slices, 120 rounds. A preempted hog joins the queue behind the
// ten that wait, so between two of its turns the others start at least nine
// (ten, less one when two hogs trade places so that neither goes back to the
// P it left: SpentSlicesSpreadOverPs); the test counts the gaps shorter than
// eight and allows 3% of them.
// Measured on a 2-core VM: with the rotation no gap below eight in 65 runs,
// 25 of them beside a full ctest -j2 (the shortest gap seen: nine); with
// batches 14-15% of gaps below eight. A gap counts the turns started, not
// their length, so a thread the OS deschedules leaves it alone; an earlier
// version of this test, bounding how far one hog's turn count got ahead,
// failed in CI for that reason. In a child process, for its own time slice.
[[noreturn]] void RotationInChild() {
  static constexpr int kHogs = 12;
  static constexpr int kRounds = 120;
  static constexpr int kShortGap = kHogs - 4;
  static std::atomic<int> turns_started{0}, gaps{0}, short_gaps{0};
  static std::atomic<int> gap_histogram[kHogs + 1];
  static std::atomic<bool> stop{false};
  goro::Options opts = HogChildOptions(&turns_started);
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(kHogs);
        for (int i = 0; i < kHogs; ++i) {
          goro::Go([&wg] {
            int last_turn = -1;  // its number among all turns started
            HogLoop(stop, turns_started, [&last_turn](int turn) {
              // After three rounds: the start-up order has settled.
              if (last_turn >= 0 && turn >= 3 * kHogs) {
                int gap = turn - last_turn - 1;
                gap_histogram[std::min(gap, kHogs)].fetch_add(1);
                gaps.fetch_add(1);
                if (gap < kShortGap) short_gaps.fetch_add(1);
              }
              last_turn = turn;
              if (turn + 1 >= kRounds * kHogs) stop = true;
            });
            wg.Done();
          });
        }
        wg.Wait();
      },
      opts);
  std::string histogram;
  for (auto& n : gap_histogram) histogram += " " + std::to_string(n.load());
  fprintf(stderr,
          "%d of %d gaps between a hog's turns were shorter than %d turns of others; "
          "gaps of 0..%d+ turns:%s\n",
          short_gaps.load(), gaps.load(), kShortGap, kHogs, histogram.c_str());
  _exit(short_gaps.load() * 100 <= gaps.load() * 3 ? 0 : 21);
}

// A request stays with its slice: a goroutine that inherits a slice sysmon
// asked to end - its goroutine parked before it took the request, as one of
// a pair ping-ponging on a channel usually does, being in runtime code most
// of the time - is preempted at its first safe point. White-box, on 1 P with
// 1 s slices (sysmon asks nothing itself): the main goroutine marks its slice
// asked, as PreemptOne does, readies a receiver (runnext) and parks; the
// receiver inherits the slice. Fails if the switch wipes the request: the
// receiver ran on unpreempted (a pair kept its slice until a later request
// happened to land between two of its operations).
[[noreturn]] void InheritedRequestChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "a goroutine inheriting an asked slice");
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  opts.time_slice = absl::Seconds(1);
  static uint64_t preemptions_before = 0;
  static bool receiver_preempted = false;
  goro::Run(
      [] {
        goro::Chan<int> ch, done;
        goro::Go([&] {
          ch.Recv();
          goro::Checkpoint();
          receiver_preempted = goro::CurrentGoroutinePreemptions() > preemptions_before;
          done.Send(1);
        });
        goro::Yield();  // the receiver waits in Recv now
        preemptions_before = 0;
        goro::internal::P* p = goro::internal::sched.allp[0];
        p->slice_asked.store(goro::internal::kSliceAsked | p->schedtick.load());
        ch.Send(1);
        done.Recv();
      },
      opts);
  if (!receiver_preempted) {
    fprintf(stderr, "the goroutine that inherited an asked slice was not preempted\n");
    _exit(1);
  }
  _exit(0);
}

TEST(PreemptTest, AGoroutineInheritingAnAskedSliceIsPreempted) {
  EXPECT_EXIT(InheritedRequestChild(), ::testing::ExitedWithCode(0), "");
}

TEST(PreemptTest, SpentSlicesRotateInOrder) {
  EXPECT_EXIT(RotationInChild(), ::testing::ExitedWithCode(0), "");
}

// A preempted goroutine does not go back to the P it left when the next one
// in the global queue left the other P: otherwise, with an even number of
// hogs waiting and two Ps whose slices end in turn, each hog would only ever
// run on one of the two, and on CPUs of unequal speed half the hogs would get
// less done. Four hogs with a safe point on 2 Ps, 1 ms slices, 300 rounds;
// every turn notes its thread (with 2 Ps busy the two Ms keep their Ps), and
// of a hog's consecutive turns at most 10% may run on one thread. Only pairs
// with strictly alternating turns in between are judged (below). Measured on
// a 2-core VM, 14 runs each, 10 of them beside ctest -j2: with the swap 0 of
// 211-703 judged pairs on one thread; without it 99-100% of 188-679. An
// earlier version judged every pair and failed beside ctest -j2: a host
// that deschedules one thread makes the other P take turns in a row. In a
// child process, for its own time slice.
[[noreturn]] void SpreadInChild() {
  static constexpr int kHogs = 4;
  static constexpr int kRounds = 300;
  static constexpr int kTurns = kRounds * kHogs;
  static std::atomic<int> turns_started{0};
  static std::atomic<bool> stop{false};
  static pid_t thread_of_turn[kTurns + kHogs];  // each written once, read after Run
  goro::Options opts = HogChildOptions(&turns_started);
  std::vector<std::vector<int>> hog_turns(kHogs);  // each hog's turn numbers
  goro::Run(
      [&hog_turns] {
        goro::WaitGroup wg;
        wg.Add(kHogs);
        for (int i = 0; i < kHogs; ++i) {
          goro::Go([&wg, &mine = hog_turns[i]] {
            HogLoop(stop, turns_started, [&mine](int turn) {
              if (turn >= kTurns + kHogs) return;
              thread_of_turn[turn] = gettid();
              // After three rounds: the start-up order has settled.
              if (turn >= 3 * kHogs) mine.push_back(turn);
              if (turn + 1 >= kTurns) stop = true;
            });
            wg.Done();
          });
        }
        wg.Wait();
      },
      opts);
  // A pair of one hog's consecutive turns is judged only if every turn from
  // the first to the second ran on the other thread than the turn before it:
  // the Ps took turns strictly, as they do when the host leaves both threads
  // alone. A thread the host deschedules lets the other P take several turns
  // in a row, and then a hog may rightly run on the same P twice.
  int judged = 0, same = 0;
  for (const std::vector<int>& mine : hog_turns) {
    for (size_t i = 1; i < mine.size(); ++i) {
      bool alternating = true;
      for (int t = mine[i - 1] + 1; t <= mine[i] && alternating; ++t) {
        alternating = thread_of_turn[t] != thread_of_turn[t - 1];
      }
      if (!alternating) continue;
      ++judged;
      same += thread_of_turn[mine[i]] == thread_of_turn[mine[i - 1]];
    }
  }
  fprintf(stderr, "%d of %d judged pairs of a hog's consecutive turns ran on one thread%s\n", same, judged,
          judged < 20 ? " (too few to judge: the host kept descheduling a thread)" : "");
  _exit(judged >= 20 && same * 10 <= judged ? 0 : 21);
}

TEST(PreemptTest, SpentSlicesSpreadOverPs) {
  EXPECT_EXIT(SpreadInChild(), ::testing::ExitedWithCode(0), "");
}

// A signal that lands in library code cannot preempt there; the handler
// wakes sysmon, which signals again at once (then with back-off) instead of
// at its next look, a slice later. Two goroutines on 1 P, 3 ms slices, each
// spending about half its time in libc's memset (not preemptible) and half in
// a loop of this binary. Each turn notes the thread's CPU clock and the
// signals sent so far; a turn that took two or more signals had its first
// refused, and lasts 3 ms and a little with the retry, 6 ms or more without.
// The test requires the median of those turns under 4.5 ms of CPU time.
// CPU time, since a host that deschedules the thread lengthens turns in wall
// time (a first version, counting turns over 4.5 ms of wall time, saw up to
// 109 of 150 beside ctest -j2); the median, since a busy host also delays
// sysmon's wake-ups, which lengthens some retried turns (up to 21 of 150 over
// 4.5 ms beside ctest -j2). Measured on a 2-core VM: 55-74 of 149 turns took
// 2+ signals; their median 3.16-3.17 ms quiet and 1.2-2.3 ms beside ctest -j2
// with the handler's wake-up, 6.19-6.26 ms quiet without it (3.2-3.4 ms
// beside ctest -j2, where CPU-time turns shrink). In a child process, for
// its own time slice.
__attribute__((noinline)) void BusyInThisBinary(int n) {
  for (int i = 0; i < n; ++i) asm volatile("");
}

[[noreturn]] void RefusedRequestInChild() {
  static constexpr int kTurns = 150;
  struct Turn {
    int64_t cpu_ns;  // the thread's CPU clock when the turn began
    uint64_t signals;  // preemption signals sent by then
    pid_t thread;
  };
  static Turn turn[kTurns + 1];
  static std::atomic<int> turns{0};
  static std::atomic<bool> stop{false};
  goro_test::Watchdog dog(absl::Seconds(30), "RefusedRequestInChild");
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  opts.time_slice = absl::Milliseconds(3);
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(2);
        for (int k = 0; k < 2; ++k) {
          goro::Go([&wg] {
            std::vector<char> buf(256 * 1024);
            uint64_t seen = goro::CurrentGoroutinePreemptions();
            int round = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              memset(buf.data(), ++round, buf.size());
              BusyInThisBinary(20000);
              uint64_t now = goro::CurrentGoroutinePreemptions();
              if (now == seen) continue;
              seen = now;
              int t = turns.fetch_add(1);
              if (t > kTurns) continue;
              timespec ts;
              clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
              turn[t] = Turn{int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec, goro::GetStats().preempt_signals_sent,
                             gettid()};
              if (t == kTurns) stop = true;
            }
            wg.Done();
          });
        }
        wg.Wait();
      },
      opts);
  std::vector<int64_t> retried;  // CPU time of the turns that took 2+ signals
  int judged = 0;
  for (int t = 1; t < kTurns; ++t) {  // a turn: from its start to the next one's
    if (turn[t + 1].thread != turn[t].thread) continue;
    ++judged;
    if (turn[t + 1].signals - turn[t].signals >= 2) retried.push_back(turn[t + 1].cpu_ns - turn[t].cpu_ns);
  }
  std::sort(retried.begin(), retried.end());
  double median_ms = retried.empty() ? 0 : static_cast<double>(retried[retried.size() / 2]) / 1e6;
  fprintf(stderr, "%zu of %d turns took 2 or more signals; their median %.2f ms of CPU time\n", retried.size(),
          judged, median_ms);
  _exit(retried.size() >= 20 && median_ms < 4.5 ? 0 : 21);
}

TEST(PreemptTest, RefusedRequestIsSignalledAgainSoon) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(RefusedRequestInChild(), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// State survives asynchronous preemption.

// Integer, scalar floating point, and 256-/512-bit vector chains kept in
// registers by a loop with no calls; the result must match the same code run
// on a plain thread.
struct Chains {
  uint64_t gpr[8];
  double fp[4];
  uint64_t v256[16];
  uint64_t v512[16];
};

__attribute__((noinline)) void GprAndFpChain(uint64_t iters, uint64_t seed, Chains* out) {
  uint64_t a = seed, b = seed * 3 + 1, c = seed ^ 0x9e3779b97f4a7c15ull, d = ~seed, e = seed << 7,
           f = seed + 11, g = seed * seed, h = 0x1234567;
  double x = 1.0 + static_cast<double>(seed % 7), y = 0.5, z = 0.25, w = 2.0;
  for (uint64_t i = 0; i < iters; ++i) {
    a ^= a << 13;
    a ^= a >> 7;
    a ^= a << 17;
    b += a;
    c ^= b >> 3;
    d = d * 6364136223846793005ull + c;
    e += d ^ (e >> 11);
    f ^= e + (f << 5);
    g = g * 0x5851f42d4c957f2dull + f;
    h += g >> 17;
    x = x * 1.0000001 + 1e-9;
    y = y * 0.9999999 + x * 1e-12;
    z = z + y * 1e-6 - z * 1e-7;
    w = w * 1.00000003 - 1e-10;
  }
  uint64_t r[8] = {a, b, c, d, e, f, g, h};
  memcpy(out->gpr, r, sizeof(r));
  double s[4] = {x, y, z, w};
  memcpy(out->fp, s, sizeof(s));
}

typedef uint64_t V4 __attribute__((vector_size(32)));
typedef uint64_t V8 __attribute__((vector_size(64)));

__attribute__((noinline, target("avx2"))) void Avx2Chain(uint64_t iters, uint64_t seed, Chains* out) {
  V4 p = {seed, seed + 1, seed + 2, seed + 3}, q = {~seed, 5, 7, 11}, r = {13, 17, 19, seed * 3},
     s = {0x9e3779b97f4a7c15ull, 1, 2, 3};
  for (uint64_t i = 0; i < iters; ++i) {
    p ^= p << 13;
    p ^= p >> 7;
    p ^= p << 17;
    q += p;
    r ^= q >> 3;
    s += r ^ (s << 5);
  }
  V4 parts[4] = {p, q, r, s};
  memcpy(out->v256, parts, sizeof(parts));
}

__attribute__((noinline, target("avx512f"))) void Avx512Chain(uint64_t iters, uint64_t seed,
                                                              Chains* out) {
  V8 p = {seed, seed + 1, seed + 2, seed + 3, seed + 4, seed + 5, seed + 6, seed + 7};
  V8 q = {~seed, 5, 7, 11, 13, 17, 19, 23};
  for (uint64_t i = 0; i < iters; ++i) {
    p ^= p << 13;
    p ^= p >> 7;
    p ^= p << 17;
    q += p ^ (q >> 3);
  }
  V8 parts[2] = {p, q};
  memcpy(out->v512, parts, sizeof(parts));
}

void ComputeChains(uint64_t iters, uint64_t seed, bool avx2, bool avx512, Chains* out) {
  memset(out, 0, sizeof(*out));
  GprAndFpChain(iters, seed, out);
  if (avx2) Avx2Chain(iters, seed, out);
  if (avx512) Avx512Chain(iters, seed, out);
}

[[noreturn]] void RegistersChild(bool avx2, bool avx512) {
  goro_test::Watchdog dog(absl::Seconds(90));
  goro::Options opts = goro_test::TestOptions();
  opts.time_slice = absl::Milliseconds(1);  // many preemptions per second
  constexpr int kGoroutines = 6;
  constexpr uint64_t kIters = 30'000'000;
  std::vector<Chains> want(kGoroutines);
  std::vector<Chains> got(kGoroutines);
  std::thread reference([&] {
    for (int i = 0; i < kGoroutines; ++i) ComputeChains(kIters, i + 1, avx2, avx512, &want[i]);
  });
  reference.join();
  goro::Run(
      [&] {
        goro::WaitGroup wg;
        wg.Add(kGoroutines);
        for (int i = 0; i < kGoroutines; ++i) {
          goro::Go([&, i] {
            ComputeChains(kIters, i + 1, avx2, avx512, &got[i]);
            wg.Done();
          });
        }
        wg.Wait();
      },
      opts);
  goro::Stats s = goro::GetStats();
  fprintf(stderr, "async_preemptions=%llu (avx2 %d, avx512 %d)\n",
          static_cast<unsigned long long>(s.async_preemptions), avx2, avx512);
  int bad = 0;
  for (int i = 0; i < kGoroutines; ++i) {
    if (memcmp(&want[i], &got[i], sizeof(Chains)) != 0) {
      fprintf(stderr, "goroutine %d: registers corrupted: gpr %d fp %d v256 %d v512 %d\n", i,
              memcmp(want[i].gpr, got[i].gpr, sizeof(want[i].gpr)) != 0,
              memcmp(want[i].fp, got[i].fp, sizeof(want[i].fp)) != 0,
              memcmp(want[i].v256, got[i].v256, sizeof(want[i].v256)) != 0,
              memcmp(want[i].v512, got[i].v512, sizeof(want[i].v512)) != 0);
      ++bad;
    }
  }
  if (bad != 0) _exit(1);
  if (s.async_preemptions < 100) {
    fprintf(stderr, "too few preemptions to mean anything\n");
    _exit(2);
  }
  _exit(0);
}

TEST(PreemptTest, RegistersSurviveThousandsOfPreemptions) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  const bool avx2 = __builtin_cpu_supports("avx2");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  EXPECT_EXIT(RegistersChild(avx2, avx512), ::testing::ExitedWithCode(0), "");
}

// errno belongs to the goroutine: set it, get preempted (and perhaps moved to
// another thread) inside a loop with no calls, and read it back.
__attribute__((noinline)) void SpinIterations(uint64_t n, std::atomic<uint64_t>* sink) {
  uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x += i ^ (x >> 3);
  sink->store(x, std::memory_order_relaxed);
}

// errno is *__errno_location(), a const function: the compiler may keep the
// address from before the spin and read the old thread's errno. These go
// through a fresh call every time (noipa: no inferred const-ness, no inlining).
__attribute__((noipa)) void StoreErrno(int v) { errno = v; }
__attribute__((noipa)) int LoadErrno() { return errno; }
// And the address is used by the instruction after the call that returned
// it: preempted between the two, the goroutine would carry the old thread's
// address to the new one (this failed once in CI). The scope keeps each
// access whole; a request that arrives meanwhile is honoured at its end, by
// a cooperative preemption, which keeps errno too.
void SetErrno(int v) {
  goro::NoPreemptScope whole;
  StoreErrno(v);
}
int GetErrno() {
  goro::NoPreemptScope whole;
  return LoadErrno();
}

TEST(PreemptTest, ErrnoTravelsWithTheGoroutine) {
  RunBounded([] {
    constexpr int kGoroutines = 4;
    std::atomic<int> wrong{0};
    std::atomic<uint64_t> sink{0};
    goro::WaitGroup wg;
    wg.Add(kGoroutines);
    uint64_t before = goro::GetStats().async_preemptions;
    for (int g = 0; g < kGoroutines; ++g) {
      goro::Go([&, g] {
        for (int round = 0; round < 20; ++round) {
          int mine = 1000 + g * 100 + round;
          SetErrno(mine);
          SpinIterations(20'000'000, &sink);  // ~a time slice or more, no calls
          if (GetErrno() != mine) ++wrong;
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(wrong.load(), 0);
    // Informative: the test only means something if preemptions happened.
    ::testing::Test::RecordProperty("async_preemptions", std::to_string(goro::GetStats().async_preemptions - before));
  });
}

// ---------------------------------------------------------------------------
// Unwind info of the context switch and of the preemption trampoline.

// A sampling profiler's SIGPROF handler walks the stack from wherever the
// signal lands, so the unwind info of goro's assembly must be right at every
// instruction, epilogues included. The test single-steps a thread (the trap
// flag, bit 8 of RFLAGS: a SIGTRAP after each instruction) while goroutines
// yield, start and are preempted on it, and walks the stack with libgcc's
// unwinder (_Unwind_Backtrace, what backtrace() uses) before each instruction
// of goro_switch_context, goro_start_context and goro_async_preempt. Each
// walk must go through the stepped instruction and end within 64 frames
// where unwind info says a stack ends (libgcc then reports a last frame at
// address 0), right after a function a walk from ordinary code ends after:
// goro_start_context on a goroutine's stack, the thread's first function on
// a thread's. Until goro_switch_context has been stepped to its `ret` 20
// times and the trampoline 3 times, with max_procs=1 and 1 ms slices (a few
// seconds). Fails - wrong frames, or a SIGSEGV in the unwinder - when a pop
// or an `addq` to %rsp in an epilogue is not described, as before the fix
// (at the trampoline's `ret $128` the CFA was still rsp+264, not rsp+136).
constexpr uint64_t kTrapFlag = 0x100;
constexpr int kMaxFrames = 64;

struct Walk {
  uintptr_t pc = 0;     // the stepped instruction
  bool saw_pc = false;  // a frame was at it
  int frames = 0;
  uintptr_t last = 0;         // the last frame's address (0: the end, per unwind info)
  uintptr_t last_lookup = 0;  // where that frame's unwind info is looked up
  uintptr_t outer_lookup = 0;  // the same for the frame before it
};

_Unwind_Reason_Code OnFrame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  int before_insn = 0;
  uintptr_t ip = _Unwind_GetIPInfo(ctx, &before_insn);
  if (ip == w->pc && before_insn) w->saw_pc = true;
  w->outer_lookup = w->last_lookup;
  w->last = ip;
  w->last_lookup = before_insn ? ip : ip - 1;
  return ++w->frames < kMaxFrames ? _URC_NO_REASON : _URC_NORMAL_STOP;
}

// Where the unwind info of the code at `pc` begins (its function), or null.
const void* FunctionOf(uintptr_t pc) {
  DwarfEhBases bases;
  if (_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases) == nullptr) return nullptr;
  return bases.func;
}

// The function a walk from here ends after (the outermost one of this stack).
__attribute__((noinline)) const void* OutermostFunction() {
  Walk w;
  _Unwind_Backtrace(OnFrame, &w);
  return w.last == 0 ? FunctionOf(w.outer_lookup) : nullptr;
}

struct UnwindProbe {
  // Where the unwind info of each begins.
  const void* switch_fn = nullptr;
  const void* start_fn = nullptr;
  const void* trampoline_fn = nullptr;
  const void* main_thread_fn = nullptr;  // _start
  const void* thread_fn = nullptr;       // a pthread's first function (clone3's)
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> walks{0};
  std::atomic<uint64_t> switch_rets{0};      // walks at goro_switch_context's ret
  std::atomic<uint64_t> trampoline_rets{0};  // walks at goro_async_preempt's ret $128
  std::atomic<uint64_t> bad{0};
  // The first bad walk.
  std::atomic<uintptr_t> bad_pc{0};
  std::atomic<int> bad_rc{0};
  std::atomic<int> bad_frames{0};
  std::atomic<bool> bad_saw_pc{false};
  std::atomic<uintptr_t> bad_last{0};
  std::atomic<uintptr_t> bad_outer{0};
};
UnwindProbe probe;

// SIGTRAP, after each instruction of a stepped thread. SIGURG is blocked
// meanwhile, so goro's handler cannot send this one to the trampoline.
void OnTrap(int, siginfo_t*, void* uctx) {
  auto* uc = static_cast<ucontext_t*>(uctx);
  if (probe.stop.load(std::memory_order_relaxed)) {
    uc->uc_mcontext.gregs[REG_EFL] &= ~static_cast<greg_t>(kTrapFlag);
    return;
  }
  const auto pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const void* fn = FunctionOf(pc);
  if (fn == nullptr || (fn != probe.switch_fn && fn != probe.start_fn && fn != probe.trampoline_fn)) return;
  Walk w;
  w.pc = pc;
  _Unwind_Reason_Code rc = _Unwind_Backtrace(OnFrame, &w);
  const void* outer = w.last == 0 ? FunctionOf(w.outer_lookup) : nullptr;
  bool ok = rc == _URC_END_OF_STACK && w.saw_pc && w.last == 0 && outer != nullptr &&
            (outer == probe.start_fn || outer == probe.main_thread_fn || outer == probe.thread_fn);
  probe.walks.fetch_add(1, std::memory_order_relaxed);
  if (!ok && probe.bad.fetch_add(1, std::memory_order_relaxed) == 0) {
    probe.bad_pc = pc;
    probe.bad_rc = rc;
    probe.bad_frames = w.frames;
    probe.bad_saw_pc = w.saw_pc;
    probe.bad_last = w.last;
    probe.bad_outer = w.outer_lookup;
  }
  const auto op = *reinterpret_cast<const uint8_t*>(pc);
  if (fn == probe.switch_fn && op == 0xC3) probe.switch_rets.fetch_add(1, std::memory_order_relaxed);         // ret
  if (fn == probe.trampoline_fn && op == 0xC2) probe.trampoline_rets.fetch_add(1, std::memory_order_relaxed);  // ret $n
}

// Single-steps the calling thread from here on, until probe.stop. Not inlined,
// and with a frame pointer: GCC's pushf/pop for the eflags builtins carry no
// unwind info, so with the CFA kept in %rsp a walk from a preemption that
// landed between them went wrong (the test failed in about 1 run of 8, on
// the test's own code). Based on %rbp, the CFA is right there too.
__attribute__((noinline, optimize("no-omit-frame-pointer"))) void StepThisThread() {
  __builtin_ia32_writeeflags_u64(__builtin_ia32_readeflags_u64() | kTrapFlag);
}

[[noreturn]] void UnwindEverywhereChild() {
  constexpr uint64_t kSwitchRets = 20, kTrampolineRets = 3;
  goro_test::Watchdog dog(absl::Seconds(90));
  probe.switch_fn = FunctionOf(reinterpret_cast<uintptr_t>(&goro::arch::goro_switch_context));
  probe.start_fn = FunctionOf(reinterpret_cast<uintptr_t>(&goro::arch::goro_start_context));
  probe.trampoline_fn = FunctionOf(reinterpret_cast<uintptr_t>(&goro_async_preempt));
  probe.main_thread_fn = OutermostFunction();
  std::thread([] { probe.thread_fn = OutermostFunction(); }).join();
  if (probe.switch_fn == nullptr || probe.start_fn == nullptr || probe.trampoline_fn == nullptr ||
      probe.main_thread_fn == nullptr || probe.thread_fn == nullptr) {
    fprintf(stderr, "no unwind info for goro's assembly or a thread's first function\n");
    _exit(3);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnTrap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGURG);
  sigaction(SIGTRAP, &sa, nullptr);
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  opts.time_slice = absl::Milliseconds(1);
  static std::atomic<bool> done{false};
  goro::Run(
      [] {
        constexpr int kWorkers = 2;
        goro::WaitGroup wg;
        wg.Add(kWorkers);
        for (int i = 0; i < kWorkers; ++i) {
          goro::Go([&wg] {
            while (!done.load(std::memory_order_relaxed)) {
              StepThisThread();  // whichever thread runs this goroutine now
              goro::Yield();     // goro_switch_context
              goro::Go([] {});   // goro_start_context
              goro_test::Spin(absl::Milliseconds(2));  // preempted: goro_async_preempt
            }
            wg.Done();
          });
        }
        auto start = goro_test::Now();
        while ((probe.switch_rets.load() < kSwitchRets || probe.trampoline_rets.load() < kTrampolineRets) &&
               goro_test::Since(start) < absl::Seconds(60)) {
          goro::SleepFor(absl::Milliseconds(5));
        }
        done = true;
        wg.Wait();
      },
      opts);
  probe.stop = true;
  fprintf(stderr, "%llu walks, %llu at goro_switch_context's ret, %llu at the trampoline's; %llu bad\n",
          goro_test::U(probe.walks.load()), goro_test::U(probe.switch_rets.load()),
          goro_test::U(probe.trampoline_rets.load()), goro_test::U(probe.bad.load()));
  if (probe.bad.load() != 0) {
    const auto pc = probe.bad_pc.load();
    const auto off = [pc](auto* f) { return static_cast<long>(pc - reinterpret_cast<uintptr_t>(f)); };
    fprintf(stderr,
            "first bad walk: before goro_switch_context%+ld = goro_async_preempt%+ld: code %d after %d frames, "
            "%s the stepped instruction, last frame at %#lx after one at %#lx\n",
            off(&goro::arch::goro_switch_context), off(&goro_async_preempt), probe.bad_rc.load(), probe.bad_frames.load(),
            probe.bad_saw_pc.load() ? "through" : "not through", static_cast<unsigned long>(probe.bad_last.load()),
            static_cast<unsigned long>(probe.bad_outer.load()));
    _exit(1);
  }
  if (probe.switch_rets.load() < kSwitchRets || probe.trampoline_rets.load() < kTrampolineRets) {
    fprintf(stderr, "the epilogues were not stepped through often enough in 60 s\n");
    _exit(2);
  }
  _exit(0);
}

TEST(PreemptTest, UnwindInfoIsRightAtEveryInstructionOfTheSwitchAndTheTrampoline) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(UnwindEverywhereChild(), ::testing::ExitedWithCode(0), "");
}

// Static linking. static_link_probe.cc, built with -static-libstdc++
// -static-libgcc and with -static, runs six goroutines that throw, catch
// and rethrow exceptions and churn malloc, with the shortest time slice, and
// prints what it saw. Linked into the executable, the C++ runtime, the
// unwinder and malloc used to be preemptible like the program's code: a
// goroutine parked inside them resumed on another thread with the first
// thread's per-thread state (caught-exception stack, tcache), and the probe
// died in 6 of 6 runs ("terminate called without an active exception",
// SIGSEGV, "malloc(): unaligned tcache chunk detected"). The -static one
// never started: goro's dl_iterate_phdr called the null that dlsym(RTLD_NEXT)
// returns in a static executable.
struct ProbeRun {
  int exit_code = -1;  // or 128 + signal
  std::string out;
  std::vector<std::string> err_lines;  // non-empty lines of stderr
  std::string Describe() const {
    std::string d = "exit " + std::to_string(exit_code) + "\nstdout:\n" + out + "stderr:\n";
    for (const auto& l : err_lines) d += l + "\n";
    return d;
  }
};

// Runs `path` with `arg` (if not null) and without GORODEBUG, which could
// turn async preemption off by itself; kills it after 30 s.
ProbeRun RunStaticProbe(const char* path, const char* arg = nullptr) {
  ProbeRun r;
  std::vector<std::string> argv = {path};
  if (arg != nullptr) argv.push_back(arg);
  goro_test::CapturedRun run = goro_test::RunCapturing(argv, goro_test::EnvironmentWithout({"GORODEBUG"}));
  r.exit_code = run.exit_code;
  r.out = std::move(run.out);
  for (absl::string_view line : absl::StrSplit(run.err, '\n', absl::SkipWhitespace())) {
    r.err_lines.emplace_back(line);
  }
  return r;
}

// The probe's exception and malloc run: it finishes, one warning line names
// what is linked statically and says async preemption is off, GetOptions()
// says so too, no exception state went wrong, and dl_iterate_phdr listed
// the program.
void ExpectStaticRunSurvives(const char* path, const char* linked) {
  ProbeRun r = RunStaticProbe(path);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_EQ(r.err_lines.size(), 1u) << r.Describe();
  EXPECT_TRUE(absl::StartsWith(r.err_lines[0], absl::StrCat("goro: ", linked, " linked into the executable")))
      << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "async preemption is off")) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "goro::RegisterPreemptibleCode")) << r.Describe();
  long rounds = -1, bad = -1;
  int async = -1, found_main = -1;
  ASSERT_EQ(sscanf(r.out.c_str(), "async=%d rounds=%ld bad=%ld found_main=%d", &async, &rounds, &bad, &found_main), 4)
      << r.Describe();
  EXPECT_EQ(async, 0) << r.Describe();
  EXPECT_EQ(bad, 0) << r.Describe();
  EXPECT_GT(rounds, 0) << r.Describe();
  EXPECT_EQ(found_main, 1) << r.Describe();
}

// The way back the warning names: code the program registers before the
// runtime starts is interrupted (a call-free loop on both Ps lets the main
// goroutine wake), and nothing is printed.
void ExpectRegisteredCodeIsPreemptible(const char* path) {
  ProbeRun r = RunStaticProbe(path, "--register");
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(r.err_lines.empty()) << r.Describe();
  EXPECT_TRUE(absl::StartsWith(r.out, "async=1 registered_loop_stopped=1")) << r.Describe();
}

#define SKIP_WITHOUT_PROBE(path) \
  if ((path)[0] == '\0') GTEST_SKIP() << "not built here (tests/CMakeLists.txt says when)"

TEST(PreemptTest, StaticLibstdcxxAndLibgccTurnAsyncPreemptionOffWithOneWarning) {
  SKIP_WITHOUT_PROBE(GORO_STATIC_CXX_PROBE_PATH);
  ExpectStaticRunSurvives(GORO_STATIC_CXX_PROBE_PATH, "libstdc++ and libgcc's unwinder are");
}

TEST(PreemptTest, StaticLibstdcxxAndLibgccLeaveRegisteredCodePreemptible) {
  SKIP_WITHOUT_PROBE(GORO_STATIC_CXX_PROBE_PATH);
  ExpectRegisteredCodeIsPreemptible(GORO_STATIC_CXX_PROBE_PATH);
}

// -static also needs dl_iterate_phdr without a dynamic loader: glibc's own
// is not linked in (a weak reference does not pull it from libc.a), so goro
// lists the program and the vDSO from the auxiliary vector.
TEST(PreemptTest, FullyStaticExecutableStartsWithAsyncPreemptionOff) {
  SKIP_WITHOUT_PROBE(GORO_STATIC_PROBE_PATH);
  ExpectStaticRunSurvives(GORO_STATIC_PROBE_PATH, "libstdc++, libgcc's unwinder and libc are");
}

TEST(PreemptTest, FullyStaticExecutableLeavesRegisteredCodePreemptible) {
  SKIP_WITHOUT_PROBE(GORO_STATIC_PROBE_PATH);
  ExpectRegisteredCodeIsPreemptible(GORO_STATIC_PROBE_PATH);
}

// An allocator linked into the executable (a static tcmalloc or jemalloc,
// whose malloc libc's calls reach too) keeps per-thread caches: the probe's
// own malloc is the executable's code, and so was preemptible. Fails without
// the check of where dlsym finds malloc: no line, async preemption on.
TEST(PreemptTest, OwnMallocInTheExecutableTurnsAsyncPreemptionOffWithOneWarning) {
  SKIP_WITHOUT_PROBE(GORO_OWN_MALLOC_PROBE_PATH);
  ExpectStaticRunSurvives(GORO_OWN_MALLOC_PROBE_PATH, "an allocator (malloc) is");
}

// An executable built without -pie that takes malloc's address: dlsym
// finds malloc in the executable (its PLT entry, the function's canonical
// address there), but the executable does not define it. Fails without the
// look at the symbol's definition: one line naming an allocator, async
// preemption off.
TEST(PreemptTest, NonPieExecutableTakingMallocsAddressKeepsAsyncPreemption) {
  SKIP_WITHOUT_PROBE(GORO_NOPIE_PROBE_PATH);
  ProbeRun r = RunStaticProbe(GORO_NOPIE_PROBE_PATH);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(r.err_lines.empty()) << r.Describe();
  long rounds = -1, bad = -1;
  int async = -1, found_main = -1;
  ASSERT_EQ(sscanf(r.out.c_str(), "async=%d rounds=%ld bad=%ld found_main=%d", &async, &rounds, &bad, &found_main), 4)
      << r.Describe();
  EXPECT_EQ(async, 1) << r.Describe();
  EXPECT_EQ(bad, 0) << r.Describe();
}

TEST(PreemptTest, OwnMallocInTheExecutableLeavesRegisteredCodePreemptible) {
  SKIP_WITHOUT_PROBE(GORO_OWN_MALLOC_PROBE_PATH);
  ExpectRegisteredCodeIsPreemptible(GORO_OWN_MALLOC_PROBE_PATH);
}

}  // namespace
