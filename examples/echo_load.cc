// A load generator for echo servers: N concurrent loopback connections, each
// sending a message, waiting for the whole echo, checking every byte of it
// and sending the next (one message in flight per connection). Reports
// requests per second and the round-trip latency percentiles.
//
//   ./echo_load                                  # starts goro's echo server in-process
//   ./echo_load --server=127.0.0.1:7777          # drives a server that is already running
//   ./echo_load --server=7777 --conns=10000 --seconds=5
//   ./echo_load --client=epoll --threads=1       # plain threads + epoll instead of goroutines
//   ./echo_load --messages=1000 --conns=10       # a fixed message count per connection
//
// Two clients, same protocol and checks:
//   --client=goro   one goroutine per connection, blocked in goro::io::Write and
//                   goro::io::Read (the same code a user would write);
//   --client=epoll  --threads plain threads, each with its own epoll set and a
//                   share of the connections: the cheapest client per message,
//                   for when the server, not the client, is to be measured.
//
// Every message carries bytes computed from (connection, sequence number), so
// a byte lost, duplicated, reordered or crossed between connections is a
// mismatch. Any failure (mismatch, short or extra reply, connection closed or
// reset, no reply within --reply_timeout, the whole run hung) prints one line
// starting with "echo_load: FAIL" and exits with a non-zero status.
//
// Timing (time mode, --messages=0): all connections are opened first, then
// the clients run --warmup seconds unmeasured and --seconds measured; a
// message counts when its reply arrives inside the measured window. With
// --messages=M each connection sends M messages, all measured, and the run
// stops early after --seconds if they are not done.
//
// Loopback only: the server address must be 127.0.0.1. The soft limit on open
// files is raised to the hard limit at start. A bad flag value is one line on
// stderr (not a FAIL) and exit status 2.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "goro/goro.h"

ABSL_FLAG(std::string, server, "inproc",
          "\"inproc\" starts goro's echo server in this process; otherwise the server's "
          "address, 127.0.0.1:PORT or just PORT");
ABSL_FLAG(int, conns, 100, "concurrent connections");
ABSL_FLAG(int, size, 64, "bytes per message (1..4096)");
ABSL_FLAG(double, seconds, 3, "measured seconds (with --messages: the time limit)");
ABSL_FLAG(double, warmup, 0.5, "unmeasured seconds after the connections are open");
ABSL_FLAG(int64_t, messages, 0, "messages per connection; 0 runs for --seconds instead");
ABSL_FLAG(std::string, client, "goro", "goro (a goroutine per connection) or epoll (plain threads)");
ABSL_FLAG(int, threads, 1, "threads of the epoll client");
ABSL_FLAG(int, procs, 0, "goro Ps for the goro client and the in-process server; 0: default");
ABSL_FLAG(absl::Duration, reply_timeout, absl::Seconds(10), "longest wait for one echo");
ABSL_FLAG(std::string, label, "", "a name for the server, copied into the JSON line");
ABSL_FLAG(int, server_pid, 0, "the server's process id: report its CPU use in the measured window");
ABSL_FLAG(bool, json, false, "also print the results as one JSON line");

