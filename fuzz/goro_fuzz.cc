// goro_fuzz: a libFuzzer target that turns its input into a small concurrent
// program over goro's channels, Select, Mutex, WaitGroup and timers, runs it
// with goro::Run on 2 Ps, and checks what happened against a sequential model.
// See docs/fuzzing.md for what is checked and how to run it.
//
// The program, decoded from the input bytes (missing bytes read as 0):
//   - 2..6 workers, 1..4 shared channels (capacity 0..4 each), 1..3 Mutexes;
//   - one consumer per shared channel that receives until the channel is
//     closed, and one watcher that waits on the workers' WaitGroup;
//   - each worker runs up to 24 operations: sends (plain, Select over two
//     channels, Select with default), non-blocking and timed receives,
//     Mutex-guarded increments, TryLock, SleepFor, After, Yield, spawning a
//     helper goroutine, and operations on 1..2 private buffered channels that
//     only it touches, checked step by step against a queue model.
// The main goroutine waits for the workers, closes the shared channels and
// waits for the consumers. Nothing can block forever: every send is drained by
// a consumer, every receive a worker makes is non-blocking or bounded by an
// After timer, and a private channel is used blockingly only when the model
// says the operation is ready.
//
// Every mismatch prints one line naming it and traps, which libFuzzer reports
// as a crash with the input that caused it.
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "goro/goro.h"

namespace {

[[noreturn]] void Fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "goro_fuzz: MISMATCH: %s (%lld vs %lld)\n", what, a, b);
  std::fflush(stderr);
  __builtin_trap();
}

#define CHECK_EQ(what, a, b)                                                 \
  do {                                                                       \
    long long a_ = static_cast<long long>(a), b_ = static_cast<long long>(b); \
    if (a_ != b_) Fail(what, a_, b_);                                        \
  } while (0)

int64_t MonoNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Reads the input a byte at a time; past the end it yields zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool AtEnd() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr int kMaxWorkers = 6;
constexpr int kMaxChans = 4;
constexpr int kMaxMutexes = 3;
constexpr int kMaxOps = 24;
constexpr int kMaxPrivate = 2;
constexpr int kMaxHelpers = 8;

enum Op : uint8_t {
  kSend,            // Send on a shared channel
  kSelectSend2,     // Select over sends on two shared channels (blocking)
  kTrySend,         // Select {send, default}
  kTryRecv,         // Select {recv, default}
  kTimedRecv,       // Select {recv, recv After(d)}
  kLockInc,         // Lock, non-atomic increment (maybe yielding inside), Unlock
  kTryLockInc,      // TryLock and, if it succeeds, increment
  kSleep,           // SleepFor(d)
  kAfter,           // After(d).Recv()
  kYield,           // Yield
  kSpawnHelper,     // Go a helper that increments a counter k times
  kPrivate,         // an operation on a private channel, against the model
  kTimer,           // a goro::Timer: received, stopped, reset, or stopped late
  kTicker,          // a goro::Ticker: two ticks received, stopped, reset, or stopped late
  kRWWrite,         // RWMutex Lock (or TryLock), non-atomic increment (maybe yielding), Unlock
  kRWRead,          // RWMutex RLock (or TryRLock), read the counter twice around a yield, RUnlock
  kOnce,            // Once.Do on one of two Onces: its function ran exactly once, before Do returned
  kNumOps
};

struct WorkerSpec {
  int nops = 0;
  uint8_t op[kMaxOps];
  uint8_t arg[kMaxOps];
  int npriv = 0;
  int priv_cap[kMaxPrivate];
};

struct Program {
  int nworkers = 0;
  int nchans = 0;
  int nmutexes = 0;
  int cap[kMaxChans];
  WorkerSpec workers[kMaxWorkers];
};

