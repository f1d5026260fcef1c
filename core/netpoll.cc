// The network poller: one edge-triggered epoll instance for the process.
//
// Each file descriptor used through goro::io gets a PollDesc, registered with
// epoll for input and output (EPOLLET) on first use. A goroutine that finds
// the fd not ready parks on the PollDesc (one reader and one writer at a time,
// like Go's fdMutex-serialised netFD); an epoll event marks the fd ready and
// readies the parked goroutine. Because events are edge-triggered the
// readiness is latched in the PollDesc until the next operation consumes it.
//
// Who calls epoll_wait:
//   - FindRunnable, without blocking, when its queues are empty;
//   - the M that sleeps until the earliest timer (core/proc.cc) blocks in it
//     instead of on its futex whenever goroutines wait on I/O, with the
//     timer as the timeout; NetpollBreak (an eventfd) interrupts it when an
//     earlier timer is added, and only a blocking poll takes its token;
//   - sysmon, if nobody has polled for 10 ms.
// A goroutine that parks on I/O leaves its M in FindRunnable, which polls or
// becomes that sleeper. A plain thread that waits on I/O leaves no M behind,
// and while the runtime is idle (every M in the idle list, sysmon asleep
// until a P has work) nobody would poll at all: so it calls WakeNetpoller,
// which wakes the sleeper if it sleeps on its futex, or else an idle M with
// an idle P (WakeP), which becomes the polling sleeper. Go's wakeNetPoller
// does the same for a new timer.
// sched.last_poll is 0 while an M is blocked in epoll_wait, else the time of
// the last poll.
//
// PollDesc objects are never freed: they are indexed by fd number in a
// two-level table whose chunks are allocated on demand and published with a
// CAS, so lookups take no lock. io::Close bumps a PollDesc's sequence number,
// wakes its waiters and deregisters the fd, then closes it; reopening the
// same number starts afresh, and a waiter of the closed file still sees that
// its file is gone. Until close(2) has returned the PollDesc says kClosing,
// and an operation that registers the number meanwhile waits for that: had
// it added the file being closed to epoll, close(2) would have dropped the
// entry and left the PollDesc "polled" for a number in no epoll set - the
// operation never woken, the next file to get the number never registered.
// Each registration's epoll data is the fd number tagged with the sequence
// number (PollTag), so an event of the closed file that a poller had already
// fetched is dropped rather than taken for the new file's readiness.
#include "core/netpoll.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/fatal.h"
#include "core/trace.h"

namespace goro::internal {

namespace {

constexpr int kChunkBits = 10;
constexpr int kChunkSize = 1 << kChunkBits;
constexpr int kMaxChunks = kMaxPollFds / kChunkSize;

std::atomic<PollDesc*> chunks[kMaxChunks];

int epfd = -1;
int breakfd = -1;
std::atomic<bool> inited{false};
std::atomic<bool> break_pending{false};
std::atomic<bool> pwait2_works{true};  // false once epoll_pwait2 said ENOSYS or EPERM
absl::Mutex init_mu(absl::kConstInit);

// The epoll_event data for the break eventfd: an fd field no PollDesc has.
constexpr uint64_t kBreakTag = kMaxPollFds;

void InitLocked() {
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) Fatal(absl::StrCat("netpoll: epoll_create1 failed: errno ", errno));
  breakfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (breakfd < 0) Fatal(absl::StrCat("netpoll: eventfd failed: errno ", errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kBreakTag;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, breakfd, &ev) != 0) Fatal("netpoll: cannot watch its eventfd");
  sched.last_poll.store(Nanotime(), std::memory_order_relaxed);
  inited.store(true, std::memory_order_release);
}

void EnsureInit() {
  if (inited.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&init_mu);
  if (!inited.load(std::memory_order_relaxed)) InitLocked();
}

}  // namespace

