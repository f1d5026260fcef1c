// Preemption safety: what asynchronous preemption must never break, and the
// knobs that keep it away from a piece of code.
//
// The loops that must be interrupted are written in assembly
// (spin_loop_x86_64_sysv_elf_gas.S), so "no call, no safe point" is a fact of
// the source. Every test runs in a child process (EXPECT_EXIT): each needs its
// own Options (one P, a 200 us slice, another preemption signal, ...), and
// Options are read once per process. A child reports every failed check on
// stderr and exits non-zero; its own watchdog turns a hang into a failure.
// Each comment says what would make the test fail.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "arch/cpu.h"
#include "core/runtime.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

extern char** environ;

// tests/spin_loop_x86_64_sysv_elf_gas.S
extern "C" {
uint64_t goro_test_spin_until(const volatile uint8_t* stop, uint64_t* counter);
uint64_t goro_test_spin_until_excluded(const volatile uint8_t* stop, uint64_t* counter);
void goro_test_spin_until_excluded_end();
uint64_t goro_test_spin_with_df(const volatile uint8_t* stop, uint64_t* counter);
uint64_t goro_test_spin_red_zone(const volatile uint8_t* stop, uint64_t* counter);
uint64_t goro_test_spin_with_ac(const volatile uint8_t* stop, uint64_t* counter);
uint64_t goro_test_spin_vector(const volatile uint8_t* stop, uint64_t* counter, uint64_t offset, uint64_t avx512);
}

namespace {

using goro_test::Now;
using goro_test::Since;

// ---------------------------------------------------------------------------
// Helpers.

using SpinFn = uint64_t (*)(const volatile uint8_t*, uint64_t*);

// The stop byte and the iteration counter of one assembly loop.
struct Spin {
  std::atomic<uint8_t> stop{0};
  std::atomic<uint64_t> counter{0};

  uint64_t Run(SpinFn fn) {
    return fn(reinterpret_cast<const volatile uint8_t*>(&stop), reinterpret_cast<uint64_t*>(&counter));
  }
  bool Started() const { return counter.load(std::memory_order_relaxed) != 0; }
};
static_assert(sizeof(std::atomic<uint8_t>) == 1 && sizeof(std::atomic<uint64_t>) == 8);

using goro_test::child_failures;
using goro_test::U;

using goro_test::PrintStats;

// Ends the child: 0 when every CHILD_CHECK held.
[[noreturn]] void ExitChild() {
  PrintStats("at exit");
  _exit(child_failures.load() == 0 ? 0 : 1);
}

goro::Options Opts(int procs, absl::Duration slice, bool async = true) {
  goro::Options opts;
  opts.max_procs = procs;
  opts.time_slice = slice;
  opts.async_preemption = async;
  return opts;
}

// Waits on a goroutine (polling with SleepFor) or a plain thread until `cond`.
bool WaitUntil(const std::function<bool()>& cond, absl::Duration limit) {
  return goro_test::Eventually(cond, limit);
}

#define EXPECT_CHILD_OK(call) EXPECT_EXIT(call, ::testing::ExitedWithCode(0), "")

// ---------------------------------------------------------------------------
// An assembly loop with no call is preempted on one P; with async
// preemption off it is not.
//
// On one P the main goroutine can run while the loop is in progress only if
// the loop's goroutine was interrupted. Fails (watchdog) if the signal does
// not preempt; the control fails if anything but the signal lets the main
// goroutine in (then the first test would prove nothing).

[[noreturn]] void AsmLoopOnOneProcChild(bool async) {
  goro_test::Watchdog dog(absl::Seconds(25), "asm loop on one P");
  static Spin spin;
  static std::atomic<bool> main_saw_loop{false};
  static std::atomic<uint64_t> spinner_preemptions{0};
  std::thread stopper;
  if (!async) {
    // Nothing can interrupt the loop: a plain thread ends it after 300 ms.
    stopper = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      CHILD_CHECK(!main_saw_loop.load(), "the main goroutine ran beside the loop with async preemption off");
      CHILD_CHECK(spin.Started(), "the loop never started");
      spin.stop = 1;
    });
  }
  goro::Run(
      [async] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          spin.Run(goro_test_spin_until);
          spinner_preemptions = goro::CurrentGoroutinePreemptions();
          wg.Done();
        });
        // Yield to the loop; we are back only when it started and lost the P.
        while (!spin.Started()) goro::Yield();
        const bool loop_still_running = spin.stop.load() == 0;
        main_saw_loop = true;
        if (async) {
          CHILD_CHECK(loop_still_running, "the main goroutine ran only after the loop was stopped");
          // And the loop goes on after its preemption.
          uint64_t seen = spin.counter.load();
          while (spin.counter.load() == seen) goro::Yield();
          spin.stop = 1;
        } else {
          CHILD_CHECK(!loop_still_running, "the loop was interrupted with async preemption off");
        }
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(1), async));
  if (stopper.joinable()) stopper.join();
  goro::Stats s = goro::GetStats();
  if (async) {
    CHILD_CHECK(s.async_preemptions > 0, "no async preemption");
    CHILD_CHECK(spinner_preemptions.load() > 0, "the loop's goroutine was never preempted");
  } else {
    CHILD_CHECK(s.async_preemptions == 0, "%llu async preemptions with it off", U(s.async_preemptions));
    CHILD_CHECK(s.preempt_signals_sent == 0, "%llu signals sent with it off", U(s.preempt_signals_sent));
  }
  ExitChild();
}

TEST(PreemptSafetyTest, AsmLoopWithoutCallsIsPreemptedOnOneProc) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(AsmLoopOnOneProcChild(true));
}

TEST(PreemptSafetyTest, AsmLoopStarvesOthersWithAsyncPreemptionOff) {
  EXPECT_CHILD_OK(AsmLoopOnOneProcChild(false));
}

// ---------------------------------------------------------------------------
// Code that finds its own goroutine is never split by a preemption.
//
// Regression test: GoroutineId() (and Checkpoint, RuntimeScope) used to read
// the M from TLS and then m->curg; a preemption between the two moved the
// goroutine to another thread, which then read that thread's old M's curg:
// another goroutine. Fails with mismatches (or a crash on a null curg) if the
// lookup is two reads a signal can separate: against the runtime of fc19018,
// before the fix, every run reported several wrong ids.

[[noreturn]] void GoroutineIdChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "goroutine id loop");
  constexpr int kGoroutines = 8;
  static std::atomic<uint64_t> mismatches{0};
  static std::atomic<uint64_t> calls{0};
  static std::atomic<uint64_t> preemptions{0};
  static int64_t ids[kGoroutines];
  goro::Run(
      [] {
        goro::Chan<int> ch(4);
        goro::WaitGroup wg;
        wg.Add(kGoroutines);
        for (int i = 0; i < kGoroutines; ++i) {
          goro::Go([i, ch, &wg]() mutable {
            const int64_t mine = goro::GoroutineId();
            ids[i] = mine;
            uint64_t bad = 0, n = 0;
            int64_t first_wrong = 0;
            auto check = [&] {
              int64_t now = goro::GoroutineId();
              ++n;
              if (now != mine) {
                if (bad++ == 0) first_wrong = now;
              }
            };
            auto start = Now();
            while (Since(start) < absl::Seconds(1)) {
              // Mostly the calls that find the goroutine without entering
              // the runtime (where async preemptions land), now and then a
              // runtime call (where cooperative ones do).
              for (int j = 0; j < 2000; ++j) {
                check();
                goro::Checkpoint();
                check();
                if (j % 64 == 0) {
                  std::optional<int> got;
                  goro::Select(goro::OnRecv(ch, &got), goro::OnDefault());
                  check();
                  int v = j;
                  goro::Select(goro::OnSend(ch, &v), goro::OnDefault());
                  check();
                }
              }
            }
            if (bad != 0) {
              fprintf(stderr, "goroutine %lld saw GoroutineId() == %lld (%llu times in %llu calls)\n",
                      static_cast<long long>(mine), static_cast<long long>(first_wrong), U(bad), U(n));
            }
            mismatches += bad;
            calls += n;
            preemptions += goro::CurrentGoroutinePreemptions();
            wg.Done();
          });
        }
        wg.Wait();
      },
      Opts(2, absl::Microseconds(200)));
  goro::Stats s = goro::GetStats();
  fprintf(stderr, "%llu GoroutineId calls, %llu preemptions of the loops\n", U(calls.load()),
          U(preemptions.load()));
  CHILD_CHECK(mismatches.load() == 0, "%llu calls returned another goroutine's id", U(mismatches.load()));
  for (int i = 0; i < kGoroutines; ++i) {
    CHILD_CHECK(ids[i] > 0, "goroutine %d has id %lld", i, static_cast<long long>(ids[i]));
    for (int j = 0; j < i; ++j) CHILD_CHECK(ids[i] != ids[j], "goroutines %d and %d share an id", i, j);
  }
  CHILD_CHECK(s.async_preemptions > 0, "no async preemption: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, GoroutineIdIsNeverSplitByPreemption) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(GoroutineIdChild());
}

// ---------------------------------------------------------------------------
// C++ exceptions, thrown 40 frames deep and caught, under heavy async
// preemption (200 us slices, a call-free hog on every P).
//
// Fails if the unwinder or a personality routine can be interrupted (they run
// in libgcc/libstdc++ and take the loader's lock through dl_iterate_phdr:
// a deadlock or a crash), if a preemption in one of the throwing frames
// corrupts a register the unwinder restores (wrong values, crashes), or if
// goro's linking diverts _Unwind_* to an unwinder that cannot handle them.
// Before 5f27dac (exception state per goroutine) it failed about one run in
// fifteen: a preemption inside a catch block moved the goroutine, which then
// rethrew another goroutine's exception (a freed one: garbage values).

constexpr int kThrowDepth = 40;

struct Boom {
  int64_t goroutine;
  uint64_t iter;
  uint64_t acc;
};

// Call-free work in every frame, so that preemptions land in these frames.
__attribute__((noinline)) uint64_t MixFrame(uint64_t acc, int depth) {
  for (int i = 0; i < 64; ++i) acc = acc * 6364136223846793005ull + 1442695040888963407ull + depth;
  return acc;
}

// The value Dive's innermost frame throws, computed without throwing.
__attribute__((noinline)) uint64_t ExpectedAcc(uint64_t acc) {
  for (int d = kThrowDepth; d >= 0; --d) acc = MixFrame(acc, d);
  return acc;
}

// mode 0: throws Boom; 1: throws std::runtime_error carrying the values as
// text; 2: throws Boom, caught half-way down, modified and rethrown.
__attribute__((noinline)) uint64_t Dive(int depth, int64_t gid, uint64_t iter, uint64_t acc, int mode) {
  acc = MixFrame(acc, depth);
  if (depth == 0) {
    if (mode == 1) throw std::runtime_error(absl::StrCat(gid, ":", iter, ":", acc));
    throw Boom{gid, iter, acc};
  }
  uint64_t r;
  if (mode == 2 && depth == kThrowDepth / 2) {
    try {
      r = Dive(depth - 1, gid, iter, acc, mode);
    } catch (Boom& b) {
      b.acc ^= 0xabcdef;
      throw;
    }
  } else {
    r = Dive(depth - 1, gid, iter, acc, mode);
  }
  asm volatile("" : "+r"(r));  // no tail call: keep every frame
  return r + depth;
}

