// The event trace (include/goro/trace.h): recording, and the writer that turns
// the records into Chrome trace-event JSON.
//
// Recording. Each P has a buffer of fixed-size binary records (32 bytes); the
// P's owner appends to it with no lock (core/trace.h says who the owner is at
// each hook). Records made without a P go to one shared buffer under a spin
// lock. A full buffer is queued for the writer thread under a mutex - once
// per kBufRecords records - and replaced from a free list (allocated only
// when the writer has fallen behind and the list is empty).
//
// Start and Stop against running Ps. Every append runs between raising and
// lowering its buffer's `busy` flag, and re-checks `on` after raising it
// (Dekker's handshake, both sides sequentially consistent): Stop clears `on`,
// then waits until no flag is raised. After that no writer can touch a buffer
// (a late one sees `on` false), so Stop may take the half-full ones.
//
// Timestamps are the TSC where it ticks at a constant rate (rdtsc costs about
// half of clock_gettime here: 15 ns against 31 ns), else CLOCK_MONOTONIC.
// The writer converts ticks to nanoseconds with the slope between Start's
// (clock, TSC) pair and a fresh pair taken when it converts, which is never
// older than the records it converts, so the error stays within the jitter
// of one pair (tens of nanoseconds).
//
// The writer replays each P's records in order - they are one timeline,
// since only the P's owner writes them - keeping which goroutine runs on
// it and since when, and emits a complete ("X") event per run of a goroutine
// when the run ends, instant ("i") events for the rest, and a flow (s/f) from
// each unblock to the start of the unblocked goroutine's next run. A
// goroutine already running when the trace starts (the writer is told by a
// racy snapshot of each P, or learns it from the first record of that
// goroutine on the P) gets a run from the start of the trace; one still
// running at Stop, a run until the end.
#include "goro/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "arch/cpu.h"
#include "core/env.h"
#include "core/fatal.h"
#include "core/lock.h"
#include "core/runtime.h"
#include "core/trace.h"
#include "goro/preempt.h"
#include "goro/syscall.h"

namespace goro::internal::trace {

std::atomic<bool> on{false};

namespace {

enum class Kind : uint8_t {
  kCreate = 1,   // g: creator (0: a plain thread), arg: the new goroutine
  kStart,        // g: starts running; aux: flow id of its unblock (0: none)
  kBlock,        // g stops: parks; extra: WaitReason
  kYield,        // g stops: goro::Yield
  kPreempt,      // g stops: slice spent; extra: 1 async, 0 cooperative
  kEnd,          // g stops: returned
  kUnblock,      // g: unblocker (0: runtime), arg: made runnable; aux: flow id
  kSteal,        // arg: stolen goroutine; aux: victim P
  kSyscallEnter, // g
  kSyscallExit,  // g
  kHandoff,      // g: the goroutine whose M lost the P; extra: HandoffWhy
};

struct Record {
  uint64_t ts;
  int64_t g;
  int64_t arg;
  uint32_t aux;
  Kind kind;
  uint8_t extra;
  uint16_t unused;
};
static_assert(sizeof(Record) == 32, "a trace record should be 32 bytes");

constexpr uint32_t kBufRecords = 4096;  // 128 KiB per buffer

struct Buf {
  int32_t p = -1;  // the P whose records these are; -1: the shared buffer
  uint32_t n = 0;
  Buf* next = nullptr;
  Record rec[kBufRecords];
};

// One per P, and one shared (for records made off a P).
struct alignas(64) Writer {
  std::atomic<bool> busy{false};
  int32_t p = -1;
  Buf* buf = nullptr;     // written by the owner of the P while `on`
  uint32_t flow_seq = 0;  // the owner's
};

struct Pair {
  int64_t ns;
  uint64_t ticks;
};

// Trace-wide state. Never destroyed: a GOROTRACE trace is stopped by an
// atexit handler, and Ms run past static destructors.
struct State {
  absl::Mutex ctl_mu;  // serializes Start and Stop
  bool active ABSL_GUARDED_BY(ctl_mu) = false;

