// Passing a signal on to the handler installed before goro's.
#ifndef GORO_SIGNALS_FORWARD_H_
#define GORO_SIGNALS_FORWARD_H_

#include <signal.h>
#include <unistd.h>

namespace goro::internal {

// Calls the handler described by `prev` (async-signal-safe). Returns false if
// there is none to call (SIG_DFL or SIG_IGN): the caller decides what the
// default action means for its signal.
inline bool CallPreviousHandler(const struct sigaction& prev, int sig, siginfo_t* info, void* uctx) {
  // The kernel reads SIG_DFL and SIG_IGN whatever the flags say; sa_handler
  // and sa_sigaction share their storage.
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) return false;
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, info, uctx);
  } else {
    prev.sa_handler(sig);
  }
  return true;
}

// Whether the default action (SIG_DFL) of `sig` ends the process: of every
// signal but those it ignores (SIGCHLD, SIGURG, SIGWINCH), SIGCONT and the
// stop signals (signal(7)). Async-signal-safe.
inline bool DefaultActionEndsProcess(int sig) {
  switch (sig) {
    case SIGCHLD:
    case SIGURG:
    case SIGWINCH:
    case SIGCONT:
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
      return false;
    default:
      return true;
  }
}

// Ends the process by `sig`'s default action, from inside a handler for it
// (as Go's dieFromSignal): SIG_DFL, the signal unblocked on this thread, and
// sent to it again. Async-signal-safe. For a signal whose default action
// ends the process.
[[noreturn]] inline void DieFromSignal(int sig) {
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(2);  // not reached
}

}  // namespace goro::internal

#endif  // GORO_SIGNALS_FORWARD_H_
