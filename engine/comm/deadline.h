// A deadline for a blocking call that has no timeout of its own (MPI_Init, communicator splits):
// armed on construction, disarmed on destruction; if it is still armed after `timeout_s`, its
// thread runs `on_timeout`, which ends the process (mpirun then ends the job).
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace zt {

class Deadline {
 public:
  Deadline(double timeout_s, std::function<void()> on_timeout)
      : thread_([this, timeout_s, f = std::move(on_timeout)] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return done_; })) f();
        }) {}
  ~Deadline() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace zt
