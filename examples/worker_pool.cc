// A worker pool: a fixed number of goroutines take jobs from a channel and
// send results back; the main goroutine hands out jobs and collects results.
//
//   ./worker_pool          # 4 workers, 100 jobs
#include <cstdio>

#include "goro/goro.h"

int main() {
  goro::Run([] {
    constexpr int kWorkers = 4;
    constexpr int kJobs = 100;
    goro::Chan<int> jobs(kJobs);
    goro::Chan<long> results(kJobs);
    goro::WaitGroup workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.Add(1);
      goro::Go([&] {
        for (int n : jobs) {  // until jobs is closed and drained
          long sum = 0;
          for (int i = 1; i <= n; ++i) sum += static_cast<long>(i) * i;
          results.Send(sum);
        }
        workers.Done();
      });
    }
    for (int j = 1; j <= kJobs; ++j) jobs.Send(j * 1000);
    jobs.Close();
    goro::Go([&] {  // close results once every worker is done
      workers.Wait();
      results.Close();
    });
    long total = 0;
    int count = 0;
    for (long r : results) {
      total += r;
      count++;
    }
    std::printf("%d results, checksum %ld\n", count, total);
  });
}
