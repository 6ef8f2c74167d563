// Requests a server holds for a connection its program has not accepted yet: bounded,
// because anyone who reaches an rdma_cm port can send requests naming any ports. At
// most `total` are held, and at most `per_source` from one source (a peer address):
// one host's flood cannot crowd out the others. All are held equally long, so the
// oldest expires first, and expiry costs only the entries that expire. Pure: the
// upgrade's poller code (core/conn/upgrade_requests.cpp) keeps one, with rdma_cm ids.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace ferry {

template <class T, class Time>
class HeldQueue {
 public:
  HeldQueue(size_t total, size_t per_source) : total_(total), per_source_(per_source) {}

  // Whether one more from `source` may be held.
  bool admits(const std::string& source) const { return q_.size() < total_ && from(source) < per_source_; }
  // Holds `value` for `key` until `deadline` (no earlier than the last one's). False,
  // and nothing held (value dropped), unless admits(source).
  bool push(T value, std::string key, std::string source, Time deadline) {
    if (!admits(source)) return false;
    ++from_[source];
    q_.push_back({std::move(value), std::move(key), std::move(source), deadline});
    return true;
  }

  // The oldest value held for `key`, taken out.
  std::optional<T> take(const std::string& key) {
    for (auto it = q_.begin(); it != q_.end(); ++it) {
      if (it->key != key) continue;
      T v = std::move(it->value);
      drop(it);
      return v;
    }
    return std::nullopt;
  }

  // Takes out, oldest first, each entry for which f(key, value) returns true (f may move
  // the value away then).
  template <class F>
  void take_if(F&& f) {
    for (auto it = q_.begin(); it != q_.end();) it = f(it->key, it->value) ? drop(it) : std::next(it);
  }

  // Hands each entry whose deadline is not after `now` to f(value), oldest first, and
  // takes it out.
  template <class F>
  void expire(Time now, F&& f) {
    while (!q_.empty() && !(now < q_.front().deadline)) {
      f(q_.front().value);
      drop(q_.begin());
    }
  }

  bool empty() const { return q_.empty(); }
  size_t size() const { return q_.size(); }
  // The oldest entry's deadline (call when not empty).
  Time next_deadline() const { return q_.front().deadline; }
  size_t from(const std::string& source) const {
    auto it = from_.find(source);
    return it == from_.end() ? 0 : it->second;
  }

 private:
  struct Entry {
    T value;
    std::string key, source;
    Time deadline;
  };
  typename std::deque<Entry>::iterator drop(typename std::deque<Entry>::iterator it) {
    auto s = from_.find(it->source);
    if (s != from_.end() && --s->second == 0) from_.erase(s);
    return q_.erase(it);
  }

  size_t total_, per_source_;
  std::deque<Entry> q_;
  std::map<std::string, size_t> from_;
};

}  // namespace ferry
