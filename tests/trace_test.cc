// The event trace (goro/trace.h): the file is strict JSON in Chrome's
// trace-event format, and its events match what a workload did.
#include "goro/trace.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "goro/goro.h"
#include "goro/syscall.h"
#include "gtest/gtest.h"
#include "test_util.h"

// LeakSanitizer's hook, asked at exit: a program may define it to skip the
// check (sanitizer/lsan_interface.h).
extern "C" int __lsan_is_turned_off();

namespace {

using goro_test::RunBounded;

// ---------------------------------------------------------------------------
// A strict JSON parser (RFC 8259), small enough to trust: the CI machine may
// have no python3 to validate with.

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;

  const Json* Get(const std::string& key) const {
    for (const auto& [k, v] : obj) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  // Parses the whole input as one value; false (and error()) if it is not JSON.
  bool ParseDocument(Json* out) {
    Ws();
    if (!Value(out, 0)) return false;
    Ws();
    if (i_ != s_.size()) return Fail("trailing characters");
    return true;
  }
  const std::string& error() const { return err_; }

 private:
  bool Fail(const std::string& why) {
    if (err_.empty()) err_ = absl::StrCat(why, " at offset ", i_);
    return false;
  }
  void Ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Lit(const char* word) {
    size_t n = strlen(word);
    if (s_.compare(i_, n, word) != 0) return Fail("bad literal");
    i_ += n;
    return true;
  }
  bool Value(Json* out, int depth) {
    if (depth > 64) return Fail("nesting too deep");
    if (i_ >= s_.size()) return Fail("unexpected end");
    char c = s_[i_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->type = Json::kString;
      return String(&out->str);
    }
    if (c == 't') {
      out->type = Json::kBool;
      out->b = true;
      return Lit("true");
    }
    if (c == 'f') {
      out->type = Json::kBool;
      return Lit("false");
    }
    if (c == 'n') return Lit("null");
    return Number(out);
  }
  bool Digits() {
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool Number(Json* out) {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (!Digits()) {
      return Fail("bad number");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!Digits()) return Fail("bad fraction");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!Digits()) return Fail("bad exponent");
    }
    out->type = Json::kNumber;
    out->num = strtod(s_.substr(start, i_ - start).c_str(), nullptr);
    return true;
  }
  bool String(std::string* out) {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return Fail("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (i_ >= s_.size()) break;
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u':
          for (int k = 0; k < 4; ++k, ++i_) {
            if (i_ >= s_.size() || !isxdigit(static_cast<unsigned char>(s_[i_]))) return Fail("bad \\u escape");
          }
          out->push_back('?');
          break;
        default: return Fail("bad escape");
      }
    }
    return Fail("unterminated string");
  }
  bool Array(Json* out, int depth) {
    out->type = Json::kArray;
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      out->arr.emplace_back();
      Ws();
      if (!Value(&out->arr.back(), depth + 1)) return false;
      Ws();
      if (i_ >= s_.size()) return Fail("unterminated array");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      return Fail("expected , or ] in array");
    }
  }
  bool Object(Json* out, int depth) {
    out->type = Json::kObject;
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      Ws();
      if (i_ >= s_.size() || s_[i_] != '"') return Fail("expected a key");
      std::string key;
      if (!String(&key)) return false;
      Ws();
      if (i_ >= s_.size() || s_[i_] != ':') return Fail("expected :");
      ++i_;
      Ws();
      out->obj.emplace_back(key, Json());
      if (!Value(&out->obj.back().second, depth + 1)) return false;
      Ws();
      if (i_ >= s_.size()) return Fail("unterminated object");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      return Fail("expected , or } in object");
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string err_;
};

TEST(TraceJsonParserTest, AcceptsJsonAndRejectsTheRest) {
  for (const char* good : {"{}", "[]", "{\"a\":[1,-2.5e3,\"x\\n\",true,false,null]}", " 0 "}) {
    Json j;
    EXPECT_TRUE(Parser(good).ParseDocument(&j)) << good;
  }
  for (const char* bad : {"{", "[1,]", "{\"a\":1,}", "01", "1.", "\"a", "{a:1}", "[1] x", "",
                          "{\"a\":.5}", "[\"\t\"]"}) {
    Json j;
    EXPECT_FALSE(Parser(bad).ParseDocument(&j)) << bad;
  }
}

