#include "core/env.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/fatal.h"

namespace goro::internal {

namespace {

// A day: a longer period would print nothing in most runs, and ms * 10^6 (the
// period in ns, which sysmon adds to a time) could overflow an int64_t.
constexpr int64_t kMaxSchedtraceMs = int64_t{24} * 60 * 60 * 1000;

void Warn(absl::string_view what) { WriteStderr(absl::StrCat("goro: ", what, "\n")); }

}  // namespace

EnvSettings ParseEnvironment(const char* maxprocs, const char* debug) {
  EnvSettings s;
  if (maxprocs != nullptr && *maxprocs != '\0') {
    int n = 0;
    if (!absl::SimpleAtoi(maxprocs, &n) || n < 1 || n > kMaxProcsLimit) {
      Warn(absl::StrCat("ignoring GOROMAXPROCS=\"", maxprocs, "\": want an integer from 1 to ",
                        kMaxProcsLimit, "; using the default"));
    } else {
      s.max_procs = n;
    }
  }
  if (debug == nullptr) return s;
  // As in Go's GODEBUG, a key given more than once takes its last good value;
  // a bad one is ignored. Warnings wait for the end of the list, so that each
  // says which value of its key is used in the end.
  std::vector<std::pair<absl::string_view, absl::string_view>> used;  // key, last good value
  struct Warning {
    std::string text;
    absl::string_view key;  // empty: no "; using ..." tail
  };
  std::vector<Warning> warnings;
  for (absl::string_view item : absl::StrSplit(debug, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::string_view key = kv.first, value = kv.second;
    auto good = [&] {
      auto it = std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == key; });
      if (it != used.end()) {
        it->second = value;
      } else {
        used.emplace_back(key, value);
      }
    };
    auto bad = [&](absl::string_view want) {
      warnings.push_back({absl::StrCat("ignoring GORODEBUG ", key, "=\"", value, "\": want ", want), key});
    };
    // A 0-or-1 key: sets *flag to the value, or warns.
    auto boolean = [&](bool* flag) {
      if (value == "0" || value == "1") {
        *flag = value == "1";
        good();
      } else {
        bad("0 or 1");
      }
    };
    if (key == "asyncpreemptoff") {
      boolean(&s.async_preempt_off);
    } else if (key == "timeslice") {
      absl::Duration d;
      if (absl::ParseDuration(value, &d) && d >= kMinTimeSlice && d <= absl::Seconds(10)) {
        s.time_slice = d;
        good();
      } else {
        bad("a duration from 50us to 10s, such as 10ms or 200us");
      }
    } else if (key == "schedtrace") {
      int64_t ms = 0;
      if (absl::SimpleAtoi(value, &ms) && ms >= 0 && ms <= kMaxSchedtraceMs) {
        s.schedtrace_ms = ms;
        good();
      } else {
        bad(absl::StrCat("a number of milliseconds from 0 to ", kMaxSchedtraceMs, " (a day)"));
      }
    } else if (key == "sigquitdump") {
      boolean(&s.sigquit_dump);
    } else if (key == "scheddetail") {
      boolean(&s.scheddetail);
    } else {
      warnings.push_back({absl::StrCat("ignoring unknown GORODEBUG key \"", key,
                                       "\" (known: asyncpreemptoff, timeslice, schedtrace, scheddetail, sigquitdump)"),
                          absl::string_view()});
    }
  }
  for (const Warning& w : warnings) {
    if (w.key.empty()) {
      Warn(w.text);
      continue;
    }
    auto it = std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == w.key; });
    Warn(absl::StrCat(w.text, "; using ",
                      it != used.end() ? absl::StrCat(w.key, "=", it->second) : std::string("the default")));
  }
  return s;
}

EnvSettings ReadEnvironment() {
  return ParseEnvironment(std::getenv("GOROMAXPROCS"), std::getenv("GORODEBUG"));
}

