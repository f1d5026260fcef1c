// goro_static_cxx_probe (built with -static-libstdc++ -static-libgcc),
// goro_static_probe (built with -static, where the static libraries exist)
// and goro_own_malloc_probe (dynamically linked, with GORO_PROBE_OWN_MALLOC:
// the executable defines malloc and its kin, as a static tcmalloc or
// jemalloc would): preempt_test runs them and checks their stderr and what
// they print. goro_nopie_probe (built with -no-pie, with
// GORO_PROBE_TAKE_MALLOC_ADDRESS) stores malloc's address in a hook table,
// as C libraries compiled into programs do: libc's malloc then has its
// canonical address in the executable's PLT.
//
// With no argument: six goroutines on two Ps with the shortest time slice
// throw, catch and rethrow exceptions and churn the allocator for 600 ms,
// reaching a safe point (Checkpoint) once per round, and call
// dl_iterate_phdr now and then. Printed on stdout:
//   async=A rounds=N bad=B found_main=F async_preemptions=P
// A is GetOptions().async_preemption; B counts wrong exception state
// (std::uncaught_exceptions, std::current_exception, the value caught);
// F is 1 when dl_iterate_phdr listed an object whose code holds main().
// Interrupted inside the C++ runtime, the unwinder or malloc and resumed on
// another thread, a goroutine corrupts their per-thread state: the probe
// crashes, aborts or counts B > 0. The own malloc counts a call that returns
// on another thread than it began on in B: a per-thread cache would have been
// corrupted there.
//
// --register: first registers its own loop (in section goro_probe_code) with
// goro::RegisterPreemptibleCode, then runs that call-free loop on both Ps
// while the main goroutine sleeps 20 ms. Printed:
//   async=A registered_loop_stopped=S async_preemptions=P
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "goro/goro.h"

extern "C" char __start_goro_probe_code[];
extern "C" char __stop_goro_probe_code[];

namespace {

std::atomic<bool> stop{false};
std::atomic<long> bad{0};
std::atomic<long> rounds{0};

#ifdef GORO_PROBE_OWN_MALLOC
// Some work in the executable's code on each call, long enough for a
// signal to land in it now and then.
__attribute__((noinline)) void Churn() {
  for (int i = 0; i < 64; ++i) asm volatile("");
}
#endif

struct CheckUnwinding {
  ~CheckUnwinding() {
    if (std::uncaught_exceptions() != 1) bad++;
  }
};

void ExceptionRound(int i, void** slots, unsigned* x) {
  try {
    CheckUnwinding c;
    throw i;
  } catch (int v) {
    if (v != i) bad++;
    try {
      throw;
    } catch (int w) {
      if (w != i) bad++;
    }
  }
  if (std::uncaught_exceptions() != 0 || std::current_exception()) bad++;
  *x = *x * 1103515245 + 12345;
  int k = static_cast<int>((*x >> 16) % 64);
  if (slots[k] != nullptr) {
    free(slots[k]);
    slots[k] = nullptr;
  } else {
    size_t size = 16 + (*x >> 20) % 200;
    slots[k] = malloc(size);
    memset(slots[k], i, size);
  }
}

int FindMain(dl_phdr_info* info, size_t, void* found) {
  auto pc = reinterpret_cast<uintptr_t>(&FindMain);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t b = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && pc >= b && pc < b + ph.p_memsz) {
      *static_cast<int*>(found) = 1;
    }
  }
  return 0;
}