[[noreturn]] void ExceptionsChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "exceptions under preemption");
  constexpr int kThrowers = 4;
  constexpr int kHogs = 2;
  static std::atomic<uint64_t> thrown{0}, caught{0}, wrong{0}, not_thrown{0};
  goro::Run(
      [] {
        static Spin hogs[kHogs];
        goro::WaitGroup hogs_done, throwers_done;
        hogs_done.Add(kHogs);
        throwers_done.Add(kThrowers);
        for (int h = 0; h < kHogs; ++h) {
          goro::Go([h, &hogs_done] {
            hogs[h].Run(goro_test_spin_until);
            hogs_done.Done();
          });
        }
        for (int t = 0; t < kThrowers; ++t) {
          goro::Go([t, &throwers_done] {
            const int64_t gid = goro::GoroutineId();
            auto start = Now();
            for (uint64_t iter = 0; iter < 20000 && Since(start) < absl::Milliseconds(1500); ++iter) {
              const int mode = static_cast<int>((iter + t) % 3);
              const uint64_t seed = iter * 1000 + t;
              const uint64_t want = ExpectedAcc(seed);
              thrown++;
              try {
                Dive(kThrowDepth, gid, iter, seed, mode);
                not_thrown++;
              } catch (const Boom& b) {
                caught++;
                const uint64_t want_acc = mode == 2 ? (want ^ 0xabcdef) : want;
                if (mode == 1 || b.goroutine != gid || b.iter != iter || b.acc != want_acc) {
                  if (wrong++ == 0) {
                    fprintf(stderr, "mode %d: caught Boom{%lld, %llu, %llx}, want {%lld, %llu, %llx}\n",
                            mode, static_cast<long long>(b.goroutine), U(b.iter), U(b.acc),
                            static_cast<long long>(gid), U(iter), U(want_acc));
                  }
                }
              } catch (const std::runtime_error& e) {
                caught++;
                std::string w = absl::StrCat(gid, ":", iter, ":", want);
                if (mode != 1 || w != e.what()) {
                  if (wrong++ == 0) fprintf(stderr, "caught \"%s\", want \"%s\"\n", e.what(), w.c_str());
                }
              }
            }
            throwers_done.Done();
          });
        }
        throwers_done.Wait();
        for (auto& h : hogs) h.stop = 1;
        hogs_done.Wait();
      },
      Opts(2, absl::Microseconds(200)));
  fprintf(stderr, "thrown %llu, caught %llu\n", U(thrown.load()), U(caught.load()));
  CHILD_CHECK(thrown.load() > 0, "nothing was thrown");
  CHILD_CHECK(caught.load() == thrown.load(), "%llu thrown, %llu caught", U(thrown.load()), U(caught.load()));
  CHILD_CHECK(not_thrown.load() == 0, "%llu dives returned normally", U(not_thrown.load()));
  CHILD_CHECK(wrong.load() == 0, "%llu exceptions carried wrong values", U(wrong.load()));
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, ExceptionsUnderHeavyAsyncPreemption) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ExceptionsChild());
}

// The C++ runtime keeps the state of exception handling per thread
// (libstdc++'s __cxa_eh_globals: the stack of caught exceptions and the
// uncaught count). Goroutines that switch inside their catch blocks - here
// they sleep until all four are inside one, and rethrow in the order they
// entered; an async preemption switches at any instruction - must each
// still find their own exception: std::current_exception() and `throw;` use
// that state. Fails if the state stays with the thread: a goroutine finds
// nothing, or the exception another goroutine caught later on the same thread
// (it is on top of that thread's stack), and rethrows it or calls
// std::terminate. Before 5f27dac it failed every run.
[[noreturn]] void CatchBlockMovesChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "catch block that moves");
  constexpr int kGoroutines = 4;
  static std::atomic<int> moved{0}, lost{0}, wrong{0}, uncaught_wrong{0}, in_catch{0}, turn{0};
  static int64_t catch_tids[kGoroutines];
  goro::Run(
      [] {
        static Spin hogs[2];
        goro::WaitGroup hogs_done, wg;
        hogs_done.Add(2);
        for (auto& h : hogs) {
          goro::Go([&h, &hogs_done] {
            h.Run(goro_test_spin_until);
            hogs_done.Done();
          });
        }
        wg.Add(kGoroutines);
        for (int i = 0; i < kGoroutines; ++i) {
          goro::Go([i, &wg] {
            const int64_t gid = goro::GoroutineId();
            try {
              throw Boom{gid, static_cast<uint64_t>(i), 42};
            } catch (Boom& b) {
              const int64_t tid = goro_test::ThreadId();
              catch_tids[i] = tid;
              const int seq = in_catch++;
              // Sleep (others run on this thread meanwhile) until every
              // goroutine is inside its catch block, then a little longer
              // for a chance to resume on another thread.
              auto start = Now();
              while (in_catch.load() < kGoroutines && Since(start) < absl::Seconds(5)) {
                goro::SleepFor(absl::Microseconds(200));
              }
              start = Now();
              while (goro_test::ThreadId() == tid && Since(start) < absl::Milliseconds(200)) {
                goro::SleepFor(absl::Microseconds(200));
              }
              if (goro_test::ThreadId() != tid) moved++;
              // Rethrow in the order the catch blocks were entered: the
              // opposite of a per-thread stack's order, so that any thread
              // holding two open catch blocks gives the first one the wrong
              // exception.
              start = Now();
              while (turn.load() != seq && Since(start) < absl::Seconds(5)) {
                goro::SleepFor(absl::Microseconds(200));
              }
              if (std::uncaught_exceptions() != 0) uncaught_wrong++;
              if (std::current_exception() == nullptr) {
                fprintf(stderr, "goroutine %lld: no current exception in its catch block after moving\n",
                        static_cast<long long>(gid));
                lost++;
              } else {
                try {
                  throw;
                } catch (Boom& again) {
                  if (&again != &b || again.goroutine != gid) {
                    fprintf(stderr, "goroutine %lld rethrew Boom{%lld} at %p, caught %p\n",
                            static_cast<long long>(gid), static_cast<long long>(again.goroutine),
                            static_cast<void*>(&again), static_cast<void*>(&b));
                    wrong++;
                  }
                }
              }
              turn++;
            }
            wg.Done();
          });
        }
        wg.Wait();
        for (auto& h : hogs) h.stop = 1;
        hogs_done.Wait();
      },
      Opts(2, absl::Milliseconds(1)));
  int shared = 0;  // catch blocks entered on a thread where an earlier one was still open
  for (int i = 0; i < kGoroutines; ++i) {
    for (int j = 0; j < i; ++j) {
      if (catch_tids[i] == catch_tids[j]) {
        ++shared;
        break;
      }
    }
  }
  fprintf(stderr, "%d of %d catch blocks resumed on another thread, %d opened on a thread with another open\n",
          moved.load(), kGoroutines, shared);
  CHILD_CHECK(lost.load() == 0, "%d goroutines lost their exception", lost.load());
  CHILD_CHECK(wrong.load() == 0, "%d goroutines rethrew another exception", wrong.load());
  CHILD_CHECK(uncaught_wrong.load() == 0, "std::uncaught_exceptions() was wrong in %d catch blocks",
              uncaught_wrong.load());
  CHILD_CHECK(in_catch.load() == kGoroutines, "only %d goroutines reached their catch block", in_catch.load());
  CHILD_CHECK(moved.load() > 0 || shared > 0,
              "no catch block moved or shared its thread with another: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, ExceptionStateTravelsWithTheGoroutine) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(CatchBlockMovesChild());
}

// ---------------------------------------------------------------------------
// malloc/free, std::string/std::vector churn and dl_iterate_phdr loops
// under 200 us slices on one and two Ps finish (no deadlock).
//
// Library code is never interrupted, so a goroutine never parks inside
// malloc holding an arena lock or halfway through a thread's tcache, which
// another goroutine on that thread would then use (deadlock or corruption).
// dl_iterate_phdr calls back into the executable with the loader's lock held
// (a recursive lock owned by the thread): goro interposes it and defers
// preemption for the whole walk. Were the callback interruptible, a goroutine
// would park with the lock held and resume on another thread, which cannot
// release it; the next walk on the first thread would nest into it, and any
// walk on another thread would wait forever (the watchdog fires).
// Checked by hand: with libc and libstdc++ registered as preemptible
// (RegisterPreemptibleCode) both variants abort in malloc within 50 ms
// ("double free detected in tcache", "unaligned tcache chunk"); without the
// interposer's deferral the two-P variant hangs (on one P a single thread
// runs every walk, and the recursive lock just nests).

struct PhdrWalk {
  uint64_t objects = 0;
  uint64_t hash = 0;
};

int CountObject(dl_phdr_info* info, size_t, void* data) {
  auto* w = static_cast<PhdrWalk*>(data);
  w->objects++;
  // Call-free work with the loader's lock held, so that preemption requests
  // arrive inside the callback.
  uint64_t h = w->hash;
  for (int i = 0; i < info->dlpi_phnum; ++i) h = h * 31 + info->dlpi_phdr[i].p_memsz;
  for (int i = 0; i < 20000; ++i) h = h * 6364136223846793005ull + static_cast<uint64_t>(i);
  w->hash = h;
  return 0;
}

uint64_t CountObjects() {
  PhdrWalk w;
  dl_iterate_phdr(CountObject, &w);
  return w.objects;
}

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Returns the number of damaged blocks found.
uint64_t MallocChurn(absl::Duration d, uint64_t seed, uint64_t* rounds) {
  struct Slot {
    unsigned char* p = nullptr;
    size_t n = 0;
    unsigned char tag = 0;
  };
  std::array<Slot, 64> slots;
  Rng rng{seed * 0x9e3779b97f4a7c15ull + 1};
  uint64_t damaged = 0;
  auto start = Now();
  while (Since(start) < d) {
    for (int i = 0; i < 256; ++i) {
      uint64_t r = rng.Next();
      Slot& s = slots[r % slots.size()];
      if (s.p != nullptr) {
        if (s.p[0] != s.tag || s.p[s.n - 1] != s.tag || s.p[s.n / 2] != s.tag) ++damaged;
        free(s.p);
      }
      s.n = (r >> 8) % 4 == 0 ? 1 + (r >> 16) % 65536 : 1 + (r >> 16) % 512;
      s.tag = static_cast<unsigned char>(r >> 40);
      s.p = static_cast<unsigned char*>(malloc(s.n));
      memset(s.p, s.tag, s.n);
    }
    ++*rounds;
  }
  for (Slot& s : slots) free(s.p);
  return damaged;
}

uint64_t ContainerChurn(absl::Duration d, uint64_t seed, uint64_t* rounds) {
  Rng rng{seed * 0x9e3779b97f4a7c15ull + 7};
  uint64_t damaged = 0;
  auto start = Now();
  while (Since(start) < d) {
    std::vector<std::string> v;
    for (int i = 0; i < 200; ++i) {
      std::string s = std::to_string(i);
      s.append(rng.Next() % 300, static_cast<char>('a' + i % 26));
      v.push_back(std::move(s));
    }
    for (int i = 0; i < 200; ++i) {
      const std::string& s = v[i];
      std::string prefix = std::to_string(i);
      if (s.compare(0, prefix.size(), prefix) != 0) ++damaged;
      if (s.size() > prefix.size() && s.back() != static_cast<char>('a' + i % 26)) ++damaged;
    }
    v.erase(v.begin(), v.begin() + 100);
    v.shrink_to_fit();
    ++*rounds;
  }
  return damaged;
}

uint64_t PhdrChurn(absl::Duration d, uint64_t want_objects, uint64_t* rounds) {
  uint64_t wrong = 0;
  auto start = Now();
  while (Since(start) < d) {
    PhdrWalk w;
    dl_iterate_phdr(CountObject, &w);
    if (w.objects != want_objects) ++wrong;
    ++*rounds;
  }
  return wrong;
}

[[noreturn]] void LibraryChurnChild(int procs) {
  goro_test::Watchdog dog(absl::Seconds(25), "library churn");
  static uint64_t want_objects = 0;
  static std::atomic<uint64_t> damaged{0};
  static uint64_t rounds[6] = {};
  goro::Run(
      [] {
        want_objects = CountObjects();  // once the runtime has loaded libunwind
        static Spin hog;
        const absl::Duration d = absl::Seconds(1);
        goro::WaitGroup hog_done, wg;
        hog_done.Add(1);
        goro::Go([&hog_done] {
          hog.Run(goro_test_spin_until);
          hog_done.Done();
        });
        wg.Add(6);
        for (int i = 0; i < 2; ++i) {
          goro::Go([i, d, &wg] {
            damaged += MallocChurn(d, i, &rounds[i]);
            wg.Done();
          });
          goro::Go([i, d, &wg] {
            damaged += ContainerChurn(d, i, &rounds[2 + i]);
            wg.Done();
          });
          goro::Go([i, d, &wg] {
            damaged += PhdrChurn(d, want_objects, &rounds[4 + i]);
            wg.Done();
          });
        }
        wg.Wait();
        hog.stop = 1;
        hog_done.Wait();
      },
      Opts(procs, absl::Microseconds(200)));
  fprintf(stderr, "%llu objects; rounds: malloc %llu %llu, containers %llu %llu, dl_iterate_phdr %llu %llu\n",
          U(want_objects), U(rounds[0]), U(rounds[1]), U(rounds[2]), U(rounds[3]), U(rounds[4]),
          U(rounds[5]));
  CHILD_CHECK(damaged.load() == 0, "%llu damaged blocks, strings or walks", U(damaged.load()));
  for (int i = 0; i < 6; ++i) CHILD_CHECK(rounds[i] > 0, "worker %d made no progress", i);
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, MallocContainersAndDlIteratePhdrUnderPreemptionOneProc) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(LibraryChurnChild(1));
}

