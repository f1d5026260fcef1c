// Timers: a binary min-heap per P, ordered by `when`, under the P's timer lock.
//
// A timer goes on the heap of the P that adds it and stays there until it
// fires or is deleted (Ps never go away, so t->p stays valid); ResetTimer
// changes a pending timer's time where it lies, re-sorting it in one hold of
// the lock, when the caller runs on that P (or on none). Whoever runs a
// P's timers - its own M in FindRunnable, or a thief on its last stealing pass
// - pops the expired ones and calls them with the lock held, which is what
// lets DelTimer promise that a callback is not running once it returns.
// A callback may take a channel's or CondVar's lock and, through Ready,
// sched.mu (only when a full run queue spills into the global one: the
// WakeP that may start a thread waits for the unlock, M::running_timers):
// those come after the timer lock, and a PollDesc lock before it
// (docs/scheduler.md).
// p->timer0_when mirrors the heap's minimum so that schedulers can skip a P
// without taking its lock (UpdateTimer0 says how it is ordered).
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/chan_internal.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "goro/sync.h"
#include "goro/timer.h"

namespace goro::internal {

namespace {

bool Less(const Timer* a, const Timer* b) { return a->when < b->when; }

void Place(std::vector<Timer*>& h, size_t i, Timer* t) {
  h[i] = t;
  t->index = static_cast<int32_t>(i);
}

void SiftUp(std::vector<Timer*>& h, size_t i) {
  Timer* t = h[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!Less(t, h[parent])) break;
    Place(h, i, h[parent]);
    i = parent;
  }
  Place(h, i, t);
}

void SiftDown(std::vector<Timer*>& h, size_t i) {
  Timer* t = h[i];
  size_t n = h.size();
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && Less(h[c + 1], h[c])) ++c;
    if (!Less(h[c], t)) break;
    Place(h, i, h[c]);
    i = c;
  }
  Place(h, i, t);
}

void RemoveAt(P* p, size_t i) {
  std::vector<Timer*>& h = p->timers;
  h[i]->index = -1;
  Timer* last = h.back();
  h.pop_back();
  if (i < h.size()) {
    Place(h, i, last);
    SiftDown(h, i);
    SiftUp(h, last->index);
  }
}

// Publishes the heap's new minimum after a change, under p->timers_lock.
//
// A minimum that gets earlier is stored seq_cst: it is one half of a Dekker
// pairing. The adder stores it and then reads sched.poll_until (AddTimer's
// WakeForTimer); the timer sleeper publishes poll_until and then reads
// timer0_when again (EarliestTimer, in FindRunnable), all seq_cst. One of
// the two sees the other's store, so the sleeper either sleeps until the
// earlier time or is woken for it. A release store would let the adder's
// load of poll_until pass its store (x86's store buffer), and both miss.
//
// A minimum that gets later, or 0 (a timer fired, was deleted or was reset
// later), needs no such pairing: nobody is woken for it, and a reader that
// misses the store sees the earlier time, as it does if it reads just before
// the change. Every reader copes with that already: it wakes or looks too
// early, finds nothing due under the lock (RunTimers) and reads again.
// Release is enough there, and on x86 is a plain store instead of an xchg.
// An unchanged minimum is not stored at all: whoever stored it did the
// pairing, and the sleepers it told wake no later than it.
void UpdateTimer0(P* p) {
  int64_t before = p->timer0_when.load(std::memory_order_relaxed);  // only writers hold the lock
  int64_t after = p->timers.empty() ? 0 : p->timers[0]->when;
  if (after == before) return;
  if (after != 0 && (before == 0 || after < before)) {
    p->timer0_when.store(after, std::memory_order_seq_cst);
  } else {
    p->timer0_when.store(after, std::memory_order_release);
  }
}

}  // namespace

void AddTimer(Timer* t) { WakeForTimer(AddTimerQuietly(t)); }

