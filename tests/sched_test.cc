// The scheduler: goroutine identity, Run and Go from anywhere, work spreading
// across Ps, the Stats counters, the runtime's own threads (not copies of
// the program's), and unwinding on and off goroutines.
#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::Eventually;
using goro_test::RunBounded;
using goro_test::ThreadId;
using goro_test::Watchdog;

// ---------------------------------------------------------------------------
// Goroutine identity.

TEST(SchedTest, GoroutineIdIsZeroOffAGoroutine) {
  EXPECT_EQ(goro::GoroutineId(), 0);
  goro_test::StartRuntime();
  EXPECT_EQ(goro::GoroutineId(), 0) << "the test's thread is not a goroutine";
  int64_t in_thread = -1;
  std::thread t([&] { in_thread = goro::GoroutineId(); });
  t.join();
  EXPECT_EQ(in_thread, 0);
}

TEST(SchedTest, GoroutineIdsArePositiveAndDistinct) {
  RunBounded([] {
    constexpr int kGoroutines = 500;
    goro::Mutex mu;
    std::set<int64_t> ids;  // guarded by mu
    int64_t mine = goro::GoroutineId();
    EXPECT_GT(mine, 0);
    ids.insert(mine);
    goro::WaitGroup wg;
    wg.Add(kGoroutines);
    goro::Chan<int> gate;  // keep all of them alive at once, so ids cannot be reused
    for (int i = 0; i < kGoroutines; ++i) {
      // `gate` by value: these goroutines are still leaving Recv when fn returns.
      goro::Go([&mu, &ids, &wg, gate]() mutable {
        int64_t id = goro::GoroutineId();
        {
          std::lock_guard<goro::Mutex> lock(mu);
          ids.insert(id);
        }
        wg.Done();
        gate.Recv();
      });
    }
    wg.Wait();
    std::lock_guard<goro::Mutex> lock(mu);
    EXPECT_EQ(ids.size(), static_cast<size_t>(kGoroutines + 1));
    EXPECT_GT(*ids.begin(), 0);
    gate.Close();
  });
}