// ---------------------------------------------------------------------------
// The trace, read back.

struct Event {
  std::string name;
  char ph = 0;
  int64_t tid = 0;
  double ts = 0;   // microseconds
  double dur = 0;  // X only
  int64_t id = 0;  // s/f only
  std::map<std::string, std::string> args;  // numbers as their text
  int64_t Arg(const std::string& k) const {
    auto it = args.find(k);
    return it == args.end() ? -1 : strtoll(it->second.c_str(), nullptr, 10);
  }
};

struct Trace {
  std::vector<Event> events;
  std::map<int64_t, std::string> thread_names;  // tid -> "P0", ...

  std::vector<const Event*> Named(const std::string& name) const {
    std::vector<const Event*> v;
    for (const Event& e : events) {
      if (e.name == name) v.push_back(&e);
    }
    return v;
  }
  // Runs (X events) of goroutine g, in time order.
  std::vector<const Event*> Runs(int64_t g) const {
    std::vector<const Event*> v;
    for (const Event& e : events) {
      if (e.ph == 'X' && e.Arg("g") == g) v.push_back(&e);
    }
    std::sort(v.begin(), v.end(), [](const Event* a, const Event* b) { return a->ts < b->ts; });
    return v;
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string NumText(const Json& v) {
  if (v.type == Json::kString) return v.str;
  if (v.type == Json::kNumber) return absl::StrCat(static_cast<int64_t>(v.num));
  return "";
}

// Parses and checks the shape every trace must have; adds failures.
Trace LoadTrace(const std::string& path) {
  Trace t;
  std::string text = ReadFile(path);
  Json doc;
  Parser parser(text);
  if (!parser.ParseDocument(&doc)) {
    ADD_FAILURE() << path << " is not valid JSON: " << parser.error();
    return t;
  }
  const Json* list = doc.type == Json::kObject ? doc.Get("traceEvents") : nullptr;
  if (list == nullptr || list->type != Json::kArray) {
    ADD_FAILURE() << path << ": no traceEvents array";
    return t;
  }
  // One event per line, between the opening and closing lines.
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), list->arr.size() + 2) << "expected one event per line";
  for (const Json& ev : list->arr) {
    Event e;
    const Json* name = ev.Get("name");
    const Json* ph = ev.Get("ph");
    const Json* pid = ev.Get("pid");
    const Json* tid = ev.Get("tid");
    if (ev.type != Json::kObject || name == nullptr || ph == nullptr || pid == nullptr || tid == nullptr ||
        ph->str.size() != 1) {
      ADD_FAILURE() << "malformed event in " << path;
      continue;
    }
    e.name = name->str;
    e.ph = ph->str[0];
    e.tid = static_cast<int64_t>(tid->num);
    if (const Json* ts = ev.Get("ts")) e.ts = ts->num;
    if (const Json* dur = ev.Get("dur")) e.dur = dur->num;
    if (const Json* id = ev.Get("id")) e.id = static_cast<int64_t>(id->num);
    if (const Json* args = ev.Get("args")) {
      for (const auto& [k, v] : args->obj) e.args[k] = NumText(v);
    }
    if (e.ph == 'M' && e.name == "thread_name") t.thread_names[e.tid] = e.args["name"];
    if (e.ph != 'M') {
      EXPECT_NE(ev.Get("ts"), nullptr) << e.name << " has no ts";
    }
    if (e.ph == 'X') {
      EXPECT_GE(e.dur, 0) << e.name;
      EXPECT_EQ(e.name, absl::StrCat("G", e.Arg("g")));
      EXPECT_EQ(e.args["reason"].find("unknown"), std::string::npos)
          << "a run whose end the writer could not explain: " << e.args["reason"];
    }
    t.events.push_back(std::move(e));
  }
  // Runs on one P never overlap.
  std::map<int64_t, std::vector<const Event*>> by_tid;
  for (const Event& e : t.events) {
    if (e.ph == 'X') by_tid[e.tid].push_back(&e);
  }
  for (auto& [tid, runs] : by_tid) {
    EXPECT_EQ(t.thread_names[tid].substr(0, 1), "P") << "runs on a row that is not a P";
    std::sort(runs.begin(), runs.end(), [](const Event* a, const Event* b) { return a->ts < b->ts; });
    for (size_t i = 1; i < runs.size(); ++i) {
      EXPECT_GE(runs[i]->ts + 0.0015, runs[i - 1]->ts + runs[i - 1]->dur)
          << runs[i - 1]->name << " and " << runs[i]->name << " overlap on " << t.thread_names[tid];
    }
  }
  // The last event says how many there are.
  if (!t.events.empty()) {
    EXPECT_EQ(t.events.back().name, "trace stopped");
    EXPECT_EQ(t.events.back().Arg("events"), static_cast<int64_t>(t.events.size()));
  }
  return t;
}

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TMPDIR");
  return absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp", "/goro_trace_test_", getpid(), "_",
                      name, ".json");
}

