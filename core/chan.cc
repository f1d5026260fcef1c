// Channels and select (include/goro/chan.h), after Go's chan.go and select.go.
//
// A channel is a lock, a ring buffer of `cap` elements, and two queues of
// waiting goroutines (receivers, senders). A waiter is a Sudog, in a wait
// record of the waiting goroutine (core/wait_record.h), that says where its
// element is. When a sender finds a waiting receiver it moves its value
// straight into the receiver's std::optional, and vice versa, so an
// unbuffered hand-off copies once. A Select's receive case is the exception:
// its target may hold a value, whose destructor is user code that must not
// run under a channel lock, so it receives into raw storage of the Select's
// and the selecting goroutine moves the value on once it holds no lock.
//
// A channel lives while anything refers to it, as in Go, where a waiter's
// stack keeps the channel it waits on alive. Each Chan handle holds a
// reference (ChanRef/ChanUnref), and so does a parked Select, on each distinct
// channel of its cases, from before it queues its Sudogs until it has dequeued
// them again: another case may wake it after the last handle of this channel
// has gone. A parked Send or Recv takes none, because nothing touches the
// channel on its behalf once the last handle has gone (a waker holds a
// handle, and the woken goroutine touches only its own Sudog); instead the
// last reference frees the channel only if no Sudog is queued in it. One that
// is belongs to a goroutine blocked for ever, which keeps the channel, and
// the values in its buffer, as Go's would. Operations that complete without
// parking take no reference: the caller's handle outlives the call.
//
// Select queues one Sudog per case on every channel, parks, and on waking
// dequeues the rest. The first channel operation to complete one of its cases
// wins by setting G::select_done from 0 to 1; others skip that goroutine's
// Sudogs. Channels are locked in address order, so two selects cannot
// deadlock each other.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/chan_internal.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/wait_record.h"

namespace goro::internal {

namespace {

struct Sudog {
  G* g = nullptr;
  void* elem = nullptr;  // sender: T*; receiver: std::optional<T>*, or raw storage if into_raw
  Sudog* next = nullptr;
  Sudog* prev = nullptr;
  ChanCore* chan = nullptr;
  int case_index = -1;  // select: which case; -1: a plain send/recv
  bool queued = false;
  bool success = false;  // false when woken by Close
  bool into_raw = false;  // a Select's receiver: elem is room for a T, constructed by the sender
};

class WaitQueue {
 public:
  void Push(Sudog* s) {
    s->prev = tail_;
    s->next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = s;
    } else {
      head_ = s;
    }
    tail_ = s;
    s->queued = true;
  }
  void Remove(Sudog* s) {
    if (!s->queued) return;
    if (s->prev != nullptr) {
      s->prev->next = s->next;
    } else {
      head_ = s->next;
    }
    if (s->next != nullptr) {
      s->next->prev = s->prev;
    } else {
      tail_ = s->prev;
    }
    s->next = s->prev = nullptr;
    s->queued = false;
  }
  // Removes and returns the first waiter that can still be completed: a plain
  // one, or a select whose goroutine no other channel has claimed yet.
  Sudog* Pop() {
    while (Sudog* s = head_) {
      Remove(s);
      if (s->case_index < 0) return s;
      uint32_t zero = 0;
      if (s->g->select_done.compare_exchange_strong(zero, 1, std::memory_order_acq_rel)) return s;
    }
    return nullptr;
  }
  bool Empty() const { return head_ == nullptr; }

 private:
  Sudog* head_ = nullptr;
  Sudog* tail_ = nullptr;
};

}  // namespace