namespace {

// Makes g, parked on a PollDesc, runnable: onto `list` (through
// G::sched_link), or for a plain thread's stand-in, wakes the thread now.
void WakeParked(G* g, G** list) {
  if (g->external) {
    Ready(g);  // a plain thread: wake it now; it never goes on a run queue
    return;
  }
  GStatus want = GStatus::kWaiting;
  if (!g->status.compare_exchange_strong(want, GStatus::kRunnable, std::memory_order_acq_rel)) {
    Fatal(absl::StrCat("netpoll: goroutine ", g->id, " is not waiting"));
  }
  trace::GoUnblock(g);
  g->sched_link = *list;
  *list = g;
}

// Register's Park commit: g is on closing_waiters; the lock is let go only
// once g is parked, so FinishCloseLocked, which takes it, sees g parked.
bool CommitCloseWait(G* g, void* arg) {
  static_cast<PollDesc*>(arg)->lock.Unlock();
  return true;
}

}  // namespace

void TakeWaiter(std::atomic<G*>& slot, G** list) {
  G* g = slot.exchange(nullptr, std::memory_order_acq_rel);
  if (g != nullptr) WakeParked(g, list);
}

// The files fds 0 to 2 held when the runtime started (NoteStandardStreams).
struct StreamFile {
  bool open = false;
  dev_t dev = 0;
  ino_t ino = 0;
};
StreamFile standard_streams[3];

void NoteStandardStreams() {
  for (int fd = 0; fd <= STDERR_FILENO; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0) standard_streams[fd] = {true, st.st_dev, st.st_ino};
  }
}

namespace {

// Whether fd (0 to 2) still holds the file it held when the runtime started,
// and that file is not a socket: a socket, or a file the program opened after
// closing a standard stream, is the program's own, and is polled.
bool IsInheritedStream(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISSOCK(st.st_mode)) return false;
  const StreamFile& f = standard_streams[fd];
  return f.open && f.dev == st.st_dev && f.ino == st.st_ino;
}

// Whether fd is a socket, and its protocol (*protocol, 0 if unknown). It is
// taken for one unless the kernel says it is not (ENOTSOCK): a kernel
// without SO_PROTOCOL (before 2.6.32) refuses the question with ENOPROTOOPT.
bool SocketProtocol(int fd, int* protocol) {
  *protocol = 0;
  socklen_t len = sizeof *protocol;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, protocol, &len) == 0) return true;
  *protocol = 0;
  return Errno() != ENOTSOCK;
}

}  // namespace

bool NetpollInited() { return inited.load(std::memory_order_acquire); }

PollDesc* PollDescFor(int fd) {
  if (fd < 0 || fd >= kMaxPollFds) return nullptr;
  EnsureInit();
  std::atomic<PollDesc*>& slot = chunks[fd >> kChunkBits];
  PollDesc* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    auto* fresh = new PollDesc[kChunkSize];
    if (slot.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
    } else {
      delete[] fresh;  // someone else published one first
    }
  }
  return &chunk[fd & (kChunkSize - 1)];
}

namespace {
// PollDesc::published: seq, then tcp, socket and the state in two bits, its
// index here (0: no registration in force, the whole word 0).
constexpr PollDesc::Registration kPublishedStates[] = {
    PollDesc::Registration::kUnknown, PollDesc::Registration::kPolled, PollDesc::Registration::kNotPollable,
    PollDesc::Registration::kBlockingStream};
constexpr uint64_t kPublishedSocket = 1 << 2;
constexpr uint64_t kPublishedTcp = 1 << 3;
constexpr int kPublishedSeqShift = 4;
}  // namespace

void PollDesc::PublishLocked() {
  uint64_t word = 0;
  for (uint64_t code = 1; code < std::size(kPublishedStates); ++code) {
    if (state == kPublishedStates[code]) {
      word = code | (seq << kPublishedSeqShift) | (socket ? kPublishedSocket : 0) | (tcp ? kPublishedTcp : 0);
    }
  }
  published.store(word, std::memory_order_release);
}

