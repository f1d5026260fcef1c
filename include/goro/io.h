// goro/io.h: blocking-style I/O on sockets, pipes and eventfds that parks the
// goroutine instead of its thread (Go's network poller).
//
// Every call blocks only the calling goroutine until the operation can make
// progress or `deadline` passes. The file descriptor is registered with the
// runtime's epoll instance (edge-triggered) on first use and set to
// O_NONBLOCK; after that, use goro::io::Close to close it, so that goroutines
// blocked on it wake up with an error instead of waiting forever. A number
// closed with plain close(2) keeps its registration: io::Accept notices when
// it hands the number out again, but a file that socket(), pipe() or open()
// puts there is taken for the old one, which epoll no longer watches, and
// its waits may never end. Regular
// files, which epoll cannot watch, are read and written in a marked blocking
// region (goro::Syscall) instead. So are the blocking standard streams, as
// in Go: fds 0 to 2 while they hold the files they held when the runtime
// started, unless those are sockets. They are usually shared with other
// processes (the shell's terminal), which would see O_NONBLOCK too. Their
// deadlines are kept by poll(2) in that region (unless another process
// takes the data, or fills the room, first), but for one case: a deadline
// on a Write to a terminal is not kept. poll(2) says that a terminal has
// room, not how much, and a write(2) that needs more waits until the
// terminal has taken all of it, past the deadline - for good if nobody
// reads the terminal. io::Close does not wake a goroutine blocked in that
// region on them.
//
// Operations take turns, as Go's do (its fdMutex), on every kind of file,
// polled or not: one Read, Accept or WaitReadable at a time per fd, and one
// Write, Connect or WaitWritable; the others wait in order of arrival, each
// until its own deadline (io::Close ends their wait). So the bytes of
// concurrent Writes are never interleaved, and several goroutines may
// Accept on one listener. Turns belong to the file, not to its number: a
// file that gets the number of one closed while an operation on it was
// still under way (a Read of a blocking standard stream, which io::Close
// cannot wake) starts with its turns free.
//
// Errors are absl::Status values, never crashes:
//   DeadlineExceededError  the deadline passed first;
//   CancelledError         the fd was closed with io::Close while waiting;
//   FailedPreconditionError (EBADF)  not an open file descriptor, or not
//                          open for the operation (a pipe's write end
//                          read);
//   InvalidArgumentError   a negative fd, or one beyond the poller's table
//                          (4M fds);
//   UnavailableError       the peer reset the connection (ECONNRESET), or a
//                          write found nobody to receive it (EPIPE: the
//                          peer closed, a socket never connected, a pipe
//                          with no reader);
//   otherwise the errno, mapped with absl::ErrnoToStatus.
// Read returns 0 bytes at end of file, as read(2) does.
//
// A deadline already passed fails the operation (after its turn) with
// DeadlineExceededError before any system call, as in Go, even when data,
// room or a connection is there: a Read leaves the data for the next one,
// and a Connect starts no connection. A Connect that fails later, while the
// connection is under way (its deadline, io::Close), may leave it to complete
// in the background: close the socket.
#ifndef GORO_IO_H_
#define GORO_IO_H_

#include <sys/socket.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace goro::io {

// Reads up to n bytes; returns how many (0 at end of file). With n == 0 it
// returns 0 once it has its turn, without waiting for data or looking at the
// deadline, as Go's does.
absl::StatusOr<size_t> Read(int fd, void* buf, size_t n, absl::Time deadline = absl::InfiniteFuture());
// Writes all n bytes (completing partial writes); returns n, or an error with
// some bytes possibly written. If `written` is given, *written is the number
// of bytes written, on success and on error (Go's n from a Write that
// failed): after a deadline, the rest of a stream write can be resumed from
// there. With n == 0 it returns 0 once it has its turn (if the deadline has
// not passed), without waiting for room.
absl::StatusOr<size_t> Write(int fd, const void* buf, size_t n,
                             absl::Time deadline = absl::InfiniteFuture(), size_t* written = nullptr);
// Accepts a connection; the new fd is non-blocking and close-on-exec.
absl::StatusOr<int> Accept(int listen_fd, absl::Time deadline = absl::InfiniteFuture());
// Connects fd (a socket) to addr, waiting for the connection to complete.
// OK means connected. A listener that cannot take the connection now (EAGAIN:
// a Unix-domain listener's queue is full, or no local port is free) is an
// error, UnavailableError, as in Go; connect again with a new socket.
absl::Status Connect(int fd, const sockaddr* addr, socklen_t len,
                     absl::Time deadline = absl::InfiniteFuture());
// Waits until fd is readable / writable.
absl::Status WaitReadable(int fd, absl::Time deadline);
absl::Status WaitWritable(int fd, absl::Time deadline);
// Wakes every goroutine waiting on fd (they get CancelledError), removes it
// from the poller and closes it. An operation that starts on fd while Close
// runs gets CancelledError once Close is done - or, if another file has the
// number by then, works on that file. Close does not wait for operations
// already under way: see docs/syscalls.md before closing an fd that another
// goroutine may still be using.
absl::Status Close(int fd);

}  // namespace goro::io

#endif  // GORO_IO_H_