// Checks block/unblock consistency for goroutine g: every unblock of g
// follows a run of g that ended blocked, one unblock per block.
void CheckBlocksMatchUnblocks(const Trace& t, int64_t g, const std::set<std::string>& reasons) {
  std::vector<std::pair<double, int>> seq;  // (ts, +1 block / -1 unblock)
  for (const Event* r : t.Runs(g)) {
    if (reasons.count(r->args.at("reason"))) seq.emplace_back(r->ts + r->dur, +1);
  }
  for (const Event* u : t.Named("GoUnblock")) {
    if (u->Arg("g") == g) seq.emplace_back(u->ts, -1);
  }
  std::stable_sort(seq.begin(), seq.end(), [](auto& a, auto& b) { return a.first < b.first; });
  int outstanding = 0;
  for (auto& [ts, d] : seq) {
    outstanding += d;
    ASSERT_GE(outstanding, 0) << "goroutine " << g << " unblocked at " << ts << " us without blocking";
    ASSERT_LE(outstanding, 1) << "goroutine " << g << " blocked twice without an unblock (at " << ts << " us)";
  }
  EXPECT_EQ(outstanding, 0) << "goroutine " << g << " is still blocked at the end";
}

TEST(TraceTest, EventsMatchAKnownWorkload) {
  const std::string path = TempPath("workload");
  constexpr int kSpawned = 100;
  constexpr int kRoundTrips = 300;
  int64_t main_id = 0, pinger = 0, ponger = 0, syscaller = 0;
  std::vector<int64_t> spawned(kSpawned, 0);
  RunBounded([&] {
    main_id = goro::GoroutineId();
    ASSERT_TRUE(goro::trace::Start(path).ok());
    // 100 goroutines that do nothing but finish.
    goro::WaitGroup wg;
    wg.Add(kSpawned);
    for (int i = 0; i < kSpawned; ++i) {
      goro::Go([&, i] {
        spawned[i] = goro::GoroutineId();
        wg.Done();
      });
    }
    wg.Wait();
    // A ping-pong over unbuffered channels.
    goro::Chan<int> ping, pong;
    goro::WaitGroup pp;
    pp.Add(2);
    goro::Go([&] {
      pinger = goro::GoroutineId();
      for (int i = 0; i < kRoundTrips; ++i) {
        ping.Send(i);
        pong.Recv();
      }
      pp.Done();
    });
    goro::Go([&] {
      ponger = goro::GoroutineId();
      for (int i = 0; i < kRoundTrips; ++i) pong.Send(*ping.Recv());
      pp.Done();
    });
    pp.Wait();
    // One marked blocking call, long enough for sysmon to hand its P off
    // (after 10 ms even with nothing else to run).
    goro::WaitGroup sc;
    sc.Add(1);
    goro::Go([&] {
      syscaller = goro::GoroutineId();
      goro::Syscall([] {
        timespec ts{0, 60 * 1000 * 1000};
        return nanosleep(&ts, nullptr);
      });
      sc.Done();
    });
    sc.Wait();
    ASSERT_TRUE(goro::trace::Stop().ok());
  });

  Trace t = LoadTrace(path);
  ASSERT_FALSE(t.events.empty());
  EXPECT_EQ(t.thread_names[1], "P0");
  EXPECT_EQ(t.thread_names[2], "P1");

  // Exactly one create of each spawned goroutine, by the main goroutine, and
  // exactly one run of each that ends with its exit.
  std::set<int64_t> ids(spawned.begin(), spawned.end());
  ASSERT_EQ(ids.size(), static_cast<size_t>(kSpawned));
  int creates = 0;
  for (const Event* c : t.Named("GoCreate")) {
    if (!ids.count(c->Arg("g"))) continue;
    ++creates;
    EXPECT_EQ(c->Arg("by"), main_id);
  }
  EXPECT_EQ(creates, kSpawned);
  for (int64_t g : ids) {
    int exits = 0;
    for (const Event* r : t.Runs(g)) exits += r->args.at("reason") == "exit";
    EXPECT_EQ(exits, 1) << "goroutine " << g;
  }

  // The ping-pong: both sides block on channels, and each block is matched
  // by exactly one unblock by the other side (or by the runtime).
  const std::set<std::string> chan_reasons = {"chan receive", "chan send"};
  int pinger_blocks = 0;
  for (const Event* r : t.Runs(pinger)) pinger_blocks += chan_reasons.count(r->args.at("reason"));
  EXPECT_GE(pinger_blocks, kRoundTrips / 2);
  CheckBlocksMatchUnblocks(t, pinger, chan_reasons);
  CheckBlocksMatchUnblocks(t, ponger, chan_reasons);
  for (const Event* u : t.Named("GoUnblock")) {
    if (u->Arg("g") == pinger) {
      EXPECT_EQ(u->Arg("by"), ponger);
    }
    if (u->Arg("g") == ponger) {
      EXPECT_EQ(u->Arg("by"), pinger);
    }
  }
  // Every goroutine that was unblocked had blocked (none was blocked before
  // the trace started).
  std::set<int64_t> unblocked;
  for (const Event* u : t.Named("GoUnblock")) unblocked.insert(u->Arg("g"));
  for (int64_t g : unblocked) {
    CheckBlocksMatchUnblocks(t, g, {"chan receive", "chan send", "sync.WaitGroup.Wait", "semacquire",
                                    "sync.Mutex.Lock"});
  }

  // Flows: each arrow's end has its start.
  std::set<int64_t> flow_starts;
  for (const Event& e : t.events) {
    if (e.ph == 's') flow_starts.insert(e.id);
  }
  int flow_ends = 0;
  for (const Event& e : t.events) {
    if (e.ph != 'f') continue;
    ++flow_ends;
    EXPECT_TRUE(flow_starts.count(e.id)) << "flow " << e.id << " ends but never starts";
  }
  EXPECT_GT(flow_ends, kRoundTrips / 2);

  // The blocking call: one enter and one exit, in that order.
  std::vector<const Event*> enters, exits;
  for (const Event* e : t.Named("SyscallEnter")) {
    if (e->Arg("g") == syscaller) enters.push_back(e);
  }
  for (const Event* e : t.Named("SyscallExit")) {
    if (e->Arg("g") == syscaller) exits.push_back(e);
  }
  ASSERT_EQ(enters.size(), 1u);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_GE(exits[0]->ts - enters[0]->ts, 59000.0);  // us: it slept 60 ms
  // Sysmon took its P meanwhile: the run ends there, and a new one begins
  // when the call returns.
  int handoffs = 0;
  for (const Event* h : t.Named("PHandoff")) handoffs += h->Arg("g") == syscaller;
  EXPECT_EQ(handoffs, 1);
  std::vector<std::string> reasons;
  for (const Event* r : t.Runs(syscaller)) reasons.push_back(r->args.at("reason"));
  // (Stop may come before its exit: it readied the main goroutine.)
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_EQ(reasons[0], "syscall: P handed off");
  EXPECT_TRUE(reasons[1] == "exit" || reasons[1] == "trace stopped (still running)") << reasons[1];
  if (!HasFailure()) unlink(path.c_str());
}

