#pragma once
// A ring of N ranks as N threads of one process, for tests of ring attention and what runs
// through it (kernels/ring_attention.h): each pass copies the sent tensor into the next rank's
// mailbox for its channel, and the wait takes the oldest from this rank's.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/ring_attention.h"

namespace zoo::testing {

// The mailboxes of every rank, and how many messages were posted.
class Mailboxes {
 public:
  explicit Mailboxes(int64_t ranks) : ranks_(ranks) {}
  int64_t ranks() const { return ranks_; }
  void post(int64_t to, int64_t channel, torch::Tensor t) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      boxes_[{to, channel}].push_back(std::move(t));
      ++messages_;
    }
    wake_.notify_all();
  }
  torch::Tensor take(int64_t rank, int64_t channel) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = boxes_[{rank, channel}];
    wake_.wait(lock, [&] { return !box.empty(); });
    auto t = std::move(box.front());
    box.pop_front();
    return t;
  }
  int64_t messages() const { return messages_; }

 private:
  int64_t ranks_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::pair<int64_t, int64_t>, std::deque<torch::Tensor>> boxes_;
  int64_t messages_ = 0;
};

// Rank `rank` of the ring: it sends to rank + 1 and receives from rank - 1 through the mailboxes.
class ThreadRing : public RingExchange {
 public:
  ThreadRing(Mailboxes& boxes, int64_t rank) : boxes_(boxes), rank_(rank) {}
  int64_t ranks() const override { return boxes_.ranks(); }
  int64_t rank() const override { return rank_; }
  std::function<void()> pass(const torch::Tensor& send, const torch::Tensor& receive, int64_t channel) override {
    EXPECT_EQ(send.sizes(), receive.sizes());
    boxes_.post((rank_ + 1) % ranks(), channel, send.clone());
    return [this, receive, channel] {
      auto got = boxes_.take(rank_, channel);
      EXPECT_EQ(got.sizes(), receive.sizes()) << "a message crossed channels or steps";
      receive.copy_(got);
    };
  }

 private:
  Mailboxes& boxes_;
  int64_t rank_;
};

// Runs `body(rank, ring)` for every rank of `boxes`, each on its own thread with its own end of
// the ring, and expects none of them to throw (a failure names the rank and its error).
inline void on_every_rank(Mailboxes& boxes,
                          const std::function<void(int64_t, const std::shared_ptr<ThreadRing>&)>& body) {
  std::vector<std::string> errors(boxes.ranks());
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < boxes.ranks(); ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, std::make_shared<ThreadRing>(boxes, rank));
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t rank = 0; rank < boxes.ranks(); ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

}  // namespace zoo::testing