  // Allocated by the first Start (the P count is fixed by then), kept.
  Writer* writers = nullptr;  // sched.nprocs of them
  Writer shared;
  SpinLock shared_lock;

  bool use_tsc = false;
  // Incremented by each Start, before `on`. Atomic: a hook that passed the
  // check in one session may read it while the next Start increments it.
  std::atomic<uint32_t> session{0};
  Pair start{};

  // The hand-off to the writer thread.
  absl::Mutex q_mu;
  Buf* full_head ABSL_GUARDED_BY(q_mu) = nullptr;
  Buf* full_tail ABSL_GUARDED_BY(q_mu) = nullptr;
  Buf* free_list ABSL_GUARDED_BY(q_mu) = nullptr;
  bool stopping ABSL_GUARDED_BY(q_mu) = false;
  uint64_t records ABSL_GUARDED_BY(q_mu) = 0;  // counted as buffers are queued

  std::thread writer;
};

GORO_EARLY_INIT EarlyGlobal<State> st_storage;
constinit State& st = st_storage.value;

inline uint64_t Stamp() {
  return st.use_tsc ? arch::ReadTsc() : static_cast<uint64_t>(Nanotime());
}

// A (clock, ticks) pair read as close together as we can manage.
Pair ReadPair() {
  Pair best{};
  int64_t best_gap = INT64_MAX;
  for (int i = 0; i < 3; ++i) {
    int64_t a = Nanotime();
    uint64_t t = Stamp();
    int64_t b = Nanotime();
    if (b - a < best_gap) {
      best_gap = b - a;
      best = Pair{a + (b - a) / 2, t};
    }
  }
  return best;
}

Buf* NewBuf() { return new Buf; }  // the records stay uninitialized

// Queues b for the writer thread, which owns it from then on.
void QueueLocked(Buf* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.q_mu) {
  b->next = nullptr;
  if (st.full_tail != nullptr) {
    st.full_tail->next = b;
  } else {
    st.full_head = b;
  }
  st.full_tail = b;
  st.records += b->n;
}

// Queues a full buffer for the writer and returns an empty one.
Buf* SwapFull(Buf* b) {
  const int32_t p = b->p;  // b is the writer's once queued: read nothing after
  Buf* fresh;
  {
    absl::MutexLock lock(&st.q_mu);
    QueueLocked(b);
    fresh = st.free_list;
    if (fresh != nullptr) st.free_list = fresh->next;
  }
  if (fresh == nullptr) fresh = NewBuf();  // the writer is behind
  fresh->p = p;
  fresh->n = 0;
  fresh->next = nullptr;
  return fresh;
}

void Append(Writer& w, const Record& r) {
  w.busy.store(true, std::memory_order_seq_cst);
  if (on.load(std::memory_order_seq_cst)) {
    Buf* b = w.buf;
    Record& slot = b->rec[b->n];
    slot = r;
    slot.ts = Stamp();
    if (++b->n == kBufRecords) w.buf = SwapFull(b);
  }
  w.busy.store(false, std::memory_order_release);
}

void Emit(P* p, const Record& r) {
  if (p != nullptr) {
    Append(st.writers[p->id], r);
    return;
  }
  st.shared_lock.Lock();
  Append(st.shared, r);
  st.shared_lock.Unlock();
}

int64_t IdOf(G* g) { return g != nullptr ? g->id : 0; }

Record Make(Kind k, int64_t g, int64_t arg = 0, uint32_t aux = 0, uint8_t extra = 0) {
  Record r{};
  r.kind = k;
  r.g = g;
  r.arg = arg;
  r.aux = aux;
  r.extra = extra;
  return r;
}

}  // namespace

void RecordCreate(P* p, G* newg) {
  Emit(p, Make(Kind::kCreate, IdOf(CurrentGoroutine()), newg->id));
}

void RecordStart(P* p, G* g) {
  uint64_t f = g->trace_flow;
  g->trace_flow = 0;
  uint32_t flow = (f >> 32) == st.session.load(std::memory_order_relaxed) ? static_cast<uint32_t>(f) : 0;
  Emit(p, Make(Kind::kStart, g->id, 0, flow));
}

void RecordBlock(P* p, G* g) {
  Emit(p, Make(Kind::kBlock, g->id, 0, 0, static_cast<uint8_t>(g->wait_reason)));
}

void RecordYield(P* p, G* g) { Emit(p, Make(Kind::kYield, g->id)); }

void RecordPreempt(P* p, G* g, bool async) {
  Emit(p, Make(Kind::kPreempt, g->id, 0, 0, async ? 1 : 0));
}

void RecordEnd(P* p, G* g) { Emit(p, Make(Kind::kEnd, g->id)); }

void RecordUnblock(G* g) {
  M* m = CurrentM();
  P* p = m != nullptr ? m->p : nullptr;
  G* by = CurrentGoroutine();
  uint32_t flow = 0;
  if (p != nullptr && by != nullptr) {
    // A flow arrow needs a run of `by` on p to start from. Ids: 10 bits of P
    // (every P: at most kMaxProcsLimit), 22 of a per-P sequence (reused only
    // after 4M unblocks on one P).
    static_assert(kMaxProcsLimit <= (1 << 10), "P ids must fit the flow id's 10 bits");
    Writer& w = st.writers[p->id];
    w.flow_seq = (w.flow_seq + 1) & 0x3fffff;
    if (w.flow_seq == 0) w.flow_seq = 1;
    flow = (static_cast<uint32_t>(p->id) << 22) | w.flow_seq;
    g->trace_flow = (uint64_t{st.session.load(std::memory_order_relaxed)} << 32) | flow;
  }
  Emit(p, Make(Kind::kUnblock, IdOf(by), g->id, flow));
}

void RecordSteal(P* p, P* victim, G* g) {
  Emit(p, Make(Kind::kSteal, 0, g->id, static_cast<uint32_t>(victim->id)));
}

void RecordSyscall(P* p, G* g, bool enter) {
  Emit(p, Make(enter ? Kind::kSyscallEnter : Kind::kSyscallExit, g->id));
}

void RecordHandoff(P* p, G* g, HandoffWhy why) {
  Emit(p, Make(Kind::kHandoff, IdOf(g), 0, 0, static_cast<uint8_t>(why)));
}

// ---------------------------------------------------------------------------
// The writer thread: records to JSON.

namespace {

// One line per event; each but the last ends with a comma. Formats into its
// own buffer with memcpy and a hand-rolled integer conversion: the writer
// thread must keep up with millions of records a second. Writes the buffer
// with write(2), not through stdio: a child forked without exec shares the
// file's descriptor and offset, and its exit() flushes every stdio buffer,
// which would write what the parent had buffered there a second time. This
// buffer only the parent's writer ever writes.
class JsonOut {
 public:
  explicit JsonOut(int fd) : fd_(fd), buf_(new char[kCap]) {}
  ~JsonOut() { delete[] buf_; }
  JsonOut(const JsonOut&) = delete;
  JsonOut& operator=(const JsonOut&) = delete;