TEST(PreemptSafetyTest, MallocContainersAndDlIteratePhdrUnderPreemptionTwoProcs) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(LibraryChurnChild(2));
}

// std::call_once under async preemption: six goroutines on two Ps each run a
// fresh once_flag's call_once in a loop for a second, at a 100 us slice.
// libstdc++ passes the callable to pthread_once in two thread-locals that
// inline code in the program sets before the call and reads inside it; a
// goroutine interrupted in between resumes on another thread. Fails (a
// crash through a null callable, or another goroutine's callable run) if
// they stay with the thread: SIGSEGV in 5 of 5 runs without the swap.
[[noreturn]] void CallOnceChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "std::call_once under preemption");
  static std::atomic<uint64_t> calls{0}, wrong{0};
  goro::Run(
      [] {
        std::atomic<bool> stop{false};
        goro::WaitGroup wg;
        for (int i = 0; i < 6; ++i) {
          wg.Add(1);
          goro::Go([&stop, &wg, i] {
            uint64_t mine = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              std::once_flag once;
              int who = -1;
              std::call_once(once, [&] {
                who = i;
                ++mine;
              });
              if (who != i) ++wrong;
            }
            calls += mine;
            wg.Done();
          });
        }
        goro::SleepFor(absl::Seconds(1));
        stop = true;
        wg.Wait();
      },
      Opts(2, absl::Microseconds(100)));
  CHILD_CHECK(wrong.load() == 0, "%llu of %llu call_once calls ran another goroutine's callable", U(wrong.load()),
              U(calls.load()));
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, CallOnceUnderAsyncPreemption) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(CallOnceChild());
}

// ---------------------------------------------------------------------------
// A SIGURG that is not goro's never preempts and reaches the handler that
// was installed before the runtime started.

std::atomic<uint64_t> user_signals{0};
std::atomic<uint64_t> user_signals_si_user{0};
std::atomic<uint64_t> user_signals_si_tkill{0};

void UserSignalHandler(int, siginfo_t* info, void*) {
  if (info->si_code == SI_USER) user_signals_si_user.fetch_add(1);
  if (info->si_code == SI_TKILL) user_signals_si_tkill.fetch_add(1);
  user_signals.fetch_add(1);
}

void InstallUserHandler(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = UserSignalHandler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) != 0) {
    perror("sigaction");
    _exit(3);
  }
}

bool HandlerIsUsers(int sig) {
  struct sigaction cur;
  sigaction(sig, nullptr, &cur);
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == UserSignalHandler;
}

// Sends `n` signals with `send`, each once the previous one reached the
// handler (standard signals do not queue). Returns how many arrived; stops at
// the first that does not arrive within 5 s.
int SendEach(int n, const std::function<void()>& send) {
  for (int i = 0; i < n; ++i) {
    uint64_t before = user_signals.load();
    send();
    auto start = Now();
    while (user_signals.load() == before) {
      if (Since(start) > absl::Seconds(5)) return i;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return n;
}

int Tgkill(int64_t tid, int sig) { return static_cast<int>(syscall(SYS_tgkill, getpid(), tid, sig)); }

// No hogs, a slice far longer than the test: sysmon never asks for a
// preemption, so every SIGURG here is the user's - including ones sent with
// tgkill from this process to the thread of a goroutine running a call-free
// loop in the executable (goro's own were sent that way until they carried a
// tag). Fails if goro's handler swallows a SIGURG (count short), or lets one
// preempt (the loop's goroutine or the stats count a preemption).
[[noreturn]] void ForeignSigurgChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "foreign SIGURG");
  InstallUserHandler(SIGURG);
  constexpr int kEach = 100;
  static int arrived_kill = 0, arrived_tgkill = 0, arrived_raise = 0;
  static uint64_t spinner_preemptions = 0;
  static uint64_t async_before = 0, async_after = 0;
  goro::Run(
      [] {
        CHILD_CHECK(HandlerIsUsers(SIGURG) == false, "goro did not install its SIGURG handler");
        static Spin spin;
        static std::atomic<int64_t> spinner_tid{0};
        static std::atomic<bool> workers_stop{false};
        async_before = goro::GetStats().async_preemptions;
        goro::WaitGroup wg;
        wg.Add(3);
        goro::Go([&wg] {
          spinner_tid = goro_test::ThreadId();
          spin.Run(goro_test_spin_until);
          spinner_preemptions = goro::CurrentGoroutinePreemptions();
          wg.Done();
        });
        for (int w = 0; w < 2; ++w) {
          goro::Go([&wg] {  // ordinary goroutines, short bursts and sleeps
            uint64_t x = 1;
            while (!workers_stop.load()) {
              for (int i = 0; i < 10000; ++i) x = x * 3 + 1;
              goro::SleepFor(absl::Microseconds(200));
            }
            wg.Done();
          });
        }
        CHILD_CHECK(WaitUntil([] { return spin.Started(); }, absl::Seconds(10)), "the loop never started");
        std::atomic<bool> sent{false};
        std::thread sender([&sent] {
          arrived_kill = SendEach(kEach, [] { kill(getpid(), SIGURG); });
          arrived_tgkill = SendEach(kEach, [] { Tgkill(spinner_tid.load(), SIGURG); });
          arrived_raise = SendEach(kEach, [] { raise(SIGURG); });
          sent = true;
        });
        WaitUntil([&sent] { return sent.load(); }, absl::Seconds(20));
        sender.join();  // done (or the watchdog ends us)
        async_after = goro::GetStats().async_preemptions;
        spin.stop = 1;
        workers_stop = true;
        wg.Wait();
      },
      Opts(2, absl::Seconds(20)));
  fprintf(stderr, "arrived: kill %d, tgkill %d, raise %d (SI_USER %llu, SI_TKILL %llu)\n", arrived_kill,
          arrived_tgkill, arrived_raise, U(user_signals_si_user.load()), U(user_signals_si_tkill.load()));
  CHILD_CHECK(arrived_kill == kEach, "kill(): %d of %d reached the previous handler", arrived_kill, kEach);
  CHILD_CHECK(arrived_tgkill == kEach, "tgkill() to the loop's thread: %d of %d reached the previous handler",
              arrived_tgkill, kEach);
  CHILD_CHECK(arrived_raise == kEach, "raise(): %d of %d reached the previous handler", arrived_raise, kEach);
  CHILD_CHECK(async_after == async_before, "user SIGURGs caused %llu async preemptions",
              U(async_after - async_before));
  CHILD_CHECK(spinner_preemptions == 0, "the loop's goroutine was preempted %llu times", U(spinner_preemptions));
  ExitChild();
}

// The handler a foreign SIGURG is forwarded to runs on goro's handler's stack,
// the M's alternate stack: one written for a thread's stack that overflows
// it must fault on a guard page, not write over the mapping below. Checked
// on each M of a 2-P runtime through /proc/self/maps: the page below the
// alternate stack a goroutine finds on its thread is mapped PROT_NONE.
// Fails without the guard page: that address was in no mapping, or in
// another readable one.
bool PageBelowIsAGuard(const void* lo) {
  const auto below = reinterpret_cast<uintptr_t>(lo) - 1;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t b = 0, e = 0;
    char perms[5] = {};
    if (sscanf(line.c_str(), "%lx-%lx %4s", &b, &e, perms) != 3) continue;
    if (below >= b && below < e) return std::string(perms).rfind("---", 0) == 0;
  }
  return false;
}

[[noreturn]] void AltStackGuardChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "alternate stack guard page");
  static std::atomic<int> checked{0}, guarded{0};
  goro::Run(
      [] {
        goro::WaitGroup wg;
        for (int i = 0; i < 8; ++i) {
          wg.Add(1);
          goro::Go([&wg] {
            stack_t cur{};
            CHILD_CHECK(sigaltstack(nullptr, &cur) == 0, "sigaltstack: %s", strerror(errno));
            CHILD_CHECK(cur.ss_sp != nullptr && !(cur.ss_flags & SS_DISABLE), "no alternate stack on this M");
            ++checked;
            guarded += PageBelowIsAGuard(cur.ss_sp);
            wg.Done();
          });
        }
        wg.Wait();
      },
      Opts(2, absl::Milliseconds(10)));
  CHILD_CHECK(checked.load() == 8 && guarded.load() == 8, "%d of %d alternate stacks had a guard page below",
              guarded.load(), checked.load());
  ExitChild();
}

TEST(PreemptSafetyTest, AlternateStacksHaveAGuardPage) { EXPECT_CHILD_OK(AltStackGuardChild()); }

TEST(PreemptSafetyTest, ForeignSigurgReachesPreviousHandlerAndNeverPreempts) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ForeignSigurgChild());
}

// The same while goro's own SIGURGs fly (hogs on every P, 1 ms slices):
// process-directed kill() and a plain thread's raise() still reach the user's
// handler. (A user tgkill to a goroutine's thread is absorbed by one of
// goro's pending there, since standard signals coalesce, so that case is
// tested only above, without requests.)
[[noreturn]] void ForeignSigurgWhilePreemptingChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "foreign SIGURG while preempting");
  InstallUserHandler(SIGURG);
  constexpr int kEach = 300;
  static int arrived_kill = 0, arrived_raise = 0;
  static uint64_t preemptions_meanwhile = 0;
  goro::Run(
      [] {
        static Spin hogs[3];
        goro::WaitGroup wg;
        wg.Add(3);
        for (auto& h : hogs) {
          goro::Go([&h, &wg] {
            h.Run(goro_test_spin_until);
            wg.Done();
          });
        }
        // Send while goro's own signals are in full swing.
        WaitUntil([] { return goro::GetStats().async_preemptions >= 20; }, absl::Seconds(10));
        std::atomic<bool> sent{false};
        std::thread sender([&sent] {
          const uint64_t before = goro::GetStats().async_preemptions;
          arrived_kill = SendEach(kEach, [] { kill(getpid(), SIGURG); });
          arrived_raise = SendEach(kEach, [] { raise(SIGURG); });
          preemptions_meanwhile = goro::GetStats().async_preemptions - before;
          sent = true;
        });
        WaitUntil([&sent] { return sent.load(); }, absl::Seconds(20));
        sender.join();
        for (auto& h : hogs) h.stop = 1;
        wg.Wait();
      },
      Opts(2, absl::Milliseconds(1)));
  fprintf(stderr, "arrived: kill %d, raise %d; %llu async preemptions meanwhile\n", arrived_kill, arrived_raise,
          U(preemptions_meanwhile));
  CHILD_CHECK(arrived_kill == kEach, "kill(): %d of %d reached the previous handler", arrived_kill, kEach);
  CHILD_CHECK(arrived_raise == kEach, "raise(): %d of %d reached the previous handler", arrived_raise, kEach);
  CHILD_CHECK(preemptions_meanwhile > 0, "no async preemption while sending: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, ForeignSigurgReachesPreviousHandlerWhilePreempting) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ForeignSigurgWhilePreemptingChild());
}

