// goro::io (include/goro/io.h): I/O that parks the goroutine, not the thread.
//
// Each operation tries the system call first (the fd is non-blocking); on
// EAGAIN it waits on the fd's PollDesc (core/netpoll.h) until the poller
// reports readiness, io::Close wakes it, or its deadline timer fires, and
// tries again. After a short read of a TCP socket the next Read waits first
// (PollDesc::MarkDrained; docs/syscalls.md says when that is sound). Regular
// files, which epoll refuses, are read and written in a marked blocking
// region instead.
#include "goro/io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/netpoll.h"
#include "core/runtime.h"
#include "core/sanitizer.h"

namespace goro::internal {

namespace {

enum class Mode { kRead, kWrite };

// The system calls on files the poller watches, which never block. glibc's
// read(2), write(2) and send(2) are cancellation points: in a process with
// more than one thread (every goro program) each call turns asynchronous
// cancellation on and off around the system call, two atomic operations,
// 1.5% of an echo server's CPU. The raw call skips them. Nothing is lost: a
// cancellation there would unwind the M's stack, not the goroutine's.
// Sanitizer builds keep the libc calls, whose interceptors check the buffer
// (ASan) and make a pipe's write happen before its read (TSan).
#if defined(GORO_ASAN) || defined(GORO_TSAN)
ssize_t PolledRead(int fd, void* buf, size_t n) { return ::read(fd, buf, n); }
ssize_t PolledWrite(int fd, const void* buf, size_t n) { return ::write(fd, buf, n); }
ssize_t PolledSend(int fd, const void* buf, size_t n) { return ::send(fd, buf, n, MSG_NOSIGNAL); }
#else
ssize_t PolledRead(int fd, void* buf, size_t n) { return ::syscall(SYS_read, fd, buf, n); }
ssize_t PolledWrite(int fd, const void* buf, size_t n) { return ::syscall(SYS_write, fd, buf, n); }
ssize_t PolledSend(int fd, const void* buf, size_t n) {
  return ::syscall(SYS_sendto, fd, buf, n, MSG_NOSIGNAL, nullptr, 0);
}
#endif

int64_t DeadlineNanos(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return 0;
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return -1;  // already passed
  if (left > absl::Hours(24 * 365)) return 0;
  return Nanotime() + absl::ToInt64Nanoseconds(left);
}

absl::Status ErrnoStatus(int err, absl::string_view op, int fd) {
  std::string what = absl::StrCat(op, " on fd ", fd);
  switch (err) {
    case EBADF:
      // Also an open fd used the wrong way: a read of a pipe's write end.
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": bad file descriptor (not open, or not open for this operation)"));
    case EPIPE:
      // Also a socket that was never connected, or a pipe with no reader.
      return absl::UnavailableError(absl::StrCat(what, ": broken pipe (no peer to receive it)"));
    case ECONNRESET:
      return absl::UnavailableError(absl::StrCat(what, ": connection reset by peer"));
    default:
      return absl::ErrnoToStatus(err, what);
  }
}

absl::Status ClosedError(int fd) { return absl::CancelledError(absl::StrCat("fd ", fd, " was closed")); }
absl::Status DeadlineError(int fd) { return absl::DeadlineExceededError(absl::StrCat("fd ", fd, ": deadline passed")); }

struct IoWait {
  PollDesc* pd;
  std::atomic<G*>* slot;
  G* g;
  Timer timer;
  bool timed_out = false;
};

void IoDeadline(Timer* t) {
  auto* w = static_cast<IoWait*>(t->arg);
  G* expected = w->g;
  if (w->slot->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) {
    w->timed_out = true;
    Ready(w->g);
  }
}

