// GORODEBUG=schedtrace=MS: every MS milliseconds sysmon prints one line of
// scheduler state to stderr, in the format of Go's schedtrace so that the
// same eyes (and scripts) read it:
//
//   SCHED 1004ms: gomaxprocs=2 idleprocs=0 threads=4 spinningthreads=0 idlethreads=1 runqueue=3 [1 0]
//
// threads counts Ms (sysmon excluded); idlethreads those parked in the idle
// pool; runqueue is the global queue and the bracket each P's local queue.
// With scheddetail=1 the line grows Go's extra fields and is followed by one
// line per P, per M and per goroutine that exists:
//
//   P0: status=running schedtick=812 syscalltick=0 m=3 runqsize=1 gfreecnt=12 timerslen=1
//   M3: p=0 curg=17 spinning=false blocked=false lockedg=-1
//   G17: status=running m=3 lockedm=-1
//   G1: status=waiting(chan receive) m=-1 lockedm=-1
//
// Like Go's, it reads other threads' state racily: a line is a snapshot that
// may be a few nanoseconds inconsistent, never a lock held against them
// (sched.mu only, briefly, for the global counts).
#include <string>

#include "absl/strings/str_cat.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/sanitizer.h"
#include "goro/runtime.h"

namespace goro::internal {

namespace {

const char* PStatusName(P::Status s) {
  switch (s) {
    case P::Status::kIdle: return "idle";
    case P::Status::kRunning: return "running";
    case P::Status::kSyscall: return "syscall";
    case P::Status::kRevoking: return "revoking";
  }
  return "?";
}

// Fields the owning thread writes plainly; a trace reads them as they are
// (one load each, which the compiler may not repeat or tear).
template <typename T>
GORO_NO_SANITIZE_THREAD T Racy(const T& field) {
  return *static_cast<const volatile T*>(&field);
}

}  // namespace

// Reads other threads' fields racily by design: not for TSan.
GORO_NO_SANITIZE_THREAD void PrintSchedTrace(int64_t now, bool detail) {
  int mcount, nmidle, nmlocked, runq;
  std::vector<M*> idle_ms;
  {
    RuntimeMutexLock lock(&sched.mu);
    mcount = sched.mcount;
    nmidle = sched.nmidle;
    nmlocked = sched.nmlocked;
    runq = sched.runq_size.load(std::memory_order_relaxed);
    if (detail) {
      for (M* m = sched.midle; m != nullptr; m = m->sched_link) idle_ms.push_back(m);
    }
  }
  std::string out = absl::StrCat(
      "SCHED ", (now - sched.start_time) / 1000000, "ms: gomaxprocs=", sched.nprocs,
      " idleprocs=", sched.npidle.load(std::memory_order_relaxed), " threads=", mcount,
      " spinningthreads=", sched.nmspinning.load(std::memory_order_relaxed),
      " idlethreads=", nmidle, " runqueue=", runq);
  if (detail) {
    absl::StrAppend(&out, " nmidlelocked=", nmlocked, " goroutines=", GetStats().goroutines_live, "\n");
    for (P* p : sched.allp) {
      M* m = p->m.load(std::memory_order_relaxed);
      absl::StrAppend(&out, "  P", p->id, ": status=", PStatusName(p->status.load(std::memory_order_relaxed)),
                      " schedtick=", p->schedtick.load(std::memory_order_relaxed),
                      " syscalltick=", p->syscalltick.load(std::memory_order_relaxed),
                      " m=", m != nullptr ? Racy(m->id) : -1, " runqsize=", p->runq.Size(),
                      " gfreecnt=", Racy(p->gfree_n), " timerslen=", TimerCount(p), "\n");
    }
    for (M* m = sched.allm.load(std::memory_order_acquire); m != nullptr; m = m->alllink) {
      P* p = Racy(m->p);
      G* g = Racy(m->curg);
      G* lg = Racy(m->locked_g);
      bool idle = false;
      for (M* im : idle_ms) idle |= im == m;
      absl::StrAppend(&out, "  M", m->id, ": p=", p != nullptr ? p->id : -1,
                      " curg=", g != nullptr ? Racy(g->id) : -1,
                      " spinning=", Racy(m->spinning) ? "true" : "false",
                      " blocked=", idle ? "true" : "false",
                      " lockedg=", lg != nullptr ? Racy(lg->id) : -1, "\n");
    }
    for (G* g = sched.allgs.load(std::memory_order_acquire); g != nullptr; g = g->alllink) {
      GStatus st = g->status.load(std::memory_order_relaxed);
      if (st == GStatus::kIdle || st == GStatus::kDead) continue;
      M* on_m = st == GStatus::kRunning || st == GStatus::kSyscall ? MRunning(g) : nullptr;
      M* lm = Racy(g->locked_m);
      absl::StrAppend(&out, "  G", g->id, ": status=", GStatusString(st));
      WaitReason why = Racy(g->wait_reason);
      if (st == GStatus::kWaiting && why != WaitReason::kNone) {
        absl::StrAppend(&out, "(", WaitReasonString(why), ")");
      }
      absl::StrAppend(&out, " m=", on_m != nullptr ? on_m->id : -1,
                      " lockedm=", lm != nullptr ? lm->id : -1, "\n");
    }
  } else {
    absl::StrAppend(&out, " [");
    for (int i = 0; i < sched.nprocs; ++i) {
      absl::StrAppend(&out, i == 0 ? "" : " ", sched.allp[i]->runq.Size());
    }
    absl::StrAppend(&out, "]\n");
  }
  WriteStderr(out);
}

}  // namespace goro::internal