  // Starts an event line: {"name":"<name>","ph":"<ph>","pid":1,"tid":<tid>
  JsonOut& Begin(absl::string_view name, char ph, int64_t tid) {
    Put("{\"name\":\"");
    Put(name);
    return Phase(ph, tid);
  }
  // The same for a run of goroutine g: "name":"G<g>", "ph":"X".
  JsonOut& BeginRun(int64_t g, int64_t tid) {
    Put("{\"name\":\"G");
    PutInt(g);
    return Phase('X', tid);
  }
  JsonOut& Ts(absl::string_view key, int64_t ns) {
    Put(",");
    Key(key);
    PutMicros(ns);
    return *this;
  }
  JsonOut& Raw(absl::string_view s) {
    Put(s);
    return *this;
  }
  JsonOut& Int(absl::string_view key, int64_t v) {
    Key(key);
    PutInt(v);
    return *this;
  }
  JsonOut& Str(absl::string_view key, absl::string_view v) {
    Key(key);
    Put("\"");
    Put(v);
    Put("\"");
    return *this;
  }
  // "key":"P<id>"
  JsonOut& PName(absl::string_view key, int64_t id) {
    Key(key);
    Put("\"P");
    PutInt(id);
    Put("\"");
    return *this;
  }
  // Ends an event line.
  void End(bool last = false) {
    Put(last ? absl::string_view("}\n") : absl::string_view("},\n"));
    ++events_;
    if (len_ >= kCap - kMaxEvent) Flush();
  }
  void Line(absl::string_view s) {
    Put(s);
    Put("\n");
  }
  void Flush() {
    for (size_t done = 0; done < len_ && err_ == 0;) {
      ssize_t n = write(fd_, buf_ + done, len_ - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n == 0) {
        err_ = EIO;
      } else if (errno != EINTR) {
        err_ = errno;
      }
    }
    len_ = 0;
  }
  uint64_t events() const { return events_; }
  int err() const { return err_; }