bool CommitIoWait(G* g, void* arg) {
  auto* w = static_cast<IoWait*>(arg);
  // `w` is on the waiter's stack. Once the timer is added, another M may fire
  // it (the timer sleeper, a thief running this P's timers) and the waiter
  // may resume there and return: nothing of `w` is read after AddTimer.
  PollDesc* pd = w->pd;
  const bool external = g->external;
  // Lock order: the PollDesc lock, then a timer lock (the timer callback
  // takes no PollDesc lock; it may take sched.mu, which comes after both).
  // Added before unlocking, so the poller cannot wake the waiter before its
  // timer exists; the sleepers are told after, as sched.mu is never taken
  // under a PollDesc lock (WakeForTimer takes it, and may write the poller's
  // eventfd). docs/scheduler.md has the whole order.
  int64_t wake_at = w->timer.f != nullptr ? AddTimerQuietly(&w->timer) : 0;
  pd->lock.Unlock();
  if (wake_at != 0) WakeForTimer(wake_at);
  // A goroutine's M polls when it finds nothing else to run; a plain thread
  // has no M, so it sees to it that one polls. (A goroutine wired with
  // LockOSThread leaves its M too: HandoffP sees to that one.)
  if (external) WakeNetpoller();
  return true;
}

// Waits until fd may be ready for `mode`. Consumes a latched readiness.
// `seq` is the PollDesc's sequence number when the operation registered the
// fd: once it has changed, the file is closed, whatever now has its number.
absl::Status WaitIO(PollDesc* pd, int fd, uint64_t seq, Mode mode, int64_t deadline_ns) {
  if (deadline_ns < 0) return DeadlineError(fd);
  pd->lock.Lock();
  if (pd->seq != seq) {
    pd->lock.Unlock();
    return ClosedError(fd);
  }
  bool& ready = mode == Mode::kRead ? pd->rready : pd->wready;
  if (ready) {
    ready = false;
    pd->lock.Unlock();
    return absl::OkStatus();
  }
  if (deadline_ns != 0 && Nanotime() >= deadline_ns) {
    pd->lock.Unlock();
    return DeadlineError(fd);
  }
  std::atomic<G*>& slot = mode == Mode::kRead ? pd->rg : pd->wg;
  if (slot.load(std::memory_order_relaxed) != nullptr) {
    pd->lock.Unlock();
    return absl::FailedPreconditionError(absl::StrCat(
        "fd ", fd, ": another goroutine is already waiting to ", mode == Mode::kRead ? "read" : "write"));
  }
  IoWait w{pd, &slot, CurrentG(), {}};
  if (deadline_ns != 0) {
    w.timer.when = deadline_ns;
    w.timer.f = IoDeadline;
    w.timer.arg = &w;
  }
  slot.store(w.g, std::memory_order_release);
  sched.netpoll_waiters.fetch_add(1);
  Park(mode == Mode::kRead ? WaitReason::kIORead : WaitReason::kIOWrite, CommitIoWait, &w);
  sched.netpoll_waiters.fetch_sub(1);
  // Afterwards the deadline callback is neither running nor pending: `w` may go.
  if (w.timer.f != nullptr) DelTimer(&w.timer);
  if (w.timed_out) return DeadlineError(fd);
  // Woken by io::Close, the number may already belong to a file registered
  // since: its readiness latch is not ours to take.
  pd->lock.Lock();
  bool closed = pd->seq != seq;
  if (!closed) ready = false;
  pd->lock.Unlock();
  if (closed) return ClosedError(fd);
  return absl::OkStatus();
}