Program Decode(const uint8_t* data, size_t size) {
  Reader r(data, size);
  Program p;
  p.nworkers = 2 + r.Byte() % 5;
  p.nchans = 1 + r.Byte() % kMaxChans;
  for (int c = 0; c < p.nchans; ++c) p.cap[c] = r.Byte() % 5;
  p.nmutexes = 1 + r.Byte() % kMaxMutexes;
  for (int w = 0; w < p.nworkers; ++w) {
    WorkerSpec& ws = p.workers[w];
    uint8_t b = r.Byte();
    ws.npriv = 1 + b % kMaxPrivate;
    for (int i = 0; i < ws.npriv; ++i) ws.priv_cap[i] = ((b >> (2 + 3 * i)) & 7) % 5;
    ws.nops = r.Byte() % (kMaxOps + 1);
    for (int i = 0; i < ws.nops; ++i) {
      ws.op[i] = r.Byte() % kNumOps;
      ws.arg[i] = r.Byte();
    }
  }
  return p;
}

// A value sent on a shared channel: who sent it and its per-sender sequence
// number, so that every value is unique and its origin is known.
uint64_t Encode(int sender, uint32_t seq) { return (uint64_t{static_cast<uint32_t>(sender)} << 32) | seq; }
int SenderOf(uint64_t v) { return static_cast<int>(v >> 32); }
uint32_t SeqOf(uint64_t v) { return static_cast<uint32_t>(v); }

// What one receiver saw, in order: (channel, value).
using RecvLog = std::vector<std::pair<int, uint64_t>>;

struct State {
  const Program* prog;
  std::vector<goro::Chan<uint64_t>> chans;
  goro::Mutex mu[kMaxMutexes];
  int64_t counter[kMaxMutexes] = {};  // guarded by mu[i]
  goro::RWMutex rw;
  int64_t rw_counter = 0;  // written under rw's write lock, read under its read lock
  goro::Once once[2];
  std::atomic<int> once_runs[2] = {};
  goro::WaitGroup workers_wg;         // workers and their helpers
  goro::WaitGroup consumers_wg;       // consumers and the watcher
  std::atomic<int> finished{0};       // workers + helpers that reached Done
  std::atomic<int> helpers_spawned{0};
  // Per worker, written only by that worker, read after workers_wg.Wait().
  std::vector<uint64_t> sent[kMaxWorkers];
  RecvLog worker_recv[kMaxWorkers];
  int64_t incs[kMaxWorkers][kMaxMutexes] = {};
  int64_t rw_incs[kMaxWorkers] = {};
  // Per consumer, written only by it, read after consumers_wg.Wait().
  RecvLog consumer_recv[kMaxChans];
};

void Increment(State* s, int m, bool yield_inside) {
  s->mu[m].Lock();
  int64_t v = s->counter[m];
  if (yield_inside) goro::Yield();
  s->counter[m] = v + 1;
  s->mu[m].Unlock();
}

absl::Duration Tiny(uint8_t a) { return absl::Microseconds((a % 8) * 25); }

// Checks that an elapsed interval covers at least `d`.
void CheckElapsed(const char* what, int64_t start, absl::Duration d) {
  int64_t elapsed = MonoNanos() - start;
  if (elapsed < absl::ToInt64Nanoseconds(d)) Fail(what, elapsed, absl::ToInt64Nanoseconds(d));
}

// A private channel and the queue model of its contents.
struct Private {
  goro::Chan<uint64_t> ch;
  size_t cap;
  std::deque<uint64_t> model;
  bool closed = false;
  uint64_t next = 1;
};

// The model's prediction for a receive: a value, or nullopt for closed+drained.
void CheckRecvMatches(Private& p, const std::optional<uint64_t>& got) {
  if (p.model.empty()) {
    if (!p.closed) Fail("private recv proceeded on an empty open channel");
    if (got.has_value()) Fail("private recv on closed drained channel gave a value", static_cast<long long>(*got));
    return;
  }
  if (!got.has_value()) Fail("private recv gave nullopt with values buffered", static_cast<long long>(p.model.size()));
  CHECK_EQ("private recv: FIFO order", *got, p.model.front());
  p.model.pop_front();
}

