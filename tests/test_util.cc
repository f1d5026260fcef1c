#include "test_util.h"

#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
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

int WiredGoroutinesWithCwd(const std::string& dir, int n) {
  goro::Chan<int> found;  // 1 from each goroutine that ran in dir, else 0
  goro::Chan<int> release;
  goro::WaitGroup done;
  int in_dir = 0;
  for (int i = 0; i < n; ++i) {
    done.Add(1);
    goro::Go([found, release, &done, &dir]() mutable {
      goro::LockOSThread();
      found.Send(WorkingDirectory() == dir ? 1 : 0);
      release.Recv();  // holds its thread meanwhile
      goro::UnlockOSThread();
      done.Done();
    });
    in_dir += found.Recv().value_or(0);
  }
  release.Close();
  done.Wait();
  return in_dir;
}

std::string WorkingDirectory() {
  char buf[4096];
  return getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string("?");
}

std::string OtherDirectory() { return WorkingDirectory() == "/" ? "/tmp" : "/"; }

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

std::vector<std::string> EnvironmentWithout(std::initializer_list<const char*> drop) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool keep = true;
    for (const char* name : drop) {
      size_t n = strlen(name);
      if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') keep = false;
    }
    if (keep) env.emplace_back(*e);
  }
  return env;
}

namespace {

std::string ReadWholeFile(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

CapturedRun RunCapturing(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const cpu_set_t* affinity, absl::Duration limit) {
  CapturedRun r;
  std::vector<std::string> arg_strings = argv, env_strings = env;
  std::vector<char*> args, envp;
  for (auto& s : arg_strings) args.push_back(s.data());
  args.push_back(nullptr);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char out_path[] = "/tmp/goro_test_out_XXXXXX";
  char err_path[] = "/tmp/goro_test_err_XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  pid_t pid = -1;
  int rc = 0;
  auto spawn = [&] { rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data()); };
  if (affinity == nullptr) {
    spawn();
  } else {
    // The child inherits the spawning thread's mask: spawn from a thread of
    // its own, so that this one's is left alone.
    std::thread([&] {
      if (sched_setaffinity(0, sizeof(*affinity), affinity) != 0) {
        rc = errno;
        return;
      }
      spawn();
    }).join();
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out_fd);
  close(err_fd);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << args[0] << ": " << strerror(rc);
  } else {
    int status = 0;
    const absl::Time deadline = absl::Now() + limit;
    for (;;) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << args[0] << " did not finish within " << absl::FormatDuration(limit);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadWholeFile(out_path);
    r.err = ReadWholeFile(err_path);
  }
  unlink(out_path);
  unlink(err_path);
  return r;
}

ShellRun RunShell(const std::string& command) {
  ShellRun r;
  FILE* f = popen(command.c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.text.append(buf, n);
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace goro_test