int64_t AddTimerQuietly(Timer* t) {
  M* m = CurrentM();
  P* p = m != nullptr && m->p != nullptr ? m->p : sched.allp[FastRandN(sched.nprocs)];
  if (t->when <= 0) t->when = 1;  // 0 means "no timer" in timer0_when
  t->p = p;
  // Once the lock is dropped another M may fire t, and its callback may free
  // it (After) or wake the goroutine whose stack holds it (SleepFor).
  int64_t when = t->when;
  p->timers_lock.Lock();
  p->timers.push_back(t);
  SiftUp(p->timers, p->timers.size() - 1);
  UpdateTimer0(p);
  p->timers_lock.Unlock();
  return when;
}

bool DelTimer(Timer* t) {
  P* p = t->p;
  if (p == nullptr) return false;
  p->timers_lock.Lock();
  bool removed = t->index >= 0;
  if (removed) {
    RemoveAt(p, t->index);
    UpdateTimer0(p);
  }
  p->timers_lock.Unlock();
  return removed;
}

bool ResetTimer(Timer* t, int64_t when) {
  P* p = t->p;
  if (p == nullptr) return false;
  if (when <= 0) when = 1;  // 0 means "no timer" in timer0_when
  M* m = CurrentM();
  if (m != nullptr && m->p != nullptr && m->p != p) {
    // Added from another P: move it to this one, as AddTimer places a new
    // timer, so that the M that runs its goroutine runs it.
    if (!DelTimer(t)) return false;
    t->when = when;
    AddTimer(t);
    return true;
  }
  p->timers_lock.Lock();
  // Out of the heap: it fired (under this lock, so its callback is done) or
  // was deleted. Nothing changes.
  if (t->index < 0) {
    p->timers_lock.Unlock();
    return false;
  }
  int64_t first = p->timers[0]->when;
  bool earlier = when < t->when;
  t->when = when;
  if (earlier) {
    SiftUp(p->timers, t->index);
  } else {
    SiftDown(p->timers, t->index);
  }
  UpdateTimer0(p);
  int64_t now_first = p->timers[0]->when;
  p->timers_lock.Unlock();
  // Only an earlier minimum needs a sleeper woken: the one who sleeps until
  // the old minimum wakes no later than that and looks again.
  if (now_first < first) WakeForTimer(now_first);
  return true;
}

int64_t RunTimers(P* p, int64_t now, int* fired) {
  int64_t first = p->timer0_when.load(std::memory_order_relaxed);
  if (first == 0 || first > now) return first;
  if (!p->timers_lock.TryLock()) return first;  // someone else is running them
  M* m = CurrentM();  // on g0 (FindRunnable, StealWork)
  m->running_timers = true;
  while (!p->timers.empty() && p->timers[0]->when <= now) {
    Timer* t = p->timers[0];
    RemoveAt(p, 0);
    // A one-shot callback may free t (After) or wake the goroutine whose
    // stack holds it (SleepFor); a ticker's record stays until DelTimer,
    // which waits for this lock.
    const int64_t period = t->period;
    t->f(t);
    if (fired != nullptr) ++*fired;
    if (period > 0) {
      t->when += period * ((now - t->when) / period + 1);
      p->timers.push_back(t);
      SiftUp(p->timers, p->timers.size() - 1);
    }
  }
  m->running_timers = false;
  UpdateTimer0(p);
  int64_t next = p->timer0_when.load(std::memory_order_relaxed);
  p->timers_lock.Unlock();
  if (m->wakep_deferred) {
    m->wakep_deferred = false;
    WakeP();  // for the goroutines the callbacks readied
  }
  return next;
}

size_t TimerCount(P* p) {
  p->timers_lock.Lock();
  size_t n = p->timers.size();
  p->timers_lock.Unlock();
  return n;
}

int64_t EarliestTimer() {
  int64_t next = 0;
  for (P* p : sched.allp) {
    int64_t w = p->timer0_when.load(std::memory_order_seq_cst);
    if (w != 0 && (next == 0 || w < next)) next = w;
  }
  return next;
}