namespace {

constexpr int kMaxSize = 4096;
enum Phase : int { kWarmup, kMeasure, kStop };
std::atomic<int> g_phase{kWarmup};

struct Config {
  int conns;
  int size;
  int64_t messages;
  absl::Duration reply_timeout;
};

// Results of one connection; only its own client writes them.
struct alignas(64) ConnStats {
  uint64_t total = 0;             // replies received and checked
  std::vector<int64_t> lat_ns;    // round trips completed in the measured window
  std::atomic<bool> done{false};  // the connection has stopped
};

template <typename... Args>
[[noreturn]] void Fail(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  std::string line = absl::StrCat("echo_load: FAIL: ", absl::StrFormat(fmt, args...), "\n");
  fputs(line.c_str(), stderr);
  fflush(stdout);
  _exit(1);
}

// A bad flag value: one line, status 2.
template <typename... Args>
[[noreturn]] void Usage(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  std::string line = absl::StrCat("echo_load: ", absl::StrFormat(fmt, args...), "\n");
  fputs(line.c_str(), stderr);
  exit(2);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The bytes of message `seq` on connection `conn`: xorshift64 seeded from both.
void FillMessage(char* p, int size, uint32_t conn, uint64_t seq) {
  uint64_t x = (uint64_t{conn} << 40 ^ seq) * 0x9E3779B97F4A7C15u + 0x2545F4914F6CDD1Du;
  x |= 1;
  for (int i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, std::min(8, size - i));
  }
}

// Checks a complete reply of `got` bytes against the message sent.
void CheckReply(const char* sent, const char* got, size_t n, int size, uint32_t conn,
                uint64_t seq) {
  if (n != static_cast<size_t>(size)) {
    Fail("connection %u, message %u: %u bytes came back for a %d-byte message", conn, seq, n,
         size);
  }
  if (std::memcmp(sent, got, size) == 0) return;
  int first = 0, differ = 0;
  for (int i = size - 1; i >= 0; --i) {
    if (sent[i] != got[i]) {
      first = i;
      differ++;
    }
  }
  Fail("connection %u, message %u: byte %d echoed as 0x%02x, sent 0x%02x (%d of %d bytes differ)",
       conn, seq, first, static_cast<unsigned char>(got[first]),
       static_cast<unsigned char>(sent[first]), differ, size);
}

void Record(ConnStats* st, int64_t start_ns) {
  st->total++;
  if (g_phase.load(std::memory_order_relaxed) == kMeasure) st->lat_ns.push_back(NowNs() - start_ns);
}

bool Finished(const Config& cfg, uint64_t next_seq) {
  return g_phase.load(std::memory_order_relaxed) == kStop ||
         (cfg.messages > 0 && next_seq >= static_cast<uint64_t>(cfg.messages));
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void ExplainConnectError(int err, int i) {
  if (err == EADDRNOTAVAIL) {
    Fail("connect #%d: %s (out of local ports: see /proc/sys/net/ipv4/ip_local_port_range "
         "and TIME_WAIT sockets in `ss -s`)",
         i, std::strerror(err));
  }
  Fail("connect #%d: %s", i, std::strerror(err));
}

// ---- goro's echo server, in this process (the loop of examples/echo_server.cc) ----

// A listening socket on an ephemeral port of 127.0.0.1; sets *port to it.
int ListenLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, SOMAXCONN) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Fail("in-process server: cannot listen on 127.0.0.1: %s", std::strerror(errno));
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

void StartInprocServer(int lfd) {
  goro::Go([lfd] {
    for (;;) {
      absl::StatusOr<int> fd = goro::io::Accept(lfd);
      if (!fd.ok()) Fail("in-process server: accept: %s", fd.status().ToString());
      SetNoDelay(*fd);
      goro::Go([fd = *fd] {
        char buf[4096];
        for (;;) {
          absl::StatusOr<size_t> n = goro::io::Read(fd, buf, sizeof buf);
          if (!n.ok() || *n == 0) break;
          if (!goro::io::Write(fd, buf, *n).ok()) break;
        }
        goro::io::Close(fd).IgnoreError();
      });
    }
  });
}

// ---- the goro client: one goroutine per connection ----

void GoroConnection(int fd, uint32_t id, ConnStats* st, const Config* cfg) {
  char sent[kMaxSize];
  char got[2 * kMaxSize];  // room for more than was sent, to catch extra bytes
  for (uint64_t seq = 0; !Finished(*cfg, seq); ++seq) {
    FillMessage(sent, cfg->size, id, seq);
    const int64_t start = NowNs();
    const absl::Time deadline = absl::Now() + cfg->reply_timeout;
    absl::StatusOr<size_t> w = goro::io::Write(fd, sent, cfg->size, deadline);
    if (!w.ok()) Fail("connection %u, message %u: write: %s", id, seq, w.status().ToString());
    size_t n = 0;
    while (n < static_cast<size_t>(cfg->size)) {
      absl::StatusOr<size_t> r = goro::io::Read(fd, got + n, sizeof got - n, deadline);
      if (absl::IsDeadlineExceeded(r.status())) {
        Fail("connection %u, message %u: %u of %d bytes echoed within %s", id, seq, n, cfg->size,
             absl::FormatDuration(cfg->reply_timeout));
      }
      if (!r.ok()) Fail("connection %u, message %u: read: %s", id, seq, r.status().ToString());
      if (*r == 0) {
        Fail("connection %u, message %u: the server closed the connection after %u of %d bytes",
             id, seq, n, cfg->size);
      }
      n += *r;
    }
    CheckReply(sent, got, n, cfg->size, id, seq);
    Record(st, start);
  }
  absl::Status closed = goro::io::Close(fd);
  if (!closed.ok()) Fail("connection %u: close: %s", id, closed.ToString());
  st->done.store(true, std::memory_order_release);
}

// Opens every connection, one after the other so that the server's accept
// queue never overflows.
std::vector<int> GoroConnectAll(const sockaddr_in& addr, const Config& cfg) {
  std::vector<int> fds(cfg.conns);
  for (int i = 0; i < cfg.conns; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) Fail("socket #%d: %s", i, std::strerror(errno));
    absl::Status st = goro::io::Connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr,
                                        absl::Now() + absl::Seconds(10));
    if (absl::IsDeadlineExceeded(st)) Fail("connect #%d: no answer within 10s", i);
    if (!st.ok()) Fail("connect #%d: %s", i, st.ToString());
    SetNoDelay(fd);
    fds[i] = fd;
  }
  return fds;
}