// WaitReadable / WaitWritable of a polled fd: waits until poll(2) finds it
// ready for `mode` (or hung up, or in error), and waits for an edge between
// looks. The latch alone would not do: one left from an edge whose data has
// been read since said "ready" for ever (a caller that waits, reads until
// EAGAIN and waits again spun), and a latch consumed by an earlier wait says
// nothing of data still queued from before it. poll(2) says what is queued
// now; an edge that comes after the latch is cleared sets it again, so the
// wait after a look that found nothing ends when something arrives.
absl::Status WaitReady(PollDesc* pd, int fd, uint64_t seq, Mode mode, int64_t deadline_ns) {
  for (;;) {
    pollfd pfd{fd, static_cast<short>(mode == Mode::kRead ? POLLIN : POLLOUT), 0};
    const int r = ::poll(&pfd, 1, 0);
    if (r > 0) {
      if (pfd.revents & POLLNVAL) return ErrnoStatus(EBADF, "poll", fd);
      // The next Read reads first: the edge this wait may have consumed
      // was what a Read after a short one would wait for.
      if (mode == Mode::kRead) pd->drained.store(false, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (r < 0) {
      if (const int err = Errno(); err != EINTR) return ErrnoStatus(err, "poll", fd);
      continue;
    }
    if (absl::Status s = WaitIO(pd, fd, seq, mode, deadline_ns); !s.ok()) return s;
  }
}

// The fd's turn for one direction (PollDesc::AcquireOps, Go's fdMutex),
// held for the rest of an operation on any kind of file.
class OpsTurn {
 public:
  OpsTurn() = default;
  OpsTurn(const OpsTurn&) = delete;
  OpsTurn& operator=(const OpsTurn&) = delete;
  ~OpsTurn() {
    if (pd_ != nullptr) pd_->ReleaseOps(dir_, seq_);
  }
  absl::Status Take(PollDesc* pd, int fd, uint64_t seq, PollDesc::OpDir dir, int64_t deadline_ns) {
    switch (pd->AcquireOps(dir, seq, deadline_ns)) {
      case PollDesc::OpTurn::kMine:
        pd_ = pd;
        dir_ = dir;
        seq_ = seq;
        return absl::OkStatus();
      case PollDesc::OpTurn::kDeadline:
        return DeadlineError(fd);
      case PollDesc::OpTurn::kClosed:
        break;
    }
    return ClosedError(fd);
  }

 private:
  PollDesc* pd_ = nullptr;
  PollDesc::OpDir dir_ = PollDesc::kReadOps;
  uint64_t seq_ = 0;  // the file's: a turn belongs to one file (PollDesc::OpQueue)
};

// For a blocking standard stream, which the poller does not watch: waits in
// a marked blocking region until poll(2) says the fd is ready for `events`
// (or hung up, or in error: the operation then says so), or the deadline
// passes.
absl::Status PollBlocking(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    // deadline_ns: 0 for none (callers fail one already passed first).
    const int timeout_ms = deadline_ns == 0 ? -1 : TimeoutMillis(std::max<int64_t>(deadline_ns - Nanotime(), 0));
    pollfd pfd{fd, events, 0};
    int r = RuntimeSyscall([&] { return ::poll(&pfd, 1, timeout_ms); });
    if (r > 0) return absl::OkStatus();
    if (r == 0 && Nanotime() >= deadline_ns) {
      return DeadlineError(fd);
    }
    if (r < 0) {
      if (const int err = Errno(); err != EINTR) return ErrnoStatus(err, "poll", fd);
    }
  }
}

// Looks up and registers fd; sets *pd and *file (the sequence number the
// operation passes to WaitIO, and the kind of file), or returns why not.
// *pollable: the poller watches it; *stream (if asked): it is not polled but
// may block, a blocking standard stream, whose deadlines PollBlocking keeps.
absl::Status Prepare(int fd, PollDesc** pd, PollDesc::File* file, bool* pollable, bool* stream = nullptr) {
  if (stream != nullptr) *stream = false;
  EnsureStarted(Options{});
  *pd = PollDescFor(fd);
  if (*pd == nullptr) {
    if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("fd ", fd, " is not a valid descriptor"));
    return absl::InvalidArgumentError(
        absl::StrCat("fd ", fd, " is beyond the poller's table (fds below ", kMaxPollFds, "): goro::io cannot wait on it"));
  }
  int error = 0;
  switch ((*pd)->Register(fd, file, &error)) {
    case PollDesc::Registration::kPolled:
      *pollable = true;
      return absl::OkStatus();
    case PollDesc::Registration::kNotPollable:
      *pollable = false;
      return absl::OkStatus();
    case PollDesc::Registration::kBlockingStream:
      *pollable = false;
      if (stream != nullptr) *stream = true;
      return absl::OkStatus();
    case PollDesc::Registration::kClosed:
      return ClosedError(fd);
    case PollDesc::Registration::kFailed:
      return ErrnoStatus(error, "epoll_ctl (adding it to the poller)", fd);
    default:
      return ErrnoStatus(EBADF, "register", fd);
  }
}

}  // namespace

}  // namespace goro::internal