int64_t NanotimeIn(absl::Duration d) {
  d = std::clamp(d, absl::ZeroDuration(), absl::Hours(24 * 365 * 100));
  return Nanotime() + absl::ToInt64Nanoseconds(d);
}

namespace {

int64_t ToMonotonic(absl::Time t) { return NanotimeIn(t - absl::Now()); }

void ReadyTimerG(Timer* t) { Ready(static_cast<G*>(t->arg)); }

bool CommitSleep(G* g, void* arg) {
  AddTimer(static_cast<Timer*>(arg));
  return true;
}

void SleepUntilNanos(int64_t when) {
  if (!OnGoroutine()) {
    int64_t left = when - Nanotime();
    CurrentG();  // known (and awake: it wakes by itself)
    if (left <= 0) return;
    // A plain thread's sleep during exit ends the freeze at exit, as its
    // park would (Park): a global's destructor polling, with SleepFor, for
    // the goroutines it stopped would otherwise poll for ever.
    if (sched.frozen.load(std::memory_order_acquire)) [[unlikely]] ThawAfterExitFreeze();
    absl::SleepFor(absl::Nanoseconds(left));
    return;
  }
  Timer t;
  t.when = when;
  t.f = ReadyTimerG;
  t.arg = CurrentG();
  Park(WaitReason::kSleep, CommitSleep, &t);
}

// The state of an After timer: owned by the timer until it fires.
struct AfterTimer {
  Timer timer;
  Chan<absl::Time> ch{1};
};

// A goro::Timer's or Ticker's callback only offers the time, on the channel
// its TimerState owns (t->arg); the record lives with the object.
void FireTimer(Timer* t) {
  absl::Time now = absl::Now();
  ChanOffer(static_cast<ChanCore*>(t->arg), &now);
}

void FireAfter(Timer* t) {
  auto* a = static_cast<AfterTimer*>(t->arg);
  absl::Time now = absl::Now();
  // Nobody else sends on this channel and its buffer holds one, so the offer
  // only fails if a user closed the channel; then the value is dropped.
  ChanOffer(a->ch.core(), &now);
  delete a;
}

}  // namespace

}  // namespace goro::internal

namespace goro {

// Neither sleep starts the runtime: on a goroutine it runs already, and a
// plain thread sleeps by itself (SleepUntilNanos), so the Options of a Run
// that comes later still count.
// A zero or negative duration returns at once, as Go's time.Sleep does: a
// yield would queue the goroutine behind every preempted goroutine in the
// global queue. The scope still makes the call a safe point.
void SleepFor(absl::Duration d) {
  internal::RuntimeScope scope;
  if (d <= absl::ZeroDuration()) return;
  internal::SleepUntilNanos(internal::NanotimeIn(d));
}

void SleepUntil(absl::Time t) {
  internal::RuntimeScope scope;
  internal::SleepUntilNanos(internal::ToMonotonic(t));
}

Chan<absl::Time> After(absl::Duration d) {
  internal::EnsureStarted(Options{});
  internal::RuntimeScope scope;
  auto* a = new internal::AfterTimer();
  Chan<absl::Time> ch = a->ch;
  a->timer.when = internal::NanotimeIn(d);
  a->timer.f = internal::FireAfter;
  a->timer.arg = a;
  internal::AddTimer(&a->timer);
  return ch;
}

namespace internal {

// A goro::Timer's or goro::Ticker's: its record, the channel it fires into,
// and the lock that orders Stop and Reset. The channel is the state's own
// handle, not the object's ch_: the user may assign to C(), and the timer
// must neither send into nor drain a channel it no longer holds.
struct TimerState {
  Timer timer;
  Chan<absl::Time> ch{1};
  Mutex mu;  // Stop and Reset, one at a time

  TimerState() {
    timer.f = FireTimer;  // only offers the time
    timer.arg = ch.core();
  }

