// Passing a signal on to the handler installed before goro's.
#ifndef GORO_SIGNALS_FORWARD_H_
#define GORO_SIGNALS_FORWARD_H_

#include <signal.h>

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

}  // namespace goro::internal

#endif  // GORO_SIGNALS_FORWARD_H_