void PrivateOp(Private* privs, int npriv, uint8_t a) {
  Private& p = privs[a % npriv];
  Private& q = privs[(a >> 1) % npriv];
  bool can_send = !p.closed && p.model.size() < p.cap;
  bool can_recv = !p.model.empty() || p.closed;
  switch ((a >> 2) % 8) {
    case 0: {  // Select {send, default}; never on a closed channel (fatal)
      if (p.closed) break;
      uint64_t v = p.next;
      int i = goro::Select(goro::OnSend(p.ch, &v), goro::OnDefault());
      CHECK_EQ("private try-send: chosen case", i, can_send ? 0 : 1);
      if (i == 0) p.model.push_back(p.next++);
      break;
    }
    case 1: {  // Select {recv, default}
      std::optional<uint64_t> out;
      int i = goro::Select(goro::OnRecv(p.ch, &out), goro::OnDefault());
      CHECK_EQ("private try-recv: chosen case", i, can_recv ? 0 : 1);
      if (i == 0) CheckRecvMatches(p, out);
      break;
    }
    case 2: {  // Select {send p, recv q, default}: any ready case may win
      if (p.closed) break;
      bool q_ready = !q.model.empty() || q.closed;
      uint64_t v = p.next;
      std::optional<uint64_t> out;
      int i = goro::Select(goro::OnSend(p.ch, &v), goro::OnRecv(q.ch, &out), goro::OnDefault());
      if (i == 0) {
        if (!can_send) Fail("private select: send chosen but the model has no room", static_cast<long long>(p.model.size()));
        p.model.push_back(p.next++);
      } else if (i == 1) {
        if (!q_ready) Fail("private select: recv chosen but the model is empty");
        CheckRecvMatches(q, out);
      } else {
        CHECK_EQ("private select: default chosen although a case was ready", can_send || q_ready, 0);
      }
      break;
    }
    case 3:  // a blocking Send, only when the model says it completes at once
      if (can_send) {
        p.ch.Send(p.next);
        p.model.push_back(p.next++);
      }
      break;
    case 4:  // a blocking Recv, only when the model says it completes at once
      if (can_recv) CheckRecvMatches(p, p.ch.Recv());
      break;
    case 5:  // close once
      if (!p.closed && (a & 0x80)) {
        p.ch.Close();
        p.closed = true;
      }
      break;
    case 6:  // a blocking Select {recv p, recv q} when one of them is ready
      if (can_recv || !q.model.empty() || q.closed) {
        bool q_ready = !q.model.empty() || q.closed;
        std::optional<uint64_t> o1, o2;
        int i = goro::Select(goro::OnRecv(p.ch, &o1), goro::OnRecv(q.ch, &o2));
        if (i == 0) {
          if (!can_recv) Fail("private select2: recv p chosen but not ready");
          CheckRecvMatches(p, o1);
        } else {
          if (!q_ready) Fail("private select2: recv q chosen but not ready");
          CheckRecvMatches(q, o2);
        }
      }
      break;
    default:
      CHECK_EQ("private len", p.ch.size(), p.model.size());
      CHECK_EQ("private cap", p.ch.capacity(), p.cap);
      break;
  }
}

