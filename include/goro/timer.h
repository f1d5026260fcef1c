// goro/timer.h: timer channels: After, Timer and Ticker.
#ifndef GORO_TIMER_H_
#define GORO_TIMER_H_

#include <memory>

#include "absl/time/time.h"
#include "goro/chan.h"

namespace goro {

namespace internal {
struct TimerState;  // a Timer's or Ticker's record, channel and lock (core/timer.cc)
}  // namespace internal

// Returns a channel that receives the current time once, after at least `d`
// (Go's time.After). Use it in Select for timeouts, as Go's
// `case <-time.After(d)`: Select(OnRecv(c, &v), OnRecv(After(d), &t)). The
// channel has a buffer of one, so nobody has to receive from it.
//
// The timer cannot be stopped: it, its channel and its entry in the timer
// heap (a few hundred bytes) live until it fires, as Go's time.After did
// before Go 1.23. A loop that selects on After(1h) and usually finishes
// early piles them up for an hour; so does the deadlock check, which stays
// silent while any timer is pending. For a timeout inside a loop, use a
// Timer (below), which can be stopped and reset.
Chan<absl::Time> After(absl::Duration d);

// A one-shot timer that can be stopped (Go's time.Timer, with Go 1.23's
// guarantees): C() receives the current time once, at least `d` after the
// Timer was made or last Reset, unless Stop or Reset comes first. Once Stop
// or Reset has returned, no time from before it can be received from C(). A
// stopped timer leaves the timer heap at once, so a timeout in a loop costs
// nothing after the loop moves on:
//
//   goro::Timer timeout(absl::Seconds(1));
//   for (;;) {
//     std::optional<Msg> m;
//     std::optional<absl::Time> t;
//     if (goro::Select(goro::OnRecv(in, &m), goro::OnRecv(timeout.C(), &t)) == 1) break;
//     Handle(*m);
//     timeout.Reset(absl::Seconds(1));
//   }
//
// Stop and Reset may be called from any goroutine or thread, concurrently;
// the destructor stops the timer. C() may outlive the Timer (it then never
// receives). Starts the runtime, with the defaults, if it has not started.
class Timer {
 public:
  explicit Timer(absl::Duration d);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // The channel the time is sent on (buffer of one). Assigning to it only
  // changes what C() returns: the timer still sends on, and Stop and Reset
  // still drain, the channel it was made with.
  Chan<absl::Time>& C() { return ch_; }

  // Stops the timer. Returns true if that kept a time from being received:
  // the timer had not fired, or its time was still in C()'s buffer (it is
  // dropped). False if it had been received, or the timer was stopped.
  bool Stop();
  // Stops the timer and starts it again, to fire `d` from now (at once if
  // `d` <= 0). Returns what Stop would have.
  bool Reset(absl::Duration d);

 private:
  std::unique_ptr<internal::TimerState> state_;  // pinned: the timer heap points into it
  Chan<absl::Time> ch_{nullptr};  // C(): the state's channel, unless reassigned
};

// A ticker (Go's time.Ticker, with Go 1.23's guarantees): C() receives the
// current time every `d`, the first time `d` after the Ticker was made or
// last Reset. Ticks are due at exact multiples of `d` from then, and none
// comes early. The channel holds one tick: a receiver that falls behind
// finds the oldest tick it missed, and the ones after it are dropped, so
// ticks never pile up. Once Stop or Reset has returned, no tick from before
// it can be received. A `d` that is zero or negative is a fatal error
// naming the goroutine, as it is a panic in Go.
//
//   goro::Ticker tick(absl::Seconds(1));
//   for (;;) {
//     std::optional<absl::Time> t;
//     std::optional<Msg> m;
//     if (goro::Select(goro::OnRecv(tick.C(), &t), goro::OnRecv(in, &m)) == 0) Report();
//     ...
//   }
//
// Stop and Reset may be called from any goroutine or thread, concurrently;
// the destructor stops the ticker. C() may outlive the Ticker (it then never
// receives). Starts the runtime, with the defaults, if it has not started.
class Ticker {
 public:
  explicit Ticker(absl::Duration d);
  ~Ticker();
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // The channel the ticks are sent on (buffer of one); as Timer::C().
  Chan<absl::Time>& C() { return ch_; }

  // No more ticks; a tick in C()'s buffer is dropped. Stopping a stopped
  // Ticker does nothing.
  void Stop();
  // Stops the ticker and starts it again with period `d`, the first tick `d`
  // from now. Restarts a stopped Ticker.
  void Reset(absl::Duration d);

 private:
  std::unique_ptr<internal::TimerState> state_;  // pinned: the timer heap points into it
  Chan<absl::Time> ch_{nullptr};  // C(), as Timer's
};

}  // namespace goro

#endif  // GORO_TIMER_H_