// A SIGURG queued to a goroutine's thread (SI_QUEUE, as pthread_sigqueue
// sends; the kernel's for out-of-band data and another process's tgkill are
// alike) while the thread blocks SIGURG; sysmon's signal for the loop that
// runs meanwhile merges with it (standard signals do not queue). The one
// delivery, once unblocked, must reach the program's handler and also
// acknowledge goro's. Fails without the second: sysmon never signals that
// thread again, so the call-free loop afterwards keeps the other goroutine
// out until the 5 s guard stops it, and goro::Syscall waits for ever (the
// watchdog's message).
[[noreturn]] void ForeignSigurgAbsorbsGorosChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "a foreign SIGURG that absorbed goro's");
  InstallUserHandler(SIGURG);
  static uint64_t sent_while_blocked = 0;
  static uint64_t forwarded = 0;
  static double waited_s = -1;
  goro::Run(
      [] {
        goro::LockOSThread();  // the signal mask below is this thread's
        {
          goro::NoPreemptScope no_preempt;  // sysmon still signals; the handler does not inject
          sigset_t urg;
          sigemptyset(&urg);
          sigaddset(&urg, SIGURG);
          pthread_sigmask(SIG_BLOCK, &urg, nullptr);
          const uint64_t user0 = user_signals.load();
          int err = goro_test::QueueSignalToThisThread(SIGURG);
          CHILD_CHECK(err == 0, "rt_tgsigqueueinfo: %s", strerror(err));
          const uint64_t sent0 = goro::GetStats().preempt_signals_sent;
          auto start = Now();
          while (goro::GetStats().preempt_signals_sent == sent0 && Since(start) < absl::Seconds(5)) {
          }
          sent_while_blocked = goro::GetStats().preempt_signals_sent - sent0;
          pthread_sigmask(SIG_UNBLOCK, &urg, nullptr);  // the merged signal arrives here
          forwarded = user_signals.load() - user0;
        }
        goro::UnlockOSThread();
        static Spin hog;
        std::atomic<bool> other_ran{false};
        goro::Go([&other_ran] {
          other_ran = true;
          hog.stop = 1;
        });
        std::thread guard([&other_ran] {
          auto start = Now();
          while (!other_ran.load() && Since(start) < absl::Seconds(5)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          hog.stop = 1;
        });
        auto start = Now();
        hog.Run(goro_test_spin_until);  // call-free: only a signal stops it
        waited_s = absl::ToDoubleSeconds(Since(start));
        guard.join();
        CHILD_CHECK(other_ran.load(), "a call-free loop on 1 P kept the other goroutine out for %.2f s", waited_s);
        goro::Syscall([] { return 0; });  // waits for an acknowledgement that never comes, if lost
      },
      Opts(1, absl::Milliseconds(1)));
  fprintf(stderr, "sysmon signals while SIGURG was blocked: %llu; forwarded on unblocking: %llu; the loop ran %.3f s\n",
          U(sent_while_blocked), U(forwarded), waited_s);
  CHILD_CHECK(sent_while_blocked > 0, "sysmon sent no signal while SIGURG was blocked: the test proved nothing");
  CHILD_CHECK(forwarded == 1, "%llu SIGURGs reached the program's handler on unblocking, not 1", U(forwarded));
  ExitChild();
}

TEST(PreemptSafetyTest, ForeignSigurgThatAbsorbsGorosIsAlsoGorosAcknowledgement) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ForeignSigurgAbsorbsGorosChild());
}

// The program installs a SIGURG handler of its own after the runtime
// started. Sysmon's signal for a call-free loop then reaches that handler,
// never goro's, and is never acknowledged: the next goro::Syscall on that
// thread would wait for the acknowledgement for ever. One fatal line naming
// the signal instead. Fails (the watchdog's hang message) without the check.
[[noreturn]] void HandlerReplacedChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "goro::Syscall after the preemption handler was replaced");
  goro::Run(
      [] {
        InstallUserHandler(SIGURG);  // replaces goro's
        static Spin hog;
        const uint64_t sent0 = goro::GetStats().preempt_signals_sent;
        std::thread stopper([sent0] {
          auto start = Now();
          while (goro::GetStats().preempt_signals_sent == sent0 && Since(start) < absl::Seconds(5)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          hog.stop = 1;
        });
        hog.Run(goro_test_spin_until);
        stopper.join();
        CHILD_CHECK(goro::GetStats().preempt_signals_sent > sent0, "sysmon sent no signal: the test proved nothing");
        fflush(stderr);
        goro::Syscall([] { return 0; });
        fprintf(stderr, "goro::Syscall returned\n");
      },
      Opts(1, absl::Milliseconds(1)));
  ExitChild();
}

TEST(PreemptSafetyTest, ReplacedPreemptionHandlerIsOneFatalLineNotAHang) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_DEATH(HandlerReplacedChild(),
               "fatal error: goroutine 1: the handler of signal 23 \\(goro's preemption signal, Options::preempt_signal\\) was "
               "replaced after the runtime started");
}

// A SIGURG disposition of SIG_IGN installed with SA_SIGINFO before goro
// started: a stray SIGURG is ignored, as the kernel would. Fails (SIGSEGV)
// if goro calls the previous "handler" because SA_SIGINFO is set.
[[noreturn]] void IgnoredWithSiginfoChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "SIGURG ignored with SA_SIGINFO");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = SA_SIGINFO;
  CHILD_CHECK(sigaction(SIGURG, &sa, nullptr) == 0, "sigaction: %s", strerror(errno));
  goro::Run(
      [] {
        kill(getpid(), SIGURG);
        raise(SIGURG);
        goro::SleepFor(absl::Milliseconds(20));  // delivered by now
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(PreemptSafetyTest, PreviousSigIgnWithSiginfoIsHonoured) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(IgnoredWithSiginfoChild());
}

// The program installs a SIGURG handler after the runtime started that calls
// the previous one, goro's, as a well-behaved handler does. Installed
// without SA_ONSTACK, it runs on the goroutine's stack, and the kernel's
// signal frame (with the XSAVE area) begins right below the interrupted red
// zone: goro's handler, called from there, must not inject a call, whose
// return address it would write into that frame. Eight call-free loops on 2
// Ps, one for each stack pointer modulo 64, check the upper halves of the
// ymm registers (and, with AVX-512, zmm16..31 and the mask registers); a
// plain thread stops them once the program's handler has run 200 times (or
// after 5 s). Without SA_ONSTACK no loop may be preempted by signal; with
// it, goro's handler runs on the M's alternate stack and preempts as usual.
// Either way no register may change. Fails without the check on the stack
// the handler runs on: the return address landed on the XSAVE area's end
// marker for one of the eight stack positions, sigreturn restored only the
// SSE state, and that loop found every ymm upper half zeroed.
struct sigaction chained_previous;
std::atomic<uint64_t> chained_calls{0};

void ChainingHandler(int sig, siginfo_t* info, void* uc) {
  chained_calls.fetch_add(1, std::memory_order_relaxed);
  if (chained_previous.sa_flags & SA_SIGINFO) chained_previous.sa_sigaction(sig, info, uc);
}

[[noreturn]] void ChainingHandlerChild(bool onstack, bool avx512) {
  goro_test::Watchdog dog(absl::Seconds(25), "a chaining SIGURG handler");
  constexpr int kLoops = 8;
  static Spin spins[kLoops];
  static uint64_t bad[kLoops], preemptions[kLoops];
  static uint64_t async_before = 0;
  goro::Run(
      [onstack, avx512] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = ChainingHandler;
        sa.sa_flags = SA_SIGINFO | SA_RESTART | (onstack ? SA_ONSTACK : 0);
        sigemptyset(&sa.sa_mask);
        CHILD_CHECK(sigaction(SIGURG, &sa, &chained_previous) == 0, "sigaction: %s", strerror(errno));
        async_before = goro::GetStats().async_preemptions;
        // Without preemption by signal the loops keep both Ps: a plain
        // thread stops them.
        std::thread stopper([] {
          auto start = Now();
          while (chained_calls.load() < 200 && Since(start) < absl::Seconds(5)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          for (auto& s : spins) s.stop = 1;
        });
        goro::WaitGroup wg;
        wg.Add(kLoops);
        for (int i = 0; i < kLoops; ++i) {
          goro::Go([i, avx512, &wg] {
            bad[i] = goro_test_spin_vector(reinterpret_cast<const volatile uint8_t*>(&spins[i].stop),
                                           reinterpret_cast<uint64_t*>(&spins[i].counter), i, avx512);
            preemptions[i] = goro::CurrentGoroutinePreemptions();
            wg.Done();
          });
        }
        wg.Wait();
        stopper.join();
      },
      Opts(2, absl::Microseconds(200)));
  const uint64_t async = goro::GetStats().async_preemptions - async_before;
  for (int i = 0; i < kLoops; ++i) {
    fprintf(stderr, "loop %d: %llu iterations, %llu preemptions, %llu failed checks\n", i,
            U(spins[i].counter.load()), U(preemptions[i]), U(bad[i]));
    CHILD_CHECK(bad[i] == 0, "loop %d (stack pointer 8*%d lower): %llu failed register checks", i, i, U(bad[i]));
  }
  fprintf(stderr, "the program's handler ran %llu times; %llu async preemptions\n", U(chained_calls.load()),
          U(async));
  CHILD_CHECK(chained_calls.load() >= 20, "the program's handler ran only %llu times", U(chained_calls.load()));
  if (onstack) {
    CHILD_CHECK(async >= 20, "only %llu async preemptions through a handler on the alternate stack", U(async));
  } else {
    CHILD_CHECK(async == 0, "%llu async preemptions from a handler on the goroutine's stack", U(async));
  }
  ExitChild();
}

TEST(PreemptSafetyTest, ChainingHandlerOnTheGoroutineStackNeverInjects) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  if (!__builtin_cpu_supports("avx")) GTEST_SKIP() << "the loops check ymm registers: no AVX here";
  EXPECT_CHILD_OK(ChainingHandlerChild(/*onstack=*/false, __builtin_cpu_supports("avx512f")));
}

TEST(PreemptSafetyTest, ChainingHandlerOnTheAlternateStackStillPreempts) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  if (!__builtin_cpu_supports("avx")) GTEST_SKIP() << "the loops check ymm registers: no AVX here";
  EXPECT_CHILD_OK(ChainingHandlerChild(/*onstack=*/true, __builtin_cpu_supports("avx512f")));
}

// ---------------------------------------------------------------------------
// Options::preempt_signal = SIGUSR2: a call-free loop on one P is still
// preempted, and SIGURG is left entirely to the user.
//
// Fails if sysmon still sends SIGURG or the handler is not on SIGUSR2 (no
// preemption: the watchdog fires; or SIGUSR2's default action kills the
// process), or if goro still takes SIGURG (the user's handler is replaced, or
// SIGURGs sent to a goroutine's thread while preemptions are pending vanish).

[[noreturn]] void PreemptSignalChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "preempt_signal=SIGUSR2");
  InstallUserHandler(SIGURG);
  constexpr int kEach = 50;
  static int arrived_kill = 0, arrived_tgkill = 0;
  goro::Options opts = Opts(1, absl::Milliseconds(1));
  opts.preempt_signal = SIGUSR2;
  goro::Run(
      [] {
        CHILD_CHECK(HandlerIsUsers(SIGURG), "goro replaced the user's SIGURG handler");
        struct sigaction usr2;
        sigaction(SIGUSR2, nullptr, &usr2);
        CHILD_CHECK((usr2.sa_flags & SA_SIGINFO) != 0, "no SA_SIGINFO handler on SIGUSR2");
        static Spin spin;
        static std::atomic<int64_t> spinner_tid{0};
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          spinner_tid = goro_test::ThreadId();
          spin.Run(goro_test_spin_until);
          wg.Done();
        });
        // One P: back here only if the loop was interrupted.
        while (!spin.Started()) goro::Yield();
        std::atomic<bool> sent{false};
        std::thread sender([&sent] {
          arrived_kill = SendEach(kEach, [] { kill(getpid(), SIGURG); });
          arrived_tgkill = SendEach(kEach, [] { Tgkill(spinner_tid.load(), SIGURG); });
          sent = true;
        });
        // Keep the loop and its preemptions going while the signals arrive.
        while (!sent.load()) goro::Yield();
        sender.join();
        spin.stop = 1;
        wg.Wait();
      },
      opts);
  goro::Stats s = goro::GetStats();
  fprintf(stderr, "arrived: kill %d, tgkill %d\n", arrived_kill, arrived_tgkill);
  CHILD_CHECK(s.preempt_signals_sent > 0, "no preemption signal sent");
  CHILD_CHECK(s.async_preemptions > 0, "no async preemption");
  CHILD_CHECK(arrived_kill == kEach, "kill(SIGURG): %d of %d reached the user's handler", arrived_kill, kEach);
  CHILD_CHECK(arrived_tgkill == kEach, "tgkill(SIGURG): %d of %d reached the user's handler", arrived_tgkill,
              kEach);
  CHILD_CHECK(HandlerIsUsers(SIGURG), "goro replaced the user's SIGURG handler");
  ExitChild();
}

