// echo_floor: the cheapest echo server we know how to write, as the floor
// for bench/echo_compare.sh. One thread, one edge-triggered epoll instance,
// one shared 4 KiB buffer, no runtime and no per-connection state beyond
// the kernel's (unless a write is short): what is left of its CPU time per
// round trip is the kernel's loopback TCP work and epoll. No server with a
// goroutine (or thread, or callback object) per connection can spend less,
// so its requests/s against Go's bounds what goro's can reach.
//
//   echo_floor --port=0 --seconds=30
//
// It prints "listening on 127.0.0.1:PORT" as examples/echo_server does, and
// makes the same system calls per round trip as goro's server: read, write,
// and the next read only after epoll reports the socket readable again.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

ABSL_FLAG(int, port, 7777, "TCP port on 127.0.0.1; 0 picks a free one and prints it");
ABSL_FLAG(double, seconds, 0, "stop after this many seconds; 0 runs until killed");

namespace {

char buf[4096];

// Bytes read but not yet written back, for the rare socket whose send
// buffer was full (never with one small message in flight).
absl::flat_hash_map<int, std::string> backlog;

// Readiness to watch: input always, output only while something is owed.
void Watch(int ep, int fd, int op, bool output) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (output ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  epoll_ctl(ep, op, fd, &ev);
}

void Drop(int ep, int fd) {
  epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  backlog.erase(fd);
}

// Writes what is owed to fd; false if the connection is broken.
bool Flush(int fd, std::string& out) {
  while (!out.empty()) {
    ssize_t w = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    if (w < 0) return errno == EAGAIN || errno == EINTR;
    out.erase(0, static_cast<size_t>(w));
  }
  return true;
}

void Serve(int ep, int fd, uint32_t events) {
  if (auto it = backlog.find(fd); it != backlog.end()) {
    if (!Flush(fd, it->second)) return Drop(ep, fd);
    if (!it->second.empty()) return;  // still full: wait for EPOLLOUT
    backlog.erase(it);
    Watch(ep, fd, EPOLL_CTL_MOD, false);
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) return;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r == 0) return Drop(ep, fd);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) Drop(ep, fd);
      return;
    }
    ssize_t w = send(fd, buf, static_cast<size_t>(r), MSG_NOSIGNAL);
    if (w < 0 && errno != EAGAIN && errno != EINTR) return Drop(ep, fd);
    if (w < r) {
      backlog[fd].append(buf + std::max<ssize_t>(w, 0), buf + r);
      Watch(ep, fd, EPOLL_CTL_MOD, true);
      return;  // EPOLLOUT comes back here
    }
    if (static_cast<size_t>(r) < sizeof buf) return;  // drained: the next read waits for epoll
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(absl::GetFlag(FLAGS_port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, SOMAXCONN) != 0) {
    std::fprintf(stderr, "echo_floor: cannot listen on 127.0.0.1:%d: %s\n", absl::GetFlag(FLAGS_port),
                 std::strerror(errno));
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event lev{};
  lev.events = EPOLLIN;
  lev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const absl::Time end = seconds > 0 ? absl::Now() + absl::Seconds(seconds) : absl::InfiniteFuture();
  long connections = 0;
  epoll_event events[128];
  while (absl::Now() < end) {
    int n = epoll_wait(ep, events, 128, 100);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd != lfd) {
        Serve(ep, fd, events[i].events);
        continue;
      }
      for (;;) {
        int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
          if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
            std::fprintf(stderr, "echo_floor: accept: %s\n", std::strerror(errno));
          }
          if (errno == EINTR || errno == ECONNABORTED) continue;
          break;
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Watch(ep, c, EPOLL_CTL_ADD, false);
        ++connections;
      }
    }
  }
  std::printf("echo_floor: %ld connections served, stopping\n", connections);
  return 0;
}
