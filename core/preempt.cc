// Where a goroutine may be interrupted: code ranges for the SIGURG handler.
//
// At start-up the executable segments of the main program are preemptible;
// everything else (shared libraries, the vDSO, the dynamic loader) is not. The
// trampoline is always excluded. The tables are fixed arrays that the handler
// reads without locks while the program may be adding to them, from any
// number of threads at once: a writer claims a slot with a CAS on the count
// of slots claimed, fills it, and publishes it with a release store of the
// slot's ready flag; a reader skips a claimed slot that is not ready yet (its
// Add has not returned).
//
// That rule assumes the runtime libraries are shared objects. Linked into the
// executable (-static, -static-libstdc++, -static-libgcc, or an allocator
// such as tcmalloc, jemalloc or mimalloc linked as a static library) their
// code sits in the executable's segments and would be interrupted like the
// program's: a
// goroutine parked inside malloc, __cxa_get_globals or the unwinder resumes
// on another thread with the first thread's per-thread state (a tcache, the
// caught-exception stack) in its registers, and corrupts it. Nothing in the
// segments tells their code from the program's (a stripped binary has no
// symbols), so the runtime then makes no range preemptible and async
// preemption is turned off (EnsureStarted), unless the program registered
// its own code before the runtime started.
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "goro/preempt.h"

namespace goro::internal {

namespace {

struct Range {
  uintptr_t begin;
  uintptr_t end;
};

// The program's own registrations and exclusions, each.
constexpr int kMaxRanges = 64;
// The main executable's executable segments (usually one).
constexpr int kMaxMainSegments = 8;

// Constant-initialised (constinit): a dynamic initialiser would reset
// `claimed` after a static constructor of the program had started the runtime
// and registered the ranges.
template <int kCapacity>
struct RangeTable {
  struct Slot {
    Range range;                // written once, by the writer that claimed the slot, before `ready`
    std::atomic<bool> ready{};  // release-stored by that writer; `range` is read only once it is seen true
  };
  Slot slots[kCapacity] = {};
  // Slots handed out: writers CAS it up, never past kCapacity. A plain load
  // and store of one count let two concurrent writers take the same slot,
  // both returning true: one range lost.
  std::atomic<int> claimed{0};

  bool Add(uintptr_t b, uintptr_t e) {
    if (b >= e) return false;
    int i = claimed.load(std::memory_order_relaxed);
    do {
      if (i >= kCapacity) return false;
    } while (!claimed.compare_exchange_weak(i, i + 1, std::memory_order_relaxed));
    slots[i].range = Range{b, e};
    slots[i].ready.store(true, std::memory_order_release);
    return true;
  }
  bool Contains(uintptr_t pc) const {
    int count = claimed.load(std::memory_order_relaxed);
    for (int i = 0; i < count; ++i) {
      if (!slots[i].ready.load(std::memory_order_acquire)) continue;  // being written
      if (pc >= slots[i].range.begin && pc < slots[i].range.end) return true;
    }
    return false;
  }
  bool Empty() const { return claimed.load(std::memory_order_relaxed) == 0; }
};

// The program's (RegisterPreemptibleCode, ExcludeFromPreemption).
constinit RangeTable<kMaxRanges> preemptible;
constinit RangeTable<kMaxRanges> excluded;
// The runtime's own, in tables of their own: in the program's, 64 ranges
// registered before the runtime started left no room for the executable's
// segments, and then no code at all was preemptible while async preemption
// still said it was on.
constinit RangeTable<kMaxMainSegments> main_program_code;
constinit RangeTable<1> trampoline;

// The main program's executable segments, and whether it has a dynamic
// loader (PT_INTERP): a program without one has libc linked in (-static or
// -static-pie).
struct MainProgram {
  Range code[kMaxMainSegments] = {};
  int n = 0;
  bool has_interp = false;

  bool Contains(const void* p) const {
    auto pc = reinterpret_cast<uintptr_t>(p);
    for (int i = 0; i < n; ++i) {
      if (pc >= code[i].begin && pc < code[i].end) return true;
    }
    return false;
  }
};

int FindMainProgram(dl_phdr_info* info, size_t, void* data) {
  // The first object is the main program (its name is empty).
  auto* main = static_cast<MainProgram*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_INTERP) main->has_interp = true;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && main->n < static_cast<int>(std::size(main->code))) {
      uintptr_t b = info->dlpi_addr + ph.p_vaddr;
      main->code[main->n++] = Range{b, b + ph.p_memsz};
    }
  }
  return 1;  // stop after the first object
}

