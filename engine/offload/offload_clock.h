// The host's time blocked in offload transfers and I/O (gradients to the host, parameters to the
// device, NVMe reads and writes waited for): the step breakdown's "offload", taken out of the
// phase it happened in, like exposed communication. The ZeRO store and its state tier share one.
#pragma once
#include <chrono>
#include <functional>
#include <utility>

namespace zt {

class OffloadClock {
 public:
  // Called after each wait with what it was, when it began and how long (the timeline trace).
  using Observer = std::function<void(const char* what, std::chrono::steady_clock::time_point start, double ms)>;

  // Runs fn, counting its time as blocked in offload.
  template <typename Fn>
  void wait(const char* what, Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    std::forward<Fn>(fn)();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    waited_ms_ += ms;
    if (observer_) observer_(what, start, ms);
  }
  double waited_ms() const { return waited_ms_; }
  void set_observer(Observer f) { observer_ = std::move(f); }

 private:
  double waited_ms_ = 0;
  Observer observer_;
};

}  // namespace zt