// ---- the epoll client: plain threads, each with its own epoll set ----

struct EpollConn {
  int fd;
  uint32_t id;
  uint64_t seq = 0;
  int64_t start = 0;
  size_t got = 0;
  std::unique_ptr<char[]> sent, reply;
};

void EpollSend(EpollConn* c, const Config& cfg) {
  FillMessage(c->sent.get(), cfg.size, c->id, c->seq);
  c->got = 0;
  c->start = NowNs();
  int off = 0;
  while (off < cfg.size) {  // one message in flight: the send buffer is all but empty
    ssize_t w = write(c->fd, c->sent.get() + off, cfg.size - off);
    if (w > 0) {
      off += w;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{c->fd, POLLOUT, 0};
      if (poll(&p, 1, absl::ToInt64Milliseconds(cfg.reply_timeout)) == 0) {
        Fail("connection %u, message %u: socket not writable within %s", c->id, c->seq,
             absl::FormatDuration(cfg.reply_timeout));
      }
    } else if (w < 0 && errno != EINTR) {
      Fail("connection %u, message %u: write: %s", c->id, c->seq, std::strerror(errno));
    }
  }
}

void EpollThread(std::vector<EpollConn*> conns, const Config& cfg, std::vector<ConnStats>& stats) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) Fail("epoll_create1: %s", std::strerror(errno));
  size_t active = 0;
  for (EpollConn* c : conns) {
    if (Finished(cfg, 0)) break;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) Fail("epoll_ctl: %s", std::strerror(errno));
    EpollSend(c, cfg);
    active++;
  }
  const int64_t timeout_ns = absl::ToInt64Nanoseconds(cfg.reply_timeout);
  int64_t next_check = NowNs() + 100'000'000;
  epoll_event events[256];
  while (active > 0) {
    int n = epoll_wait(ep, events, 256, 100);
    if (n < 0 && errno != EINTR) Fail("epoll_wait: %s", std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<EpollConn*>(events[i].data.ptr);
      ssize_t r = read(c->fd, c->reply.get() + c->got, 2 * cfg.size - c->got);
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        Fail("connection %u, message %u: read: %s", c->id, c->seq, std::strerror(errno));
      }
      if (r == 0) {
        Fail("connection %u, message %u: the server closed the connection after %u of %d bytes",
             c->id, c->seq, c->got, cfg.size);
      }
      c->got += r;
      if (c->got < static_cast<size_t>(cfg.size)) continue;
      CheckReply(c->sent.get(), c->reply.get(), c->got, cfg.size, c->id, c->seq);
      Record(&stats[c->id], c->start);
      if (Finished(cfg, ++c->seq)) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
        close(c->fd);
        c->fd = -1;
        stats[c->id].done.store(true, std::memory_order_release);
        active--;
      } else {
        EpollSend(c, cfg);
      }
    }
    int64_t now = NowNs();
    if (now >= next_check) {  // a reply that never comes is a failure, not a hang
      next_check = now + 100'000'000;
      for (EpollConn* c : conns) {
        if (c->fd >= 0 && now - c->start > timeout_ns) {
          Fail("connection %u, message %u: %u of %d bytes echoed within %s", c->id, c->seq,
               c->got, cfg.size, absl::FormatDuration(cfg.reply_timeout));
        }
      }
    }
  }
  for (EpollConn* c : conns) {
    if (c->fd >= 0) {  // stopped before its first message
      close(c->fd);
      stats[c->id].done.store(true, std::memory_order_release);
    }
  }
  close(ep);
}