// Spinners that never call into goro, more of them than Ps: sysmon preempts
// them. Two are already running when the trace starts.

TEST(TraceTest, PreemptionsAndGoroutinesRunningAtStart) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // the spinners make no call
  const std::string path = TempPath("preempt");
  goro::Stats before{}, after{};
  RunBounded([&] {
    std::atomic<bool> stop{false};
    goro::WaitGroup wg;
    constexpr int kSpinners = 3;
    wg.Add(kSpinners);
    for (int i = 0; i < kSpinners; ++i) {
      goro::Go([&] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
        wg.Done();
      });
    }
    goro::SleepFor(absl::Milliseconds(30));  // let them occupy both Ps
    before = goro::GetStats();
    ASSERT_TRUE(goro::trace::Start(path).ok());
    goro::SleepFor(absl::Milliseconds(200));
    stop.store(true);
    wg.Wait();
    ASSERT_TRUE(goro::trace::Stop().ok());
    after = goro::GetStats();
  });
  Trace t = LoadTrace(path);
  uint64_t preempts = (after.async_preemptions + after.cooperative_preemptions) -
                      (before.async_preemptions + before.cooperative_preemptions);
  std::vector<const Event*> ev = t.Named("GoPreempt");
  EXPECT_GE(ev.size(), 1u);
  EXPECT_LE(ev.size(), preempts);
  int preempted_runs = 0, from_start = 0;
  for (const Event& e : t.events) {
    if (e.ph != 'X') continue;
    bool preempted = e.args.at("reason").rfind("preempted", 0) == 0;
    preempted_runs += preempted;
    if (e.ts == 0 && preempted) ++from_start;  // running when the trace started
  }
  EXPECT_EQ(preempted_runs, static_cast<int>(ev.size()));
  EXPECT_GE(from_start, 1) << "no run from the start of the trace for a goroutine already running";
  unlink(path.c_str());
}

