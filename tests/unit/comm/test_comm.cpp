// The comm layer on its own: the group of one (host and device copies, aliasing), the host-staged
// communicator over device memory (every collective's data goes to the host, through the inner
// communicator, and back), and the host-access wrapper (the backend's memory is touched only
// inside it). The MPI communicator needs mpirun: test_comm_mpi.cpp, its own executable.
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/comm/comm_staged.h"

using namespace zt;

namespace {
// A host communicator of 2 ranks whose peer holds the same data as this one (rank 1): sums double,
// maxima stay, gathers repeat. Counts its calls.
class MirrorComm final : public Comm {
 public:
  int size() const override { return 2; }
  int rank() const override { return 1; }
  std::string name() const override { return "mirror"; }
  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    if (op == ReduceOp::Sum)
      for (size_t i = 0; i < n; ++i) buf[i] *= 2;
    return ++calls;
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    for (size_t i = 0; i < n; ++i) recv[i] = 2 * send[n + i];  // this rank's chunk, summed twice
    return ++calls;
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    std::vector<float> s(send, send + n);  // send may alias recv + rank * n
    for (size_t i = 0; i < n; ++i) recv[i] = s[i], recv[n + i] = s[i];
    return ++calls;
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    for (size_t i = 0; i < n; ++i) buf[i] += float(root);
    return ++calls;
  }
  void wait(Handle) override { ++waits; }
  void all_reduce_doubles(double* buf, size_t n) override {
    for (size_t i = 0; i < n; ++i) buf[i] *= 2;
  }
  void barrier() override {}
  int calls = 0, waits = 0;
};

std::vector<float> iota(size_t n, float first = 1) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}
}  // namespace

TEST_CASE("the group of one: identities and copies, in host or device memory", "[comm]") {
  auto host = make_self_comm("dp");
  REQUIRE(host->size() == 1);
  REQUIRE(host->rank() == 0);
  std::vector<float> a = iota(8), out(8, 0);
  host->wait(host->all_reduce(a.data(), 8, ReduceOp::Sum));
  REQUIRE(a == iota(8));
  host->wait(host->reduce_scatter(a.data(), out.data(), 8));
  REQUIRE(out == iota(8));
  std::fill(out.begin(), out.end(), 0.0f);
  host->wait(host->all_gather(a.data(), out.data(), 8));
  REQUIRE(out == iota(8));
  host->wait(host->all_gather(out.data(), out.data(), 8));  // in place (send = recv + rank * n)
  REQUIRE(out == iota(8));
  double d[2] = {1.5, -2};
  host->all_reduce_doubles(d, 2);
  REQUIRE((d[0] == 1.5 && d[1] == -2));

  // the device flavour copies with the backend (the buffers may not be host memory)
  auto be = make_cpu_backend(1);
  auto dev = make_device_self_comm("dp", *be);
  float* src = static_cast<float*>(be->alloc(8 * sizeof(float)));
  float* dst = static_cast<float*>(be->alloc(8 * sizeof(float)));
  be->copy_to_device(src, a.data(), 8 * sizeof(float));
  dev->wait(dev->reduce_scatter(src, dst, 8));
  std::vector<float> back(8);
  be->copy_to_host(back.data(), dst, 8 * sizeof(float));
  REQUIRE(back == iota(8));
  be->free(src);
  be->free(dst);
}

TEST_CASE("the host-staged communicator takes device buffers through the host and back", "[comm]") {
  auto be = make_cpu_backend(1);
  auto inner = std::make_unique<MirrorComm>();
  MirrorComm& mirror = *inner;
  auto comm = make_host_staged_comm(std::move(inner), *be);
  REQUIRE(comm->size() == 2);
  REQUIRE(comm->rank() == 1);
  REQUIRE(comm->name() == "mirror+host-staged");
  const size_t n = 6;
  float* buf = static_cast<float*>(be->alloc(2 * n * sizeof(float)));
  float* out = static_cast<float*>(be->alloc(2 * n * sizeof(float)));
  auto put = [&](float* d, const std::vector<float>& v) { be->copy_to_device(d, v.data(), v.size() * sizeof(float)); };
  auto get = [&](const float* d, size_t k) {
    std::vector<float> v(k);
    be->copy_to_host(v.data(), d, k * sizeof(float));
    return v;
  };
  put(buf, iota(n));
  comm->wait(comm->all_reduce(buf, n, ReduceOp::Sum));
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 2.0f * float(i + 1);
  REQUIRE(get(buf, n) == want);  // the result is back in device memory when the call returns

  put(buf, iota(2 * n));
  comm->wait(comm->reduce_scatter(buf, out, n));
  for (size_t i = 0; i < n; ++i) want[i] = 2.0f * float(n + i + 1);  // chunk 1, summed
  REQUIRE(get(out, n) == want);

  put(buf, iota(n));
  comm->wait(comm->all_gather(buf, out, n));
  std::vector<float> twice = iota(n);
  twice.insert(twice.end(), twice.begin(), twice.end());
  REQUIRE(get(out, 2 * n) == twice);
  put(out, std::vector<float>(2 * n, 0.0f));
  put(out + n, iota(n));
  comm->wait(comm->all_gather(out + n, out, n));  // in place: send is this rank's slot
  REQUIRE(get(out, 2 * n) == twice);

  put(buf, iota(n));
  comm->wait(comm->broadcast(buf, n, 1));
  REQUIRE(get(buf, n) == iota(n, 2));
  REQUIRE(mirror.calls == 5);
  REQUIRE(mirror.waits == 5);  // each collective completed inside its call
  be->free(buf);
  be->free(out);
}

TEST_CASE("a collective through the host-access wrapper may read the backend's memory", "[comm]") {
  // With guarded memory the CPU backend's buffers are inaccessible outside its ops: the wrapper is
  // the one sanctioned host access for a host communicator (MPI) over them.
  setenv("ZTRAIN_CPU_GUARD_MEMORY", "1", 1);
  auto be = make_cpu_backend(1);
  unsetenv("ZTRAIN_CPU_GUARD_MEMORY");
  auto comm = make_host_access_comm(std::make_unique<MirrorComm>(), *be);
  const size_t n = 4;
  float* buf = static_cast<float*>(be->alloc(n * sizeof(float)));
  const std::vector<float> v = iota(n);
  be->copy_to_device(buf, v.data(), n * sizeof(float));
  comm->wait(comm->all_reduce(buf, n, ReduceOp::Sum));  // MirrorComm writes the buffer on the host
  std::vector<float> back(n);
  be->copy_to_host(back.data(), buf, n * sizeof(float));
  REQUIRE(back == std::vector<float>{2, 4, 6, 8});
  be->free(buf);
}