std::vector<std::unique_ptr<EpollConn>> ConnectPlain(const sockaddr_in& addr, const Config& cfg) {
  std::vector<std::unique_ptr<EpollConn>> conns;
  for (int i = 0; i < cfg.conns; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) Fail("socket #%d: %s", i, std::strerror(errno));
    timeval tv{10, 0};  // bound the blocking connect
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ExplainConnectError(errno, i);
    }
    SetNoDelay(fd);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto c = std::make_unique<EpollConn>();
    c->fd = fd;
    c->id = i;
    c->sent.reset(new char[cfg.size]);
    c->reply.reset(new char[2 * cfg.size]);
    conns.push_back(std::move(c));
  }
  return conns;
}

// ---- timing ----

// A moment: wall clock, this process's CPU time and, with --server_pid, the
// server's CPU time (-1 when unknown).
struct Sample {
  int64_t ns = 0;
  double cpu = 0, server_cpu = -1;
};

int g_server_pid = 0;

// User + system CPU seconds of process `pid` from /proc/PID/stat, or -1.
double ProcessCpuSeconds(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  unsigned long utime = 0, stime = 0;
  if (p == nullptr || std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                  &utime, &stime) != 2) {
    return -1;
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

Sample Now() {
  Sample s;
  s.ns = NowNs();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  if (g_server_pid > 0) s.server_cpu = ProcessCpuSeconds(g_server_pid);
  return s;
}

// Runs the phases on a plain thread, outside the scheduler being measured.
class Timekeeper {
 public:
  // With count_mode (--messages) the measured window opens at once, before
  // any connection sends.
  Timekeeper(double warmup, double seconds, bool count_mode) {
    if (count_mode) Open();
    thread_ = std::thread([=, this] { Loop(warmup, seconds, count_mode); });
  }
  // Called when every connection has stopped.
  void Finished() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      finished_ = true;
      end_ = Now();
    }
    cv_.notify_all();
    goro::Syscall([this] { thread_.join(); });  // a blocking call: let the P go
  }
  double measured_seconds() const { return (stop_.ns - start_.ns) / 1e9; }
  double cpu_seconds() const { return stop_.cpu - start_.cpu; }
  double server_cpu_seconds() const {
    return start_.server_cpu < 0 || stop_.server_cpu < 0 ? -1 : stop_.server_cpu - start_.server_cpu;
  }

 private:
  void Open() {
    start_ = Now();
    g_phase.store(kMeasure, std::memory_order_relaxed);
  }
  void Loop(double warmup, double seconds, bool count_mode) {
    std::unique_lock<std::mutex> lk(mu_);
    auto done = [this] { return finished_; };
    if (!count_mode) {
      cv_.wait_for(lk, std::chrono::duration<double>(warmup), done);
      Open();
    }
    cv_.wait_for(lk, std::chrono::duration<double>(seconds), done);
    stop_ = finished_ ? end_ : Now();  // finished: --messages, every connection is done
    g_phase.store(kStop, std::memory_order_relaxed);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  Sample start_, stop_, end_;
  std::thread thread_;
};

// Ends the process if the run is still going long after it should have
// stopped: a hang is a failure with a message, never a stuck benchmark.
void StartWatchdog(double limit_s, const std::vector<ConnStats>* stats, bool goro_client) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit_s));
    int unfinished = 0;
    uint64_t replies = 0;
    for (const ConnStats& s : *stats) {
      unfinished += !s.done.load(std::memory_order_acquire);
      replies += s.total;  // racy read, for the message only
    }
    std::string extra;
    if (goro_client) {
      goro::Stats gs = goro::GetStats();
      extra = absl::StrFormat("; goro: %d goroutines live, %d Ps, %d threads", gs.goroutines_live,
                              gs.procs, gs.threads);
    }
    Fail("hung: still running %.0f s after starting; %d of %u connections unfinished, %u replies "
         "so far%s",
         limit_s, unfinished, stats->size(), replies, extra);
  }).detach();
}