// Start and Stop again and again while goroutines switch on every P: each
// file is complete and consistent.
TEST(TraceTest, StartStopWhileGoroutinesRun) {
  RunBounded([&] {
    std::atomic<bool> stop{false};
    goro::WaitGroup wg;
    constexpr int kPairs = 3;
    wg.Add(2 * kPairs);
    std::vector<std::unique_ptr<goro::Chan<int>>> chans;
    for (int i = 0; i < kPairs; ++i) {
      chans.push_back(std::make_unique<goro::Chan<int>>(i));  // capacities 0, 1, 2
      goro::Chan<int>* c = chans.back().get();
      goro::Go([&, c] {
        while (!stop.load(std::memory_order_relaxed)) {
          c->Send(1);
          goro::Yield();
        }
        c->Close();
        wg.Done();
      });
      goro::Go([&, c] {
        while (c->Recv().has_value()) goro::Yield();
        wg.Done();
      });
    }
    for (int round = 0; round < 10; ++round) {
      std::string path = TempPath(absl::StrCat("round", round));
      ASSERT_TRUE(goro::trace::Start(path).ok());
      goro::SleepFor(absl::Milliseconds(5));
      ASSERT_TRUE(goro::trace::Stop().ok());
      Trace t = LoadTrace(path);
      EXPECT_GT(t.Named("GoUnblock").size(), 0u) << "round " << round;
      if (HasFailure()) {
        ADD_FAILURE() << "kept " << path;
        break;
      }
      unlink(path.c_str());
    }
    stop.store(true);
    wg.Wait();
  });
}

TEST(TraceTest, Errors) {
  RunBounded([] {
    // A directory that does not exist, and one that is not a file.
    absl::Status s = goro::trace::Start("/nonexistent-goro-dir/trace.json");
    EXPECT_TRUE(absl::IsNotFound(s)) << s;
    EXPECT_NE(s.message().find("/nonexistent-goro-dir/trace.json"), absl::string_view::npos) << s;
    s = goro::trace::Start("/");
    EXPECT_FALSE(s.ok());
    // Stop without Start.
    s = goro::trace::Stop();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    // Start twice: the second fails and the first trace goes on.
    std::string path = TempPath("twice");
    ASSERT_TRUE(goro::trace::Start(path).ok());
    s = goro::trace::Start(TempPath("twice2"));
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    goro::Yield();
    EXPECT_TRUE(goro::trace::Stop().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(goro::trace::Stop()));
    LoadTrace(path);
    unlink(path.c_str());
  });
}

// GOROTRACE=path traces from the start of the runtime to exit. The child
// (a fresh process: EXPECT_EXIT re-executes the binary) starts the runtime.
void TraceWholeProgramChild(const std::string& path) {
  setenv("GOROTRACE", path.c_str(), 1);
  goro::Options opts = goro_test::TestOptions();
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(10);
        for (int i = 0; i < 10; ++i) goro::Go([&] { wg.Done(); });
        wg.Wait();
      },
      opts);
  exit(0);  // the trace is stopped and written by an atexit handler
}