class ChanCore {
 public:
  ChanCore(size_t cap, const ElemOps* ops) : cap_(cap), ops_(ops) {
    if (cap_ > 0) {
      size_t align = std::max(ops->align, alignof(std::max_align_t));
      stride_ = (ops->size + ops->align - 1) / ops->align * ops->align;
      // As Go's makechan: a size that wraps (or that no object may have, over
      // PTRDIFF_MAX) would allocate a short buffer that sends then overrun.
      if (cap_ > static_cast<size_t>(PTRDIFF_MAX) / stride_) {
        FatalG(absl::StrCat("makechan: size out of range: capacity ", cap_, " of ", ops->size,
                            "-byte elements"));
      }
      buf_ = static_cast<char*>(::operator new(stride_ * cap_, std::align_val_t(align)));
      align_ = align;
    }
  }
  ~ChanCore() {
    size_t n = count_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) ops_->destroy(Slot((recvx_ + i) % cap_));
    if (buf_ != nullptr) ::operator delete(buf_, std::align_val_t(align_));
  }

  void* Slot(size_t i) { return buf_ + i * stride_; }

  // References: Chan handles and parked waiters. Changed with atomic RMWs,
  // by anyone; whoever takes it to zero deletes the channel.
  std::atomic<size_t> refs_{1};
  SpinLock lock;
  const size_t cap_;
  const ElemOps* const ops_;
  size_t stride_ = 0;
  size_t align_ = 0;
  char* buf_ = nullptr;
  // Written under lock; ChanLen reads it without, a snapshot as Go's len(ch).
  std::atomic<size_t> count_{0};
  size_t sendx_ = 0, recvx_ = 0;
  bool closed_ = false;
  WaitQueue recvq, sendq;
};

