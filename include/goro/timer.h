// goro/timer.h: timer channels.
#ifndef GORO_TIMER_H_
#define GORO_TIMER_H_

#include "absl/time/time.h"
#include "goro/chan.h"

namespace goro {

// Returns a channel that receives the current time once, after at least `d`
// (Go's time.After). Use it in Select for timeouts. The channel has a buffer of
// one, so nobody has to receive from it.
//
// The timer cannot be stopped: it, its channel and its entry in the timer
// heap (a few hundred bytes) live until it fires, as Go's time.After did
// before Go 1.23. A loop that selects on After(1h) and usually finishes
// early piles them up for an hour; so does the deadlock check, which stays
// silent while any timer is pending. For a timeout inside a loop, prefer a
// deadline made once outside it, or a short duration.
Chan<absl::Time> After(absl::Duration d);

}  // namespace goro

#endif  // GORO_TIMER_H_
