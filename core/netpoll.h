// The network poller's per-fd state (core/netpoll.cc, core/io.cc).
#ifndef GORO_CORE_NETPOLL_H_
#define GORO_CORE_NETPOLL_H_

#include <sys/epoll.h>

#include <algorithm>
#include <cstdint>

#include "core/lock.h"
#include "core/runtime.h"

namespace goro::internal {

struct PollDesc {
  // The fd's registration (`state`), or what Register says.
  enum class Registration : uint8_t {
    // Not registered: the next operation registers the fd (and finds out
    // which of the next two it is).
    kUnknown,
    // In the epoll set, tagged PollTag(fd, seq), and non-blocking.
    kPolled,
    // epoll refused it (a regular file or a directory): operations on it
    // run in a marked blocking region.
    kNotPollable,
    // A standard stream (fd 0 to 2) still holding the file it held when the
    // runtime started, blocking and not a socket: shared with other
    // processes, so not made non-blocking (NoteStandardStreams). Operations
    // run in a marked blocking region, after poll(2) when they have a
    // deadline.
    kBlockingStream,
    // io::Close is closing the fd: from CloseLocked (which ended its seq and
    // took it out of epoll) until its close(2) has returned
    // (FinishCloseLocked). The number may hold the file being closed, which
    // must not be added to epoll again - close(2) would drop the entry and
    // leave kPolled for a number in no epoll set - or, once close(2) has
    // freed it (it does so before it returns), a new file. Register cannot
    // tell them apart, so it waits for FinishCloseLocked.
    kClosing,
    // Only returned by Register, never stored: epoll_ctl failed for another
    // reason than the kind of file (errno in *error: ENOSPC, ENOMEM) ...
    kFailed,
    // ... not an open fd ...
    kBadFd,
    // ... or no longer one: Register found the number being closed, and
    // then free (the operation gets CancelledError, like one that was
    // parked on the fd).
    kClosed,
  };

  // What an operation learns of the file when it registers: `seq`, and the
  // kind noted at registration (see `socket` and `tcp` below).
  struct File {
    uint64_t seq = 0;
    bool socket = false;
    bool tcp = false;
  };
  // Adds fd to epoll (and makes it non-blocking) if not done yet; says how
  // the fd is to be waited on, and sets *file to the current registration
  // (and *error, for kFailed). A registration in force is read without the
  // lock (`published`).
  // While io::Close is closing the fd (kClosing), parks the caller
  // (goroutine or plain thread; its deadline does not apply) until the
  // close is done, unless the number is free already (kClosed at once).
  Registration Register(int fd, File* file, int* error);
  // With `lock` held: ends the fd's current `seq`, deregisters it, sets
  // kClosing and returns its waiters (made runnable) as a list through
  // G::sched_link. io::Close then closes the fd and calls FinishCloseLocked.
  G* CloseLocked(int fd);
  // With `lock` held, after the close(2) that followed CloseLocked returned
  // (whatever it returned: Linux frees the number even on EINTR):
  // `closing_seq` is the seq CloseLocked set. Unless another io::Close of
  // the number has begun since (it finishes the job), sets kUnknown and
  // returns the operations that Register parked meanwhile (made runnable)
  // as a list through G::sched_link.
  G* FinishCloseLocked(uint64_t closing_seq);
  // For a number the kernel has just handed out (accept4 returned it): a
  // registration still recorded for it is of a file closed with plain
  // close(2), not io::Close. Forgets it as io::Close would have (new seq,
  // waiters woken with CancelledError), so that the new file is registered
  // afresh instead of taken for a file epoll no longer watches. Returns the
  // waiters (made runnable) as a list through G::sched_link.
  G* ForgetStale();

  // After a short read of a TCP socket: unless the peer hung up (or an error
  // or urgent data was reported), the next io::Read waits for an edge first.
  // No lock: the poller sets hup and rready together under the lock, so a
  // hup this misses comes with an rready that the wait finds (a wait that
  // took that rready already took the lock after the poller, and hup is
  // seen).
  void MarkDrained() {
    if (!hup.load(std::memory_order_relaxed)) drained.store(true, std::memory_order_relaxed);
  }

  // With `lock` held: whether a registration is in force (the fast path of
  // Register; what ForgetStale forgets).
  bool RegisteredLocked() const {
    return state == Registration::kPolled || state == Registration::kNotPollable ||
           state == Registration::kBlockingStream;
  }
  // With `lock` held, after any change of `state`, `seq`, `socket` or
  // `tcp`: publishes them for Register's fast path.
  void PublishLocked();
  // With `lock` held: ends the current `seq` and returns its waiters (made
  // runnable) as a list through G::sched_link, those waiting for a turn too.
  G* EndSeqLocked();