TEST(PreemptSafetyTest, PreemptSignalSigusr2PreemptsAndLeavesSigurgAlone) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(PreemptSignalChild());
}

// A realtime preempt_signal (SIGRTMIN+2) that the goroutine's thread blocks:
// realtime signals queue, one entry per send, so sysmon must not send
// another while the last is unacknowledged (it is still pending, never
// lost). A goroutine wired to its thread blocks every signal and spins for
// 300 ms on the only P (1 ms slices: sysmon keeps asking); then it unblocks
// them, which delivers the pending one, and runs a call-free loop that must
// be preempted by signal as usual (on one P the main goroutine gets back in
// only then). Fails if more than two signals were sent during the 300 ms:
// resent every 10 ms, each took one of the user's RLIMIT_SIGPENDING entries.
// Checked by hand: without the fix, 23-29 were sent (and queued), 3 of 3 runs.
[[noreturn]] void RealtimePreemptSignalChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "realtime preempt_signal");
  static Spin spin;
  static std::atomic<bool> blocked_spin{false}, stop_blocked{false};
  static std::atomic<uint64_t> sent_while_blocked{0};
  std::thread stopper([] {
    auto start = Now();
    while (!blocked_spin.load() && Since(start) < absl::Seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop_blocked = true;
  });
  goro::Options opts = Opts(1, absl::Milliseconds(1));
  opts.preempt_signal = SIGRTMIN + 2;
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          goro::LockOSThread();
          sigset_t all, old;
          sigfillset(&all);
          pthread_sigmask(SIG_BLOCK, &all, &old);
          uint64_t sent0 = goro::GetStats().preempt_signals_sent;
          blocked_spin = true;
          while (!stop_blocked.load(std::memory_order_relaxed)) {
          }
          sent_while_blocked = goro::GetStats().preempt_signals_sent - sent0;
          pthread_sigmask(SIG_SETMASK, &old, nullptr);
          goro::UnlockOSThread();
          spin.Run(goro_test_spin_until);
          wg.Done();
        });
        // One P: back while the loop runs only if it was preempted by signal.
        while (!spin.Started()) goro::Yield();
        spin.stop = 1;
        wg.Wait();
      },
      opts);
  stopper.join();
  fprintf(stderr, "%llu signals sent while the thread blocked them\n", U(sent_while_blocked.load()));
  CHILD_CHECK(sent_while_blocked.load() >= 1, "no signal sent while blocked: the test proved nothing");
  CHILD_CHECK(sent_while_blocked.load() <= 2, "%llu realtime signals queued on a thread that blocks them",
              U(sent_while_blocked.load()));
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption");
  ExitChild();
}

TEST(PreemptSafetyTest, RealtimePreemptSignalIsNotQueuedAgainWhileBlocked) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(RealtimePreemptSignalChild());
}

// goro's pthread_sigmask wrapper notes on the M whether the thread's mask is
// still the runtime's (M::sigmask_changed, which g0 reads to restore it).
// The M it writes must be the thread's whose mask it read: it runs in the
// executable's code, and once a goroutine's mask is the runtime's again the
// handler may preempt it there. Two call-free loops keep both Ps busy (1 ms
// slices); a goroutine blocks SIGUSR1 and unblocks it, five times, and on
// each unblock the wrapper's seam (core/runtime.h's sigmask_note_hook),
// called with the M about to be written, spins 100 ms in this binary's
// code, watching the thread's M. Fails if the goroutine moved to another M
// in the hook: the wrapper would then write the flag of the M it left, from
// the mask of the thread it is on, possibly clearing the flag another
// goroutine set there. Checked by hand: without the wrapper's preempt_off,
// the goroutine moved in 5 of 5 unblocks.
namespace masknote {
std::atomic<bool> armed{false};
std::atomic<int> calls{0}, moved{0};

void Hook(goro::internal::M* m) {
  if (!armed.load()) return;
  calls.fetch_add(1);
  auto start = Now();
  while (Since(start) < absl::Milliseconds(100)) {
    if (goro::internal::CurrentM() != m) {
      moved.fetch_add(1);
      return;
    }
  }
}
}  // namespace masknote

[[noreturn]] void MaskNoteChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "sigmask note");
  goro::internal::sigmask_note_hook.store(masknote::Hook);
  static Spin hogs[2];
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(2);
        for (auto& h : hogs) {
          goro::Go([&h, &wg] {
            h.Run(goro_test_spin_until);
            wg.Done();
          });
        }
        while (!hogs[0].Started() || !hogs[1].Started()) goro::Yield();
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        for (int i = 0; i < 5; ++i) {
          pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
          masknote::armed = true;
          pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);  // the runtime's mask again: preemptible
          masknote::armed = false;
          goro::Yield();
        }
        for (auto& h : hogs) h.stop = 1;
        wg.Wait();
      },
      Opts(2, absl::Milliseconds(1)));
  goro::internal::sigmask_note_hook.store(nullptr);
  fprintf(stderr, "%d unblocks noted, %d moved to another M meanwhile\n", masknote::calls.load(),
          masknote::moved.load());
  CHILD_CHECK(masknote::calls.load() == 5, "the hook ran %d times, not 5", masknote::calls.load());
  CHILD_CHECK(masknote::moved.load() == 0, "moved to another M while noting the mask, %d times",
              masknote::moved.load());
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, SigmaskWrapperNotesTheMaskOnTheMItRead) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(MaskNoteChild());
}

// The preemption signal sent by someone else (kill), with no handler of the
// program's before goro's: it must do what it does without goro. For SIGUSR2
// and a real-time signal that is to end the process. Fails (the child
// exits 0) if the handler drops it, as it did whatever the signal.
[[noreturn]] void ForeignPreemptSignalChild(int sig) {
  goro_test::Watchdog dog(absl::Seconds(25), "a foreign preemption signal");
  goro::Options opts = Opts(1, absl::Milliseconds(10));
  opts.preempt_signal = sig;
  goro::Run(
      [sig] {
        kill(getpid(), sig);
        goro::SleepFor(absl::Milliseconds(500));
      },
      opts);
  _exit(0);
}

TEST(PreemptSafetyTest, ForeignPreemptSignalGetsItsDefaultAction) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(ForeignPreemptSignalChild(SIGUSR2), ::testing::KilledBySignal(SIGUSR2), "");
  EXPECT_EXIT(ForeignPreemptSignalChild(SIGRTMIN + 2), ::testing::KilledBySignal(SIGRTMIN + 2), "");
  // SIGURG's default action is to ignore it.
  EXPECT_EXIT(ForeignPreemptSignalChild(SIGURG), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// A child started with fork()+exec() (or posix_spawn) from a goroutine,
// while preemption signals fly, starts with the default signal state.
//
// Fails if goro leaves signals blocked on the threads that run goroutines
// (the mask survives fork and exec: SigBlk != 0) or sets SIGURG to SIG_IGN
// (also inherited: SigIgn). SigCgt is checked too, although exec itself
// resets caught signals to their default; it documents the expectation.

struct SigState {
  bool ok = false;
  uint64_t blk = 0, cgt = 0, ign = 0;
  std::string text;
};

bool ParseSigLine(const std::string& text, const char* key, uint64_t* out) {
  size_t at = text.find(key);
  if (at == std::string::npos) return false;
  *out = strtoull(text.c_str() + at + strlen(key), nullptr, 16);
  return true;
}

SigState ReadChildOutput(int fd, pid_t pid) {
  SigState st;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    st.text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  st.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && ParseSigLine(st.text, "SigBlk:", &st.blk) &&
          ParseSigLine(st.text, "SigCgt:", &st.cgt) && ParseSigLine(st.text, "SigIgn:", &st.ign);
  return st;
}

const char kShellCommand[] = "exec grep -E '^Sig(Blk|Cgt|Ign)' /proc/self/status";

SigState ForkExecStatus() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    execl("/bin/sh", "sh", "-c", kShellCommand, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return {};
  }
  return ReadChildOutput(fds[0], pid);
}

SigState PosixSpawnStatus() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  char arg0[] = "sh", arg1[] = "-c";
  std::string cmd = kShellCommand;
  char* argv[] = {arg0, arg1, cmd.data(), nullptr};
  pid_t pid = -1;
  int err = posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return {};
  }
  return ReadChildOutput(fds[0], pid);
}

[[noreturn]] void ForkExecChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "fork+exec");
  constexpr int kSpawners = 3;
  constexpr int kEach = 4;
  static std::vector<SigState> results(kSpawners * kEach);
  goro::Run(
      [] {
        static Spin hogs[2];
        goro::WaitGroup hogs_done, wg;
        hogs_done.Add(2);
        for (auto& h : hogs) {
          goro::Go([&h, &hogs_done] {
            h.Run(goro_test_spin_until);
            hogs_done.Done();
          });
        }
        wg.Add(kSpawners);
        for (int s = 0; s < kSpawners; ++s) {
          goro::Go([s, &wg] {
            for (int i = 0; i < kEach; ++i) {
              results[s * kEach + i] = i % 2 == 0 ? ForkExecStatus() : PosixSpawnStatus();
              goro::SleepFor(absl::Milliseconds(2));  // let the hogs be preempted in between
            }
            wg.Done();
          });
        }
        wg.Wait();
        for (auto& h : hogs) h.stop = 1;
        hogs_done.Wait();
      },
      Opts(2, absl::Milliseconds(1)));
  const uint64_t urg_bit = uint64_t{1} << (SIGURG - 1);
  for (size_t i = 0; i < results.size(); ++i) {
    const SigState& st = results[i];
    const char* how = i % 2 == 0 ? "fork+exec" : "posix_spawn";
    CHILD_CHECK(st.ok, "%s child %zu: no status read; output: %s", how, i, st.text.c_str());
    if (!st.ok) continue;
    CHILD_CHECK(st.blk == 0, "%s child %zu: signals blocked: SigBlk %016llx", how, i, U(st.blk));
    CHILD_CHECK((st.ign & urg_bit) == 0, "%s child %zu: SIGURG ignored: SigIgn %016llx", how, i, U(st.ign));
    CHILD_CHECK((st.cgt & urg_bit) == 0, "%s child %zu: SIGURG caught: SigCgt %016llx", how, i, U(st.cgt));
  }
  CHILD_CHECK(goro::GetStats().preempt_signals_sent > 0, "no preemption signal was sent meanwhile");
  ExitChild();
}

TEST(PreemptSafetyTest, ForkExecChildStartsWithDefaultSignalState) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ForkExecChild());
}

// A program that blocks a signal before it starts goro (to collect it with
// sigwait, say) keeps it blocked on the runtime's threads, as on threads of
// its own, and async preemption still works with that mask in place. After
// Run, a process-directed SIGUSR1 must stay pending for sigtimedwait. Fails
// if the Ms unblock every signal (SIGUSR1 reaches an M and its default
// action kills the child), or if the preemption handler takes any blocked
// signal for "inside a signal handler" (the loop is never preempted: the
// main goroutine does not run until the stopper ends the loop).
[[noreturn]] void BlockedSignalChild() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  CHILD_CHECK(pthread_sigmask(SIG_BLOCK, &usr1, nullptr) == 0, "pthread_sigmask");  // before any thread
  goro_test::Watchdog dog(absl::Seconds(25), "blocked signal");
  static Spin spin;
  static std::atomic<bool> ran_beside_loop{false};
  std::thread stopper([] {  // the loop ends after 3 s whatever happens
    goro_test::Eventually([] { return ran_beside_loop.load(); }, absl::Seconds(3));
    spin.stop = 1;
  });
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          spin.Run(goro_test_spin_until);
          wg.Done();
        });
        while (!spin.Started()) goro::Yield();
        ran_beside_loop = spin.stop.load() == 0;  // back before the loop ended: it was preempted
        spin.stop = 1;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(1)));
  stopper.join();
  CHILD_CHECK(ran_beside_loop.load(), "the loop was not preempted while the program blocked SIGUSR1 "
              "(%llu async preemptions)", U(goro::GetStats().async_preemptions));
  kill(getpid(), SIGUSR1);  // to the process: any thread that does not block it may take it
  timespec wait = {5, 0};
  siginfo_t info;
  int sig = sigtimedwait(&usr1, &info, &wait);
  CHILD_CHECK(sig == SIGUSR1, "sigtimedwait returned %d (errno %d), not SIGUSR1", sig, errno);
  ExitChild();
}

