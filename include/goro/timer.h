// goro/timer.h: timer channels.
#ifndef GORO_TIMER_H_
#define GORO_TIMER_H_

#include "absl/time/time.h"
#include "goro/chan.h"

namespace goro {

// Returns a channel that receives the current time once, after at least `d`
// (Go's time.After). Use it in Select for timeouts. The channel has a buffer of
// one, so nobody has to receive from it.
Chan<absl::Time> After(absl::Duration d);

}  // namespace goro

#endif  // GORO_TIMER_H_
