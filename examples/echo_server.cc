// A TCP echo server: one goroutine per connection, each blocked in
// goro::io::Read / goro::io::Write. Only the goroutine waits; the runtime's
// network poller wakes it when its socket is ready, so 10,000 idle
// connections cost 10,000 small stacks, not 10,000 threads.
//
//   ./echo_server                 # 127.0.0.1:7777, until killed
//   ./echo_server --port=0        # an ephemeral port, printed on stdout
//   ./echo_server --seconds=30    # exit after 30 s
//
// It prints "listening on 127.0.0.1:PORT" once the socket listens, so a
// script can start it and read the port. Loopback only. A bad flag value is
// one line on stderr and exit status 2.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "goro/goro.h"

ABSL_FLAG(int, port, 7777, "TCP port on 127.0.0.1; 0 picks a free one and prints it");
ABSL_FLAG(double, seconds, 0, "stop after this many seconds; 0 runs until killed");
ABSL_FLAG(int, procs, 0, "number of Ps; 0 uses $GOROMAXPROCS or every CPU it may run on");

namespace {

std::atomic<long> connections{0};

// Echoes everything it reads back to the peer until the peer closes the
// connection or something fails. (No deadline: a deadline costs a timer per
// wait, and the Go server this one is compared with sets none either.)
void Serve(int fd) {
  char buf[4096];
  for (;;) {
    absl::StatusOr<size_t> n = goro::io::Read(fd, buf, sizeof buf);
    if (!n.ok() || *n == 0) break;  // error or end of file
    if (!goro::io::Write(fd, buf, *n).ok()) break;
  }
  goro::io::Close(fd).IgnoreError();
}

int Listen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // htons() would keep the low 16 bits of a bigger port (70000 is 4464), and
  // a negative or NaN --seconds would run until killed.
  const int port = absl::GetFlag(FLAGS_port);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (port < 0 || port > 65535) {
    std::fprintf(stderr, "echo_server: --port=%d: want 0 (a free port) to 65535\n", port);
    return 2;
  }
  if (!(seconds >= 0 && std::isfinite(seconds))) {
    std::fprintf(stderr,
                 "echo_server: --seconds=%g: want 0 (run until killed) or a finite number of seconds\n",
                 seconds);
    return 2;
  }
  rlimit files{};  // one descriptor per connection: allow as many as we may (Go does too)
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  goro::Options opts;
  opts.max_procs = absl::GetFlag(FLAGS_procs);
  int status = 0;
  goro::Run(
      [&] {
        int lfd = Listen(port);
        if (lfd < 0) {
          std::fprintf(stderr, "echo_server: cannot listen on 127.0.0.1:%d: %s\n", port,
                       std::strerror(errno));
          status = 1;
          return;
        }
        sockaddr_in addr{};
        socklen_t len = sizeof addr;
        getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
        std::printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
        std::fflush(stdout);

        const absl::Time deadline =
            seconds > 0 ? absl::Now() + absl::Seconds(seconds) : absl::InfiniteFuture();
        for (;;) {
          absl::StatusOr<int> fd = goro::io::Accept(lfd, deadline);
          if (absl::IsDeadlineExceeded(fd.status())) break;
          if (!fd.ok()) {  // e.g. out of file descriptors: say so, keep serving
            std::fprintf(stderr, "echo_server: accept: %s\n", fd.status().ToString().c_str());
            goro::SleepFor(absl::Milliseconds(10));
            continue;
          }
          int one = 1;  // answer each small message at once
          setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          connections.fetch_add(1, std::memory_order_relaxed);
          goro::Go([fd = *fd] { Serve(fd); });
        }
        // Returning ends the process, and with it the connections still open.
        goro::io::Close(lfd).IgnoreError();
        std::printf("echo_server: %ld connections served, stopping\n", connections.load());
      },
      opts);
  return status;
}