 private:
  static constexpr size_t kCap = 1 << 20;  // one write(2) per MiB
  static constexpr size_t kMaxEvent = 1024;  // no event line is longer

  JsonOut& Phase(char ph, int64_t tid) {
    Put("\",\"ph\":\"");
    buf_[len_++] = ph;
    Put("\",\"pid\":1,\"tid\":");
    PutInt(tid);
    return *this;
  }
  // "key":
  void Key(absl::string_view key) {
    Put("\"");
    Put(key);
    Put("\":");
  }
  void Put(absl::string_view s) {
    if (len_ + s.size() > kCap) Flush();  // only a long header line gets here
    memcpy(buf_ + len_, s.data(), s.size());
    len_ += s.size();
  }
  void PutInt(int64_t v) {
    char tmp[24];
    char* e = tmp + sizeof tmp;
    char* p = e;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      *--p = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) *--p = '-';
    Put(absl::string_view(p, static_cast<size_t>(e - p)));
  }
  // Microseconds with nanosecond precision: 1234.567.
  void PutMicros(int64_t ns) {
    if (ns < 0) ns = 0;
    PutInt(ns / 1000);
    char frac[4] = {'.', static_cast<char>('0' + ns / 100 % 10), static_cast<char>('0' + ns / 10 % 10),
                    static_cast<char>('0' + ns % 10)};
    Put(absl::string_view(frac, 4));
  }

  int fd_;
  char* buf_;
  size_t len_ = 0;
  uint64_t events_ = 0;
  int err_ = 0;
};

// What the writer knows about one P's timeline.
struct Row {
  int64_t tid = 0;
  int64_t running = 0;   // the goroutine running, 0: none
  int64_t since = 0;     // ns since the start of the trace
  uint32_t flow = 0;     // flow id ending at this run
  bool seen = false;     // any record of this P seen yet
  bool snapshot = false; // `running` comes from Start's snapshot
  int64_t last = 0;      // the latest timestamp (ns) on this row
};

const char* HandoffReason(uint8_t why) {
  return why == static_cast<uint8_t>(HandoffWhy::kSyscall) ? "syscall: P handed off"
                                                             : "blocked call: P handed off";
}

class Replay {
 public:
  // ticks_per_ns: Start's estimate, for the first 100k ticks.
  Replay(int fd, int nprocs, Pair start, bool use_tsc, double ticks_per_ns,
         const std::vector<int64_t>& running_at_start)
      : out_(fd), start_(start), use_tsc_(use_tsc), ticks_per_ns_(ticks_per_ns), rows_(nprocs + 1) {
    for (int i = 0; i <= nprocs; ++i) rows_[i].tid = i + 1;  // tid 0 is special in viewers
    for (int i = 0; i < nprocs; ++i) {
      if (running_at_start[i] != 0) {
        rows_[i].running = running_at_start[i];
        rows_[i].snapshot = true;
      }
    }
    now_ = start_;
  }