void Worker(State* s, int w) {
  const Program& prog = *s->prog;
  const WorkerSpec& ws = prog.workers[w];
  Private privs[kMaxPrivate];
  for (int i = 0; i < ws.npriv; ++i) {
    privs[i].ch = goro::Chan<uint64_t>(ws.priv_cap[i]);
    privs[i].cap = ws.priv_cap[i];
  }
  uint32_t seq = 0;
  auto chan = [&](uint8_t a) -> goro::Chan<uint64_t>& { return s->chans[a % prog.nchans]; };
  for (int k = 0; k < ws.nops; ++k) {
    uint8_t a = ws.arg[k];
    switch (ws.op[k]) {
      case kSend: {
        uint64_t v = Encode(w, seq++);
        chan(a).Send(v);
        s->sent[w].push_back(v);
        break;
      }
      case kSelectSend2: {
        uint64_t v1 = Encode(w, seq), v2 = v1;
        int i = goro::Select(goro::OnSend(chan(a), &v1), goro::OnSend(chan(a >> 2), &v2));
        if (i != 0 && i != 1) Fail("blocking select send: bad case index", i, 0);
        s->sent[w].push_back(Encode(w, seq++));
        break;
      }
      case kTrySend: {
        uint64_t v = Encode(w, seq);
        int i = goro::Select(goro::OnSend(chan(a), &v), goro::OnDefault());
        if (i == 0) s->sent[w].push_back(Encode(w, seq++));
        break;
      }
      case kTryRecv: {
        std::optional<uint64_t> out;
        int i = goro::Select(goro::OnRecv(chan(a), &out), goro::OnDefault());
        if (i == 0) {
          if (!out) Fail("try-recv on an open shared channel gave nullopt");
          s->worker_recv[w].emplace_back(a % prog.nchans, *out);
        }
        break;
      }
      case kTimedRecv: {
        std::optional<uint64_t> out;
        std::optional<absl::Time> fired;
        int64_t start = MonoNanos();
        absl::Duration d = Tiny(a >> 3);
        auto timer = goro::After(d);
        int i = goro::Select(goro::OnRecv(chan(a), &out), goro::OnRecv(timer, &fired));
        if (i == 0) {
          if (!out) Fail("timed recv on an open shared channel gave nullopt");
          s->worker_recv[w].emplace_back(a % prog.nchans, *out);
        } else {
          if (!fired) Fail("After channel gave nullopt");
          CheckElapsed("After fired early (timed recv)", start, d);
        }
        break;
      }
      case kLockInc: {
        int m = a % prog.nmutexes;
        Increment(s, m, a & 0x80);
        s->incs[w][m]++;
        break;
      }
      case kTryLockInc: {
        int m = a % prog.nmutexes;
        if (s->mu[m].TryLock()) {
          s->counter[m]++;
          s->mu[m].Unlock();
          s->incs[w][m]++;
        }
        break;
      }
      case kSleep: {
        absl::Duration d = Tiny(a);
        int64_t start = MonoNanos();
        goro::SleepFor(d);
        CheckElapsed("SleepFor returned early", start, d);
        break;
      }
      case kAfter: {
        absl::Duration d = Tiny(a);
        int64_t start = MonoNanos();
        std::optional<absl::Time> t = goro::After(d).Recv();
        if (!t) Fail("After channel gave nullopt");
        CheckElapsed("After fired early", start, d);
        break;
      }
      case kTimer: {
        // A stopped Timer's channel never has a time; one received is never
        // early, counted from the last Reset.
        absl::Duration d = Tiny(a);
        int64_t start = MonoNanos();
        goro::Timer t(d);
        auto nothing_left = [&t] {
          std::optional<absl::Time> v;
          return goro::Select(goro::OnRecv(t.C(), &v), goro::OnDefault()) == 1;
        };
        switch ((a >> 3) & 3) {
          case 0: {
            std::optional<absl::Time> v = t.C().Recv();
            if (!v) Fail("Timer channel gave nullopt");
            CheckElapsed("Timer fired early", start, d);
            break;
          }
          case 1:
            if (t.Stop() && !nothing_left()) Fail("a Timer stopped before it fired had a time");
            break;
          case 2: {
            absl::Duration d2 = Tiny(a >> 5);
            int64_t reset = MonoNanos();
            t.Reset(d2);
            std::optional<absl::Time> v = t.C().Recv();
            if (!v) Fail("reset Timer channel gave nullopt");
            CheckElapsed("reset Timer fired early", reset, d2);
            break;
          }
          default:
            goro::SleepFor(d);  // fired by now, perhaps
            t.Stop();
            if (!nothing_left()) Fail("a Timer had a time after Stop");
            break;
        }
        break;
      }
      case kTicker: {
        // Ticks come on the schedule, none early; a stopped Ticker's
        // channel never has a tick.
        absl::Duration d = Tiny(a) + absl::Microseconds(10);
        int64_t start = MonoNanos();
        goro::Ticker t(d);
        auto nothing_left = [&t] {
          std::optional<absl::Time> v;
          return goro::Select(goro::OnRecv(t.C(), &v), goro::OnDefault()) == 1;
        };
        switch ((a >> 3) & 3) {
          case 0:
            for (int k = 1; k <= 2; ++k) {
              if (!t.C().Recv()) Fail("Ticker channel gave nullopt");
              CheckElapsed("Ticker ticked early", start, k * d);
            }
            break;
          case 1:
            t.Stop();
            if (!nothing_left()) Fail("a Ticker had a tick after Stop");
            break;
          case 2: {
            absl::Duration d2 = Tiny(a >> 5) + absl::Microseconds(10);
            int64_t reset = MonoNanos();
            t.Reset(d2);
            if (!t.C().Recv()) Fail("reset Ticker channel gave nullopt");
            CheckElapsed("reset Ticker ticked early", reset, d2);
            break;
          }
          default:
            goro::SleepFor(3 * d);  // ticked by now, perhaps
            t.Stop();
            if (!nothing_left()) Fail("a Ticker had a tick after Stop");
            break;
        }
        break;
      }
      case kRWWrite: {
        if (a & 1) {
          if (!s->rw.TryLock()) break;
        } else {
          s->rw.Lock();
        }
        int64_t v = s->rw_counter;
        if (a & 2) goro::Yield();
        s->rw_counter = v + 1;
        s->rw.Unlock();
        s->rw_incs[w]++;
        break;
      }
      case kRWRead: {
        if (a & 1) {
          if (!s->rw.TryRLock()) break;
        } else {
          s->rw.RLock();
        }
        int64_t v = s->rw_counter;
        goro::Yield();
        if (s->rw_counter != v) Fail("RWMutex: the counter changed under a read lock");
        s->rw.RUnlock();
        break;
      }
      case kOnce: {
        int k = a & 1;
        s->once[k].Do([s, k, a] {
          if (a & 2) goro::Yield();
          s->once_runs[k].fetch_add(1, std::memory_order_relaxed);
        });
        if (s->once_runs[k].load(std::memory_order_relaxed) != 1) Fail("Once: Do returned, f ran other than once");
        break;
      }
      case kYield:
        goro::Yield();
        break;
      case kSpawnHelper: {
        if (s->helpers_spawned.fetch_add(1, std::memory_order_relaxed) >= kMaxHelpers) break;
        int m = a % prog.nmutexes;
        int times = 1 + (a >> 4) % 4;
        s->incs[w][m] += times;  // counted by the spawner; checked after Wait
        s->workers_wg.Add(1);
        goro::Go([s, m, times] {
          for (int i = 0; i < times; ++i) Increment(s, m, i & 1);
          s->finished.fetch_add(1, std::memory_order_release);
          s->workers_wg.Done();
        });
        break;
      }
      case kPrivate:
        PrivateOp(privs, ws.npriv, a);
        break;
    }
  }
  s->finished.fetch_add(1, std::memory_order_release);
  s->workers_wg.Done();
}