TEST(PreemptSafetyTest, RuntimeThreadsKeepTheProgramsBlockedSignals) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(BlockedSignalChild());
}

// ---------------------------------------------------------------------------
// A signal mask a goroutine sets is its own while it holds the thread.
//
// The preemption handler takes a thread whose mask is not the runtime's for
// one inside a signal handler of the program's, and declines to preempt
// there. A goroutine that blocked a signal and then exited (or migrated
// before it unblocked it) used to leave the block on its thread, and no
// call-free goroutine that ran there later could ever be preempted. On one P:
// a goroutine blocks SIGUSR2 and exits; the asm loop that follows must still
// be preempted, so that the main goroutine runs beside it. Fails (watchdog,
// or the main goroutine runs only after the loop was stopped) if the mask is
// left on the thread. Also checks that a goroutine wired with LockOSThread
// keeps the mask it set across a park.

// A plain thread that stops `spin`'s loop after 5 s, so that a failure is a
// failed check rather than the watchdog; it sets *by_thread if it had to.
std::thread StopLoopAfterFiveSeconds(Spin* spin, std::atomic<bool>* by_thread) {
  return std::thread([spin, by_thread] {
    for (int i = 0; i < 500 && spin->stop.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (spin->stop.load() == 0) *by_thread = true;
    spin->stop = 1;
  });
}

// On one P, on the main goroutine: starts a goroutine that runs `first` and
// then the asm loop, and checks that the main goroutine ran again while the
// loop was still running, which only a preemption by signal allows.
void ExpectTheNextLoopPreempted(Spin* spin, const std::atomic<bool>& by_thread,
                                const std::function<void()>& first = {}) {
  goro::WaitGroup wg;
  wg.Add(1);
  goro::Go([&] {
    if (first) first();
    spin->Run(goro_test_spin_until);
    wg.Done();
  });
  while (!spin->Started()) goro::Yield();
  CHILD_CHECK(spin->stop.load() == 0 && !by_thread.load(),
              "the main goroutine ran only after the loop was stopped: it was never preempted");
  spin->stop = 1;
  wg.Wait();
}

[[noreturn]] void MaskLeftByAnExitedGoroutineChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "a mask left by an exited goroutine");
  static Spin spin;
  static std::atomic<bool> stop_by_thread{false};
  std::thread stopper = StopLoopAfterFiveSeconds(&spin, &stop_by_thread);
  goro::Run(
      [] {
        sigset_t usr2;
        sigemptyset(&usr2);
        sigaddset(&usr2, SIGUSR2);
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          CHILD_CHECK(pthread_sigmask(SIG_BLOCK, &usr2, nullptr) == 0, "pthread_sigmask failed");
          wg.Done();
        });
        wg.Wait();
        // Wired: the mask it sets survives a park on its own thread.
        wg.Add(1);
        goro::Go([&] {
          goro::LockOSThread();
          CHILD_CHECK(sigprocmask(SIG_BLOCK, &usr2, nullptr) == 0, "sigprocmask failed");
          goro::SleepFor(absl::Milliseconds(2));
          sigset_t cur;
          pthread_sigmask(SIG_BLOCK, nullptr, &cur);
          CHILD_CHECK(sigismember(&cur, SIGUSR2) == 1, "a wired goroutine's mask was reset by a park");
          wg.Done();
        });
        wg.Wait();
        ExpectTheNextLoopPreempted(&spin, stop_by_thread, [] {
          sigset_t cur;
          pthread_sigmask(SIG_BLOCK, nullptr, &cur);
          CHILD_CHECK(sigismember(&cur, SIGUSR2) == 0, "a new goroutine found SIGUSR2 blocked on its thread");
        });
      },
      Opts(1, absl::Milliseconds(1)));
  stopper.join();
  ExitChild();
}

TEST(PreemptSafetyTest, MaskSetByAGoroutineDoesNotOutliveItOnTheThread) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(MaskLeftByAnExitedGoroutineChild());
}

// A loop with no calls, of about n nanoseconds.
__attribute__((noinline)) uint64_t CallFreeWork(uint64_t n) {
  uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x = x * 31 + i;
  return x;
}

// The same for masks changed out of the wrappers' sight. glibc's legacy
// calls (sighold, sigblock, sigsetmask, sigset) change the mask through its
// internal __sigprocmask; goro does them on top of sigprocmask instead. A
// change by the system call itself is put back once the preemption handler
// has declined because of it and the goroutine leaves the thread: here the
// goroutine runs call-free until the handler has declined (it marks the M),
// then exits. On one P the asm loop that follows must be preempted, as in
// MaskLeftByAnExitedGoroutineChild. Fails (the main goroutine ran only after
// the loop was stopped) without the legacy calls' wrappers (sighold, sigblock,
// sigsetmask, sigset) or without g0's look at the mask after a refusal (raw).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy calls
// The legacy calls' mask of SIGUSR2 (glibc's sigmask(), whose deprecation
// warning comes from the preprocessor and the pragma does not silence).
constexpr int kUsr2OldMask = 1 << (SIGUSR2 - 1);
[[noreturn]] void MaskLeftByALegacyCallChild(const std::string& how) {
  goro_test::Watchdog dog(absl::Seconds(25), "a mask left by a legacy call");
  static Spin spin;
  static std::atomic<bool> stop_by_thread{false};
  std::thread stopper = StopLoopAfterFiveSeconds(&spin, &stop_by_thread);
  goro::Run(
      [&how] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          if (how == "sighold") {
            CHILD_CHECK(sighold(SIGUSR2) == 0, "sighold failed");
          } else if (how == "sigblock") {
            sigblock(kUsr2OldMask);
          } else if (how == "sigsetmask") {
            sigset_t cur;
            pthread_sigmask(SIG_BLOCK, nullptr, &cur);
            sigsetmask(static_cast<int>(cur.__val[0]) | kUsr2OldMask);
          } else if (how == "sigset") {
            CHILD_CHECK(sigset(SIGUSR2, SIG_HOLD) != SIG_ERR, "sigset failed");
          } else {
            sigset_t usr2;
            sigemptyset(&usr2);
            sigaddset(&usr2, SIGUSR2);
            syscall(SYS_rt_sigprocmask, SIG_BLOCK, &usr2, nullptr, _NSIG / 8);
            // It stays on this thread: the handler declines, and so do safe points.
            auto* refused = static_cast<volatile bool*>(&goro::internal::CurrentM()->sigmask_refused);
            auto start = Now();
            while (!*refused && Since(start) < absl::Seconds(5)) CallFreeWork(100'000);
            CHILD_CHECK(*refused, "the handler never declined: the test proved nothing");
          }
          sigset_t cur;
          pthread_sigmask(SIG_BLOCK, nullptr, &cur);
          CHILD_CHECK(sigismember(&cur, SIGUSR2) == 1, "%s did not block SIGUSR2", how.c_str());
          wg.Done();
        });
        wg.Wait();
        ExpectTheNextLoopPreempted(&spin, stop_by_thread);
      },
      Opts(1, absl::Milliseconds(1)));
  stopper.join();
  ExitChild();
}
#pragma GCC diagnostic pop

TEST(PreemptSafetyTest, MaskSetByALegacyCallDoesNotOutliveTheGoroutine) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  for (const char* how : {"sighold", "sigblock", "sigsetmask", "sigset", "raw"}) {
    SCOPED_TRACE(how);
    EXPECT_CHILD_OK(MaskLeftByALegacyCallChild(how));
  }
}

// An alternate signal stack a goroutine sets is its own while it holds the
// thread. Four goroutines on 2 Ps with 1 ms slices each give their thread an
// alternate stack of their own twenty times, the usual way on a thread: save
// the old one, set a new one, work, restore the old one, unmap the new one.
// Half the rounds work in a call-free loop of a few milliseconds (requests
// to preempt come meanwhile), half sleep 1 ms (the goroutine parks, and may
// resume on another thread). After the loop the goroutine must be on the
// thread it began on, with its own alternate stack; after the sleep the
// thread's must be its M's (g0 took the goroutine's back); after the restore
// too. Fails without the sigaltstack interposer: a goroutine that parked
// kept its alternate stack on the thread it left, and restored that thread's
// old one (its M's) on the thread it resumed on, two threads on one stack.
// The calling thread's alternate stack, and whether it is the M's.
bool AltStackIsTheMs() {
  goro::NoPreemptScope same_thread;
  stack_t cur{};
  sigaltstack(nullptr, &cur);
  goro::internal::M* m = goro::internal::CurrentM();
  return !(cur.ss_flags & SS_DISABLE) && cur.ss_sp == m->altstack;
}

[[noreturn]] void OwnAltStackChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "goroutines with alternate stacks of their own");
  static std::atomic<uint64_t> sink{0};
  goro::Run(
      [] {
        goro::WaitGroup wg;
        for (int i = 0; i < 4; ++i) {
          wg.Add(1);
          goro::Go([&wg] {
            for (int round = 0; round < 20; ++round) {
              const size_t size = 256 * 1024;
              void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
              CHILD_CHECK(mem != MAP_FAILED, "mmap: %s", strerror(errno));
              stack_t ss{}, old{}, cur{};
              ss.ss_sp = mem;
              ss.ss_size = size;
              const long tid = syscall(SYS_gettid);
              CHILD_CHECK(sigaltstack(&ss, &old) == 0, "sigaltstack: %s", strerror(errno));
              if (round % 2 == 0) {
                sink += CallFreeWork(3'000'000);
                CHILD_CHECK(syscall(SYS_gettid) == tid, "moved to another thread with an alternate stack of its own");
                sigaltstack(nullptr, &cur);
                CHILD_CHECK(cur.ss_sp == mem, "round %d: its alternate stack was taken during the loop", round);
              } else {
                goro::SleepFor(absl::Milliseconds(1));
                CHILD_CHECK(AltStackIsTheMs(), "round %d: a park left its alternate stack on the thread", round);
              }
              CHILD_CHECK(sigaltstack(&old, nullptr) == 0, "sigaltstack: %s", strerror(errno));
              CHILD_CHECK(AltStackIsTheMs(), "round %d: the restore left another alternate stack than the M's",
                          round);
              munmap(mem, size);
            }
            wg.Done();
          });
        }
        wg.Wait();
      },
      Opts(2, absl::Milliseconds(1)));
  ExitChild();
}

TEST(PreemptSafetyTest, AltStackSetByAGoroutineStaysWithItsThread) {
  EXPECT_CHILD_OK(OwnAltStackChild());
}

// The same save-set-restore, when the thread the old alternate stack was
// saved on has ended before the restore. With one P, a goroutine saves its
// M's alternate stack, sets one of its own and waits for a goroutine that
// runs on the same M, wires itself with LockOSThread and exits wired, which
// ends the thread (RetireMOnG0). The goroutine resumes on an M that was idle
// and restores the stack it saved: the thread's alternate stack must then be
// its M's, and a signal handled on it. Fails without a stack kept for the
// next M: the ended thread's M had unmapped its stack, which then belonged
// to no M, so the restore gave it to the kernel and the signal killed the
// process with SIGSEGV.
int IdleMs() {
  goro::internal::RuntimeMutexLock lock(&goro::internal::sched.mu);
  return goro::internal::sched.nmidle;
}

std::atomic<int> usr1_handled{0};
void CountUsr1(int) { usr1_handled.fetch_add(1, std::memory_order_relaxed); }