  void Header(int nprocs) {
    out_.Line("{\"traceEvents\":[");
    out_.Begin("process_name", 'M', rows_[0].tid).Raw(",\"args\":{").Str("name", "goro").Raw("}").End();
    for (int i = 0; i <= nprocs; ++i) {
      std::string name = i < nprocs ? absl::StrCat("P", i) : std::string("no P");
      out_.Begin("thread_name", 'M', rows_[i].tid).Raw(",\"args\":{").Str("name", name).Raw("}").End();
      out_.Begin("thread_sort_index", 'M', rows_[i].tid).Raw(",\"args\":{").Int("sort_index", i).Raw("}")
          .End();
    }
  }

  // Takes a fresh clock pair: records converted after this are older than it.
  void Recalibrate(Pair p) { now_ = p; }

  void Process(const Buf& b) {
    Row& row = b.p >= 0 ? rows_[b.p] : rows_.back();
    bool on_p = b.p >= 0;
    for (uint32_t i = 0; i < b.n; ++i) Apply(row, on_p, b.rec[i]);
  }

  // Ends every run still open, writes the final event, flushes.
  void Finish(Pair end, uint64_t records) {
    now_ = end;
    int64_t t = ToNs(end.ticks);
    for (size_t i = 0; i + 1 < rows_.size(); ++i) {
      Row& row = rows_[i];
      if (row.running != 0) Close(row, std::max(t, row.last), "trace stopped (still running)");
    }
    out_.Begin("trace stopped", 'i', rows_.back().tid).Raw(",\"s\":\"g\"").Ts("ts", t)
        .Raw(",\"args\":{").Int("records", static_cast<int64_t>(records)).Raw(",")
        .Int("events", static_cast<int64_t>(out_.events() + 1)).Raw("}").End(/*last=*/true);
    out_.Line("],\"displayTimeUnit\":\"ns\"}");
    out_.Flush();
  }

  int err() const { return out_.err(); }

 private:
  int64_t ToNs(uint64_t ticks) const {
    if (!use_tsc_) return static_cast<int64_t>(ticks) - start_.ns;
    double dt = static_cast<double>(static_cast<int64_t>(ticks - start_.ticks));
    double slope = now_.ticks > start_.ticks + 100000
                       ? static_cast<double>(now_.ns - start_.ns) /
                             static_cast<double>(now_.ticks - start_.ticks)
                       : 1.0 / ticks_per_ns_;
    return static_cast<int64_t>(dt * slope);
  }

  void Open(Row& row, int64_t g, int64_t at, uint32_t flow) {
    row.running = g;
    row.since = at;
    row.flow = flow;
    row.snapshot = false;
  }

  void Close(Row& row, int64_t at, absl::string_view reason) {
    int64_t g = row.running;
    out_.BeginRun(g, row.tid).Raw(",\"cat\":\"goroutine\"").Ts("ts", row.since)
        .Ts("dur", at - row.since).Raw(",\"args\":{").Int("g", g).Raw(",").Str("reason", reason).Raw("}")
        .End();
    if (row.flow != 0) {
      // Bound to the run it ends in: placed inside it, not at its edge,
      // where the previous run ends too.
      out_.Begin("unblock", 'f', row.tid).Raw(",\"cat\":\"goroutine\",\"bp\":\"e\"")
          .Ts("ts", row.since + (at - row.since) / 2).Raw(",").Int("id", row.flow).End();
    }
    row.running = 0;
    row.flow = 0;
  }

