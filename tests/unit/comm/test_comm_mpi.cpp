// The MPI communicator on its own, under mpirun (ctest runs it on 3 ranks: an odd size, so chunks
// and roots are not symmetric): every collective against the values each rank can compute for
// itself, collectives in flight together, in-place gathers, and sub-communicators split as the
// topology splits them. The timeout's abort ends a job, so tests/dist covers it end to end.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <chrono>

#include <mpi.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "engine/comm/comm_mpi.h"

using namespace zt;

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
// The value rank r holds at element i before a collective.
float value(int r, size_t i) { return float(r * 1000) + float(i) * 0.5f; }
}  // namespace

TEST_CASE("MPI collectives give each rank what it can compute itself", "[mpi]") {
  const int P = world_size(), me = world_rank();
  auto c = make_mpi_comm(MPI_COMM_WORLD, "world", 30);
  REQUIRE(c->size() == P);
  REQUIRE(c->rank() == me);
  const size_t n = 1001;  // odd: no rank's chunk is special
  std::vector<float> sum(n), mx(n);
  for (size_t i = 0; i < n; ++i) sum[i] = mx[i] = value(me, i);
  // two collectives in flight at once, waited in reverse order
  const Comm::Handle hs = c->all_reduce(sum.data(), n, ReduceOp::Sum);
  const Comm::Handle hm = c->all_reduce(mx.data(), n, ReduceOp::Max);
  c->wait(hm);
  c->wait(hs);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < P; ++r) want += value(r, i);
    REQUIRE(sum[i] == want);
    REQUIRE(mx[i] == value(P - 1, i));
  }
  // reduce-scatter: chunk `me` of every rank's P * n elements, summed
  std::vector<float> send(size_t(P) * n), recv(n);
  for (size_t i = 0; i < send.size(); ++i) send[i] = value(me, i);
  c->wait(c->reduce_scatter(send.data(), recv.data(), n));
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < P; ++r) want += value(r, size_t(me) * n + i);
    REQUIRE(recv[i] == want);
  }
  // all-gather in place: this rank's part already sits at recv + me * n (ZeRO's parameter gather)
  std::vector<float> all(size_t(P) * n, -1.0f);
  for (size_t i = 0; i < n; ++i) all[size_t(me) * n + i] = value(me, i);
  c->wait(c->all_gather(all.data() + size_t(me) * n, all.data(), n));
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < n; ++i) REQUIRE(all[size_t(r) * n + i] == value(r, i));
  // broadcast from the last rank, doubles summed, a barrier
  std::vector<float> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = value(me, i);
  c->wait(c->broadcast(b.data(), n, P - 1));
  for (size_t i = 0; i < n; ++i) REQUIRE(b[i] == value(P - 1, i));
  double d[2] = {1.0, double(me)};
  c->all_reduce_doubles(d, 2);
  REQUIRE(d[0] == double(P));
  REQUIRE(d[1] == double(P * (P - 1) / 2));
  c->barrier();
  // Each wait is one point of the breakdown's books, and the exposed time between two points is
  // the sum of those waits' times as reported one by one (the trace's track)
  std::vector<double> seen;
  c->set_wait_observer([&](const char*, std::chrono::steady_clock::time_point, double ms) { seen.push_back(ms); });
  const int64_t p0 = c->wait_point();
  c->wait(c->all_reduce(b.data(), n, ReduceOp::Sum));
  c->wait(c->all_gather(all.data() + size_t(me) * n, all.data(), n));
  const int64_t p1 = c->wait_point();
  c->set_wait_observer(nullptr);
  REQUIRE(p1 == p0 + 2);
  REQUIRE(seen.size() == 2);
  REQUIRE(c->exposed_ms(p0, p1) == seen[0] + seen[1]);
  REQUIRE(c->exposed_ms(p0, p0 + 1) == seen[0]);
  REQUIRE(c->exposed_ms(p1, p1) == 0);
}

TEST_CASE("a split communicator reduces over its own ranks only", "[mpi]") {
  const int me = world_rank();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);  // even and odd ranks, as tensor groups split
  auto c = make_mpi_comm(half, "tp", 30);
  std::vector<float> x(7, float(me));
  c->wait(c->all_reduce(x.data(), x.size(), ReduceOp::Sum));
  float want = 0;
  for (int r = me % 2; r < world_size(); r += 2) want += float(r);
  REQUIRE(x[3] == want);
  REQUIRE(c->name().find("tp") != std::string::npos);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int failed = Catch::Session().run(argc, argv);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