namespace goro::io {

using internal::Mode;

absl::StatusOr<size_t> Read(int fd, void* buf, size_t n, absl::Time deadline) {
  internal::RuntimeScope scope;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable, stream;
  if (absl::Status s = internal::Prepare(fd, &pd, &file, &pollable, &stream); !s.ok()) return s;
  int64_t dl = internal::DeadlineNanos(deadline);
  // One Read at a time on every kind of file, as Go's os.File and netFD
  // take fdMutex: two readers of a blocking stream would otherwise both
  // find it readable, and the one that gets nothing block in read(2).
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, fd, file.seq, internal::PollDesc::kReadOps, dl); !s.ok()) return s;
  // A Read of nothing returns at once, as Go's does once it has its turn:
  // neither the wait after a short TCP read nor a stream's poll(2) below
  // may make it wait for data it would not take.
  if (n == 0) return size_t{0};
  if (dl < 0) return internal::DeadlineError(fd);
  if (!pollable) {
    // A process sharing the stream may take the data between poll(2) and
    // read(2); the read then waits for more, past the deadline.
    if (stream && dl != 0) {
      if (absl::Status s = internal::PollBlocking(fd, POLLIN, dl); !s.ok()) return s;
    }
    for (;;) {
      ssize_t r = internal::RuntimeSyscall([&] { return ::read(fd, buf, n); });
      if (r >= 0) return static_cast<size_t>(r);
      // EINTR: a signal of the program's, without SA_RESTART.
      if (const int err = internal::Errno(); err != EINTR) return internal::ErrnoStatus(err, "read", fd);
    }
  }
  if (pd->drained.load(std::memory_order_relaxed)) {
    // The last read emptied the queue: skip the read that would say EAGAIN.
    // A deadline that passes before the edge is fetched still gets its read
    // (below): the data may be there already.
    pd->drained.store(false, std::memory_order_relaxed);
    if (absl::Status s = internal::WaitIO(pd, fd, file.seq, Mode::kRead, dl); !s.ok() && !absl::IsDeadlineExceeded(s)) {
      return s;
    }
  }
  for (;;) {
    ssize_t r = internal::PolledRead(fd, buf, n);
    if (r >= 0) {
      if (r > 0 && static_cast<size_t>(r) < n && file.tcp) pd->MarkDrained();
      return static_cast<size_t>(r);
    }
    const int err = internal::Errno();
    if (err == EINTR) continue;
    if (err != EAGAIN) return internal::ErrnoStatus(err, "read", fd);
    if (absl::Status s = internal::WaitIO(pd, fd, file.seq, Mode::kRead, dl); !s.ok()) return s;
  }
}

