#include "core/base/hazard.h"
#include "core/conn/fdtable.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ferry {
namespace {

std::atomic<int> g_live{0};

struct Obj {
  explicit Obj(int v) : value(v) { ++g_live; }
  ~Obj() {
    value = -1;
    --g_live;
  }
  int value;
};

std::shared_ptr<Obj> make_obj(int v) {
  return std::shared_ptr<Obj>(new Obj(v), [](Obj* o) { hazard::retire(o, [](void* p) { delete static_cast<Obj*>(p); }); });
}

TEST(Hazard, BorrowedObjectOutlivesItsCloseAndDiesWhenTheBorrowEnds) {
  FdMap<Obj> map;
  ASSERT_TRUE(map.set(5, make_obj(7)));
  const int before = g_live.load();
  {
    FdMap<Obj>::Borrowed b;
    map.borrow(5, b);
    ASSERT_TRUE(b);
    std::thread closer([&] { map.take(5); });  // drops the last reference
    closer.join();
    EXPECT_EQ(g_live.load(), before);  // still alive: borrowed
    EXPECT_EQ(b->value, 7);
    FdMap<Obj>::Borrowed none;
    map.borrow(5, none);
    EXPECT_FALSE(none);  // the fd is gone for new lookups
  }
  EXPECT_EQ(g_live.load(), before - 1);
}

TEST(Hazard, UnborrowedObjectDiesAtOnce) {
  FdMap<Obj> map;
  ASSERT_TRUE(map.set(3, make_obj(1)));
  const int before = g_live.load();
  map.take(3);
  EXPECT_EQ(g_live.load(), before - 1);
}

TEST(Hazard, NestedBorrowsBeyondTheDepthHoldAReference) {
  FdMap<Obj> map;
  for (int fd = 0; fd < hazard::kDepth + 2; ++fd) ASSERT_TRUE(map.set(fd, make_obj(fd)));
  const int before = g_live.load();
  {
    std::vector<std::unique_ptr<FdMap<Obj>::Borrowed>> held;
    for (int fd = 0; fd < hazard::kDepth + 2; ++fd) {
      held.push_back(std::make_unique<FdMap<Obj>::Borrowed>());
      map.borrow(fd, *held.back());
      ASSERT_TRUE(*held.back());
      EXPECT_EQ((*held.back())->value, fd);
    }
    for (int fd = 0; fd < hazard::kDepth + 2; ++fd) map.take(fd);
    EXPECT_EQ(g_live.load(), before);
    while (!held.empty()) held.pop_back();  // innermost first, like nested calls
  }
  EXPECT_EQ(g_live.load(), before - (hazard::kDepth + 2));
}

// Readers borrow while writers keep replacing and closing the same fds: every object a
// reader sees is alive and intact, and every object dies exactly once.
TEST(Hazard, ConcurrentReplaceAndBorrowNeverSeesADeadObject) {
  const int before = g_live.load();
  {
    FdMap<Obj> map;
    std::atomic<bool> stop{false}, bad{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        while (!stop.load()) {
          for (int fd = 0; fd < 8; ++fd) {
            FdMap<Obj>::Borrowed b;
            map.borrow(fd, b);
            if (b && b->value != fd) bad = true;
          }
        }
      });
    }
    std::thread writer([&] {
      for (int i = 0; i < 20000; ++i) {
        int fd = i % 8;
        if (i % 3 == 0) {
          map.take(fd);
        } else {
          map.set(fd, make_obj(fd));
        }
      }
      stop = true;
    });
    writer.join();
    for (auto& t : threads) t.join();
    EXPECT_FALSE(bad.load());
  }
  EXPECT_EQ(g_live.load(), before);
}

// More objects wait at once than the quick check has cells for (and some fewer later):
// each is destroyed when its own borrow ends, never before.
TEST(Hazard, ManyWaitingObjectsEachDieWhenTheirBorrowEnds) {
  constexpr int kObjects = 12;
  FdMap<Obj> map;
  for (int fd = 0; fd < kObjects; ++fd) ASSERT_TRUE(map.set(fd, make_obj(fd)));
  const int before = g_live.load();
  std::atomic<int> borrowed{0};
  std::atomic<int> let_go{-1};
  std::vector<std::thread> threads;
  for (int fd = 0; fd < kObjects; ++fd) {
    threads.emplace_back([&, fd] {
      FdMap<Obj>::Borrowed b;
      map.borrow(fd, b);
      ++borrowed;
      while (let_go.load() < fd) std::this_thread::yield();
      EXPECT_EQ(b->value, fd);
    });
  }
  while (borrowed.load() < kObjects) std::this_thread::yield();
  for (int fd = 0; fd < kObjects; ++fd) map.take(fd);
  EXPECT_EQ(g_live.load(), before);
  for (int fd = 0; fd < kObjects; ++fd) {
    let_go = fd;
    threads[fd].join();
    EXPECT_EQ(g_live.load(), before - fd - 1);
  }
}

TEST(Hazard, AnExitedThreadsRecordIsReused) {
  hazard::Record* first = nullptr;
  std::thread([&] { first = hazard::mine(); }).join();
  hazard::Record* second = nullptr;
  std::thread([&] { second = hazard::mine(); }).join();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first->depth, 0);
}

}  // namespace
}  // namespace ferry