void RaiseFileLimit(int needed) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < static_cast<rlim_t>(needed)) {
    Fail("%d connections need about %d open files but the hard limit (ulimit -Hn) is %u; "
         "raise it or use fewer --conns",
         absl::GetFlag(FLAGS_conns), needed, static_cast<uint64_t>(rl.rlim_max));
  }
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    Fail("cannot raise the open-file limit to %u: %s", static_cast<uint64_t>(rl.rlim_max),
         std::strerror(errno));
  }
}

sockaddr_in LoopbackAddress(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// "127.0.0.1:PORT", "localhost:PORT" or "PORT" -> the port; fails otherwise.
int ParsePort(std::string s) {
  absl::string_view v = s;
  if (!absl::ConsumePrefix(&v, "127.0.0.1:")) absl::ConsumePrefix(&v, "localhost:");
  int port = 0;
  if (!absl::SimpleAtoi(v, &port) || port <= 0 || port > 65535) {
    Usage("--server=%s: want inproc, 127.0.0.1:PORT or PORT (loopback only)", s);
  }
  return port;
}

double Percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1e3;  // microseconds
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("echo_load: drives a TCP echo server on 127.0.0.1 and checks every byte");
  absl::ParseCommandLine(argc, argv);
  const std::string server = absl::GetFlag(FLAGS_server);
  const std::string client = absl::GetFlag(FLAGS_client);
  const bool inproc = server == "inproc";
  const Config cfg{absl::GetFlag(FLAGS_conns), absl::GetFlag(FLAGS_size),
                   absl::GetFlag(FLAGS_messages), absl::GetFlag(FLAGS_reply_timeout)};
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double warmup_flag = absl::GetFlag(FLAGS_warmup);
  const int threads_flag = absl::GetFlag(FLAGS_threads);
  // The timekeeper and the watchdog wait for these many seconds: NaN, an
  // infinity or a span that overflows the clock ended their waits at once,
  // and the run was reported as hung.
  constexpr double kMaxSeconds = 86400;
  if (cfg.conns < 1) Usage("--conns=%d: want 1 or more", cfg.conns);
  if (cfg.size < 1 || cfg.size > kMaxSize) Usage("--size=%d: want 1 to %d", cfg.size, kMaxSize);
  if (!(seconds > 0 && seconds <= kMaxSeconds)) {
    Usage("--seconds=%g: want more than 0, at most %g", seconds, kMaxSeconds);
  }
  if (!(warmup_flag >= 0 && warmup_flag <= kMaxSeconds)) {
    Usage("--warmup=%g: want 0 to %g", warmup_flag, kMaxSeconds);
  }
  if (cfg.messages < 0) Usage("--messages=%d: want 0 (run for --seconds) or more", cfg.messages);
  if (threads_flag < 1) Usage("--threads=%d: want 1 or more", threads_flag);
  if (cfg.reply_timeout <= absl::ZeroDuration() || cfg.reply_timeout > absl::Seconds(kMaxSeconds)) {
    Usage("--reply_timeout=%s: want more than 0, at most 24h", absl::FormatDuration(cfg.reply_timeout));
  }
  if (client != "goro" && client != "epoll") Usage("--client=%s: want goro or epoll", client);
  const double warmup = cfg.messages > 0 ? 0 : warmup_flag;
  const int threads = std::min(threads_flag, cfg.conns);  // no thread without a connection
  const int port_flag = inproc ? 0 : ParsePort(server);
  g_server_pid = absl::GetFlag(FLAGS_server_pid);
  RaiseFileLimit(cfg.conns * (inproc ? 2 : 1) + 64);

  goro::Options opts;
  opts.max_procs = absl::GetFlag(FLAGS_procs);
  std::vector<ConnStats> stats(cfg.conns);
  const double watchdog_s =
      warmup + seconds + absl::ToDoubleSeconds(cfg.reply_timeout) + 10 + cfg.conns / 1000.0;
  int port = port_flag;
  std::unique_ptr<Timekeeper> clock;
  const int64_t connect_start = NowNs();
  double connect_s = 0;

  if (client == "goro") {
    goro::Run(
        [&] {
          if (inproc) {
            StartInprocServer(ListenLoopback(&port));
          }
          StartWatchdog(watchdog_s + 10, &stats, true);  // +10: connecting
          std::vector<int> fds = GoroConnectAll(LoopbackAddress(port), cfg);
          connect_s = (NowNs() - connect_start) / 1e9;
          clock = std::make_unique<Timekeeper>(warmup, seconds, cfg.messages > 0);
          goro::WaitGroup wg;
          wg.Add(cfg.conns);
          for (int i = 0; i < cfg.conns; ++i) {
            goro::Go([fd = fds[i], i, st = &stats[i], cfg = &cfg, wg = &wg] {
              GoroConnection(fd, i, st, cfg);
              wg->Done();
            });
          }
          wg.Wait();
          clock->Finished();
        },
        opts);
  } else {
    if (inproc) {
      int lfd = ListenLoopback(&port);
      // The server's goroutines keep running after Run returns.
      goro::Run([lfd] { StartInprocServer(lfd); }, opts);
    }
    StartWatchdog(watchdog_s + 10, &stats, false);
    std::vector<std::unique_ptr<EpollConn>> conns = ConnectPlain(LoopbackAddress(port), cfg);
    connect_s = (NowNs() - connect_start) / 1e9;
    std::vector<std::vector<EpollConn*>> shares(threads);
    for (auto& c : conns) shares[c->id % threads].push_back(c.get());
    std::vector<std::thread> workers;
    clock = std::make_unique<Timekeeper>(warmup, seconds, cfg.messages > 0);
    for (auto& share : shares) {
      workers.emplace_back([&cfg, &stats, share] { EpollThread(share, cfg, stats); });
    }
    for (std::thread& t : workers) t.join();
    clock->Finished();
  }

  std::vector<int64_t> lat;
  uint64_t total = 0;
  for (ConnStats& s : stats) {
    lat.insert(lat.end(), s.lat_ns.begin(), s.lat_ns.end());
    total += s.total;
  }
  const double measured = clock->measured_seconds();
  const double rps = measured > 0 ? lat.size() / measured : 0;
  const double cpu = measured > 0 ? clock->cpu_seconds() / measured : 0;
  const double server_cpu_s = clock->server_cpu_seconds();
  const double server_cpu = measured > 0 && server_cpu_s >= 0 ? server_cpu_s / measured : -1;
  const double server_us_per_req = server_cpu_s >= 0 && !lat.empty() ? server_cpu_s * 1e6 / lat.size() : -1;
  const double p50 = Percentile(lat, 0.50), p90 = Percentile(lat, 0.90),
               p99 = Percentile(lat, 0.99), p999 = Percentile(lat, 0.999),
               pmax = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end()) / 1e3;
  const std::string where = inproc ? "in-process goro server" : absl::StrCat("127.0.0.1:", port);
  absl::PrintF("echo_load: %s client, %d connections, %d-byte messages -> %s\n", client, cfg.conns,
               cfg.size, where);
  absl::PrintF("  connect     %d connections in %.2f s\n", cfg.conns, connect_s);
  absl::PrintF("  measured    %.2f s: %u round trips (%u in all), every byte checked\n", measured,
               lat.size(), total);
  absl::PrintF("  requests/s  %.0f\n", rps);
  absl::PrintF("  latency us  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", p50, p90, p99,
               p999, pmax);
  absl::PrintF("  client CPU  %.0f%% of one CPU%s\n", 100 * cpu,
               inproc ? " (client and server together)" : "");
  if (server_cpu >= 0) {
    absl::PrintF("  server CPU  %.0f%% of one CPU, %.2f us per round trip (process %d)\n",
                 100 * server_cpu, server_us_per_req, g_server_pid);
  }
  if (absl::GetFlag(FLAGS_json)) {
    absl::PrintF(
        "{\"label\":\"%s\",\"client\":\"%s\",\"server\":\"%s\",\"conns\":%d,\"size\":%d,"
        "\"seconds\":%.3f,\"requests\":%u,\"total\":%u,\"rps\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,"
        "\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,\"client_cpu\":%.3f,\"server_cpu\":%.3f,"
        "\"server_us_per_req\":%.3f}\n",
        absl::GetFlag(FLAGS_label), client, where, cfg.conns, cfg.size, measured, lat.size(), total, rps,
        p50, p90, p99, p999, pmax, cpu, server_cpu, server_us_per_req);
  }
  std::fflush(stdout);
  if (lat.empty()) Fail("no round trip completed in the measured window");
  return 0;
}