[[noreturn]] void AltStackOfAnEndedThreadChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "the alternate stack of a thread that ended");
  struct sigaction sa{};
  sa.sa_handler = CountUsr1;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGUSR1, &sa, nullptr);
  goro::Run(
      [] {
        // An idle M for the goroutine to resume on, whose alternate stack is
        // not the one saved: a new M would get that one (the test would prove
        // nothing). Goroutines blocking in marked regions lose the P to new Ms.
        const bool idle = goro_test::Eventually([] {
          goro::WaitGroup wg;
          for (int i = 0; i < 2; ++i) {
            wg.Add(1);
            goro::Go([&wg] {
              goro::Syscall([] { return usleep(20'000); });
              wg.Done();
            });
          }
          wg.Wait();
          return IdleMs() > 0;
        });
        CHILD_CHECK(idle, "no idle M after goroutines blocked in marked regions");
        const size_t size = 256 * 1024;
        void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHILD_CHECK(mem != MAP_FAILED, "mmap: %s", strerror(errno));
        goro::internal::M* first;
        stack_t ss{}, old{};
        ss.ss_sp = mem;
        ss.ss_size = size;
        {
          goro::NoPreemptScope same_thread;
          first = goro::internal::CurrentM();
          CHILD_CHECK(sigaltstack(&ss, &old) == 0, "sigaltstack: %s", strerror(errno));
        }
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          goro::LockOSThread();
          wg.Done();
        });  // exits wired
        wg.Wait();
        goro::internal::M* now = goro::internal::CurrentM();
        CHILD_CHECK(first->retiring, "the goroutine that exited wired ran on another M than the one saved on");
        CHILD_CHECK(old.ss_sp == first->altstack && old.ss_sp != now->altstack,
                    "the stack saved is not the ended M's, or it is the M's resumed on");
        CHILD_CHECK(sigaltstack(&old, nullptr) == 0, "sigaltstack: %s", strerror(errno));
        CHILD_CHECK(AltStackIsTheMs(), "the restore left another alternate stack than the M's (that of an ended M)");
        munmap(mem, size);
        raise(SIGUSR1);
        // Under TSan the handler runs at the thread's next intercepted call.
        CHILD_CHECK(goro_test::Eventually([] { return usr1_handled.load() == 1; }, absl::Seconds(10)),
                    "SIGUSR1 was not handled");
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(PreemptSafetyTest, AltStackOfAnEndedThreadIsNotRestored) {
  EXPECT_CHILD_OK(AltStackOfAnEndedThreadChild());
}

// A signal handler of the program's that reaches a safe point (Checkpoint,
// the end of a NoPreemptScope) while a preemption request is pending must
// not be switched out: it would return (sigreturn) on another thread. Four
// goroutines run Checkpoint loops on 2 Ps with 100 us slices, noting their
// thread; a plain thread sends those threads SIGALRM every 500 us, and its
// handler runs a Checkpoint loop of its own. Fails if any handler ends on another thread than it began on (or the
// process crashes: two threads on one alternate stack).
std::atomic<long> alarm_handlers{0}, alarm_moved{0};

void CheckpointingAlarmHandler(int) {
  if (goro::GoroutineId() == 0) return;
  const long tid = syscall(SYS_gettid);
  for (int i = 0; i < 2000; ++i) {
    for (int k = 0; k < 50; ++k) asm volatile("");
    goro::Checkpoint();
    goro::NoPreemptScope scope;
  }
  if (syscall(SYS_gettid) != tid) alarm_moved++;
  alarm_handlers++;
}

[[noreturn]] void CheckpointInAHandlerChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "Checkpoint inside a signal handler");
  goro::Run([] {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = CheckpointingAlarmHandler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    std::atomic<bool> stop{false};
    std::atomic<long> tids[4] = {};
    goro::WaitGroup wg;
    for (int i = 0; i < 4; ++i) {
      wg.Add(1);
      goro::Go([&, i] {
        while (!stop.load(std::memory_order_relaxed)) {
          tids[i].store(syscall(SYS_gettid), std::memory_order_relaxed);
          goro::Checkpoint();
        }
        wg.Done();
      });
    }
    std::thread sender([&] {
      const pid_t pid = getpid();
      for (int n = 0; !stop.load(); ++n) {
        if (long tid = tids[n % 4].load(); tid != 0) syscall(SYS_tgkill, pid, tid, SIGALRM);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
    goro::SleepFor(absl::Milliseconds(400));
    stop = true;
    sender.join();
    wg.Wait();
  }, Opts(2, absl::Microseconds(100)));
  fprintf(stderr, "%ld handlers on goroutines, %ld ended on another thread\n", alarm_handlers.load(),
          alarm_moved.load());
  CHILD_CHECK(alarm_moved.load() == 0, "%ld of %ld handlers were switched to another thread", alarm_moved.load(),
              alarm_handlers.load());
  CHILD_CHECK(alarm_handlers.load() > 20, "only %ld handlers ran on goroutines", alarm_handlers.load());
  ExitChild();
}

TEST(PreemptSafetyTest, SafePointInsideAProgramsSignalHandlerDoesNotSwitch) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan runs the program's signal handlers itself, later, from its "
                    "interceptors and without the handler's signal mask, so nothing tells goro it is inside "
                    "one (docs/sanitizers.md)";
  }
  EXPECT_CHILD_OK(CheckpointInAHandlerChild());
}

// ---------------------------------------------------------------------------
// Flags and the red zone survive thousands of preemptions.
//
// goro_test_spin_with_df runs with DF set and checks it every iteration: it
// fails if the trampoline does not save and restore rflags around its cld
// (popfq). goro_test_spin_red_zone keeps 128 bytes of data below %rsp: it
// fails if the handler does not skip the red zone before pushing the return
// address, or the trampoline writes into it, or returns without `ret $128`
// (then %rsp is off and the data it reads is not what it wrote).
// Checked by hand: with the trampoline's popfq replaced by a lea that drops
// the flags, the DF loops report losses; without the handler's 128-byte skip
// (and a plain ret), every red-zone loop reports thousands of mismatches.

[[noreturn]] void LeafLoopChild(SpinFn fn, const char* what) {
  goro_test::Watchdog dog(absl::Seconds(25), what);
  constexpr int kLoops = 4;
  static Spin spins[kLoops];
  static uint64_t bad[kLoops], preemptions[kLoops];
  goro::Run(
      [fn] {
        goro::WaitGroup wg;
        wg.Add(kLoops);
        for (int i = 0; i < kLoops; ++i) {
          goro::Go([i, fn, &wg] {
            bad[i] = spins[i].Run(fn);
            preemptions[i] = goro::CurrentGoroutinePreemptions();
            wg.Done();
          });
        }
        auto start = Now();
        while (goro::GetStats().async_preemptions < 4000 && Since(start) < absl::Seconds(8)) {
          goro::SleepFor(absl::Milliseconds(10));
        }
        for (auto& s : spins) s.stop = 1;
        wg.Wait();
      },
      Opts(2, absl::Microseconds(200)));
  uint64_t total = 0;
  for (int i = 0; i < kLoops; ++i) {
    fprintf(stderr, "%s loop %d: %llu iterations, %llu preemptions, %llu bad\n", what, i,
            U(spins[i].counter.load()), U(preemptions[i]), U(bad[i]));
    CHILD_CHECK(bad[i] == 0, "%s loop %d: %llu bad observations", what, i, U(bad[i]));
    total += preemptions[i];
  }
  CHILD_CHECK(total >= 1000, "only %llu preemptions of the loops: too few to mean anything", U(total));
  ExitChild();
}

TEST(PreemptSafetyTest, DirectionFlagSurvivesPreemption) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(LeafLoopChild(goro_test_spin_with_df, "DF"));
}

TEST(PreemptSafetyTest, RedZoneSurvivesPreemption) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(LeafLoopChild(goro_test_spin_red_zone, "red zone"));
}

// EFLAGS.AC (alignment check) set by a goroutine stays with it, and only it:
// two call-free loops run with AC set on 2 Ps (goro_test_spin_with_ac checks
// every iteration that it is still set), and the main goroutine, which runs
// on a thread only after a loop there was preempted, reads a misaligned
// quadword and formats text with libc each turn. The kernel keeps the
// interrupted AC for a signal handler, and the context switch carries no
// flags: unless the preemption handler and the trampoline clear AC (the
// trampoline's popfq gives it back to the loop), the handler's lazily bound
// calls fault in the dynamic loader for ever (the watchdog fires), or AC
// leaks to g0 and the main goroutine, whose misaligned read is a SIGBUS.
// Checked by hand: without the fix the child died by SIGSEGV (the handler's
// faults recursing) in 1 of 1 runs; with the handlers fixed but not the
// trampoline, by SIGBUS in 2 of 2.
__attribute__((noinline)) uint64_t ReadUnaligned(const char* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);  // one movq: misaligned when p is
  return v;
}

[[noreturn]] void AlignmentCheckChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "AC");
  constexpr int kLoops = 2;
  static Spin spins[kLoops];
  static uint64_t lost[kLoops], preemptions[kLoops];
  static uint64_t turns = 0;
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(kLoops);
        for (int i = 0; i < kLoops; ++i) {
          goro::Go([i, &wg] {
            lost[i] = spins[i].Run(goro_test_spin_with_ac);
            preemptions[i] = goro::CurrentGoroutinePreemptions();
            wg.Done();
          });
        }
        alignas(16) static char bytes[32];
        memset(bytes, 1, sizeof bytes);
        uint64_t sum = 0;
        auto start = Now();
        while ((goro::GetStats().async_preemptions < 1000 || turns < 200) && Since(start) < absl::Seconds(8)) {
          sum += ReadUnaligned(bytes + 1 + turns % 7);
          char text[32];
          snprintf(text, sizeof text, "%llu", U(sum));
          ++turns;
          goro::SleepFor(absl::Microseconds(300));
        }
        for (auto& s : spins) s.stop = 1;
        wg.Wait();
      },
      Opts(2, absl::Microseconds(200)));
  uint64_t total = 0;
  for (int i = 0; i < kLoops; ++i) {
    fprintf(stderr, "AC loop %d: %llu iterations, %llu preemptions, AC lost %llu times\n", i,
            U(spins[i].counter.load()), U(preemptions[i]), U(lost[i]));
    CHILD_CHECK(lost[i] == 0, "AC loop %d: AC found clear %llu times", i, U(lost[i]));
    total += preemptions[i];
  }
  CHILD_CHECK(total >= 200 && turns >= 100, "only %llu preemptions of the loops, %llu turns of main: too few",
              U(total), U(turns));
  ExitChild();
}

TEST(PreemptSafetyTest, AlignmentCheckFlagStaysWithTheGoroutineThatSetIt) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(AlignmentCheckChild());
}

// The x87 register stack of an interrupted goroutine goes with it, not to
// the next goroutine on its thread. A loop keeps 7 values on the x87 stack
// while it spins (as a long double loop keeps its accumulators there); on one
// P the main goroutine runs again only after that loop was interrupted, on
// the same thread, and must find the x87 stack empty, as the ABI promises at
// every call, and 1 + 1 computed there must be 2. Fails if the trampoline
// switches away with the x87 registers still in use (XSAVE copies them but
// leaves them loaded): the tag word is not 0xFFFF and, with 7 entries
// leaked, the two pushes of 1 + 1 overflow the stack and give NaN.
__attribute__((noinline)) uint64_t X87LoadedSpin(const std::atomic<bool>* stop, std::atomic<uint64_t>* laps) {
  uint64_t n = 0;
  asm volatile(
      "fld1\n\tfld1\n\tfld1\n\tfld1\n\tfld1\n\tfld1\n\tfld1\n\t"
      "1:\n\t"
      "incq %0\n\t"
      "movq %0, (%2)\n\t"
      "cmpb $0, (%1)\n\t"
      "je 1b\n\t"
      "fstp %%st(0)\n\tfstp %%st(0)\n\tfstp %%st(0)\n\tfstp %%st(0)\n\t"
      "fstp %%st(0)\n\tfstp %%st(0)\n\tfstp %%st(0)\n\t"
      : "+r"(n)
      : "r"(stop), "r"(laps)
      : "memory", "cc", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)", "st(7)");
  return n;
}

__attribute__((noinline)) uint16_t X87TagWord() {  // 0xFFFF: every register empty
  unsigned char env[28];
  asm volatile("fnstenv %0\n\tfldenv %0" : "=m"(env) : : "memory");
  uint16_t tag;
  memcpy(&tag, env + 8, sizeof tag);
  return tag;
}

