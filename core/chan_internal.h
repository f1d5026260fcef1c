// Channel operations the runtime itself uses.
#ifndef GORO_CORE_CHAN_INTERNAL_H_
#define GORO_CORE_CHAN_INTERNAL_H_

#include "goro/chan.h"

namespace goro::internal {

// Sends *elem if that can be done without blocking and the channel is open;
// never fatal, never blocks. Safe on g0 (used by timer callbacks).
bool ChanOffer(ChanCore* c, void* elem);

// Whether someone holds c's lock (a test seam: it tries to take it).
bool ChanLockHeldForTest(ChanCore* c);

}  // namespace goro::internal

#endif  // GORO_CORE_CHAN_INTERNAL_H_