  // A record made by goroutine g on this row's P: g is running there. If the
  // writer does not know that yet, g was running when the trace started (its
  // first record on this P), or it got this P without passing through the
  // scheduler's start (never, barring a record this writer lost).
  void Ensure(Row& row, int64_t g, int64_t at) {
    if (g == 0 || row.running == g) return;
    if (row.running != 0) Close(row, at, absl::StrCat("unknown (then a record by G", g, ")"));
    Open(row, g, row.seen ? at : 0, 0);
  }

  void Instant(Row& row, absl::string_view name, int64_t at) {
    out_.Begin(name, 'i', row.tid).Raw(",\"s\":\"t\"").Ts("ts", at).Raw(",\"args\":{");
  }

  void Apply(Row& row, bool on_p, const Record& r) {
    int64_t at = ToNs(r.ts);
    if (at < row.last) at = row.last;  // TSCs of two CPUs may disagree slightly
    row.last = at;
    if (on_p && !row.seen && row.snapshot) {
      // Start's snapshot of this P holds only if the P's first record is by
      // the goroutine it names (then it ran since the start); otherwise that
      // goroutine stopped before the trace began.
      bool by_snapshot = r.kind != Kind::kStart && r.g == row.running;
      if (!by_snapshot) row.running = 0;
    }
    switch (r.kind) {
      case Kind::kStart:
        if (row.running != 0) Close(row, at, absl::StrCat("unknown (then G", r.g, " started)"));
        Open(row, r.g, at, r.aux);
        break;
      case Kind::kBlock:
      case Kind::kYield:
      case Kind::kPreempt:
      case Kind::kEnd: {
        Ensure(row, r.g, at);
        absl::string_view reason;
        if (r.kind == Kind::kBlock) {
          const char* w = WaitReasonString(static_cast<WaitReason>(r.extra));
          reason = *w != '\0' ? w : "blocked";
        } else if (r.kind == Kind::kYield) {
          reason = "yield";
        } else if (r.kind == Kind::kEnd) {
          reason = "exit";
        } else {
          reason = r.extra ? "preempted (async)" : "preempted (cooperative)";
          Instant(row, "GoPreempt", at);
          out_.Int("g", r.g).Raw(",").Str("how", r.extra ? "async" : "cooperative").Raw("}").End();
        }
        Close(row, at, reason);
        break;
      }
      case Kind::kCreate:
        if (on_p) Ensure(row, r.g, at);
        Instant(row, "GoCreate", at);
        out_.Int("g", r.arg).Raw(",").Int("by", r.g).Raw("}").End();
        break;
      case Kind::kUnblock:
        if (on_p) Ensure(row, r.g, at);
        Instant(row, "GoUnblock", at);
        out_.Int("g", r.arg).Raw(",").Int("by", r.g).Raw("}").End();
        if (r.aux != 0) {
          out_.Begin("unblock", 's', row.tid).Raw(",\"cat\":\"goroutine\"").Ts("ts", at).Raw(",")
              .Int("id", r.aux).End();
        }
        break;
      case Kind::kSteal:
        Instant(row, "GoSteal", at);
        out_.Int("g", r.arg).Raw(",").PName("from", r.aux).Raw("}").End();
        break;
      case Kind::kSyscallEnter:
      case Kind::kSyscallExit:
        Ensure(row, r.g, at);
        Instant(row, r.kind == Kind::kSyscallEnter ? "SyscallEnter" : "SyscallExit", at);
        out_.Int("g", r.g).Raw("}").End();
        break;
      case Kind::kHandoff:
        Instant(row, "PHandoff", at);
        out_.Int("g", r.g).Raw(",").Str("why", r.extra == static_cast<uint8_t>(HandoffWhy::kSyscall)
                                                   ? "syscall" : "blocked call").Raw("}").End();
        if (row.running != 0) Close(row, at, HandoffReason(r.extra));
        break;
    }
    row.seen = true;
  }

