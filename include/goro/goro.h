// goro/goro.h: the whole public API of goro.
#ifndef GORO_GORO_H_
#define GORO_GORO_H_

#include "goro/chan.h"
#include "goro/io.h"
#include "goro/preempt.h"
#include "goro/runtime.h"
#include "goro/sync.h"
#include "goro/syscall.h"
#include "goro/timer.h"
#include "goro/trace.h"

#endif  // GORO_GORO_H_
