// The local run queue under concurrent stealing: every goroutine put in comes
// out exactly once, whether the owner takes it, a thief steals it, or the
// owner moves it to the (here simulated) global queue on overflow.
#include "core/runq.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "gtest/gtest.h"

namespace goro::internal {
namespace {

std::vector<std::unique_ptr<G>> MakeGs(int n) {
  std::vector<std::unique_ptr<G>> gs;
  for (int i = 0; i < n; ++i) {
    gs.push_back(std::make_unique<G>());
    gs.back()->id = i;
  }
  return gs;
}

TEST(RunQueueTest, FifoAndRunnextFirst) {
  auto gs = MakeGs(4);
  RunQueue q;
  ASSERT_TRUE(q.PutTail(gs[0].get()));
  ASSERT_TRUE(q.PutTail(gs[1].get()));
  EXPECT_EQ(q.PutNext(gs[2].get()), nullptr);
  // A second PutNext displaces the first, which the caller must queue.
  EXPECT_EQ(q.PutNext(gs[3].get()), gs[2].get());
  bool inherit = false;
  EXPECT_EQ(q.Get(&inherit), gs[3].get());
  EXPECT_TRUE(inherit);
  EXPECT_EQ(q.Get(&inherit), gs[0].get());
  EXPECT_FALSE(inherit);
  EXPECT_EQ(q.Get(&inherit), gs[1].get());
  EXPECT_EQ(q.Get(&inherit), nullptr);
  EXPECT_TRUE(q.Empty());
}

TEST(RunQueueTest, FullRingOverflowsHalf) {
  auto gs = MakeGs(RunQueue::kSize + 1);
  RunQueue q;
  for (uint32_t i = 0; i < RunQueue::kSize; ++i) ASSERT_TRUE(q.PutTail(gs[i].get()));
  EXPECT_FALSE(q.PutTail(gs[RunQueue::kSize].get()));
  G* batch[RunQueue::kSize / 2 + 1];
  uint32_t n = q.TakeHalf(gs[RunQueue::kSize].get(), batch);
  ASSERT_EQ(n, RunQueue::kSize / 2 + 1);
  // The oldest half leaves, in order, followed by the new one.
  for (uint32_t i = 0; i < RunQueue::kSize / 2; ++i) EXPECT_EQ(batch[i], gs[i].get());
  EXPECT_EQ(batch[n - 1], gs[RunQueue::kSize].get());
  EXPECT_EQ(q.Size(), RunQueue::kSize / 2);
}

TEST(RunQueueTest, StealTakesHalf) {
  auto gs = MakeGs(10);
  RunQueue victim, thief;
  for (auto& g : gs) ASSERT_TRUE(victim.PutTail(g.get()));
  G* got = thief.StealFrom(victim, false);
  ASSERT_NE(got, nullptr);
  // 5 stolen: one returned, four left in the thief's ring.
  EXPECT_EQ(thief.Size(), 4u);
  EXPECT_EQ(victim.Size(), 5u);
}

TEST(RunQueueTest, StealRunnextOnlyWhenAllowed) {
  auto gs = MakeGs(1);
  RunQueue victim, thief;
  victim.PutNext(gs[0].get());
  EXPECT_EQ(thief.StealFrom(victim, false), nullptr);
  EXPECT_EQ(thief.StealFrom(victim, true), gs[0].get());
  EXPECT_TRUE(victim.Empty());
}

// One owner producing and consuming, three thieves stealing and draining their
// own queues, and overflow to a mutex-protected list: no G lost or duplicated.
TEST(RunQueueTest, ConcurrentStealNoLossNoDuplication) {
  constexpr int kTotal = 400000;
  constexpr int kThieves = 3;
  auto gs = MakeGs(kTotal);
  std::vector<std::atomic<int>> seen(kTotal);
  std::atomic<int> consumed{0};
  std::atomic<bool> producing{true};
  RunQueue owner_q;
  std::mutex global_mu;
  std::vector<G*> global;

  auto take = [&](G* g) {
    seen[g->id].fetch_add(1, std::memory_order_relaxed);
    consumed.fetch_add(1, std::memory_order_relaxed);
  };

  std::vector<std::thread> thieves;
  for (int t = 0; t < kThieves; ++t) {
    thieves.emplace_back([&] {
      RunQueue mine;
      bool inherit;
      while (producing.load() || !owner_q.Empty()) {
        G* g = mine.StealFrom(owner_q, true);
        if (g == nullptr) continue;
        take(g);
        while (G* more = mine.Get(&inherit)) take(more);
      }
    });
  }

  bool inherit;
  for (int i = 0; i < kTotal; ++i) {
    G* g = gs[i].get();
    if (i % 7 == 0) {
      if (G* displaced = owner_q.PutNext(g)) g = displaced; else continue;
    }
    while (!owner_q.PutTail(g)) {
      G* batch[RunQueue::kSize / 2 + 1];
      uint32_t n = owner_q.TakeHalf(g, batch);
      if (n == 0) continue;
      std::lock_guard<std::mutex> lock(global_mu);
      global.insert(global.end(), batch, batch + n);
      break;
    }
    if (i % 3 == 0) {
      if (G* got = owner_q.Get(&inherit)) take(got);
    }
  }
  producing.store(false);
  while (G* got = owner_q.Get(&inherit)) take(got);
  for (auto& th : thieves) th.join();
  for (G* g : global) take(g);

  EXPECT_EQ(consumed.load(), kTotal);
  int lost = 0, dup = 0;
  for (int i = 0; i < kTotal; ++i) {
    int s = seen[i].load();
    if (s == 0) lost++;
    if (s > 1) dup++;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(dup, 0);
}

}  // namespace
}  // namespace goro::internal