  // With mu held, and the record out of the heap (it fired, or DelTimer or
  // ResetTimer has just taken it out under its lock, so the callback is
  // not running and will not run: whatever it sent is in the buffer now, or
  // was taken by a receiver): drops the time it sent, if nobody has
  // received it. Returns whether there was one.
  bool DrainLocked() {
    std::optional<absl::Time> stale;
    // A user may have closed C(): its receive is then ready with no time.
    return Select(OnRecv(ch, &stale), OnDefault()) == 0 && stale.has_value();
  }
};

}  // namespace internal

Timer::Timer(absl::Duration d) {
  internal::EnsureStarted(Options{});
  internal::RuntimeScope scope;
  state_ = std::make_unique<internal::TimerState>();
  ch_ = state_->ch;
  state_->timer.when = internal::NanotimeIn(d);
  internal::AddTimer(&state_->timer);
}

Timer::~Timer() { Stop(); }

bool Timer::Stop() {
  internal::RuntimeScope scope;
  state_->mu.Lock();
  bool stopped = internal::DelTimer(&state_->timer) || state_->DrainLocked();
  state_->mu.Unlock();
  return stopped;
}

// A pending timer is only moved (ResetTimer): it has sent nothing, so there
// is nothing to drain. Otherwise it is out of the heap, and stays out while
// mu is held: drain, then add it again.
bool Timer::Reset(absl::Duration d) {
  internal::RuntimeScope scope;
  int64_t when = internal::NanotimeIn(d);
  state_->mu.Lock();
  bool stopped = internal::ResetTimer(&state_->timer, when);
  if (!stopped) {
    stopped = state_->DrainLocked();
    state_->timer.when = when;
    internal::AddTimer(&state_->timer);
  }
  state_->mu.Unlock();
  return stopped;
}

namespace {

// The period of a Ticker of `d`, in ns; fatal unless d > 0.
int64_t TickerPeriod(absl::Duration d, const char* what) {
  if (d <= absl::ZeroDuration()) {
    internal::FatalG(absl::StrCat("non-positive interval for ", what, ": ", absl::FormatDuration(d)));
  }
  // Whole nanoseconds, rounded up so that no tick comes early: a period
  // below 1 ns would otherwise be 0, a one-shot timer.
  d = absl::Ceil(std::min(d, absl::Hours(24 * 365 * 100)), absl::Nanoseconds(1));  // NanotimeIn's bound
  return absl::ToInt64Nanoseconds(d);
}

// Starts s's record ticking every `period` ns, the first tick one period
// from now (its record out of the heap; with s->mu held, or not yet shared).
void StartTicking(internal::TimerState* s, int64_t period) {
  s->timer.period = period;
  s->timer.when = internal::Nanotime() + period;
  internal::AddTimer(&s->timer);
}

}  // namespace

Ticker::Ticker(absl::Duration d) {
  internal::EnsureStarted(Options{});
  internal::RuntimeScope scope;
  const int64_t period = TickerPeriod(d, "Ticker");
  state_ = std::make_unique<internal::TimerState>();
  ch_ = state_->ch;
  StartTicking(state_.get(), period);
}

Ticker::~Ticker() { Stop(); }

// A ticker's record is back in its heap as soon as it has fired, so a tick
// may wait in the buffer whatever DelTimer says: always drain.
void Ticker::Stop() {
  internal::RuntimeScope scope;
  state_->mu.Lock();
  internal::DelTimer(&state_->timer);
  state_->DrainLocked();
  state_->mu.Unlock();
}

void Ticker::Reset(absl::Duration d) {
  internal::RuntimeScope scope;
  const int64_t period = TickerPeriod(d, "Ticker.Reset");
  state_->mu.Lock();
  internal::DelTimer(&state_->timer);
  state_->DrainLocked();
  StartTicking(state_.get(), period);
  state_->mu.Unlock();
}

}  // namespace goro