  // Turns, Go's fdMutex: one operation per direction at a time. Read,
  // Accept and WaitReadable take kReadOps; Write, Connect and WaitWritable
  // kWriteOps. So two Writes never interleave their bytes, and several
  // goroutines may Accept on one listener; the others wait their turn in
  // order of arrival, each with its own deadline, and io::Close of the file
  // ends their wait (kClosed). An uncontended turn is one CAS to take and
  // one to give back.
  enum OpDir { kReadOps = 0, kWriteOps = 1 };
  static constexpr uint64_t TurnState(uint64_t file_seq, uint64_t x) { return file_seq << 2 | x; }
  enum class OpTurn { kMine, kDeadline, kClosed };
  // deadline_ns: 0 for none, -1 for one already passed (the turn is then
  // taken only if free).
  OpTurn AcquireOps(OpDir dir, uint64_t file_seq, int64_t deadline_ns);
  // Gives back the turn that AcquireOps gave the operation on file_seq.
  void ReleaseOps(OpDir dir, uint64_t file_seq);
  struct OpWaiter;  // core/netpoll.cc
  struct OpQueue {
    // TurnState(seq, x), x being 0: free; 1: taken; 2: taken, and goroutines
    // may wait in the queue (a release then takes the lock and hands the
    // turn to the first). A turn belongs to one file: EndSeqLocked frees it
    // for the next one under the number, since its holder may never give it
    // back (a Read of a blocking stdin, in read(2) until someone writes),
    // and a late release by the old file's holder finds another seq and does
    // nothing. Under lock its seq is always `seq`.
    std::atomic<uint64_t> state{0};
    OpWaiter* head = nullptr;  // guarded by lock
    OpWaiter* tail = nullptr;
  };

  SpinLock lock;
  // The registration in force, packed (PublishLocked): 0 while there is none
  // (kUnknown, kClosing). Register reads it without the lock; one load gives
  // the state, seq and kind of one registration, where three reads of the
  // fields below could mix a closed file's with a new one's.
  std::atomic<uint64_t> published{0};
  // Everything below is guarded by lock.
  Registration state = Registration::kUnknown;  // never kBadFd or kClosed
  // Which file under this fd number: io::Close bumps it (like Go's
  // pollDesc.fdseq). An operation notes it when it registers the fd and
  // compares it whenever it takes the lock again, always after a wait: a
  // different value means its file was closed (CancelledError), even if the
  // number has been reused and registered again since - Linux hands out the
  // lowest free number, so the next socket() or accept() may well get it.
  uint64_t seq = 0;
  bool rready = false;  // readiness latched from an edge-triggered event
  bool wready = false;
  // A socket (getsockopt does not say ENOTSOCK), noted when the fd is
  // registered: io::Write sends on it with send(MSG_NOSIGNAL), and writes
  // anything else (a pipe, an eventfd, a tty) with write(2) straight away,
  // not after a send that says ENOTSOCK - two system calls per chunk.
  bool socket = false;
  // A TCP socket: a read that returns less than asked for has emptied the
  // receive queue, and anything that arrives later raises a new edge.
  bool tcp = false;
  // The peer hung up, an error or urgent data was reported: a short read may
  // leave something queued that raises no further edge. Written under lock;
  // MarkDrained reads it without.
  std::atomic<bool> hup{false};
  // Set by MarkDrained after a short read of a TCP socket; taken by the next
  // io::Read (without the lock), which then waits for an edge instead of
  // trying the read first.
  std::atomic<bool> drained{false};
  // The goroutine waiting to read / write, if any. Set under lock by the
  // waiter; claimed with an exchange (or CAS) by whoever wakes it - the poller,
  // io::Close, or the waiter's deadline timer, which may not take the lock
  // (it runs under a timer lock) - so exactly one of them readies it.
  std::atomic<G*> rg{nullptr};
  std::atomic<G*> wg{nullptr};
  // Operations that Register parked while kClosing, linked through
  // G::sched_link; taken by FinishCloseLocked.
  G* closing_waiters = nullptr;
  OpQueue ops[2];  // indexed by OpDir
};

// Makes a claimed waiter runnable: onto `list` (through G::sched_link), or
// for a plain thread's stand-in, wakes the thread at once.
void TakeWaiter(std::atomic<G*>& slot, G** list);

// How many fd numbers the poller's table covers: a larger fd cannot be
// waited on (io operations say InvalidArgument), but io::Close closes it.
inline constexpr int kMaxPollFds = 1 << 22;

// A wait of ns (0 or more) as a poll(2) or epoll_wait timeout: whole
// milliseconds, rounded up so that it does not end early, at most 2^30.
inline int TimeoutMillis(int64_t ns) { return static_cast<int>(std::min<int64_t>((ns + 999999) / 1000000, 1 << 30)); }

// The PollDesc of fd (never freed), or nullptr for a negative fd or one of
// kMaxPollFds or more.
PollDesc* PollDescFor(int fd);

// What a registration's epoll_event.data carries: the fd number and the low
// 41 bits of the PollDesc's seq (Go tags its pollDesc pointer with fdseq the
// same way). An event that epoll_wait returned before io::Close but that is
// handled after the number was registered again for another file carries
// the old seq, and is dropped instead of marking the new file ready.
inline constexpr int kPollTagFdBits = 23;
static_assert(kMaxPollFds < (1 << kPollTagFdBits), "the fd field must also hold the break tag");
inline uint64_t PollTag(int fd, uint64_t seq) {
  return seq << kPollTagFdBits | static_cast<uint64_t>(fd);
}

// Handles n events returned by epoll_wait: marks the fds ready and returns
// their waiters (made runnable) as a list through G::sched_link. `blocking`:
// the events came from a blocking epoll_wait, which alone takes
// NetpollBreak's token.
G* NetpollHandle(const epoll_event* events, int n, bool blocking);

// Whether the poller's timeouts are to the nanosecond (epoll_pwait2), or
// whole milliseconds since the kernel refused it.
bool NetpollPreciseTimeouts();

}  // namespace goro::internal

#endif  // GORO_CORE_NETPOLL_H_
