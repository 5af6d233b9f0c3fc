// AsyncIo (see async_io.h).
#include "engine/offload/async_io.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "engine/core/faults.h"
#include "engine/core/status.h"

#ifdef ZTRAIN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace zt {

struct AsyncIo::Impl {
  int depth = 1;
  int64_t next = 0;
  // thread fallback: one future per request
  std::map<Ticket, std::future<void>> futures;
#ifdef ZTRAIN_HAVE_LIBURING
  bool ring_ok = false;
  io_uring ring{};
  struct Request {
    std::string path;
    bool is_write = false;
    size_t bytes = 0;
    uint64_t off = 0;
    bool done = false;
    int res = 0;
  };
  std::map<Ticket, Request> requests;
  int in_flight = 0;

  // Reaps one completion (blocking).
  void reap_one() {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do rc = io_uring_wait_cqe(&ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) throw RuntimeFailure(fmt::format("io_uring: waiting for a completion failed ({})", std::strerror(-rc)));
    Request& r = requests.at(Ticket(io_uring_cqe_get_data64(cqe)));
    r.done = true;
    r.res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
  }
  Ticket submit(const NvmeFile& f, uint64_t off, void* buf, size_t bytes, bool is_write) {
    while (in_flight >= depth) reap_one();
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
      reap_one();
      sqe = io_uring_get_sqe(&ring);
    }
    const Ticket t = next++;
    if (is_write) io_uring_prep_write(sqe, f.fd(), buf, unsigned(bytes), off);
    else io_uring_prep_read(sqe, f.fd(), buf, unsigned(bytes), off);
    io_uring_sqe_set_data64(sqe, uint64_t(t));
    requests[t] = {f.path(), is_write, bytes, off, false, 0};
    const int rc = io_uring_submit(&ring);
    if (rc < 0) throw RuntimeFailure(fmt::format("{}: io_uring submit failed ({})", f.path(), std::strerror(-rc)));
    ++in_flight;
    return t;
  }
#endif
};

AsyncIo::AsyncIo(int depth) : impl_(std::make_unique<Impl>()) {
  impl_->depth = std::max(1, depth);
#ifdef ZTRAIN_HAVE_LIBURING
  // ZTRAIN_NVME_IO=threads: the fallback on purpose (the tests run both paths)
  const char* force = std::getenv("ZTRAIN_NVME_IO");
  if (!force || std::string(force) != "threads")
    impl_->ring_ok = io_uring_queue_init(unsigned(std::max(8, 2 * impl_->depth)), &impl_->ring, 0) == 0;
#endif
}

AsyncIo::~AsyncIo() {
  for (auto& [t, f] : impl_->futures)
    if (f.valid()) try {
        f.get();
      } catch (...) {
      }
#ifdef ZTRAIN_HAVE_LIBURING
  if (impl_->ring_ok) {
    try {
      while (impl_->in_flight > 0) impl_->reap_one();
    } catch (...) {
    }
    io_uring_queue_exit(&impl_->ring);
  }
#endif
}

bool AsyncIo::io_uring_available() {
  static const bool ok = AsyncIo(1).uses_io_uring();
  return ok;
}

bool AsyncIo::uses_io_uring() const {
#ifdef ZTRAIN_HAVE_LIBURING
  return impl_->ring_ok;
#else
  return false;
#endif
}

AsyncIo::Ticket AsyncIo::read(const NvmeFile& f, uint64_t off, void* dst, size_t bytes) {
#ifdef ZTRAIN_HAVE_LIBURING
  if (impl_->ring_ok) return impl_->submit(f, off, dst, bytes, false);
#endif
  const Ticket t = impl_->next++;
  impl_->futures[t] = std::async(std::launch::async, [&f, off, dst, bytes] { f.read(off, dst, bytes); });
  return t;
}

AsyncIo::Ticket AsyncIo::write(NvmeFile& f, uint64_t off, const void* src, size_t bytes) {
#ifdef ZTRAIN_HAVE_LIBURING
  if (impl_->ring_ok) {
    f.check_injected_write_failure(off, bytes);
    return impl_->submit(f, off, const_cast<void*>(src), bytes, true);
  }
#endif
  const Ticket t = impl_->next++;
  impl_->futures[t] = std::async(std::launch::async, [&f, off, src, bytes] { f.write(off, src, bytes); });
  return t;
}

void AsyncIo::wait(Ticket t) {
  injected_delay(faults().slow_nvme_ms);  // the offload-bound verdict's test: a slow disk
#ifdef ZTRAIN_HAVE_LIBURING
  if (impl_->ring_ok) {
    auto it = impl_->requests.find(t);
    if (it == impl_->requests.end()) return;
    while (!it->second.done) impl_->reap_one();
    const Impl::Request r = it->second;
    impl_->requests.erase(it);
    if (r.res < 0 || size_t(r.res) != r.bytes)
      throw RuntimeFailure(fmt::format("{}: {} of {} bytes at {} failed ({})", r.path, r.is_write ? "write" : "read",
                                       r.bytes, r.off, r.res < 0 ? std::strerror(-r.res) : "short transfer"));
    return;
  }
#endif
  auto it = impl_->futures.find(t);
  if (it == impl_->futures.end()) return;
  std::future<void> f = std::move(it->second);
  impl_->futures.erase(it);
  f.get();
}

}  // namespace zt