void Consumer(State* s, int c) {
  goro::Chan<uint64_t>& ch = s->chans[c];
  for (uint64_t v : ch) s->consumer_recv[c].emplace_back(c, v);
  // Closed and drained: every later receive gives nullopt at once.
  if (ch.Recv().has_value()) Fail("recv after close+drain gave a value");
  std::optional<uint64_t> out = 7;
  int i = goro::Select(goro::OnRecv(ch, &out), goro::OnDefault());
  CHECK_EQ("select on closed drained channel: chosen case", i, 0);
  if (out.has_value()) Fail("select recv on closed drained channel gave a value");
  CHECK_EQ("closed drained channel: len", ch.size(), 0);
  s->consumers_wg.Done();
}

// Every receiver must see each sender's values on each channel in the order
// they were sent (a subsequence of that sender's sends).
void CheckFifo(const RecvLog& log) {
  std::map<std::pair<int, int>, int64_t> last;  // (chan, sender) -> last seq
  for (const auto& [c, v] : log) {
    auto key = std::make_pair(c, SenderOf(v));
    auto it = last.find(key);
    if (it != last.end() && static_cast<int64_t>(SeqOf(v)) <= it->second) {
      Fail("per-sender FIFO order broken on a channel", it->second, SeqOf(v));
    }
    last[key] = SeqOf(v);
  }
}