// Where the code of a runtime library is: the address a callback of ours
// returns to when that library calls it, which lies in the library's code
// wherever the linker put it. An address taken of one of the library's
// functions would not do: in an executable built without -pie it is the
// executable's PLT entry for the function even when the function is in a
// shared object. Nor would the names of the loaded objects: libstdc++.so.6
// and libgcc_s.so.1 are loaded anyway when a shared library the program uses
// needs them (Abseil's do), while the executable has copies of its own.
// This finds the copies goro's own calls reach; with goro in the executable
// (libgoro.a), those are the executable's.
__attribute__((noinline)) void NoteCxxRuntimeCaller(void* slot) {
  *static_cast<void**>(slot) = __builtin_extract_return_addr(__builtin_return_address(0));
}

__attribute__((noinline)) _Unwind_Reason_Code NoteUnwinderCaller(_Unwind_Context*, void* slot) {
  *static_cast<void**>(slot) = __builtin_extract_return_addr(__builtin_return_address(0));
  return _URC_NORMAL_STOP;  // the first frame is enough
}

// libstdc++ (its C++ ABI part, with the exception machinery): __cxa_vec_ctor
// calls the constructor it is given for each element.
void* CxxRuntimeCode() {
  void* slot = nullptr;
  abi::__cxa_vec_ctor(&slot, 1, sizeof slot, NoteCxxRuntimeCaller, nullptr);
  return slot;
}

// The unwinder (libgcc_s.so.1, or libgcc_eh.a with -static-libgcc):
// _Unwind_Backtrace calls its callback for each frame.
void* UnwinderCode() {
  void* slot = nullptr;
  _Unwind_Backtrace(NoteUnwinderCaller, &slot);
  return slot;
}

// Whether the executable defines malloc (and exports it, as it must for
// libc's calls to reach it). Where dlsym finds malloc does not tell: in an
// executable built without -pie that takes malloc's address, that is the
// executable's PLT entry for libc's malloc (the address every object then
// uses for it), an undefined symbol of the executable's.
bool MainProgramDefinesMalloc(const MainProgram& main) {
  void* addr = dlsym(RTLD_DEFAULT, "malloc");
  if (!main.Contains(addr)) return false;
  Dl_info info;
  void* extra = nullptr;  // the symbol's ElfW(Sym)
  if (dladdr1(addr, &info, &extra, RTLD_DL_SYMENT) == 0 || extra == nullptr) {
    return true;  // cannot tell: an allocator of its own, to be safe
  }
  return static_cast<const ElfW(Sym)*>(extra)->st_shndx != SHN_UNDEF;
}

}  // namespace

std::string InitPreemptibleRanges() {
  static bool done = false;
  if (done) return "";
  done = true;
  trampoline.Add(reinterpret_cast<uintptr_t>(&goro_async_preempt),
                 reinterpret_cast<uintptr_t>(&goro_async_preempt_end) + 16);
  MainProgram main;
  dl_iterate_phdr(FindMainProgram, &main);
  if (main.n == 0) return "";
  // libgcc's other part, libgcc.a (division helpers and the like), is always
  // linked in; it keeps no per-thread state.
  std::vector<std::string> linked;
  if (main.Contains(CxxRuntimeCode())) linked.emplace_back("libstdc++");
  if (main.Contains(UnwinderCode())) linked.emplace_back("libgcc's unwinder");
  if (!main.has_interp) {
    linked.emplace_back("libc");
  } else if (MainProgramDefinesMalloc(main)) {
    // The program's own malloc, which libc's calls reach too: allocators
    // keep per-thread caches as glibc's does. (Under -static, libc's is.)
    linked.emplace_back("an allocator (malloc)");
  }
  if (linked.empty()) {
    for (int i = 0; i < main.n; ++i) main_program_code.Add(main.code[i].begin, main.code[i].end);
    return "";
  }
  // The program said which of its code may be interrupted: only that is.
  if (!preemptible.Empty()) return "";
  std::string last = std::move(linked.back());
  linked.pop_back();
  return linked.empty() ? last : absl::StrCat(absl::StrJoin(linked, ", "), " and ", last);
}

bool PreemptiblePc(uintptr_t pc) {
  if (trampoline.Contains(pc) || excluded.Contains(pc)) return false;
  return main_program_code.Contains(pc) || preemptible.Contains(pc);
}

bool InLibraryCode(uintptr_t pc) {
  return !main_program_code.Contains(pc) && !preemptible.Contains(pc) && !trampoline.Contains(pc);
}

}  // namespace goro::internal

