// goro_rss: resident memory per parked goroutine.
//
//   goro_rss --procs=N [--n=1000000] [--watchdog=SECONDS]
//
// Spawns N goroutines that each count themselves and then block receiving on
// one shared unbuffered channel that nobody sends to. Once all N have counted
// themselves and had a moment to park, it reads the RSS again; then it closes
// the channel to release them and waits for all to finish. It prints one JSON
// line (the format of bench/go): KiB of RSS per parked goroutine, with the
// RSS before, after spawning, once parked and after release in the notes; and
// a second line that adds the page tables (VmPTE, which RSS does not count:
// each goroutine's stack is its own reservation, so each touched stack can
// need a page-table page of its own).
//
// Every wait is a bounded poll; a goroutine count that stops moving ends the
// program with a message instead of a hang.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_common.h"
#include "goro/goro.h"

namespace goro_bench {
namespace {

// Polls until `count` reaches `want`; dies after `limit`.
void WaitCount(const std::atomic<int64_t>& count, int64_t want, const char* what,
               absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (count.load(std::memory_order_acquire) < want) {
    if (absl::Now() > deadline) {
      const goro::Stats s = goro::GetStats();
      Die(absl::StrFormat(
          "goro_rss: timed out after %s waiting for %s: %d of %d (goroutines_live=%d threads=%d)",
          absl::FormatDuration(limit), what, count.load(), want, s.goroutines_live, s.threads));
    }
    goro::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace
}  // namespace goro_bench

int main(int argc, char** argv) {
  using namespace goro_bench;
  const int procs = ChooseProcs(TakeFlag(&argc, argv, "procs"), "goro_rss");
  int64_t n = 1000000;
  if (std::string v = TakeFlag(&argc, argv, "n"); !v.empty()) {
    if (!absl::SimpleAtoi(v, &n) || n < 1) Die("goro_rss: bad --n=" + v);
  }
  double watchdog_s = 300;
  if (std::string v = TakeFlag(&argc, argv, "watchdog"); !v.empty()) {
    if (!absl::SimpleAtod(v, &watchdog_s) || watchdog_s <= 0) Die("goro_rss: bad --watchdog=" + v);
  }
  if (argc > 1) Die(absl::StrFormat("goro_rss: unknown argument %s", argv[1]));

  goro::Options opts;
  opts.max_procs = procs;
  Watchdog::Start(watchdog_s);
  Watchdog::Arm("goro_rss");
  goro::Run([] {}, opts);  // start the runtime first, so its fixed cost is in `before`
  CheckProcs(procs, "goro_rss");

  Result r;
  double pt_per_g = 0;
  goro::Run(
      [&] {
        // The goroutine of the Run above may still be counted for a moment
        // after that Run returned; let the count settle before taking it.
        goro::SleepFor(absl::Milliseconds(50));
        const int64_t live0 = goro::GetStats().goroutines_live;
        const int64_t before = RssKiB();
        const int64_t pte_before = StatusKiB("VmPTE");
        goro::Chan<int> ch;  // never sent to; closed at the end
        std::atomic<int64_t> started{0}, finished{0};
        const absl::Time t0 = absl::Now();
        for (int64_t i = 0; i < n; ++i) {
          goro::Go([&ch, &started, &finished] {
            started.fetch_add(1, std::memory_order_release);
            (void)ch.Recv();  // blocks until Close
            finished.fetch_add(1, std::memory_order_release);
          });
        }
        const int64_t spawned = RssKiB();
        WaitCount(started, n, "goroutines to start", absl::Seconds(120));
        // Each goroutine counts itself just before it blocks; give the last
        // ones time to reach the receive, and check that all are still alive.
        goro::SleepFor(absl::Milliseconds(200));
        const absl::Duration spawn_park = absl::Now() - t0;
        const int64_t live = goro::GetStats().goroutines_live - live0;
        const int64_t parked = RssKiB();
        const int64_t pte_parked = StatusKiB("VmPTE");
        ch.Close();
        WaitCount(finished, n, "goroutines to finish", absl::Seconds(120));
        const int64_t released = RssKiB();
        // Stacks are given back asynchronously (sysmon's scavenger, at the
        // latest when every P goes idle): look again a little later.
        goro::SleepFor(absl::Milliseconds(500));
        const int64_t released_later = RssKiB();

        pt_per_g = static_cast<double>(pte_parked - pte_before) / static_cast<double>(n);
        r.name = "rss_per_parked_goroutine";
        r.procs = procs;
        r.iters = n;
        r.unit = "KiB/goroutine";
        r.value = static_cast<double>(parked - before) / static_cast<double>(n);
        r.extra = absl::StrFormat(
            "rss_kib before=%d spawned=%d parked=%d released=%d released+500ms=%d; page_tables_kib before=%d "
            "parked=%d (%.2f KiB/goroutine, not in RSS); goroutines_live before=%d, while parked=+%d; "
            "spawn+park %s",
            before, spawned, parked, released, released_later, pte_before, pte_parked,
            pt_per_g, live0, live,
            absl::FormatDuration(absl::Trunc(spawn_park, absl::Milliseconds(1))));
        if (live < n) {
          r.error = absl::StrFormat("only %d of %d goroutines live while parked", live, n);
        }
      },
      opts);
  Watchdog::Disarm();
  Emit(r);
  // RSS does not count the page tables; this second figure does.
  Result pt = r;
  pt.name = "rss_plus_page_tables_per_parked_goroutine";
  pt.value = r.value + pt_per_g;
  pt.extra.clear();
  Emit(pt);
  return r.error.empty() ? 0 : 1;
}