PollDesc::Registration PollDesc::Register(int fd, File* file, int* error) {
  // Release by PublishLocked, after the registration's fields were set: an
  // operation on another thread sees the fd non-blocking and in epoll.
  if (const uint64_t w = published.load(std::memory_order_acquire); w != 0) [[likely]] {
    *file = File{w >> kPublishedSeqShift, (w & kPublishedSocket) != 0, (w & kPublishedTcp) != 0};
    return kPublishedStates[w & 3];
  }
  lock.Lock();
  if (RegisteredLocked()) {
    *file = File{seq, socket, tcp};
    Registration r = state;
    lock.Unlock();
    return r;
  }
  // kClosing: io::Close is closing the fd. A free number means the file is
  // gone. A taken one holds either the file being closed (close(2) has not
  // got that far) or a new file (close(2) has freed the number and not yet
  // returned, or io::Close has not yet said so): wait until io::Close is
  // done. Registering the file now would be undone by close(2) if it is the
  // old one; failing the operation would fail one on a new file that merely
  // got the number early - close(2) may take long after freeing it (a
  // socket with SO_LINGER, a file system's flush), and then so does this.
  bool waited = false;
  while (state == Registration::kClosing) {
    if (fcntl(fd, F_GETFD) < 0) {
      lock.Unlock();
      return Registration::kClosed;
    }
    G* g = CurrentG();
    g->sched_link = closing_waiters;
    closing_waiters = g;
    // Counted with the goroutines parked on I/O, as something that can be
    // woken: the closer may be a plain thread that the deadlock check
    // cannot see.
    sched.netpoll_waiters.fetch_add(1);
    Park(WaitReason::kIOClose, CommitCloseWait, this);
    sched.netpoll_waiters.fetch_sub(1);
    lock.Lock();
    waited = true;
  }
  // After a wait the operation's file may be the one closed: a number found
  // free means kClosed. One found taken is registered: a new file (or, if
  // the operation was on the closed file, a new file that got its number -
  // an operation under way when its fd is closed may act on a reused
  // number, as docs/syscalls.md says).
  const Registration bad = waited ? Registration::kClosed : Registration::kBadFd;
  *file = File{seq, false, false};
  if (state != Registration::kUnknown) {  // registered by another operation while this one waited
    *file = File{seq, socket, tcp};
    Registration r = state;
    lock.Unlock();
    return r;
  }
  rready = wready = false;
  hup.store(false, std::memory_order_relaxed);
  drained.store(false, std::memory_order_relaxed);
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) {
    lock.Unlock();
    return bad;
  }
  if (fd <= STDERR_FILENO && (flags & O_NONBLOCK) == 0 && IsInheritedStream(fd)) {
    // A blocking standard stream is usually shared with other processes (the
    // shell's terminal): O_NONBLOCK, a flag of the shared open file, would
    // stay set for them, during the run and after it. As Go's os.NewFile
    // does, such a stream is waited on in a marked blocking region instead.
    state = Registration::kBlockingStream;
    socket = tcp = false;
    *file = File{seq, false, false};
    PublishLocked();
    lock.Unlock();
    return Registration::kBlockingStream;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET;
  ev.data.u64 = PollTag(fd, seq);
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
    if ((flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    state = Registration::kPolled;
    int protocol = 0;
    socket = SocketProtocol(fd, &protocol);
    tcp = protocol == IPPROTO_TCP;
  } else if (const int err = Errno(); err == EPERM) {  // Errno(): this goroutine may have parked above
    state = Registration::kNotPollable;  // a regular file or a directory
    socket = tcp = false;
  } else if (err == EEXIST && epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0) {
    // Already in the epoll set (epoll keys an entry on the open file and the
    // number): it now carries this seq's tag.
    state = Registration::kPolled;
    int protocol = 0;
    socket = SocketProtocol(fd, &protocol);
    tcp = false;
  } else {
    lock.Unlock();
    if (err == EBADF || err == EEXIST) return bad;
    *error = err;  // ENOSPC (max_user_watches), ENOMEM, ELOOP...
    return Registration::kFailed;
  }
  *file = File{seq, socket, tcp};
  PublishLocked();
  Registration r = state;
  lock.Unlock();
  return r;
}

namespace {
enum : int { kOpWaiting, kOpGranted, kOpTimedOut, kOpClosed };
}  // namespace

// A goroutine (or plain thread) waiting for a turn, on its own stack.
struct PollDesc::OpWaiter {
  PollDesc* pd = nullptr;
  G* g = nullptr;
  // kOpWaiting until exactly one of these claims it with a CAS: ReleaseOps
  // (granted), the deadline timer (timed out; it may not take pd->lock, as it
  // runs under a timer lock), EndSeqLocked (closed).
  std::atomic<int> outcome{kOpWaiting};
  OpWaiter* next = nullptr;
  bool queued = true;  // guarded by pd->lock: whoever takes it out clears it
  Timer timer;
};

namespace {

bool CommitOpWait(G* g, void* arg) {
  auto* w = static_cast<PollDesc::OpWaiter*>(arg);
  PollDesc* pd = w->pd;  // nothing of w is read after AddTimer (see CommitIoWait)
  int64_t wake_at = w->timer.f != nullptr ? AddTimerQuietly(&w->timer) : 0;
  pd->lock.Unlock();
  if (wake_at != 0) WakeForTimer(wake_at);
  return true;
}

void OpDeadline(Timer* t) {
  auto* w = static_cast<PollDesc::OpWaiter*>(t->arg);
  G* g = w->g;
  int want = kOpWaiting;
  if (w->outcome.compare_exchange_strong(want, kOpTimedOut, std::memory_order_acq_rel)) Ready(g);
}

// With pd->lock held: the first waiter of q, taken out of the queue.
PollDesc::OpWaiter* PopOpWaiter(PollDesc::OpQueue& q) {
  PollDesc::OpWaiter* w = q.head;
  if (w == nullptr) return nullptr;
  q.head = w->next;
  if (q.head == nullptr) q.tail = nullptr;
  w->queued = false;
  return w;
}

}  // namespace

PollDesc::OpTurn PollDesc::AcquireOps(OpDir dir, uint64_t file_seq, int64_t deadline_ns) {
  OpQueue& q = ops[dir];
  uint64_t s = TurnState(file_seq, 0);
  if (q.state.compare_exchange_strong(s, TurnState(file_seq, 1), std::memory_order_acquire)) return OpTurn::kMine;
  lock.Lock();
  for (;;) {
    if (seq != file_seq) {
      lock.Unlock();
      return OpTurn::kClosed;
    }
    s = q.state.load(std::memory_order_relaxed);
    if (s == TurnState(seq, 0)) {
      if (q.state.compare_exchange_weak(s, TurnState(seq, 1), std::memory_order_acquire)) {
        lock.Unlock();
        return OpTurn::kMine;
      }
    } else if (s == TurnState(seq, 2) ||
               q.state.compare_exchange_weak(s, TurnState(seq, 2), std::memory_order_relaxed)) {
      break;  // taken, and ReleaseOps will look in the queue
    }
  }
  if (deadline_ns < 0 || (deadline_ns != 0 && Nanotime() >= deadline_ns)) {
    lock.Unlock();
    return OpTurn::kDeadline;
  }
  OpWaiter w;
  w.pd = this;
  w.g = CurrentG();
  if (deadline_ns != 0) {
    w.timer.when = deadline_ns;
    w.timer.f = OpDeadline;
    w.timer.arg = &w;
  }
  (q.tail != nullptr ? q.tail->next : q.head) = &w;
  q.tail = &w;
  // Counted with the goroutines parked on I/O: the holder of the turn, whose
  // release wakes this one, may be a plain thread the deadlock check cannot see.
  sched.netpoll_waiters.fetch_add(1);
  Park(dir == kReadOps ? WaitReason::kIORead : WaitReason::kIOWrite, CommitOpWait, &w);
  sched.netpoll_waiters.fetch_sub(1);
  if (w.timer.f != nullptr) DelTimer(&w.timer);  // afterwards OpDeadline is neither running nor pending
  lock.Lock();
  if (w.queued) {  // timed out: still in the queue
    OpWaiter** link = &q.head;
    OpWaiter* prev = nullptr;
    while (*link != &w) {
      prev = *link;
      link = &(*link)->next;
    }
    *link = w.next;
    if (q.tail == &w) q.tail = prev;
  }
  const int outcome = w.outcome.load(std::memory_order_acquire);
  const bool closed = seq != file_seq;
  lock.Unlock();
  if (outcome == kOpGranted) {
    // Granted, then closed before this ran: EndSeqLocked freed the turn.
    return closed ? OpTurn::kClosed : OpTurn::kMine;
  }
  return outcome == kOpTimedOut ? OpTurn::kDeadline : OpTurn::kClosed;
}

void PollDesc::ReleaseOps(OpDir dir, uint64_t file_seq) {
  OpQueue& q = ops[dir];
  uint64_t taken = TurnState(file_seq, 1);
  if (q.state.compare_exchange_strong(taken, TurnState(file_seq, 0), std::memory_order_release)) return;
  G* list = nullptr;
  lock.Lock();
  if (seq != file_seq) {  // the file was closed: its turn went with it (EndSeqLocked)
    lock.Unlock();
    return;
  }
  bool handed = false;
  while (OpWaiter* w = PopOpWaiter(q)) {
    G* g = w->g;  // w may be gone once the CAS succeeds and g runs
    int want = kOpWaiting;
    if (w->outcome.compare_exchange_strong(want, kOpGranted, std::memory_order_acq_rel)) {
      WakeParked(g, &list);
      handed = true;
      break;
    }
  }
  if (!handed) {
    q.state.store(TurnState(seq, 0), std::memory_order_release);
  } else if (q.head == nullptr) {
    q.state.store(TurnState(seq, 1), std::memory_order_relaxed);  // the next release needs no lock
  }
  lock.Unlock();
  InjectGList(list);
}

G* PollDesc::EndSeqLocked() {
  G* list = nullptr;
  ++seq;
  TakeWaiter(rg, &list);
  TakeWaiter(wg, &list);
  for (OpQueue& q : ops) {
    while (OpWaiter* w = PopOpWaiter(q)) {
      G* g = w->g;
      int want = kOpWaiting;
      if (w->outcome.compare_exchange_strong(want, kOpClosed, std::memory_order_acq_rel)) WakeParked(g, &list);
    }
    // Free for the next file, whoever holds it for this one.
    q.state.store(TurnState(seq, 0), std::memory_order_release);
  }
  return list;
}

G* PollDesc::CloseLocked(int fd) {
  G* list = EndSeqLocked();
  if (state == Registration::kPolled) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  state = Registration::kClosing;
  PublishLocked();
  return list;
}

G* PollDesc::ForgetStale() {
  G* list = nullptr;
  lock.Lock();
  if (RegisteredLocked()) {
    list = EndSeqLocked();
    // No EPOLL_CTL_DEL: epoll dropped the entry when the old file died, or,
    // if a duplicate keeps that file open, the entry's events carry the old
    // seq's tag and are dropped.
    state = Registration::kUnknown;
    PublishLocked();
  }
  lock.Unlock();
  return list;
}

G* PollDesc::FinishCloseLocked(uint64_t closing_seq) {
  if (seq != closing_seq) return nullptr;  // a later io::Close of the number is under way: it finishes
  if (state != Registration::kClosing) Fatal("netpoll: FinishCloseLocked: the fd is not being closed");
  state = Registration::kUnknown;
  PublishLocked();
  G* list = nullptr;
  while (G* g = closing_waiters) {
    closing_waiters = g->sched_link;
    WakeParked(g, &list);
  }
  return list;
}

G* Netpoll(int64_t timeout_ns) {
  if (!NetpollInited()) return nullptr;
  int timeout_ms;
  if (timeout_ns < 0) {
    timeout_ms = -1;
  } else if (timeout_ns == 0) {
    timeout_ms = 0;
  } else {
    timeout_ms = TimeoutMillis(timeout_ns);
  }
  if (timeout_ms != 0) sched.last_poll.store(0, std::memory_order_relaxed);
  epoll_event events[128];
  int n;
  do {
    if (timeout_ms > 0 && timeout_ns < (int64_t{1} << 30) * 1000000 && pwait2_works.load(std::memory_order_relaxed)) {
      // The timer sleeper waits here while goroutines wait on I/O: to the
      // nanosecond (Linux 5.11), not to the next whole millisecond, so that
      // a 300 us sleep beside an idle connection is not 1 ms late.
      timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
      n = epoll_pwait2(epfd, events, 128, &ts, nullptr);
      if (n < 0 && (errno == ENOSYS || errno == EPERM)) {  // an old kernel, or a seccomp filter
        pwait2_works.store(false, std::memory_order_relaxed);
        n = epoll_wait(epfd, events, 128, timeout_ms);
      }
    } else {
      n = epoll_wait(epfd, events, 128, timeout_ms);
    }
  } while (n < 0 && errno == EINTR && timeout_ms == 0);
  if (timeout_ms != 0) {
    sched.last_poll.store(Nanotime(), std::memory_order_relaxed);
  } else if (int64_t last = sched.last_poll.load(std::memory_order_relaxed); last != 0) {
    // Not over the 0 of an M blocked in epoll_wait meanwhile: the others
    // (FindRunnable, sysmon) look at it before polling, as Go's do.
    sched.last_poll.compare_exchange_strong(last, Nanotime(), std::memory_order_relaxed);
  }
  return NetpollHandle(events, n, /*blocking=*/timeout_ms != 0);
}

G* NetpollHandle(const epoll_event* events, int n, bool blocking) {
  G* list = nullptr;
  for (int i = 0; i < n; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag == kBreakTag) {
      // NetpollBreak's token is for the M blocked in epoll_wait: only a
      // blocking poll takes it, as in Go. A non-blocking one that took it
      // could do so after the write woke that M but before it looked; the
      // kernel would then find nothing for it and it would sleep on. Left
      // in place, the token (the eventfd is level-triggered) shows up in
      // every non-blocking poll until a blocking one takes it; they skip it.
      if (blocking) {
        uint64_t v;
        while (read(breakfd, &v, sizeof v) > 0) {
        }
        break_pending.store(false, std::memory_order_release);
      }
      continue;
    }
    int fd = static_cast<int>(tag & ((uint64_t{1} << kPollTagFdBits) - 1));
    PollDesc* pd = PollDescFor(fd);
    uint32_t ev = events[i].events;
    pd->lock.Lock();
    if (PollTag(fd, pd->seq) != tag || pd->state != PollDesc::Registration::kPolled) {
      pd->lock.Unlock();  // for a file closed since epoll_wait returned
      continue;
    }
    if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) pd->hup.store(true, std::memory_order_relaxed);
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) {
      pd->rready = true;
      TakeWaiter(pd->rg, &list);
    }
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
      pd->wready = true;
      TakeWaiter(pd->wg, &list);
    }
    pd->lock.Unlock();
  }
  return list;
}

bool NetpollPreciseTimeouts() { return pwait2_works.load(std::memory_order_relaxed); }

void NetpollBreak() {
  if (!NetpollInited()) return;
  bool expected = false;
  if (!break_pending.compare_exchange_strong(expected, true)) return;  // one is enough
  uint64_t one = 1;
  while (write(breakfd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

}  // namespace goro::internal