  JsonOut out_;
  Pair start_;
  Pair now_;
  bool use_tsc_;
  double ticks_per_ns_;
  std::vector<Row> rows_;
};

void WriterMain(Replay* replay) {
  for (;;) {
    Buf* list;
    bool stopping;
    {
      absl::MutexLock lock(&st.q_mu);
      st.q_mu.Await(absl::Condition(
          +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->full_head != nullptr || s->stopping; },
          &st));
      list = st.full_head;
      st.full_head = st.full_tail = nullptr;
      stopping = st.stopping;
    }
    if (list != nullptr) replay->Recalibrate(ReadPair());
    while (list != nullptr) {
      Buf* b = list;
      list = b->next;
      replay->Process(*b);
      absl::MutexLock lock(&st.q_mu);
      b->next = st.free_list;
      st.free_list = b;
    }
    if (stopping) {
      absl::MutexLock lock(&st.q_mu);
      if (st.full_head == nullptr) return;
    }
  }
}

// The writer's session, owned by Start/Stop under ctl_mu.
struct Session {
  int fd = -1;
  std::string path;
  Replay* replay = nullptr;
};
Session* session = nullptr;  // guarded by st.ctl_mu

// Waits until no append is in progress on w (after `on` was cleared).
void WaitQuiet(Writer& w) {
  for (int i = 0; w.busy.load(std::memory_order_seq_cst); ++i) {
    if (i < 100) {
      arch::CpuRelax();
    } else {
      sched_yield();  // its M may have been descheduled mid-append
    }
  }
}

// mark_blocking: wait for the writer inside a marked blocking region, so that
// a goroutine calling Stop lets another thread run its P meanwhile.
absl::Status StopLocked(bool mark_blocking) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.ctl_mu) {
  on.store(false, std::memory_order_seq_cst);
  for (int i = 0; i < sched.nprocs; ++i) WaitQuiet(st.writers[i]);
  st.shared_lock.Lock();  // an append to the shared buffer holds it throughout
  st.shared_lock.Unlock();
  WaitQuiet(st.shared);
  Pair end = ReadPair();
  // Hand over the partial buffers, P by P after their full ones, and stop.
  uint64_t records;
  {
    absl::MutexLock lock(&st.q_mu);
    for (int i = 0; i < sched.nprocs; ++i) {
      QueueLocked(st.writers[i].buf);
      st.writers[i].buf = nullptr;
    }
    QueueLocked(st.shared.buf);
    st.shared.buf = nullptr;
    st.stopping = true;
  }
  std::optional<SyscallScope> blocking;  // after `on` is off: records nothing
  if (mark_blocking) blocking.emplace();
  st.writer.join();
  {
    absl::MutexLock lock(&st.q_mu);
    records = st.records;
    st.stopping = false;
    st.records = 0;
  }
  Session* s = session;
  session = nullptr;
  s->replay->Finish(end, records);
  int err = s->replay->err();
  if (close(s->fd) != 0 && err == 0 && errno != EINTR) err = errno;
  std::string path = s->path;
  delete s->replay;
  delete s;
  {
    absl::MutexLock lock(&st.q_mu);  // give the memory back
    while (Buf* b = st.free_list) {
      st.free_list = b->next;
      delete b;
    }
  }
  st.active = false;
  if (err != 0) {
    return absl::ErrnoToStatus(err, absl::StrCat("goro::trace::Stop: writing ", path));
  }
  return absl::OkStatus();
}

Buf* TakeFreeBuf(int32_t p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.q_mu) {
  Buf* b = st.free_list;
  if (b != nullptr) {
    st.free_list = b->next;
  } else {
    b = NewBuf();
  }
  b->p = p;
  b->n = 0;
  b->next = nullptr;
  return b;
}

}  // namespace

