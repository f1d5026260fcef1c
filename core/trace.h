// The scheduler's hooks for the event trace (include/goro/trace.h).
//
// Each hook is one acquire load of `trace::on` (a plain load on x86) and a
// branch predicted not taken; only while a trace runs does it call into
// core/trace.cc, which stamps the event and appends it to a fixed-size binary
// buffer. Formatting (JSON) and I/O happen on a background thread, never here.
//
// Ownership. A hook that names a P writes into that P's buffer, so it must run
// on the P's owner: g0 of the M holding it, or a goroutine inside a runtime
// entry (after EnsurePAfterEntry, which makes sure the P was not revoked
// while the goroutine was out in user code), or sysmon between taking a P and
// handing it on. Hooks with P == nullptr (and GoUnblock off a P) write into a
// shared buffer under a spin lock: plain threads, sysmon, Ms without a P.
// docs/trace.md describes the events and the file.
#ifndef GORO_CORE_TRACE_H_
#define GORO_CORE_TRACE_H_

#include <atomic>
#include <cstdint>

#include "core/runtime.h"

namespace goro::internal::trace {

// True while a trace runs. Set by Start after every buffer exists; cleared by
// Stop, which then waits out writers already past the check. Loaded with
// acquire: a hook that sees it set sees the buffers Start made.
extern std::atomic<bool> on;

inline bool On() { return __builtin_expect(on.load(std::memory_order_acquire), false); }

// Why sysmon took a P away from its M.
enum class HandoffWhy : uint8_t { kSyscall, kBlockedCall };

// The slow paths, out of line.
void RecordCreate(P* p, G* newg);
void RecordStart(P* p, G* g);
void RecordBlock(P* p, G* g);
void RecordYield(P* p, G* g);
void RecordPreempt(P* p, G* g, bool async);
void RecordEnd(P* p, G* g);
void RecordUnblock(G* g);
void RecordSteal(P* p, P* victim, G* g);
void RecordSyscall(P* p, G* g, bool enter);
void RecordHandoff(P* p, G* g, HandoffWhy why);

// Starts a trace to $GOROTRACE, if set, stopped at exit; called once, when the
// runtime has started.
void StartFromEnvironment();

// The current goroutine (or a plain thread) made newg; p: the creator's P.
inline void GoCreate(P* p, G* newg) {
  if (On()) RecordCreate(p, newg);
}
// g starts (or resumes) running on p.
inline void GoStart(P* p, G* g) {
  if (On()) RecordStart(p, g);
}
// g stops running on p: it parks for g->wait_reason.
inline void GoBlock(P* p, G* g) {
  if (On()) RecordBlock(p, g);
}
// g stops running on p: goro::Yield.
inline void GoYield(P* p, G* g) {
  if (On()) RecordYield(p, g);
}
// g stops running on p: its slice is spent (async: by the signal).
inline void GoPreempt(P* p, G* g, bool async) {
  if (On()) RecordPreempt(p, g, async);
}
// g's function returned; it stops running on p for good.
inline void GoEnd(P* p, G* g) {
  if (On()) RecordEnd(p, g);
}
// The caller (a goroutine, g0, sysmon or a plain thread) makes the waiting g
// runnable. Call before g can run: before it is put on a run queue.
inline void GoUnblock(G* g) {
  if (On() && !g->external) RecordUnblock(g);
}
// p's M stole g (and perhaps more) from victim's run queue.
inline void GoSteal(P* p, P* victim, G* g) {
  if (On()) RecordSteal(p, victim, g);
}
// g, running on p, enters or has left a marked blocking region.
inline void SyscallEnter(P* p, G* g) {
  if (On()) RecordSyscall(p, g, true);
}
inline void SyscallExit(P* p, G* g) {
  if (On()) RecordSyscall(p, g, false);
}
// Sysmon took p from the M running g; called before p is handed on.
inline void PHandoff(P* p, G* g, HandoffWhy why) {
  if (On()) RecordHandoff(p, g, why);
}

}  // namespace goro::internal::trace

#endif  // GORO_CORE_TRACE_H_
