// goro/trace.h: an event trace of the scheduler, for Perfetto or chrome://tracing.
//
//   goro::Run([] {
//     if (absl::Status s = goro::trace::Start("/tmp/sched.json"); !s.ok()) { ... }
//     work();
//     if (absl::Status s = goro::trace::Stop(); !s.ok()) { ... }
//   });
//
// While a trace runs, the scheduler records what happens to goroutines: which
// goroutine created which, when each runs on which processor (P) and why it
// stopped (the wait reason of a block, a yield, a preemption, its end), who
// made a blocked goroutine runnable again, work stealing, blocking system
// calls and the hand-off of a P away from one. The file is Chrome's
// trace-event JSON ({"traceEvents":[...]}, one event per line): open it at
// https://ui.perfetto.dev or in chrome://tracing, where each P is a row
// ("P0", "P1", ...) and each run of a goroutine a slice named "G<id>".
// docs/trace.md lists the events and what they mean.
//
// Recording is cheap (tens of nanoseconds per event, into per-P buffers; a
// background thread formats and writes them) and costs nothing measurable
// while no trace runs. Setting GOROTRACE=path traces the whole program, from
// the start of the runtime to exit.
#ifndef GORO_TRACE_H_
#define GORO_TRACE_H_

#include <string>

#include "absl/status/status.h"

namespace goro::trace {

// Starts writing a trace to the file at `path` (created or truncated). The
// runtime must have started (call it from a goroutine, or after the first
// goro::Run or goro::Go). Safe while goroutines run on every P; goroutines
// already running get a slice from the start of the trace.
// Errors: FailedPrecondition if a trace is already running or the runtime
// has not started; the errno's status (e.g. NotFound, PermissionDenied) if
// the file cannot be created.
absl::Status Start(const std::string& path);

// Stops the trace started by Start, writes the rest of the file and closes
// it; returns when the file is complete. Safe while goroutines run.
// Errors: FailedPrecondition if no trace is running; the errno's status if
// writing or closing the file failed (the trace is stopped all the same).
absl::Status Stop();

}  // namespace goro::trace

#endif  // GORO_TRACE_H_
