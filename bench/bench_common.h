// bench/bench_common.h: pieces shared by goro_bench and goro_rss.
//
// Both programs report results as one JSON object per line on stdout, in the
// same shape as bench/go (gobench), so bench/report.py can read both:
//   {"impl":"goro","name":"yield","procs":1,"value":84.2,"unit":"ns/yield",...}
#ifndef GORO_BENCH_BENCH_COMMON_H_
#define GORO_BENCH_BENCH_COMMON_H_

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "goro/runtime.h"

namespace goro_bench {

[[noreturn]] inline void Die(const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// Removes every "--name=value" argument from argv and returns the last value
// ("" when absent). Run before benchmark::Initialize so that it does not
// complain about flags it does not know.
inline std::string TakeFlag(int* argc, char** argv, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  std::string value;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg.substr(0, prefix.size()) == prefix) {
      value = std::string(arg.substr(prefix.size()));
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return value;
}

// Removes "--name" (a boolean flag) from argv; returns whether it was there.
inline bool TakeBoolFlag(int* argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  bool seen = false;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (flag == argv[i]) {
      seen = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return seen;
}

// The number of Ps for this process: --procs=N, else $GOROMAXPROCS, else the
// CPUs it may run on (its affinity mask, as the runtime and Go count them),
// else the hardware concurrency. The result is always passed to the runtime
// explicitly in Options::max_procs.
inline int ChooseProcs(const std::string& flag_value, const char* prog) {
  int procs = 0;
  if (!flag_value.empty()) {
    if (!absl::SimpleAtoi(flag_value, &procs) || procs < 1) {
      Die(absl::StrFormat("%s: bad --procs=%s (want an integer >= 1)", prog, flag_value));
    }
    return procs;
  }
  if (const char* env = std::getenv("GOROMAXPROCS"); env != nullptr && *env != '\0') {
    if (!absl::SimpleAtoi(env, &procs) || procs < 1) {
      Die(absl::StrFormat("%s: bad GOROMAXPROCS=%s (want an integer >= 1)", prog, env));
    }
    return procs;
  }
  if (cpu_set_t set; sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  procs = static_cast<int>(std::thread::hardware_concurrency());
  return procs > 0 ? procs : 1;
}

// Checks, after the first Run, that the runtime really has `procs` Ps.
inline void CheckProcs(int procs, const char* prog) {
  const goro::Stats s = goro::GetStats();
  if (s.procs != procs) {
    Die(absl::StrFormat("%s: asked for %d procs, runtime reports %d", prog, procs, s.procs));
  }
}

// Minimal JSON string escaping for names and free text.
inline std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

struct Result {
  std::string name;
  int procs = 0;
  double value = 0;
  std::string unit;
  int64_t iters = 0;
  double cpu_value = -1;  // process CPU time per op in `unit` (all threads); <0: not measured
  std::string extra;  // free text, shown in the report's notes
  std::string error;  // non-empty: the workload failed
};

inline void Emit(const Result& r) {
  std::string line = absl::StrFormat(
      "{\"impl\":\"goro\",\"name\":%s,\"procs\":%d,\"value\":%.6g,\"unit\":%s,\"iters\":%d",
      JsonQuote(r.name), r.procs, r.value, JsonQuote(r.unit), r.iters);
  if (r.cpu_value >= 0) line += absl::StrFormat(",\"cpu_value\":%.6g", r.cpu_value);
  if (!r.extra.empty()) line += ",\"extra\":" + JsonQuote(r.extra);
  if (!r.error.empty()) line += ",\"error\":" + JsonQuote(r.error);
  line += "}\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

// A field of /proc/self/status in KiB ("VmRSS", "VmPTE", ...), or -1.
inline int64_t StatusKiB(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  const size_t len = std::strlen(field);
  int64_t value = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      long long v = 0;
      if (std::sscanf(line + len + 1, "%lld", &v) == 1) value = v;
      break;
    }
  }
  std::fclose(f);
  return value;
}

// Resident set size from /proc/self/statm (second field, in pages), in KiB.
inline int64_t RssKiB() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) Die("cannot open /proc/self/statm");
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) Die("cannot parse /proc/self/statm");
  static const long page = sysconf(_SC_PAGESIZE);
  return resident * page / 1024;
}

// A thread that ends the process with a clear message if one guarded section
// (one goro::Run of a benchmark) takes longer than a limit, so that a hang in
// the runtime shows up as a diagnosis instead of a stuck script.
class Watchdog {
 public:
  static void Start(double limit_seconds) {
    limit_ns_ = static_cast<int64_t>(limit_seconds * 1e9);
    std::thread([] { Loop(); }).detach();
  }
  static void Arm(const char* what) {
    what_.store(what, std::memory_order_relaxed);
    armed_at_ns_.store(NowNs(), std::memory_order_release);
  }
  static void Disarm() { armed_at_ns_.store(0, std::memory_order_release); }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static void Loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int64_t at = armed_at_ns_.load(std::memory_order_acquire);
      if (at == 0 || NowNs() - at < limit_ns_) continue;
      const goro::Stats s = goro::GetStats();
      std::fprintf(stderr,
                   "goro bench watchdog: %s has not finished after %.3g s; "
                   "stats: created=%llu live=%lld procs=%d threads=%d steals=%llu "
                   "handoffs=%llu async_preemptions=%llu cooperative_preemptions=%llu\n",
                   what_.load(std::memory_order_relaxed), limit_ns_ / 1e9,
                   static_cast<unsigned long long>(s.goroutines_created),
                   static_cast<long long>(s.goroutines_live), s.procs, s.threads,
                   static_cast<unsigned long long>(s.steals),
                   static_cast<unsigned long long>(s.handoffs),
                   static_cast<unsigned long long>(s.async_preemptions),
                   static_cast<unsigned long long>(s.cooperative_preemptions));
      std::fflush(stderr);
      std::abort();
    }
  }
  static inline int64_t limit_ns_ = 0;
  static inline std::atomic<int64_t> armed_at_ns_{0};
  static inline std::atomic<const char*> what_{""};
};

}  // namespace goro_bench

#endif  // GORO_BENCH_BENCH_COMMON_H_