namespace {

// The lock is held; a waiting receiver exists: hand *elem to it directly.
void SendToWaiter(ChanCore* c, Sudog* r, void* elem) {
  if (r->into_raw) {
    c->ops_->to_raw(r->elem, elem);
  } else {
    c->ops_->to_opt(r->elem, elem);
  }
  r->success = true;
  r->g->param = r;
}

// The lock is held and a send can complete now (c is open): do it.
// Returns the receiver to Ready, if any.
bool TrySendLocked(ChanCore* c, void* elem, G** to_ready) {
  if (Sudog* r = c->recvq.Pop()) {
    SendToWaiter(c, r, elem);
    *to_ready = r->g;
    return true;
  }
  size_t count = c->count_.load(std::memory_order_relaxed);
  if (count < c->cap_) {
    c->ops_->to_raw(c->Slot(c->sendx_), elem);
    c->sendx_ = (c->sendx_ + 1) % c->cap_;
    c->count_.store(count + 1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

// The lock is held: completes a receive into *out if one can complete now
// (a waiting sender, a buffered value, or closed). Sets *received. `out` is
// an empty std::optional<T>, which closed leaves empty, or if kIntoRaw room
// for a T, which closed leaves unconstructed: nothing of the caller's is
// destroyed here. (A template, so that Recv's path tests nothing more.)
template <bool kIntoRaw>
bool TryRecvLocked(ChanCore* c, void* out, bool* received, G** to_ready) {
  auto take = [c, out](void* src) {
    if constexpr (kIntoRaw) {
      c->ops_->to_raw(out, src);
    } else {
      c->ops_->to_opt(out, src);
    }
  };
  if (Sudog* s = c->sendq.Pop()) {
    if (c->cap_ == 0) {
      take(s->elem);
    } else {
      // The buffer is full: take its head and put the sender's value at the
      // tail, which is the same slot.
      void* slot = c->Slot(c->recvx_);
      take(slot);
      c->ops_->destroy(slot);
      c->ops_->to_raw(slot, s->elem);
      c->recvx_ = (c->recvx_ + 1) % c->cap_;
      c->sendx_ = c->recvx_;
    }
    s->success = true;
    s->g->param = s;
    *to_ready = s->g;
    *received = true;
    return true;
  }
  if (size_t count = c->count_.load(std::memory_order_relaxed); count > 0) {
    void* slot = c->Slot(c->recvx_);
    take(slot);
    c->ops_->destroy(slot);
    c->recvx_ = (c->recvx_ + 1) % c->cap_;
    c->count_.store(count - 1, std::memory_order_relaxed);
    *received = true;
    return true;
  }
  if (c->closed_) {
    if constexpr (!kIntoRaw) c->ops_->reset_opt(out);
    *received = false;
    return true;
  }
  return false;
}

bool UnlockChan(G*, void* arg) {
  static_cast<ChanCore*>(arg)->lock.Unlock();
  return true;
}

[[noreturn]] void BlockForever(WaitReason reason) {
  Park(reason, nullptr, nullptr);
  Fatal("a goroutine blocked forever was woken");
}

}  // namespace

ChanCore* NewChanCore(size_t cap, const ElemOps* ops) { return new ChanCore(cap, ops); }

void ChanRef(ChanCore* c) { c->refs_.fetch_add(1, std::memory_order_relaxed); }

void ChanUnref(ChanCore* c) {
  // acq_rel: every use of the channel through another reference happens
  // before the delete.
  if (c->refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The lock orders this look after the last Park's UnlockChan.
  c->lock.Lock();
  bool waited_on = !c->sendq.Empty() || !c->recvq.Empty();
  c->lock.Unlock();
  if (!waited_on) delete c;  // else its blocked Send or Recv keeps it
}

size_t ChanLen(const ChanCore* c) { return c->count_.load(std::memory_order_relaxed); }
size_t ChanCap(const ChanCore* c) { return c->cap_; }

void ChanSend(ChanCore* c, void* elem) {
  RuntimeScope scope;
  if (c == nullptr) BlockForever(WaitReason::kChanSendNilChan);
  ReserveWaitRecords(1);  // the Sudog below is taken with c->lock held
  c->lock.Lock();
  if (c->closed_) {
    c->lock.Unlock();
    FatalG("send on closed channel");
  }
  G* to_ready = nullptr;
  if (TrySendLocked(c, elem, &to_ready)) {
    c->lock.Unlock();
    if (to_ready != nullptr) Ready(to_ready);
    return;
  }
  WaitRecord<Sudog> s;
  s->g = CurrentG();
  s->elem = elem;
  s->chan = c;
  c->sendq.Push(s.get());
  Park(WaitReason::kChanSend, UnlockChan, c);
  if (!s->success) FatalG("send on closed channel");
}

bool ChanOffer(ChanCore* c, void* elem) {
  c->lock.Lock();
  G* to_ready = nullptr;
  bool sent = !c->closed_ && TrySendLocked(c, elem, &to_ready);
  c->lock.Unlock();
  if (to_ready != nullptr) Ready(to_ready);
  return sent;
}

bool ChanLockHeldForTest(ChanCore* c) {
  if (!c->lock.TryLock()) return true;
  c->lock.Unlock();
  return false;
}

void ChanRecv(ChanCore* c, void* out) {
  RuntimeScope scope;
  if (c == nullptr) BlockForever(WaitReason::kChanReceiveNilChan);
  ReserveWaitRecords(1);  // the Sudog below is taken with c->lock held
  c->lock.Lock();
  bool received = false;
  G* to_ready = nullptr;
  if (TryRecvLocked</*kIntoRaw=*/false>(c, out, &received, &to_ready)) {
    c->lock.Unlock();
    if (to_ready != nullptr) Ready(to_ready);
    return;
  }
  WaitRecord<Sudog> s;
  s->g = CurrentG();
  s->elem = out;
  s->chan = c;
  c->recvq.Push(s.get());
  Park(WaitReason::kChanReceive, UnlockChan, c);
}

void ChanClose(ChanCore* c) {
  RuntimeScope scope;
  if (c == nullptr) FatalG("close of nil channel");
  c->lock.Lock();
  if (c->closed_) {
    c->lock.Unlock();
    FatalG("close of closed channel");
  }
  c->closed_ = true;
  // Collect every waiter under the lock, wake them after: their Sudogs stay
  // valid until they run.
  G* wake = nullptr;
  auto collect = [&wake](Sudog* s) {
    s->success = false;
    s->g->param = s;
    s->g->sched_link = wake;
    wake = s->g;
  };
  while (Sudog* s = c->recvq.Pop()) {
    // A receiver's empty optional: closed, no value. A Select's receiver
    // has raw storage, left unconstructed, and resets its own target.
    if (!s->into_raw) c->ops_->reset_opt(s->elem);
    collect(s);
  }
  while (Sudog* s = c->sendq.Pop()) collect(s);
  c->lock.Unlock();
  while (wake != nullptr) {
    G* g = wake;
    wake = g->sched_link;
    g->sched_link = nullptr;
    Ready(g);
  }
}

// ---------------------------------------------------------------------------
// Select

namespace {

constexpr int kMaxSelectCases = 1024;

struct SelectPark {
  ChanCore** locked;  // distinct channels, in lock order
  int nlocked;
};

bool UnlockAll(G*, void* arg) {
  auto* a = static_cast<SelectPark*>(arg);
  for (int i = a->nlocked - 1; i >= 0; --i) a->locked[i]->lock.Unlock();
  return true;
}

// Where a Select's receive cases receive, with the channel locks held: room
// for one element of the largest of their types (one case wins, so they
// share it), inline if it fits, else allocated before any lock is taken.
class RecvScratch {
 public:
  RecvScratch(size_t size, size_t align) {
    if (size > sizeof(inline_) || align > alignof(std::max_align_t)) {
      align_ = align;
      p_ = ::operator new(size, std::align_val_t(align));
    }
  }
  ~RecvScratch() {
    if (p_ != inline_) ::operator delete(p_, std::align_val_t(align_));
  }
  RecvScratch(const RecvScratch&) = delete;
  RecvScratch& operator=(const RecvScratch&) = delete;
  void* get() const { return p_; }

 private:
  alignas(std::max_align_t) unsigned char inline_[64];
  size_t align_ = 0;
  void* p_ = inline_;
};

// Gives the chosen receive case's target what the case received into
// scratch: the value (then destroyed in scratch), or nullopt if the channel
// was closed. Called by the selecting goroutine outside the runtime, with no
// channel lock held, since assigning *out destroys its old value, which may
// be anything (the last handle to a channel of this Select, a token that
// sends itself back, a destructor that blocks).
// `ops` was read while the channel was known to live: that destruction may
// free it.
void AssignRecvTarget(const ElemOps* ops, void* out, void* scratch, bool received) {
  if (received) {
    ops->to_opt(out, scratch);
    ops->destroy(scratch);
  } else {
    ops->reset_opt(out);
  }
}

// What the chosen case received, if it is a receive case: its target is
// assigned from the scratch by SelectImpl, outside the runtime.
struct ChosenRecv {
  const ElemOps* ops = nullptr;  // read while the channel was known to live
  bool received = false;  // false: the channel was closed and drained
};

// Select, in runtime code; a receive case receives into `scratch`.
int SelectInRuntime(SelectCaseRep* cases, int n, void* scratch, ChosenRecv* chosen) {
  RuntimeScope scope;
  if (n > kMaxSelectCases) FatalG(absl::StrCat("select with ", n, " cases (limit ", kMaxSelectCases, ")"));
  int default_index = -1;
  // Poll order: a random permutation of the cases with non-nil channels.
  int order_buf[64];
  ChanCore* lock_buf[64];
  Sudog* sudog_buf[16];  // in wait records taken in pass 2, or in `local`
  Sudog local_buf[16];
  std::unique_ptr<int[]> order_heap;
  std::unique_ptr<ChanCore*[]> lock_heap;
  std::unique_ptr<Sudog*[]> sudog_heap;
  std::unique_ptr<Sudog[]> local_heap;
  int* order = order_buf;
  ChanCore** locks = lock_buf;
  Sudog** sudogs = sudog_buf;
  Sudog* local = local_buf;
  if (n > 64) {
    order_heap.reset(new int[n]);
    lock_heap.reset(new ChanCore*[n]);
    order = order_heap.get();
    locks = lock_heap.get();
  }
  if (n > 16) {
    sudog_heap.reset(new Sudog*[n]);
    sudogs = sudog_heap.get();
  }
  int npoll = 0;
  for (int i = 0; i < n; ++i) {
    if (cases[i].dir == CaseDir::kDefault) {
      // Go rejects this at compile time; Select can only see it here.
      if (default_index >= 0) FatalG("multiple defaults in select");
      default_index = i;
      continue;
    }
    if (cases[i].chan == nullptr) continue;  // a nil channel is never ready
    int j = static_cast<int>(FastRandN(npoll + 1));
    order[npoll] = order[j];
    order[j] = i;
    npoll++;
  }
  // Lock order: distinct channels sorted by address.
  int nlocks = 0;
  for (int k = 0; k < npoll; ++k) locks[nlocks++] = cases[order[k]].chan;
  std::sort(locks, locks + nlocks);
  nlocks = static_cast<int>(std::unique(locks, locks + nlocks) - locks);
  auto lock_all = [&] {
    for (int k = 0; k < nlocks; ++k) locks[k]->lock.Lock();
  };
  SelectPark park{locks, nlocks};

  if (npoll == 0) {
    if (default_index >= 0) return default_index;
    BlockForever(WaitReason::kSelectNoCases);
  }

  // Pass 2 takes a Sudog per case with every channel lock held, so they are
  // found now: wait records reserved in the P's cache, or, on a plain thread
  // or for more cases than a cache batch, an array of this call's.
  P* record_p = WaitRecordP();
  if (npoll > kWaitRecordBatch) record_p = nullptr;
  if (record_p != nullptr) {
    WaitRecordReserve(record_p, npoll);
  } else if (npoll > 16) {
    local_heap.reset(new Sudog[npoll]);
    local = local_heap.get();
  }

  // Pass 1: is any case ready now?
  lock_all();
  for (int k = 0; k < npoll; ++k) {
    int i = order[k];
    ChanCore* c = cases[i].chan;
    G* to_ready = nullptr;
    bool done;
    bool received = false;
    if (cases[i].dir == CaseDir::kSend) {
      if (c->closed_) {
        UnlockAll(nullptr, &park);
        FatalG("send on closed channel");
      }
      done = TrySendLocked(c, cases[i].elem, &to_ready);
    } else {
      done = TryRecvLocked</*kIntoRaw=*/true>(c, scratch, &received, &to_ready);
    }
    if (done) {
      if (cases[i].dir == CaseDir::kRecv) *chosen = {c->ops_, received};
      UnlockAll(nullptr, &park);
      if (to_ready != nullptr) Ready(to_ready);
      return i;
    }
  }
  if (default_index >= 0) {
    UnlockAll(nullptr, &park);
    return default_index;
  }

  // Pass 2: queue on every channel and park. Each channel is referenced
  // until pass 3 has dequeued from it: the last handle to one may be dropped
  // while this goroutine waits (another channel wakes it), and pass 3 must
  // not unlink from freed memory.
  for (int k = 0; k < nlocks; ++k) ChanRef(locks[k]);
  G* g = CurrentG();
  g->select_done.store(0, std::memory_order_relaxed);
  g->param = nullptr;
  for (int k = 0; k < npoll; ++k) {
    int i = order[k];
    Sudog* s = sudogs[k] = record_p != nullptr ? new (WaitRecordAlloc(record_p)) Sudog{} : &(local[k] = Sudog{});
    s->g = g;
    s->chan = cases[i].chan;
    s->case_index = i;
    if (cases[i].dir == CaseDir::kSend) {
      s->elem = cases[i].elem;
      s->chan->sendq.Push(s);
    } else {
      s->elem = scratch;
      s->into_raw = true;
      s->chan->recvq.Push(s);
    }
  }
  Park(WaitReason::kSelect, UnlockAll, &park);

  // Pass 3: the winner was dequeued by its channel; dequeue the others.
  auto* winner = static_cast<Sudog*>(g->param);
  g->param = nullptr;
  if (winner == nullptr) Fatal("select: woken without a winning case");
  const int won = winner->case_index;
  const bool success = winner->success;
  const ElemOps* won_ops = winner->chan->ops_;  // this Select's reference keeps the channel here
  lock_all();
  for (int k = 0; k < npoll; ++k) {
    Sudog* s = sudogs[k];
    if (s == winner) continue;
    if (cases[s->case_index].dir == CaseDir::kSend) {
      s->chan->sendq.Remove(s);
    } else {
      s->chan->recvq.Remove(s);
    }
  }
  UnlockAll(nullptr, &park);
  for (int k = 0; k < nlocks; ++k) ChanUnref(locks[k]);
  if (record_p != nullptr) {
    for (int k = 0; k < npoll; ++k) {
      sudogs[k]->~Sudog();
      WaitRecordFree(sudogs[k]);
    }
  }
  if (cases[won].dir == CaseDir::kRecv) {
    *chosen = {won_ops, success};
  } else if (!success) {
    FatalG("send on closed channel");
  }
  return won;
}

}  // namespace

int SelectImpl(SelectCaseRep* cases, int n) {
  // Receive cases receive into scratch, found before any lock is taken.
  size_t scratch_size = 0;
  size_t scratch_align = 1;
  for (int i = 0; i < n; ++i) {
    if (cases[i].dir != CaseDir::kRecv || cases[i].chan == nullptr) continue;
    scratch_size = std::max(scratch_size, cases[i].chan->ops_->size);
    scratch_align = std::max(scratch_align, cases[i].chan->ops_->align);
  }
  RecvScratch scratch(scratch_size, scratch_align);
  ChosenRecv chosen;
  const int i = SelectInRuntime(cases, n, scratch.get(), &chosen);
  // The target's old value is destroyed by the program's code, which may
  // block, call goro or be preempted: outside the runtime.
  if (chosen.ops != nullptr) AssignRecvTarget(chosen.ops, cases[i].elem, scratch.get(), chosen.received);
  return i;
}

}  // namespace goro::internal
