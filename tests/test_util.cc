#include "test_util.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace goro_test {

goro::Options TestOptions() {
  goro::Options opts;
  opts.max_procs = 2;
  return opts;
}

namespace {

std::string CurrentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "<no test>";
  return absl::StrCat(info->test_suite_name(), ".", info->name());
}

}  // namespace

Watchdog::Watchdog(absl::Duration limit, std::string what) {
  std::string name = CurrentTestName();
  thread_ = std::thread([this, limit, name = std::move(name), what = std::move(what)] {
    if (done_.WaitForNotificationWithTimeout(limit)) return;
    std::string msg = absl::StrCat("goro_test watchdog: ", name, " did not finish within ",
                                   absl::FormatDuration(limit), what.empty() ? "" : " (",
                                   what, what.empty() ? "" : ")", "; ending the process\n");
    // write(2) so that nothing (a held stdio lock in a stuck thread) can block it.
    ssize_t unused = write(STDERR_FILENO, msg.data(), msg.size());
    (void)unused;
    // Ask the runtime for its goroutine dump (SIGQUIT), then make sure we die.
    kill(getpid(), SIGQUIT);
    sleep(3);
    std::abort();
  });
}

Watchdog::~Watchdog() {
  done_.Notify();
  thread_.join();
}

void RunBounded(absl::AnyInvocable<void() &&> fn, absl::Duration limit) {
  Watchdog dog(limit, "goro::Run did not return");
  goro::Run(std::move(fn), TestOptions());
}

void StartRuntime() {
  Watchdog dog(kLimit, "starting the runtime");
  goro::Run([] {}, TestOptions());
}

void GoAndWait(absl::AnyInvocable<void() &&> fn, absl::Duration limit) {
  Watchdog dog(limit, "goroutine started with goro::Go did not return");
  absl::Notification done;
  goro::Go([&done, fn = std::move(fn)]() mutable {
    std::move(fn)();
    done.Notify();
  });
  done.WaitForNotification();
}

void Pause(absl::Duration d) {
  if (goro::GoroutineId() != 0) {
    goro::SleepFor(d);
  } else {
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(d));
  }
}

bool Eventually(const std::function<bool()>& cond, absl::Duration limit) {
  auto start = Now();
  while (!cond()) {
    if (Since(start) > limit) return cond();
    Pause(absl::Milliseconds(1));
  }
  return true;
}

int64_t ThreadId() { return static_cast<int64_t>(syscall(SYS_gettid)); }

int QueueSignalToThisThread(int sig, void* value) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sig;
  si.si_code = SI_QUEUE;
  si.si_pid = getpid();
  si.si_uid = getuid();
  si.si_value.sival_ptr = value;
  return syscall(SYS_rt_tgsigqueueinfo, getpid(), ThreadId(), sig, &si) == 0 ? 0 : errno;
}

void Spin(absl::Duration d) {
  auto start = Now();
  while (Since(start) < d) {
  }
}

void PrintStats(const char* when) {
  goro::Stats s = goro::GetStats();
  fprintf(stderr,
          "%s: handoffs=%llu preempt_signals_sent=%llu async_preemptions=%llu "
          "cooperative_preemptions=%llu threads=%d live=%lld\n",
          when, U(s.handoffs), U(s.preempt_signals_sent), U(s.async_preemptions),
          U(s.cooperative_preemptions), s.threads, static_cast<long long>(s.goroutines_live));
}

}  // namespace goro_test