TEST(TraceTest, GorotraceTracesTheWholeProgram) {
  // The child re-runs this body with another pid: it inherits the name.
  const char* inherited = getenv("GORO_TRACE_TEST_PATH");
  const std::string path = inherited != nullptr ? inherited : TempPath("env");
  setenv("GORO_TRACE_TEST_PATH", path.c_str(), 1);
  EXPECT_EXIT(TraceWholeProgramChild(path), ::testing::ExitedWithCode(0), "");
  Trace t = LoadTrace(path);
  // The Run goroutine (created by the main thread, on no P) and its ten.
  EXPECT_EQ(t.Named("GoCreate").size(), 11u);
  int exits = 0;
  for (const Event& e : t.events) exits += e.ph == 'X' && e.args.at("reason") == "exit";
  // The Run goroutine may still be finishing when the main thread exits.
  EXPECT_GE(exits, 10);
  EXPECT_LE(exits, 11);
  unlink(path.c_str());
}

// Set in a child forked from a goroutine's thread, which has none of the main
// thread's stack: all the main thread pointed to (its stand-in G, gtest's
// objects) looks leaked there, and LeakSanitizer would turn its exit status
// into 23.
volatile sig_atomic_t forked_from_a_goroutine = 0;
}  // namespace

extern "C" int __lsan_is_turned_off() { return forked_from_a_goroutine; }

namespace {

// A child forked without exec that calls exit() (as after a failed exec)
// runs the atexit handlers it inherited, GOROTRACE's among them, and shares
// the trace file's descriptor and offset. The trace has written part of its
// JSON when the child is forked, and holds more, formatted but not written
// yet. Fails if the trace is not valid JSON: the child wrote its "trace
// stopped" record and the closing bracket into the parent's file, before the
// parent's own; or the child's exit() wrote what the trace held buffered
// (in a stdio buffer, which exit() flushes) a second time.
void ForkExitWithGorotraceChild(const std::string& path) {
  setenv("GOROTRACE", path.c_str(), 1);
  goro::Options opts = goro_test::TestOptions();
  goro::Run(
      [&path] {
        // Thousands of records, more than one buffer's worth of JSON.
        goro::WaitGroup wg;
        for (int i = 0; i < 4; ++i) {
          wg.Add(1);
          goro::Go([&wg] {
            for (int k = 0; k < 20000; ++k) goro::Yield();
            wg.Done();
          });
        }
        wg.Wait();
        CHILD_CHECK(goro_test::Eventually([&path] {
                      struct stat sb;
                      return stat(path.c_str(), &sb) == 0 && sb.st_size > 0;
                    }),
                    "the trace wrote nothing to its file");
        goro::SleepFor(absl::Milliseconds(50));  // the writer turns the rest into JSON
        pid_t pid = fork();
        if (pid == 0) {
          forked_from_a_goroutine = 1;
          execl("/nonexistent-goro-dir/program", "program", static_cast<char*>(nullptr));
          exit(127);
        }
        int status = 0;
        goro::Syscall([&] { return waitpid(pid, &status, 0); });
        CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 127, "the forked child's status %d", status);
      },
      opts);
  exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(TraceTest, GorotraceSurvivesAForkedChildsExit) {
  const char* inherited = getenv("GORO_TRACE_TEST_PATH");
  const std::string path = inherited != nullptr ? inherited : TempPath("fork");
  setenv("GORO_TRACE_TEST_PATH", path.c_str(), 1);
  EXPECT_EXIT(ForkExitWithGorotraceChild(path), ::testing::ExitedWithCode(0), "");
  Trace t = LoadTrace(path);
  EXPECT_EQ(t.Named("trace stopped").size(), 1u);
  unlink(path.c_str());
}

TEST(TraceTest, GorotraceWithABadPathSaysSoAndRunsOn) {
  EXPECT_EXIT(TraceWholeProgramChild("/nonexistent-goro-dir/trace.json"), ::testing::ExitedWithCode(0),
              "goro: GOROTRACE: goro::trace::Start: cannot create /nonexistent-goro-dir/trace.json: "
              ".*; not tracing");
}

TEST(TraceTest, StartBeforeTheRuntimeFails) {
  // Under ctest each test runs in a fresh process (gtest_discover_tests).
  if (goro::GetStats().procs != 0) GTEST_SKIP() << "the runtime was started by an earlier test";
  absl::Status s = goro::trace::Start(TempPath("early"));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

}  // namespace