absl::StatusOr<size_t> Write(int fd, const void* buf, size_t n, absl::Time deadline, size_t* written) {
  internal::RuntimeScope scope;
  size_t unreported;
  size_t& done = written != nullptr ? *written : unreported;  // what every return reports
  done = 0;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable, stream;
  if (absl::Status s = internal::Prepare(fd, &pd, &file, &pollable, &stream); !s.ok()) return s;
  const char* p = static_cast<const char*>(buf);
  int64_t dl = internal::DeadlineNanos(deadline);
  // One Write at a time on every kind of file: its bytes are not
  // interleaved with another's, and on a blocking stream the poll(2) before
  // each chunk is not raced by another writer filling the room it found.
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, fd, file.seq, internal::PollDesc::kWriteOps, dl); !s.ok()) return s;
  if (dl < 0) return internal::DeadlineError(fd);
  while (done < n) {
    ssize_t r;
    if (pollable) {
      // A socket that is not one any more (closed with plain close(2), the
      // number reused for a pipe) says ENOTSOCK: written as a pipe.
      r = file.socket ? internal::PolledSend(fd, p + done, n - done) : -1;
      if (!file.socket || (r < 0 && internal::Errno() == ENOTSOCK)) {
        internal::tls_in_io_write = true;  // a pipe: SIGPIPE becomes EPIPE
        r = internal::PolledWrite(fd, p + done, n - done);
        internal::tls_in_io_write = false;
      }
    } else {
      size_t chunk = n - done;
      if (stream && dl != 0) {
        // POLLOUT on a pipe promises room for PIPE_BUF bytes, no more: a
        // larger write would block until all of it fits, past the deadline.
        // On a terminal it promises some room, not how much: no size is
        // safe there, and the deadline is not kept (io.h).
        if (absl::Status s = internal::PollBlocking(fd, POLLOUT, dl); !s.ok()) return s;
        chunk = std::min<size_t>(chunk, PIPE_BUF);
      }
      r = internal::RuntimeSyscall([&] {
        internal::tls_in_io_write = true;
        ssize_t w = ::write(fd, p + done, chunk);
        internal::tls_in_io_write = false;
        return w;
      });
    }
    if (r >= 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    const int err = internal::Errno();
    if (err == EINTR) continue;
    if (err != EAGAIN || !pollable) return internal::ErrnoStatus(err, "write", fd);
    if (absl::Status s = internal::WaitIO(pd, fd, file.seq, Mode::kWrite, dl); !s.ok()) return s;
  }
  return done;
}

absl::StatusOr<int> Accept(int listen_fd, absl::Time deadline) {
  internal::RuntimeScope scope;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable;
  if (absl::Status s = internal::Prepare(listen_fd, &pd, &file, &pollable); !s.ok()) return s;
  int64_t dl = internal::DeadlineNanos(deadline);
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, listen_fd, file.seq, internal::PollDesc::kReadOps, dl); !s.ok()) return s;
  if (dl < 0) return internal::DeadlineError(listen_fd);
  for (;;) {
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      // A server that closed an earlier connection with plain close(2)
      // would otherwise find its number still registered, and wait on the
      // new connection for events that never come.
      if (internal::PollDesc* cpd = internal::PollDescFor(c)) internal::InjectGList(cpd->ForgetStale());
      return c;
    }
    const int err = internal::Errno();
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err != EAGAIN) return internal::ErrnoStatus(err, "accept", listen_fd);
    if (absl::Status s = internal::WaitIO(pd, listen_fd, file.seq, Mode::kRead, dl); !s.ok()) return s;
  }
}

absl::Status Connect(int fd, const sockaddr* addr, socklen_t len, absl::Time deadline) {
  internal::RuntimeScope scope;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable;
  if (absl::Status s = internal::Prepare(fd, &pd, &file, &pollable); !s.ok()) return s;
  int64_t dl = internal::DeadlineNanos(deadline);
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, fd, file.seq, internal::PollDesc::kWriteOps, dl); !s.ok()) return s;
  // Before connect(2), as Go's dialer: a connection started here would go on
  // in the background after the call had said it failed.
  if (dl < 0) return internal::DeadlineError(fd);
  int err = 0;
  bool retried = false;
  while (::connect(fd, addr, len) < 0) {
    err = internal::Errno();
    if (err != EINTR) break;
    retried = true;
  }
  if (err == 0) return absl::OkStatus();
  // A connect interrupted by a signal goes on in the background: asked
  // again, the kernel says it is under way (EALREADY) or done (EISCONN).
  if (retried && err == EISCONN) return absl::OkStatus();
  // EAGAIN is not "under way": no connection was started (a Unix-domain
  // listener's queue is full, or no local TCP port is free), as in Go.
  if (err != EINPROGRESS && err != EALREADY) return internal::ErrnoStatus(err, "connect", fd);
  // As Go's netFD.connect: a wake-up proves nothing by itself (a readiness
  // latched before the connect began, say), so ask the socket each time.
  for (;;) {
    if (absl::Status s = internal::WaitIO(pd, fd, file.seq, Mode::kWrite, dl); !s.ok()) return s;
    int so_error = 0;
    socklen_t elen = sizeof so_error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &elen) != 0) {
      return internal::ErrnoStatus(internal::Errno(), "getsockopt(SO_ERROR)", fd);
    }
    switch (so_error) {
      case EINPROGRESS:
      case EALREADY:
      case EINTR:
        continue;  // not done yet
      case EISCONN:
        return absl::OkStatus();
      case 0: {
        sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) return absl::OkStatus();
        if (const int gerr = internal::Errno(); gerr != ENOTCONN) return internal::ErrnoStatus(gerr, "getpeername", fd);
        continue;  // woken before the connection exists
      }
      default:
        return internal::ErrnoStatus(so_error, "connect", fd);
    }
  }
}