void Main(const Program& prog) {
  State s;
  s.prog = &prog;
  for (int c = 0; c < prog.nchans; ++c) s.chans.emplace_back(prog.cap[c]);
  s.workers_wg.Add(prog.nworkers);
  s.consumers_wg.Add(prog.nchans + 1);
  for (int c = 0; c < prog.nchans; ++c) goro::Go([&s, c] { Consumer(&s, c); });
  // A second waiter on the workers' WaitGroup, besides this goroutine.
  std::atomic<int> watcher_saw{-1};
  goro::Go([&s, &watcher_saw] {
    s.workers_wg.Wait();
    watcher_saw.store(s.finished.load(std::memory_order_acquire), std::memory_order_relaxed);
    s.consumers_wg.Done();
  });
  for (int w = 0; w < prog.nworkers; ++w) goro::Go([&s, w] { Worker(&s, w); });

  s.workers_wg.Wait();
  int helpers = std::min(s.helpers_spawned.load(), kMaxHelpers);
  CHECK_EQ("WaitGroup.Wait returned before every Done", s.finished.load(std::memory_order_acquire),
           prog.nworkers + helpers);
  for (int m = 0; m < prog.nmutexes; ++m) {
    int64_t want = 0;
    for (int w = 0; w < prog.nworkers; ++w) want += s.incs[w][m];
    std::lock_guard<goro::Mutex> lock(s.mu[m]);
    CHECK_EQ("mutex-guarded counter", s.counter[m], want);
  }
  {
    int64_t want = 0;
    for (int w = 0; w < prog.nworkers; ++w) want += s.rw_incs[w];
    std::lock_guard<goro::RWMutex> lock(s.rw);
    CHECK_EQ("RWMutex-guarded counter", s.rw_counter, want);
  }
  for (auto& ch : s.chans) ch.Close();
  s.consumers_wg.Wait();
  CHECK_EQ("second WaitGroup waiter returned before every Done", watcher_saw.load(),
           prog.nworkers + helpers);

  // Every value sent was received exactly once, and nothing else was.
  std::unordered_map<uint64_t, int> seen;
  size_t nsent = 0;
  for (int w = 0; w < prog.nworkers; ++w) {
    for (uint64_t v : s.sent[w]) seen[v] = 0;
    nsent += s.sent[w].size();
  }
  if (seen.size() != nsent) Fail("a sender recorded the same value twice", seen.size(), nsent);
  auto account = [&seen](const RecvLog& log) {
    for (const auto& [c, v] : log) {
      auto it = seen.find(v);
      if (it == seen.end()) Fail("received a value nobody sent", static_cast<long long>(v), c);
      if (++it->second != 1) Fail("value received twice", static_cast<long long>(v), c);
    }
    CheckFifo(log);
  };
  for (int c = 0; c < prog.nchans; ++c) account(s.consumer_recv[c]);
  for (int w = 0; w < prog.nworkers; ++w) account(s.worker_recv[w]);
  for (const auto& [v, n] : seen) {
    if (n != 1) Fail("value sent but never received", static_cast<long long>(v), n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool started = [] {
    goro::Options o;
    o.max_procs = 2;  // real parallelism even where the machine has more cores
    // Short slices: more cooperative preemptions at runtime entries, so more
    // interleavings per input.
    o.time_slice = absl::Microseconds(200);
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
    // ASan's allocator (and libFuzzer) are linked into the main executable,
    // which goro treats as preemptible; a goroutine interrupted inside
    // malloc could resume on another thread with that thread's allocator
    // cache. Cooperative preemption still runs.
    o.async_preemption = false;
#endif
#endif
    goro::Run([] {}, o);
    return true;
  }();
  (void)started;
  Program prog = Decode(data, size);
  goro::Run([&prog] { Main(prog); });
  return 0;
}
