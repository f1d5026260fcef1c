// ThreadSanitizer builds only (cmake/Sanitize.cmake adds this file).
//
// Debian's Abseil is a shared library built without -fsanitize=thread: TSan
// sees neither the atomics inside absl::Mutex nor those inside
// absl::Notification, so it would report every variable they guard as a data
// race. This file interposes the out-of-line members that goro and its tests
// call (the executable's definition wins over the library's), runs the real
// ones found with dlsym(RTLD_NEXT), and tells TSan about the happens-before
// edges they make: an unlock or a Notify releases, a lock or a completed wait
// acquires. It is a model of the synchronisation only; TSan's lock-order
// checks do not see these mutexes.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

#define GORO_STRINGIFY2(x) #x
#define GORO_STRINGIFY(x) GORO_STRINGIFY2(x)

// The library's definition of absl::<ns>::<rest>, where `rest` is the
// mangled tail after the inline namespace ("5Mutex4LockEv"); `konst` for
// const members.
void* Real(const char* rest, bool konst = false) {
  const char* ns = GORO_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  char name[256];
  snprintf(name, sizeof name, "_ZN%s4absl%zu%s%s", konst ? "K" : "", strlen(ns), ns, rest);
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    fprintf(stderr, "goro: tsan_absl: %s not found in Abseil\n", name);
    abort();
  }
  return f;
}

template <typename Fn>
Fn RealFn(const char* rest, bool konst = false) {
  return reinterpret_cast<Fn>(Real(rest, konst));
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  bool ok = real(this);
  if (ok) __tsan_acquire(this);
  return ok;
}

void Mutex::Unlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

// Await releases the mutex while it waits and evaluates the condition with
// the mutex held again - in this thread, or in an unlocking one - inside the
// library, before returning. A wrapping condition brackets each evaluation
// with an acquire and a release, as if by its own lock and unlock: what the
// condition reads is ordered after the last unlock's writes, and before the
// next lock's, which may follow an evaluation without any visible unlock.
void Mutex::Await(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  struct Wrapped {
    Mutex* mu;
    const Condition* cond;
  } w{this, &cond};
  const Condition bracketed(
      +[](Wrapped* w) {
        __tsan_acquire(w->mu);
        bool holds = w->cond->Eval();
        __tsan_release(w->mu);
        return holds;
      },
      &w);
  __tsan_release(this);
  real(this, bracketed);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Notification::Notify() {
  static auto real = RealFn<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real =
      RealFn<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto real = RealFn<bool (*)(const Notification*, absl::Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  bool ok = real(this, timeout);
  if (ok) __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  static auto real = RealFn<bool (*)(const Notification*, absl::Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  bool ok = real(this, deadline);
  if (ok) __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

ABSL_NAMESPACE_END
}  // namespace absl