absl::Status StartTrace(const std::string& path) {
  absl::MutexLock lock(&st.ctl_mu);
  if (st.active) return absl::FailedPreconditionError("goro::trace::Start: a trace is already running");
  if (!sched.started.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        "goro::trace::Start: the runtime has not started (call it from a goroutine, or after goro::Run)");
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("goro::trace::Start: cannot create ", path));
  }
  const int n = sched.nprocs;
  if (st.writers == nullptr) {
    st.writers = new Writer[n];
    for (int i = 0; i < n; ++i) st.writers[i].p = i;
    st.use_tsc = arch::ProbeCpu().invariant_tsc;
  }
  {
    absl::MutexLock q(&st.q_mu);
    // Two spare buffers per P, so the writer can fall behind a little
    // before anyone allocates.
    for (int i = 0; i < 2 * n + 2; ++i) {
      Buf* b = NewBuf();
      b->next = st.free_list;
      st.free_list = b;
    }
    for (int i = 0; i < n; ++i) st.writers[i].buf = TakeFreeBuf(i);
    st.shared.buf = TakeFreeBuf(-1);
  }
  double ticks_per_ns = 1.0;
  if (st.use_tsc) {
    // A first estimate, for conversions in the first 100k ticks.
    Pair a = ReadPair();
    Pair b;
    do b = ReadPair(); while (b.ns - a.ns < 200 * 1000);
    ticks_per_ns = static_cast<double>(b.ticks - a.ticks) / static_cast<double>(b.ns - a.ns);
  }
  // Racy snapshot of who runs where (see Replay::Apply for how it is used).
  std::vector<int64_t> running(n, 0);
  for (int i = 0; i < n; ++i) {
    P* p = sched.allp[i];
    M* m = p->m.load(std::memory_order_acquire);
    if (m == nullptr || p->status.load(std::memory_order_acquire) != P::Status::kRunning) continue;
    G* g = __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE);
    if (g != nullptr) running[i] = g->id;
  }
  st.session.fetch_add(1, std::memory_order_relaxed);
  st.start = ReadPair();
  auto* s = new Session();
  s->fd = fd;
  s->path = path;
  s->replay = new Replay(fd, n, st.start, st.use_tsc, ticks_per_ns, running);
  s->replay->Header(n);
  session = s;
  st.writer = std::thread(WriterMain, s->replay);
  st.active = true;
  on.store(true, std::memory_order_seq_cst);
  return absl::OkStatus();
}

absl::Status StopTrace(bool mark_blocking) {
  absl::MutexLock lock(&st.ctl_mu);
  if (!st.active) return absl::FailedPreconditionError("goro::trace::Stop: no trace is running");
  return StopLocked(mark_blocking);
}

void StartFromEnvironment() {
  const char* path = std::getenv("GOROTRACE");
  if (path == nullptr || *path == '\0') return;
  absl::Status s = StartTrace(path);
  if (!s.ok()) {
    WriteStderr(absl::StrCat("goro: GOROTRACE: ", s.message(), "; not tracing\n"));
    return;
  }
  std::atexit([] {
    AwaitFatalReportAtExit();  // registered after FreezeAtExit: runs before it
    // A child forked without exec that calls exit() (after a failed exec,
    // say) shares the file's descriptor and offset: its closing records
    // went into the parent's trace, after which that was no longer JSON.
    if (in_forked_child) return;
    // exit() may run on a goroutine: keep it on this thread while it holds
    // the trace's absl::Mutexes (see goro::trace::Stop).
    NoPreemptScope no_preempt;
    absl::Status s = StopTrace(/*mark_blocking=*/false);  // the process is ending
    // FailedPrecondition: the program stopped it itself.
    if (!s.ok() && !absl::IsFailedPrecondition(s)) {
      WriteStderr(absl::StrCat("goro: GOROTRACE: ", s.message(), "\n"));
    }
  });
}

}  // namespace goro::internal::trace

namespace goro::trace {

// Both hold absl::Mutexes, which must be released on the thread that took
// them: a goroutine must not be preempted (and moved) meanwhile.

absl::Status Start(const std::string& path) {
  NoPreemptScope no_preempt;
  return internal::trace::StartTrace(path);
}

absl::Status Stop() {
  NoPreemptScope no_preempt;
  return internal::trace::StopTrace(/*mark_blocking=*/true);
}

}  // namespace goro::trace