namespace goro {

bool RegisterPreemptibleCode(const void* begin, const void* end) {
  return internal::preemptible.Add(reinterpret_cast<uintptr_t>(begin),
                                   reinterpret_cast<uintptr_t>(end));
}

bool ExcludeFromPreemption(const void* begin, const void* end) {
  return internal::excluded.Add(reinterpret_cast<uintptr_t>(begin),
                                reinterpret_cast<uintptr_t>(end));
}

NoPreemptScope::NoPreemptScope() {
  internal::G* g = internal::CurrentGoroutine();
  g_ = g;
  if (g == nullptr) return;
  int32_t n = g->preempt_off.load(std::memory_order_relaxed);
  g->preempt_off.store(n + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // As in RuntimeScope: runtime entries inside the scope see preempt_off
  // raised and do not check the P again, so check it here. The goroutine
  // may have blocked outside the runtime since its last entry, and sysmon
  // may have handed its P to another M.
  if (n == 0) internal::EnsurePAfterEntry(g);
}

NoPreemptScope::~NoPreemptScope() {
  if (g_ == nullptr) return;
  auto* g = static_cast<internal::G*>(g_);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  int32_t n = g->preempt_off.load(std::memory_order_relaxed) - 1;
  g->preempt_off.store(n, std::memory_order_relaxed);
  // A request that arrived inside the scope is honoured now.
  if (n == 0 && g->stackguard0.load(std::memory_order_relaxed) == internal::kStackPreempt) {
    internal::PreemptCooperative();
  }
}

}  // namespace goro

// dl_iterate_phdr calls back into the main executable while holding the
// loader's lock; a goroutine interrupted in the callback would park with that
// lock held and might resume on another thread, which cannot release it. goro
// interposes the function and runs the whole walk with preemption deferred:
// preempt_off raised, not a NoPreemptScope, because unwinders call it inside
// signal handlers (goro's own SIGQUIT and fault reports, a profiler's
// SIGPROF), where the scope's check of the P could wait for one and its end
// could switch goroutines. A request that arrives meanwhile waits for the
// next safe point, or the next signal.
// ASan's and TSan's runtimes call it while they initialise, before their
// shadow memory exists, so it is not instrumented (nor is anything it calls
// then: CurrentGoroutine is inlined by hand, since the compiler will not
// inline instrumented code here) and leaves plain threads alone.
#define GORO_NO_SANITIZE_MEMORY __attribute__((no_sanitize("address", "thread")))

// glibc's implementation under its internal name, for a static executable,
// where dlsym(RTLD_NEXT) finds no "next" definition (goro's is the only one
// the program has). Weak: libc.so does not export it (null in a dynamic
// link), and a weak reference does not pull libc.a's member into a static
// link, so it is there only when something else needed it (gprof's gmon.o,
// or -Wl,--undefined=__dl_iterate_phdr).
extern "C" int __dl_iterate_phdr(int (*)(dl_phdr_info*, size_t, void*), void*) __attribute__((weak));
// The linker's symbol for the ELF header of the object it is in (GNU ld,
// gold and lld define it when the header is loaded, as it is in executables).
extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((weak, visibility("hidden")));

namespace {

// A static executable's objects as glibc's own dl_iterate_phdr lists them
// when nothing was loaded with dlopen: the program, from the auxiliary
// vector, then the vDSO. Objects a static program loads with dlopen are left
// out (link it with -Wl,--undefined=__dl_iterate_phdr to get glibc's list).
GORO_NO_SANITIZE_MEMORY int StaticDlIteratePhdr(int (*callback)(dl_phdr_info*, size_t, void*), void* data) {
  dl_phdr_info objects[2] = {};
  int n = 0;
  auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(getauxval(AT_PHDR));
  auto phnum = static_cast<ElfW(Half)>(getauxval(AT_PHNUM));
  if (phdr != nullptr) {
    dl_phdr_info& prog = objects[n++];
    prog.dlpi_name = "";
    prog.dlpi_phdr = phdr;
    prog.dlpi_phnum = phnum;
    // The load bias (0 unless it is a static PIE): where the program is, less
    // where it was linked to be. Its ELF header begins the segment at file
    // offset 0, and this code is part of the program, so the linker's
    // __ehdr_start is that header.
    const ElfW(Ehdr)* ehdr = &__ehdr_start;
    bool ours = ehdr != nullptr && reinterpret_cast<const char*>(ehdr) + ehdr->e_phoff ==
                                       reinterpret_cast<const char*>(phdr);
    for (int i = 0; i < phnum; ++i) {
      const ElfW(Phdr)& ph = phdr[i];
      if (ph.p_type == PT_PHDR) prog.dlpi_addr = reinterpret_cast<uintptr_t>(phdr) - ph.p_vaddr;
      if (ph.p_type == PT_LOAD && ph.p_offset == 0 && ours) {
        prog.dlpi_addr = reinterpret_cast<uintptr_t>(ehdr) - ph.p_vaddr;
      }
    }
    for (int i = 0; i < phnum; ++i) {
      const ElfW(Phdr)& ph = phdr[i];
      if (ph.p_type != PT_TLS) continue;
      // Module 1; the x86-64 ABI's TLS variant II puts its block right below
      // the thread pointer, at the size rounded up to the alignment.
      char* tp;
      asm volatile("movq %%fs:0, %0" : "=r"(tp));
      uintptr_t align = ph.p_align > 0 ? ph.p_align : 1;
      prog.dlpi_tls_modid = 1;
      prog.dlpi_tls_data = tp - (ph.p_memsz + align - 1) / align * align;
    }
  }
  if (auto* vdso = reinterpret_cast<const ElfW(Ehdr)*>(getauxval(AT_SYSINFO_EHDR)); vdso != nullptr) {
    dl_phdr_info& v = objects[n++];
    v.dlpi_name = "linux-vdso.so.1";
    v.dlpi_phdr = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<const char*>(vdso) + vdso->e_phoff);
    v.dlpi_phnum = vdso->e_phnum;
    for (int i = 0; i < v.dlpi_phnum; ++i) {
      if (v.dlpi_phdr[i].p_type == PT_LOAD) {
        v.dlpi_addr = reinterpret_cast<uintptr_t>(vdso) - v.dlpi_phdr[i].p_vaddr;
        break;
      }
    }
  }
  int r = 0;
  for (int i = 0; i < n && r == 0; ++i) {
    objects[i].dlpi_adds = static_cast<unsigned long long>(n);
    r = callback(&objects[i], sizeof objects[i], data);
  }
  return r;
}

using DlIteratePhdrFn = int (*)(int (*)(dl_phdr_info*, size_t, void*), void*);

// The implementation goro's wrapper calls: the next definition (libc.so's);
// in a static executable glibc's own if it was linked in, else
// StaticDlIteratePhdr. A program with a dynamic loader but none of these is
// beyond repair: one line, then abort.
GORO_NO_SANITIZE_MEMORY DlIteratePhdrFn FindRealDlIteratePhdr() {
  if (void* next = dlsym(RTLD_NEXT, "dl_iterate_phdr"); next != nullptr) {
    return reinterpret_cast<DlIteratePhdrFn>(next);
  }
  if (__dl_iterate_phdr != nullptr) return __dl_iterate_phdr;
  auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(getauxval(AT_PHDR));
  auto phnum = static_cast<int>(getauxval(AT_PHNUM));
  bool has_interp = false;
  for (int i = 0; phdr != nullptr && i < phnum; ++i) has_interp |= phdr[i].p_type == PT_INTERP;
  if (phdr != nullptr && !has_interp) return StaticDlIteratePhdr;
  static constexpr char kMsg[] =
      "fatal error: dl_iterate_phdr: goro's wrapper finds no implementation to call (dlsym(RTLD_NEXT) "
      "returned none in a dynamically linked program)\n";
  goro::internal::WriteStderr(absl::string_view(kMsg, sizeof kMsg - 1));
  abort();
}

}  // namespace