absl::Status WaitReadable(int fd, absl::Time deadline) {
  internal::RuntimeScope scope;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable, stream;
  if (absl::Status s = internal::Prepare(fd, &pd, &file, &pollable, &stream); !s.ok()) return s;
  const int64_t dl = internal::DeadlineNanos(deadline);
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, fd, file.seq, internal::PollDesc::kReadOps, dl); !s.ok()) return s;
  if (dl < 0) return internal::DeadlineError(fd);
  if (stream) return internal::PollBlocking(fd, POLLIN, dl);
  if (!pollable) return absl::OkStatus();  // regular files are always ready
  return internal::WaitReady(pd, fd, file.seq, Mode::kRead, dl);
}

absl::Status WaitWritable(int fd, absl::Time deadline) {
  internal::RuntimeScope scope;
  internal::PollDesc* pd;
  internal::PollDesc::File file;
  bool pollable, stream;
  if (absl::Status s = internal::Prepare(fd, &pd, &file, &pollable, &stream); !s.ok()) return s;
  const int64_t dl = internal::DeadlineNanos(deadline);
  internal::OpsTurn turn;
  if (absl::Status s = turn.Take(pd, fd, file.seq, internal::PollDesc::kWriteOps, dl); !s.ok()) return s;
  if (dl < 0) return internal::DeadlineError(fd);
  if (stream) return internal::PollBlocking(fd, POLLOUT, dl);
  if (!pollable) return absl::OkStatus();
  return internal::WaitReady(pd, fd, file.seq, Mode::kWrite, dl);
}

absl::Status Close(int fd) {
  internal::RuntimeScope scope;
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("fd ", fd, " is not a valid descriptor"));
  internal::PollDesc* pd = internal::PollDescFor(fd);
  if (pd == nullptr) {
    // Beyond the poller's table: never registered, so nobody waits on it.
    if (::close(fd) != 0) return internal::ErrnoStatus(internal::Errno(), "close", fd);
    return absl::OkStatus();
  }
  pd->lock.Lock();
  internal::G* waiters = pd->CloseLocked(fd);
  const uint64_t closing_seq = pd->seq;
  pd->lock.Unlock();
  internal::InjectGList(waiters);
  // Until FinishCloseLocked, an operation that registers the number waits
  // (PollDesc::kClosing): the file may still be this one, which close(2)
  // would take out of any epoll set it was added to meanwhile.
  const int r = ::close(fd);
  const int err = internal::Errno();
  pd->lock.Lock();
  waiters = pd->FinishCloseLocked(closing_seq);
  pd->lock.Unlock();
  internal::InjectGList(waiters);
  // Linux frees the number whatever close(2) says (EINTR included), so an
  // error is reported but nothing is retried.
  if (r != 0) return internal::ErrnoStatus(err, "close", fd);
  return absl::OkStatus();
}

}  // namespace goro::io