TEST(SchedTest, GoroutineIdIsStableAcrossSwitches) {
  RunBounded([] {
    goro::WaitGroup wg;
    std::atomic<int> changed{0};
    wg.Add(8);
    for (int i = 0; i < 8; ++i) {
      goro::Go([&] {
        int64_t id = goro::GoroutineId();
        for (int k = 0; k < 50; ++k) {
          if (k % 2 == 0) {
            goro::Yield();
          } else {
            goro::SleepFor(absl::Microseconds(50));
          }
          if (goro::GoroutineId() != id) ++changed;
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(changed.load(), 0);
  });
}

// ---------------------------------------------------------------------------
// Go and Run from anywhere.

TEST(SchedTest, GoFromAPlainThread) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kThreads = 4, kPerThread = 500;
  std::atomic<int> ran{0};
  std::atomic<int> zero_ids{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        goro::Go([&] {
          if (goro::GoroutineId() == 0) ++zero_ids;
          ++ran;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(Eventually([&] { return ran.load() == kThreads * kPerThread; }));
  EXPECT_EQ(zero_ids.load(), 0);
}

TEST(SchedTest, GoBeforeAnyRunStartsTheRuntime) {
  EXPECT_EXIT(
      {
        Watchdog dog(absl::Seconds(30));
        goro::Stats before = goro::GetStats();
        if (before.procs != 0) {
          fprintf(stderr, "procs = %d before the runtime started\n", before.procs);
          _exit(1);
        }
        absl::Notification ran;
        goro::Go([&] { ran.Notify(); });
        if (!ran.WaitForNotificationWithTimeout(absl::Seconds(20))) {
          fprintf(stderr, "a goroutine started by Go before any Run never ran\n");
          _exit(2);
        }
        goro::Stats after = goro::GetStats();
        if (after.procs < 1 || after.goroutines_created < 1) {
          fprintf(stderr, "procs = %d goroutines_created = %llu after Go\n", after.procs,
                  static_cast<unsigned long long>(after.goroutines_created));
          _exit(3);
        }
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SchedTest, RunFromInsideAGoroutine) {
  RunBounded([] {
    goro::Chan<int> c;
    goro::Go([c]() mutable {
      goro::SleepFor(absl::Milliseconds(10));
      c.Send(1);
    });
    std::atomic<int64_t> inner_id{0};
    std::atomic<int> got{-1};
    goro::Run([&] {
      inner_id = goro::GoroutineId();
      got = c.Recv().value_or(-2);  // needs the other goroutine to keep running
    });
    EXPECT_NE(inner_id.load(), 0) << "Run's fn must run on a goroutine";
    EXPECT_EQ(got.load(), 1);
    // Nested deeper.
    int depth = 0;
    std::function<void(int)> nest = [&](int n) {
      depth = n;
      if (n < 10) goro::Run([&, n] { nest(n + 1); });
    };
    nest(0);
    EXPECT_EQ(depth, 10);
  });
}

// Run on a goroutine blocks only that goroutine: many goroutines can sit in Run
// at once while the others go on.
TEST(SchedTest, ManyGoroutinesBlockedInRunAtOnce) {
  RunBounded([] {
    constexpr int kRunners = 50;
    goro::Chan<int> gate;
    std::atomic<int> entered{0};
    goro::WaitGroup wg;
    wg.Add(kRunners);
    for (int i = 0; i < kRunners; ++i) {
      goro::Go([&] {
        goro::Run([&] {
          ++entered;
          gate.Recv();
        });
        wg.Done();
      });
    }
    EXPECT_TRUE(Eventually([&] { return entered.load() == kRunners; }))
        << entered.load() << " of " << kRunners << " got into Run";
    gate.Close();
    wg.Wait();
  });
}

TEST(SchedTest, RunFromManyThreadsAtOnce) {
  // Also races the start of the runtime itself when this is the first test.
  Watchdog dog;
  constexpr int kThreads = 4, kRuns = 25;
  std::atomic<int> done{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRuns; ++r) {
        int result = 0;
        goro::Run(
            [&] {
              if (goro::GoroutineId() == 0) ++bad;
              goro::Chan<int> c(1);
              goro::Go([c]() mutable { c.Send(21); });
              result = c.Recv().value_or(0) * 2;
            },
            goro_test::TestOptions());
        if (result != 42) ++bad;
        ++done;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kThreads * kRuns);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(goro::GetStats().procs, 2);
}

TEST(SchedTest, RunReturnsWhenFnReturnsNotWhenItsChildrenDo) {
  goro::Chan<int> gate;
  auto child_done = std::make_shared<std::atomic<bool>>(false);
  RunBounded([&] {
    goro::Go([gate, child_done]() mutable {
      gate.Recv();
      *child_done = true;
    });
  });
  EXPECT_FALSE(child_done->load()) << "Run waited for a goroutine other than fn";
  gate.Close();  // from the test's thread
  EXPECT_TRUE(Eventually([&] { return child_done->load(); }));
}

// Each Run from a thread spawns its goroutine without a P. Such spawns must
// reuse the Gs that finished goroutines left on the free lists; otherwise every
// Run allocates a G for good (a few hundred bytes: megabytes over this loop).
TEST(SchedTest, RepeatedRunFromAThreadDoesNotGrowTheHeap) {
  goro_test::StartRuntime();
  Watchdog dog;
  auto heap = [] { return mallinfo2().uordblks; };
  for (int i = 0; i < 1000; ++i) goro::Run([] {});  // warm the free lists
  size_t before = heap();
  constexpr int kRuns = 20000;
  for (int i = 0; i < kRuns; ++i) goro::Run([] {});
  size_t after = heap();
  size_t growth = after > before ? after - before : 0;
  EXPECT_LT(growth, size_t{1} << 20) << "heap grew by " << growth << " bytes over " << kRuns
                                      << " Runs from a thread";
}

// Under TSan a goroutine's first run creates a TSan fiber, which made this
// take 28-46 s there (60 s is the bound): it starts a fifth as many.
TEST(SchedTest, OneHundredThousandGoroutines) {
  RunBounded([] {
    constexpr int kGoroutines = goro_test::kTsanBuild ? 20000 : 100000;
    std::atomic<int> ran{0};
    goro::WaitGroup wg;
    wg.Add(kGoroutines);
    for (int i = 0; i < kGoroutines; ++i) {
      goro::Go([&] {
        ++ran;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(ran.load(), kGoroutines);
  });
}

TEST(SchedTest, LongChainOfGoroutinesEachStartingTheNext) {
  RunBounded([] {
    constexpr int kLength = 10000;
    goro::Chan<int> done(1);
    std::function<void(int)> step = [&](int n) {
      if (n == kLength) {
        done.Send(n);
        return;
      }
      goro::Go([&step, n] { step(n + 1); });
    };
    goro::Go([&] { step(1); });
    EXPECT_EQ(done.Recv().value_or(-1), kLength);
  });
}

TEST(SchedTest, YieldAndCheckpointWork) {
  // Off a goroutine they are harmless.
  goro::Yield();
  goro::Checkpoint();
  RunBounded([] {
    std::atomic<int64_t> counter{0};
    std::atomic<bool> stop{false};
    goro::WaitGroup wg;
    wg.Add(4);
    for (int i = 0; i < 4; ++i) {
      goro::Go([&] {
        while (!stop.load()) {
          ++counter;
          goro::Checkpoint();
          goro::Yield();
        }
        wg.Done();
      });
    }
    EXPECT_TRUE(Eventually([&] { return counter.load() > 10000; }));
    stop = true;
    wg.Wait();
  });
}

// ---------------------------------------------------------------------------
// Parallelism and the Stats counters.

// Two goroutines that spin (reaching safe points) run on two OS threads at the
// same time: one sees the other's counter advance, on another thread, while it
// itself stays on its thread without yielding.
TEST(SchedTest, WorkSpreadsToBothPs) {
  RunBounded([] {
    EXPECT_EQ(goro::GetStats().procs, 2);
    std::atomic<bool> stop{false}, overlapped{false};
    std::atomic<int64_t> tid[2] = {0, 0};
    std::atomic<uint64_t> ticks[2] = {0, 0};
    goro::WaitGroup wg;
    wg.Add(2);
    for (int i = 0; i < 2; ++i) {
      goro::Go([&, i] {
        const int other = 1 - i;
        uint64_t rounds = 0;
        while (!stop.load()) {
          int64_t me = ThreadId();
          tid[i] = me;
          uint64_t before = ticks[other].load();
          for (int k = 0; k < 20000; ++k) ticks[i].fetch_add(1, std::memory_order_relaxed);
          uint64_t after = ticks[other].load();
          if (after != before && ThreadId() == me && tid[other].load() != me &&
              tid[other].load() != 0) {
            overlapped = true;
          }
          goro::Checkpoint();
          if (++rounds % 16 == 0) goro::Yield();
        }
        wg.Done();
      });
    }
    EXPECT_TRUE(Eventually([&] { return overlapped.load(); }))
        << "two spinning goroutines never ran on two threads at once";
    stop = true;
    wg.Wait();
  });
}

// Run returns once its goroutine's function has, while the goroutine is
// still on its way out; a leak check made right after Run must not count it.
TEST(SchedTest, RunsGoroutineIsNotLiveOnceRunReturns) {
  goro::Run([] {});  // started, with nothing of this test alive
  const int64_t before = goro::GetStats().goroutines_live;
  int counted = 0;
  for (int i = 0; i < 2000; ++i) {
    goro::Run([] {});
    if (goro::GetStats().goroutines_live != before) ++counted;
  }
  EXPECT_EQ(counted, 0) << "of 2000 Runs, " << counted
                        << " returned while GetStats() still counted their goroutine as live";
}

TEST(SchedTest, StatsCountGoroutinesAndReturnToBaseline) {
  RunBounded([] {
    constexpr int kGoroutines = 200;
    goro::Stats base = goro::GetStats();
    EXPECT_EQ(base.procs, 2);
    EXPECT_GE(base.goroutines_live, 1) << "Run's own goroutine is live";
    EXPECT_GE(base.goroutines_created, 1u);
    goro::Chan<int> gate;
    goro::WaitGroup started, finished;
    started.Add(kGoroutines);
    finished.Add(kGoroutines);
    for (int i = 0; i < kGoroutines; ++i) {
      goro::Go([&] {
        started.Done();
        gate.Recv();
        finished.Done();
      });
    }
    started.Wait();
    goro::Stats during = goro::GetStats();
    EXPECT_GE(during.goroutines_created, base.goroutines_created + kGoroutines);
    EXPECT_GE(during.goroutines_live, base.goroutines_live + kGoroutines);
    gate.Close();
    finished.Wait();
    int64_t live = -1;
    EXPECT_TRUE(Eventually([&] {
      live = goro::GetStats().goroutines_live;
      return live == base.goroutines_live;
    })) << "goroutines_live stayed at " << live << ", baseline " << base.goroutines_live;
    EXPECT_GE(goro::GetStats().threads, 1);
  });
}

// GetStats read while goroutines on both Ps spawn short goroutines, from a
// plain thread that the machine may deschedule halfway through: a goroutine
// created and exited meanwhile must not count as exited only. Fails (a
// negative count, by thousands) if GetStats reads creations before exits;
// a reviewer's run went negative in 4 of 4 three-second runs.
TEST(SchedTest, GoroutinesLiveIsNeverNegativeWhileGoroutinesComeAndGo) {
  RunBounded([] {
    std::atomic<bool> stop{false};
    goro::WaitGroup wg;
    wg.Add(2);
    for (int t = 0; t < 2; ++t) {
      goro::Go([&] {
        while (!stop.load()) {
          goro::Go([] {});
          goro::Yield();
        }
        wg.Done();
      });
    }
    int64_t min_live = INT64_MAX;
    uint64_t samples = 0;
    std::thread reader([&] {
      auto start = goro_test::Now();
      while (goro_test::Since(start) < absl::Seconds(2)) {
        min_live = std::min(min_live, goro::GetStats().goroutines_live);
        ++samples;
      }
    });
    goro::Syscall([&reader] {
      reader.join();
      return 0;
    });
    stop = true;
    wg.Wait();
    EXPECT_GE(min_live, 0) << "over " << samples << " reads of GetStats";
  });
}

TEST(SchedTest, StealsHappenAfterASpreadWorkload) {
  RunBounded([] {
    goro::Stats base = goro::GetStats();
    bool stolen = Eventually(
        [&] {
          // One goroutine makes work for many: its P's run queue fills, and the
          // other P has nothing unless it steals.
          goro::WaitGroup wg;
          wg.Add(1);
          goro::Go([&] {
            goro::WaitGroup inner;
            inner.Add(200);
            for (int i = 0; i < 200; ++i) {
              goro::Go([&] {
                goro_test::Spin(absl::Microseconds(100));
                goro::Checkpoint();
                inner.Done();
              });
            }
            inner.Wait();
            wg.Done();
          });
          wg.Wait();
          return goro::GetStats().steals > base.steals;
        },
        absl::Seconds(30));
    goro::Stats after = goro::GetStats();
    EXPECT_TRUE(stolen) << "steals stayed at " << after.steals;
    EXPECT_EQ(after.procs, 2);
    EXPECT_GE(after.threads, 2) << "two Ps ran at once, so at least two Ms exist";
  });
}

// ---------------------------------------------------------------------------
// Making threads: the runtime's threads are not copies of the program's.

// The kernel ids of the runtime's threads: those whose name begins with
// "goro-" (the Ms, sysmon, the template thread).
std::vector<pid_t> RuntimeThreads() {
  std::vector<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("goro-", 0) == 0) tids.push_back(static_cast<pid_t>(atoi(e->d_name)));
  }
  closedir(d);
  return tids;
}

// A plain thread pinned to one CPU (an I/O thread, say) starts the runtime
// with the default number of Ps and starts goroutines. The Ps count the
// process's CPUs (its main thread's mask), not the starter's, and no runtime
// thread keeps the pin: the template thread, the only one the starter makes,
// takes the main thread's mask back before it makes sysmon and the Ms (the
// first M too, made for the pinned thread's Run, and every other a copy of
// an M). Fails if the count follows the starter (one P) or any runtime
// thread runs on fewer CPUs than the process: before the template thread,
// every one did.
[[noreturn]] void PinnedThreadStartsTheRuntimeChild(cpu_set_t process) {
  Watchdog dog(absl::Seconds(30));
  int first = 0;
  while (!CPU_ISSET(first, &process)) ++first;
  std::thread t([first] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHILD_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity: %s", strerror(errno));
    goro::Run([] { goro_test::WiredGoroutinesWithCwd("", 3); });  // default Options; makes Ms
  });
  t.join();
  if (getenv("GOROMAXPROCS") == nullptr) {
    CHILD_CHECK(goro::GetStats().procs == std::min(CPU_COUNT(&process), 1024), "%d Ps for %d CPUs",
                goro::GetStats().procs, CPU_COUNT(&process));
  }
  std::vector<pid_t> tids = RuntimeThreads();
  CHILD_CHECK(tids.size() >= 4, "only %zu runtime threads", tids.size());
  for (pid_t tid : tids) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    CHILD_CHECK(sched_getaffinity(tid, sizeof mask, &mask) == 0, "sched_getaffinity(%d): %s", tid, strerror(errno));
    CHILD_CHECK(CPU_EQUAL(&mask, &process), "runtime thread %d may run on %d CPUs, the process on %d", tid,
                CPU_COUNT(&mask), CPU_COUNT(&process));
  }
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(SchedTest, RuntimeStartedByAPinnedThreadUsesTheProcessCpus) {
  cpu_set_t process;
  CPU_ZERO(&process);
  ASSERT_EQ(sched_getaffinity(0, sizeof process, &process), 0) << strerror(errno);
  if (CPU_COUNT(&process) < 2) GTEST_SKIP() << "needs two CPUs to tell a pinned thread from the process";
  EXPECT_EXIT(PinnedThreadStartsTheRuntimeChild(process), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// Unwinding: C++ exceptions and forced unwinds still work once goro is linked.

struct CountOnDestroy {
  std::atomic<int>* n;
  ~CountOnDestroy() { ++*n; }
};

__attribute__((noinline)) int ThrowFromDepth(int depth, std::atomic<int>* destroyed, bool yield) {
  CountOnDestroy guard{destroyed};
  std::string pad(static_cast<size_t>(depth % 50) + 20, 'x');  // a heap-owning local per frame
  if (depth == 0) {
    if (yield) {
      goro::Yield();
      goro::SleepFor(absl::Microseconds(10));  // may resume on another thread
    }
    throw std::runtime_error("thrown from the bottom");
  }
  int r = ThrowFromDepth(depth - 1, destroyed, yield);
  return r + static_cast<int>(pad.size());
}

TEST(UnwindTest, ExceptionCaughtInsideAGoroutineAcrossManyFrames) {
  RunBounded([] {
    constexpr int kDepth = 300, kGoroutines = 8;
    std::atomic<int> caught{0}, destroyed{0};
    goro::WaitGroup wg;
    wg.Add(kGoroutines);
    for (int g = 0; g < kGoroutines; ++g) {
      goro::Go([&] {
        try {
          ThrowFromDepth(kDepth, &destroyed, /*yield=*/true);
        } catch (const std::runtime_error& e) {
          if (std::string(e.what()) == "thrown from the bottom") ++caught;
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(caught.load(), kGoroutines);
    EXPECT_EQ(destroyed.load(), kGoroutines * (kDepth + 1)) << "a frame's destructor did not run";
  });
}

// Yield's direct switch (TryYieldDirect) hands the thread from one goroutine
// to another without g0; when the second one later switches to g0, g0 must
// save the exception state into *that* goroutine, not into the one it had
// started. Goroutines inside a catch block yield beside goroutines outside
// any: an outsider that finds a current exception got an insider's state.
// Found by ThreadSanitizer (a race on G::eh); failed every run before.
TEST(UnwindTest, ExceptionStateSurvivesDirectYields) {
  RunBounded([] {
    constexpr int kPairs = 4, kRounds = 3000;
    std::atomic<int> outsider_saw_exception{0}, insider_lost_it{0};
    goro::WaitGroup wg;
    wg.Add(2 * kPairs);
    for (int i = 0; i < kPairs; ++i) {
      goro::Go([&] {
        try {
          throw std::runtime_error("inside");
        } catch (const std::runtime_error&) {
          for (int r = 0; r < kRounds; ++r) {
            goro::Yield();
            if (std::current_exception() == nullptr) ++insider_lost_it;
          }
        }
        wg.Done();
      });
      goro::Go([&] {
        for (int r = 0; r < kRounds; ++r) {
          goro::Yield();
          if (std::current_exception() != nullptr) ++outsider_saw_exception;
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(outsider_saw_exception.load(), 0) << "a goroutine outside any catch block had a current exception";
    EXPECT_EQ(insider_lost_it.load(), 0) << "a goroutine inside a catch block lost its exception";
  });
}

TEST(UnwindTest, ExceptionOnAPlainThreadWithTheRuntimeRunning) {
  goro_test::StartRuntime();
  std::atomic<int> caught{0}, destroyed{0};
  std::thread t([&] {
    try {
      ThrowFromDepth(300, &destroyed, /*yield=*/false);
    } catch (const std::runtime_error&) {
      ++caught;
    }
  });
  t.join();
  EXPECT_EQ(caught.load(), 1);
  EXPECT_EQ(destroyed.load(), 301);
}

struct ExitArgs {
  std::atomic<int> destroyed{0};
};

__attribute__((noinline)) void ExitFromDepth(int depth, ExitArgs* args) {
  CountOnDestroy guard{&args->destroyed};
  if (depth < 0) return;
  if (depth == 0) pthread_exit(nullptr);
  ExitFromDepth(depth - 1, args);
}

TEST(UnwindTest, PthreadExitRunsDestructors) {
  goro_test::StartRuntime();
  ExitArgs args;
  pthread_t th;
  ASSERT_EQ(pthread_create(
                &th, nullptr,
                [](void* p) -> void* {
                  ExitFromDepth(50, static_cast<ExitArgs*>(p));
                  return nullptr;
                },
                &args),
            0);
  ASSERT_EQ(pthread_join(th, nullptr), 0);
  EXPECT_EQ(args.destroyed.load(), 51) << "pthread_exit's forced unwind skipped destructors";
}

}  // namespace