extern "C" GORO_NO_SANITIZE_MEMORY
int dl_iterate_phdr(int (*callback)(dl_phdr_info*, size_t, void*), void* data) {
  // Not a function-local static: TSan intercepts its guard.
  static DlIteratePhdrFn real_fn;  // the same value whoever stores it
  DlIteratePhdrFn real = __atomic_load_n(&real_fn, __ATOMIC_RELAXED);
  if (real == nullptr) {
    real = FindRealDlIteratePhdr();
    __atomic_store_n(&real_fn, real, __ATOMIC_RELAXED);
  }
  void* g = nullptr;
  if (intptr_t off = goro::internal::goro_tls_g_offset; off != 0) asm volatile("movq %%fs:(%1), %0" : "=r"(g) : "r"(off));
  if (g == nullptr) return real(callback, data);
  auto* gp = static_cast<goro::internal::G*>(g);
  int32_t n = gp->preempt_off.load(std::memory_order_relaxed);
  gp->preempt_off.store(n + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // The callbacks run with the loader's lock held, and may call goro, which
  // needs the goroutine's P: get it back now if sysmon took it during an
  // unmarked call, before the lock is taken. (Waiting for a P inside a
  // callback could wait for ever: the M holding the only P may be blocked on
  // that lock in this wrapper, with preemption deferred, so sysmon would not
  // take its P.) Not in a signal handler, which must not wait for a P.
  if (n == 0) goro::internal::EnsurePAfterEntryOutsideHandlers(gp);
  int r = real(callback, data);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  gp->preempt_off.store(gp->preempt_off.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  return r;
}