int RunExceptions() {
  goro::Options o;
  o.max_procs = 2;
  o.time_slice = absl::Microseconds(50);
  std::atomic<int> found_main{0};
  goro::Run(
      [&] {
        goro::WaitGroup wg;
        for (int i = 0; i < 6; ++i) {
          wg.Add(1);
          goro::Go([&, i] {
            void* slots[64] = {};
            unsigned x = 12345u + static_cast<unsigned>(i);
            for (long n = 0; !stop.load(std::memory_order_relaxed); ++n) {
              ExceptionRound(i, slots, &x);
              if (n % 4096 == 0) {
                int found = 0;
                dl_iterate_phdr(FindMain, &found);
                if (found) found_main = 1;
              }
              rounds++;
              goro::Checkpoint();
            }
            for (void* p : slots) free(p);
            wg.Done();
          });
        }
        goro::SleepFor(absl::Milliseconds(600));
        stop = true;
        wg.Wait();
      },
      o);
  printf("async=%d rounds=%ld bad=%ld found_main=%d async_preemptions=%llu\n",
         goro::GetOptions().async_preemption ? 1 : 0, rounds.load(), bad.load(), found_main.load(),
         static_cast<unsigned long long>(goro::GetStats().async_preemptions));
  return 0;
}

// A loop with no calls, in a section of its own whose bounds the linker
// provides.
__attribute__((noinline, section("goro_probe_code"))) void SpinUntilStopped(const std::atomic<bool>* s) {
  while (!s->load(std::memory_order_relaxed)) {
  }
}

int RunRegistered() {
  if (!goro::RegisterPreemptibleCode(__start_goro_probe_code, __stop_goro_probe_code)) {
    fprintf(stderr, "RegisterPreemptibleCode refused the range\n");
    return 1;
  }
  // Without async preemption the spinners keep both Ps and the main
  // goroutine never wakes: a plain thread ends the wait.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(20));
    printf("async=%d registered_loop_stopped=0\n", goro::GetOptions().async_preemption ? 1 : 0);
    fflush(stdout);
    _exit(0);
  }).detach();
  goro::Options o;
  o.max_procs = 2;
  goro::Run(
      [] {
        goro::WaitGroup wg;
        for (int i = 0; i < 2; ++i) {
          wg.Add(1);
          goro::Go([&] {
            SpinUntilStopped(&stop);
            wg.Done();
          });
        }
        goro::SleepFor(absl::Milliseconds(20));
        stop = true;
        wg.Wait();
      },
      o);
  printf("async=%d registered_loop_stopped=1 async_preemptions=%llu\n", goro::GetOptions().async_preemption ? 1 : 0,
         static_cast<unsigned long long>(goro::GetStats().async_preemptions));
  return 0;
}

}  // namespace

#ifdef GORO_PROBE_OWN_MALLOC
// glibc's allocator under the names it exports for wrappers like this one.
extern "C" void* __libc_malloc(size_t);
extern "C" void __libc_free(void*);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {
// Runs `call` as an allocator would: bound to the thread it began on.
template <typename F>
auto OnOneThread(F call) {
  pthread_t self = pthread_self();
  Churn();
  auto r = call();
  Churn();
  if (!pthread_equal(self, pthread_self())) bad++;
  return r;
}
}  // namespace

extern "C" {
void* malloc(size_t n) { return OnOneThread([&] { return __libc_malloc(n); }); }
void free(void* p) {
  OnOneThread([&] {
    __libc_free(p);
    return 0;
  });
}
void* calloc(size_t n, size_t size) { return OnOneThread([&] { return __libc_calloc(n, size); }); }
void* realloc(void* p, size_t n) { return OnOneThread([&] { return __libc_realloc(p, n); }); }
void* memalign(size_t align, size_t n) { return OnOneThread([&] { return __libc_memalign(align, n); }); }
void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
int posix_memalign(void** out, size_t align, size_t n) {
  void* p = memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
#endif

#ifdef GORO_PROBE_TAKE_MALLOC_ADDRESS
void* (*volatile hook_malloc)(size_t) = nullptr;
#endif

int main(int argc, char** argv) {
#ifdef GORO_PROBE_TAKE_MALLOC_ADDRESS
  hook_malloc = malloc;
#endif
  if (argc > 1 && strcmp(argv[1], "--register") == 0) return RunRegistered();
  if (argc > 1) {
    fprintf(stderr, "goro static link probe: unknown argument %s\n", argv[1]);
    return 64;
  }
  return RunExceptions();
}