__attribute__((noinline)) long double X87OnePlusOne() {
  long double r;
  asm volatile("fld1\n\tfld1\n\tfaddp\n\tfstpt %0" : "=m"(r) : : "st", "st(1)");
  return r;
}

[[noreturn]] void X87StackChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "x87 stack after preemption");
  static std::atomic<bool> stop{false};
  static std::atomic<uint64_t> laps{0};
  static uint16_t tag = 0;
  static long double two = 0;
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          X87LoadedSpin(&stop, &laps);
          wg.Done();
        });
        while (laps.load(std::memory_order_relaxed) == 0) goro::Yield();
        tag = X87TagWord();
        two = X87OnePlusOne();
        stop = true;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(1)));
  CHILD_CHECK(tag == 0xFFFF, "x87 tag word 0x%04x after another goroutine was preempted: its registers "
              "are still in use", tag);
  CHILD_CHECK(two == 2.0L, "1 + 1 on the x87 stack gave %Lf", two);
  ExitChild();
}

TEST(PreemptSafetyTest, X87StackStaysWithThePreemptedGoroutine) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(X87StackChild());
}

// ---------------------------------------------------------------------------
// NoPreemptScope and ExcludeFromPreemption.
//
// A call-free loop inside a NoPreemptScope, on one P with another goroutine
// runnable, runs its ~50 ms undisturbed although sysmon keeps asking (1 ms
// slices; signals are sent and refused), and the request that waited is
// honoured as the scope ends: the other goroutine runs before the code after
// the scope. Fails if the handler ignores preempt_off (the loop is preempted,
// the other goroutine runs inside the scope), or if the scope's end does not
// yield (the other goroutine runs only after a later preemption, with the
// loop after the scope already counting). Checked by hand: with the scope's
// preempt_off increment removed, the loop is preempted ~40 times in it.

[[noreturn]] void NoPreemptScopeChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "NoPreemptScope");
  static Spin in_scope_loop, after_loop;
  static std::atomic<bool> in_scope{false}, scope_started{false};
  static std::atomic<bool> other_ran{false}, other_ran_in_scope{false};
  static std::atomic<uint64_t> after_count_when_other_ran{0};
  static uint64_t preempt_before = 0, preempt_in_scope = 0;
  static goro::Stats s0, s1;
  std::thread stopper([] {
    auto start = Now();
    while (!scope_started.load() && Since(start) < absl::Seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in_scope_loop.stop = 1;
  });
  goro::Run(
      [] {
        goro::Go([] {
          other_ran_in_scope = in_scope.load();
          after_count_when_other_ran = after_loop.counter.load();
          other_ran = true;
          after_loop.stop = 1;
        });
        // The other goroutine is runnable now and waits for our only P.
        s0 = goro::GetStats();
        preempt_before = goro::CurrentGoroutinePreemptions();
        {
          goro::NoPreemptScope no_preempt;
          in_scope = true;
          scope_started = true;
          in_scope_loop.Run(goro_test_spin_until);  // ~50 ms, no calls
          preempt_in_scope = goro::CurrentGoroutinePreemptions();  // a field read
          in_scope = false;
        }
        // Returns once the other goroutine ran (it sets the stop byte).
        after_loop.Run(goro_test_spin_until);
        s1 = goro::GetStats();
      },
      Opts(1, absl::Milliseconds(1)));
  stopper.join();
  fprintf(stderr,
          "during the scope and after: %llu signals sent, %llu async and %llu cooperative preemptions; "
          "the loop after the scope had counted %llu when the other goroutine ran\n",
          U(s1.preempt_signals_sent - s0.preempt_signals_sent), U(s1.async_preemptions - s0.async_preemptions),
          U(s1.cooperative_preemptions - s0.cooperative_preemptions), U(after_count_when_other_ran.load()));
  CHILD_CHECK(other_ran.load(), "the other goroutine never ran");
  CHILD_CHECK(!other_ran_in_scope.load(), "the other goroutine ran inside the scope");
  CHILD_CHECK(preempt_in_scope == preempt_before, "preempted %llu times inside the scope",
              U(preempt_in_scope - preempt_before));
  CHILD_CHECK(s1.async_preemptions == s0.async_preemptions, "%llu async preemptions",
              U(s1.async_preemptions - s0.async_preemptions));
  CHILD_CHECK(s1.preempt_signals_sent > s0.preempt_signals_sent,
              "no preemption signal during the scope: the test proved nothing");
  CHILD_CHECK(after_count_when_other_ran.load() == 0,
              "the request was not honoured when the scope ended (the loop after it had run %llu iterations)",
              U(after_count_when_other_ran.load()));
  ExitChild();
}

TEST(PreemptSafetyTest, NoPreemptScopeDefersAsyncPreemptionUntilItEnds) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(NoPreemptScopeChild());
}

// ExcludeFromPreemption over exactly one assembly function: on one P, the
// main goroutine does not get back in for 300 ms while that loop spins
// (sysmon keeps signalling, the handler keeps refusing); then, in the same
// process, the identical loop that is not excluded is preempted (the control).
// Fails if exclusions are not consulted (the first phase lets main in; checked
// by hand with ExcludeFromPreemption made a no-op).
[[noreturn]] void ExcludeChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "ExcludeFromPreemption");
  CHILD_CHECK(goro::ExcludeFromPreemption(reinterpret_cast<const void*>(&goro_test_spin_until_excluded),
                                          reinterpret_cast<const void*>(&goro_test_spin_until_excluded_end)),
              "ExcludeFromPreemption refused the range");
  static Spin excluded, control;
  static std::atomic<bool> main_back{false};
  static std::atomic<uint64_t> signals_during_excluded{0};
  std::thread stopper([] {
    auto start = Now();
    while (!excluded.Started() && Since(start) < absl::Seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    uint64_t sig0 = goro::GetStats().preempt_signals_sent;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHILD_CHECK(!main_back.load(), "the excluded loop was preempted");
    signals_during_excluded = goro::GetStats().preempt_signals_sent - sig0;
    excluded.stop = 1;
  });
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          excluded.Run(goro_test_spin_until_excluded);
          wg.Done();
        });
        while (!excluded.Started()) goro::Yield();
        main_back = true;
        CHILD_CHECK(excluded.stop.load() != 0, "back while the excluded loop was still running");
        wg.Wait();
        // The control: the same loop, not excluded.
        wg.Add(1);
        goro::Go([&wg] {
          control.Run(goro_test_spin_until);
          wg.Done();
        });
        // One P: back here only if the control loop is preempted (else the
        // watchdog ends the process).
        while (!control.Started()) goro::Yield();
        control.stop = 1;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(1)));
  stopper.join();
  fprintf(stderr, "%llu preemption signals during 300 ms of the excluded loop\n",
          U(signals_during_excluded.load()));
  CHILD_CHECK(signals_during_excluded.load() > 0, "no preemption was requested: the test proved nothing");
  ExitChild();
}

TEST(PreemptSafetyTest, ExcludeFromPreemptionKeepsAnAsmLoopRunning) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(ExcludeChild());
}

// RegisterPreemptibleCode from two threads at once (as goroutines that each
// dlopen a plugin would): two threads take turns at a barrier and register
// one 64-byte piece each per turn, 32 turns, which fills the table. Every
// call must be accepted, the next refused, and every piece be preemptible
// (core/runtime.h's PreemptiblePc). The race needs fresh tables, so each
// round is a child forked before the runtime starts; 100 rounds. Fails (a
// piece not preemptible, the 65th call accepted) if two writers can take the
// same slot: Add was a plain load of the count, a store into that slot and a
// store of the count plus one. Checked by hand: with that Add, 6-20 of 100
// rounds lost ranges in each of 6 runs (2-core host, load average 6).
// ExcludeFromPreemption shares the table code.
int RegisterRaceRound() {
  constexpr int kThreads = 2, kPer = 32;  // 64: the whole table
  alignas(64) static char area[kThreads * kPer * 64];
  std::atomic<int> arrived{0}, accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        arrived.fetch_add(1);
        // Spin, to leave the barrier together; yield after a while, for a
        // host that runs only one of the two threads.
        for (int spins = 0; arrived.load() < (i + 1) * kThreads; ++spins) {
          if (spins > 2000) std::this_thread::yield();
        }
        char* b = area + (i * kThreads + t) * 64;
        if (goro::RegisterPreemptibleCode(b, b + 64)) accepted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  int lost = 0;
  for (int k = 0; k < kThreads * kPer; ++k) {
    lost += !goro::internal::PreemptiblePc(reinterpret_cast<uintptr_t>(area + k * 64 + 32));
  }
  bool extra = goro::RegisterPreemptibleCode(area, area + 1);
  if (accepted.load() != kThreads * kPer || lost != 0 || extra) {
    fprintf(stderr, "%d of %d accepted, %d lost, the next one %s\n", accepted.load(), kThreads * kPer, lost,
            extra ? "accepted too" : "refused");
    return 1;
  }
  return 0;
}

// Bounded by alarm(2), not a Watchdog: its thread would make the forks those
// of a multi-threaded process, and under ASan a fork that came while that
// thread held one of the allocator's locks (its first wait allocates) left
// the child's threads waiting for that lock for good (seen under gdb: both
// in GetFromAllocator, from pthread_getattr_np in AsanThread::Init).
[[noreturn]] void RegisterRaceChild() {
  alarm(60);  // SIGALRM ends this child, and each round (alarms are not inherited)
  int failed = 0;
  constexpr int kRounds = 100;
  for (int round = 0; round < kRounds; ++round) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      _exit(RegisterRaceRound());
    }
    int status = 0;
    CHILD_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork or waitpid failed");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  CHILD_CHECK(failed == 0, "ranges were lost in %d of %d rounds", failed, kRounds);
  ExitChild();
}

TEST(PreemptSafetyTest, ConcurrentRegistrationsLoseNoRange) {
  EXPECT_CHILD_OK(RegisterRaceChild());
}

// The program fills both of its tables (64 ranges registered, 64 excluded,
// all accepted, the 65th refused) before the runtime starts. The runtime's
// own ranges must still be in force: the executable's code is preemptible
// (a call-free loop on one P lets the main goroutine in) and the trampoline
// is not. Fails (the watchdog, or a CHILD_CHECK) if they share the
// program's tables: the runtime's Adds then failed silently, no code was
// preemptible, and GetOptions().async_preemption still said true. Checked by
// hand: with the executable's segments added to the program's table, the
// PreemptiblePc check failed and the watchdog fired, 2 of 2 runs.
[[noreturn]] void FullTablesChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "full range tables");
  alignas(64) static char area[65 * 64];
  for (int i = 0; i < 64; ++i) {
    CHILD_CHECK(goro::RegisterPreemptibleCode(area + i * 64, area + i * 64 + 32), "registration %d refused", i);
    CHILD_CHECK(goro::ExcludeFromPreemption(area + i * 64 + 32, area + i * 64 + 64), "exclusion %d refused", i);
  }
  CHILD_CHECK(!goro::RegisterPreemptibleCode(area + 64 * 64, area + 65 * 64), "a 65th registration accepted");
  CHILD_CHECK(!goro::ExcludeFromPreemption(area + 64 * 64, area + 65 * 64), "a 65th exclusion accepted");
  static Spin spin;
  goro::Run(
      [] {
        CHILD_CHECK(goro::internal::PreemptiblePc(reinterpret_cast<uintptr_t>(&goro_test_spin_until)),
                    "the executable's code is not preemptible");
        CHILD_CHECK(!goro::internal::PreemptiblePc(reinterpret_cast<uintptr_t>(&goro_async_preempt)),
                    "the trampoline is preemptible");
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          spin.Run(goro_test_spin_until);
          wg.Done();
        });
        // One P: back while the loop runs only if it was preempted.
        while (!spin.Started()) goro::Yield();
        CHILD_CHECK(spin.stop.load() == 0, "back after the loop ended");
        spin.stop = 1;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(1)));
  CHILD_CHECK(goro::GetOptions().async_preemption, "async preemption turned off");
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption");
  ExitChild();
}

TEST(PreemptSafetyTest, FullRangeTablesLeaveTheExecutablePreemptible) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(FullTablesChild());
}

}  // namespace