namespace {

// Why `sig` cannot be the preemption signal, or "" if it can. It can be a
// signal with no meaning of its own: SIGURG and SIGWINCH (ignored by
// default), SIGUSR1 and SIGUSR2, or a real-time signal. Not one that the
// system, the terminal or other programs send for a purpose: goro's handler
// would stand between the signal and what it is for (SIGINT and SIGTERM
// were accepted, and Ctrl-C and kill then did nothing), and a handler the
// program installs for it later would replace goro's. A foreign signal of an
// accepted kind goes to the program's previous handler, or gets its default
// action (signals/preempt_handler.cc).
std::string PreemptSignalProblem(int sig) {
  if (sig < 1 || sig > SIGRTMAX) return absl::StrCat("not a signal number (1 to ", SIGRTMAX, ")");
  if (sig > 31 && sig < SIGRTMIN) return "glibc uses it for its threads";
  if (sig >= SIGRTMIN) return "";
  switch (sig) {
    case SIGURG:
    case SIGWINCH:
    case SIGUSR1:
    case SIGUSR2:
      return "";
    case SIGKILL:
    case SIGSTOP:
      return "it cannot be caught";
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
    case SIGABRT:
      return "goro reports crashes with it";
    case SIGQUIT:
      return "goro's goroutine dump uses it";
    case SIGHUP:
    case SIGINT:
    case SIGTERM:
      return "it asks the process to end (the terminal, the shell and kill send it)";
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGCONT:
      return "job control uses it";
    case SIGCHLD:
      return "the kernel reports child processes with it";
    case SIGPIPE:
      return "a write to a closed pipe or socket raises it";
    case SIGALRM:
    case SIGVTALRM:
    case SIGPROF:
      return "timers send it (alarm, setitimer, profilers)";
    default:  // SIGIO, SIGXCPU, SIGXFSZ, SIGSYS, SIGPWR, SIGSTKFLT
      return "the kernel sends it for its own purpose";
  }
}

}  // namespace

Options CheckOptions(Options opts) {
  if (opts.time_slice < kMinTimeSlice) {
    // Zero or less means neither "never" nor "always"; it is more likely an
    // absl::Duration left unset than a wish.
    Fatal(absl::StrCat("Options::time_slice=", absl::FormatDuration(opts.time_slice), ": want at least ",
                       absl::FormatDuration(kMinTimeSlice)));
  }
  if (opts.stack_size > kMaxStackSize) {
    Fatal(absl::StrCat("Options::stack_size=", opts.stack_size, ": want at most ", kMaxStackSize, " (1 GiB)"));
  }
  if (opts.stack_size < kMinStackSize) opts.stack_size = kMinStackSize;
  if (std::string why = PreemptSignalProblem(opts.preempt_signal); !why.empty()) {
    const char* name = opts.preempt_signal > 0 && opts.preempt_signal < NSIG ? sigabbrev_np(opts.preempt_signal) : nullptr;
    Fatal(absl::StrCat("Options::preempt_signal=", opts.preempt_signal, name != nullptr ? absl::StrCat(" (SIG", name, ")") : "",
                       ": ", why, "; want a signal nothing else in the process uses, such as SIGURG (23, the default), "
                       "SIGUSR1, SIGUSR2 or a real-time signal"));
  }
  if (opts.max_procs < 0) {
    Warn(absl::StrCat("ignoring Options::max_procs=", opts.max_procs, ": want 0 (the default) or 1 to ",
                      kMaxProcsLimit, "; using the default"));
    opts.max_procs = 0;
  } else if (opts.max_procs > kMaxProcsLimit) {
    Warn(absl::StrCat("Options::max_procs=", opts.max_procs, ": want at most ", kMaxProcsLimit, "; using ",
                      kMaxProcsLimit));
    opts.max_procs = kMaxProcsLimit;
  }
  return opts;
}

namespace {

std::string Show(int v) { return absl::StrCat(v); }
std::string Show(size_t v) { return absl::StrCat(v); }
std::string Show(bool v) { return v ? "true" : "false"; }
std::string Show(absl::Duration v) { return absl::FormatDuration(v); }

}  // namespace

void WarnIgnoredOptions(const Options& asked, const Options& started_with, const Options& in_force) {
  static const Options kDefaults;
  std::vector<std::string> ignored, used;
  auto check = [&](absl::string_view name, const auto& a, const auto& d, const auto& s, const auto& f) {
    if (a == d || a == s || a == f) return;
    ignored.push_back(absl::StrCat("Options::", name, "=", Show(a)));
    used.push_back(absl::StrCat(name, "=", Show(f)));
  };
  check("max_procs", asked.max_procs, kDefaults.max_procs, started_with.max_procs, in_force.max_procs);
  check("time_slice", asked.time_slice, kDefaults.time_slice, started_with.time_slice, in_force.time_slice);
  check("async_preemption", asked.async_preemption, kDefaults.async_preemption, started_with.async_preemption,
        in_force.async_preemption);
  check("stack_size", asked.stack_size, kDefaults.stack_size, started_with.stack_size, in_force.stack_size);
  check("preempt_signal", asked.preempt_signal, kDefaults.preempt_signal, started_with.preempt_signal,
        in_force.preempt_signal);
  if (ignored.empty()) return;
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  Warn(absl::StrCat("ignoring ", absl::StrJoin(ignored, ", "),
                    " passed to Run: the runtime has already started; using ", absl::StrJoin(used, ", ")));
}

}  // namespace goro::internal
