// NCCL's C API subset (include/nccl.h) for the emulated device, between the ranks' processes over
// MPI. The emulated device's memory is host memory, so a collective is the MPI collective on the
// buffers themselves.
//
// Ordering is a GPU's: each collective runs on its stream's own thread (the emulated runtime's
// stream_enqueue), after everything enqueued on that stream before it and after what events
// order before it, never on the calling thread. A missing cudaStreamWaitEvent between a
// producer stream and the communicator's stream therefore reads a buffer before it is written,
// and shows as a wrong result, not as luck.
//
// Communicators. ncclGetUniqueId names a group: its creator's world rank and a serial. Init
// splits a private duplicate of MPI_COMM_WORLD by that name. As in NCCL, every member must call
// init; here every rank of the job also creates its communicators in the same order, which the
// comm layer does (tensor-parallel groups, then data-parallel groups).
//
// Non-blocking init (ncclConfig_t::blocking = 0) runs on a thread of its own. It returns
// ncclInProgress, and ncclCommGetAsyncError says ncclSuccess once the communicator is ready, so a
// caller can enforce a timeout while a peer has not called init yet.
//
// As NCCL, a collective takes only buffers a GPU's kernels reach (emulated device memory or
// pinned host memory) and answers ncclInvalidArgument for pageable host memory. Each collective
// counts as in flight from its launch to its end on the stream; the emulated runtime faults a
// cudaFree, cudaFreeHost or cudaHostAlloc meanwhile (they synchronize a GPU, see stream.h).
//
// Launch order across communicators (NCCL's user guide, "Using multiple NCCL communicators
// concurrently"): the collectives of several communicators on one GPU need one total order, the
// same on every rank, or their kernels may wait on each other across ranks and deadlock. NCCL 2.26+
// takes the host's launch order when NCCL_LAUNCH_ORDER_IMPLICIT=1 (read at the first launch);
// otherwise stream dependencies must give it. Modeled: each launch takes the process's next number;
// with the variable set, a collective starts on its stream only after every collective launched
// before it has started (NCCL's implicit order); without it, a collective that starts while one
// launched before it on another communicator has not started is an order the ranks' GPUs need not
// share: the communicator fails, naming both (on a GPU it may deadlock, by the scheduling of the day).
//
// MPI runs on the streams' threads and the init thread, so the job's MPI must provide
// MPI_THREAD_MULTIPLE (engine/comm/topology.cpp asks for it when the emulated NCCL is selected).
// 16-bit reductions are done in fp32 and rounded once; NCCL rounds per step of its ring, so sums
// of more than two bf16/fp16 values may differ from a GPU's in the last bit.
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>

#include "engine/backend/cuda_emu/half.h"
#include "engine/backend/cuda_emu/stream.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int nranks = 0, rank = 0;
  std::atomic<ncclResult_t> state{ncclInProgress};  // ncclSuccess once ready; an error after a failure
  std::thread init;                                 // non-blocking init
  std::mutex mu;
  std::string error;  // the last failure, for ncclGetLastError
  void fail(ncclResult_t r, std::string why) {
    {
      std::lock_guard lock(mu);
      error = std::move(why);
    }
    state = r;
  }
};

namespace {

constexpr uint32_t kIdMagic = 0x7a746e63;  // "ztnc": an id this library made

struct IdBody {
  uint32_t magic;
  int32_t creator;  // world rank that made the id
  int32_t serial;   // its n-th id
};

std::mutex g_world_mu;
MPI_Comm g_world = MPI_COMM_NULL;  // the private duplicate of MPI_COMM_WORLD that inits split
std::atomic<int> g_serial{0};
thread_local int tl_group_depth = 0;
thread_local std::vector<std::function<void()>> tl_group;  // collectives held until ncclGroupEnd
std::string g_last_error;

// ZTRAIN_EMU_NCCL_STATS=1: at exit, each process prints how many collectives it issued and how
// many went in groups of more than one (the tests check that a bucket's units are grouped).
struct Stats {
  std::atomic<long> collectives{0}, groups{0}, largest{0};
  ~Stats() {
    const char* on = std::getenv("ZTRAIN_EMU_NCCL_STATS");
    if (!on || std::strcmp(on, "1") != 0) return;
    std::fprintf(stderr, "ztrain emulated NCCL: %ld collectives, %ld groups of several, the largest %ld\n",
                 collectives.load(), groups.load(), largest.load());
  }
} g_stats;

// The launch order's books (see the top of the file).
struct LaunchOrder {
  std::mutex mu;
  std::condition_variable started;
  uint64_t next = 0;
  std::map<uint64_t, std::pair<const ncclComm*, const char*>> unstarted;  // launched, not started
  int implicit = -1;  // NCCL_LAUNCH_ORDER_IMPLICIT as read at the first launch
};
LaunchOrder g_order;

uint64_t order_launched(const ncclComm* c, const char* what) {
  std::lock_guard lock(g_order.mu);
  if (g_order.implicit < 0) {
    const char* v = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
    g_order.implicit = v && std::strtoll(v, nullptr, 0) != 0;
  }
  g_order.unstarted[g_order.next] = {c, what};
  return g_order.next++;
}

// Collective n starts on its stream: "" when its order is kept, else what is wrong.
std::string order_started(const ncclComm* c, uint64_t n, const char* what) {
  std::unique_lock lock(g_order.mu);
  std::string problem;
  if (g_order.implicit) {
    g_order.started.wait(lock, [&] { return g_order.unstarted.begin()->first == n; });
  } else {
    for (const auto& [m, earlier] : g_order.unstarted) {
      if (m >= n) break;
      if (earlier.first == c) continue;
      problem = std::string(what) + " (launch " + std::to_string(n) + ") started before " + earlier.second +
                " (launch " + std::to_string(m) + ") of another communicator on this device had started: no order "
                "between the two communicators' collectives (NCCL_LAUNCH_ORDER_IMPLICIT=1 or a stream dependency); "
                "on GPUs, ranks that run them in different orders deadlock";
      break;
    }
  }
  g_order.unstarted.erase(n);
  g_order.started.notify_all();
  return problem;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string mpi_error(int code) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, s, &n);
  return std::string(s, size_t(n));
}

// Runs the split that makes comm's MPI communicator (on the init thread or the caller's).
void initialize(ncclComm* c, IdBody id) {
  int code = MPI_SUCCESS;
  {
    std::lock_guard lock(g_world_mu);  // inits run one at a time, in the order they were called
    if (g_world == MPI_COMM_NULL) code = MPI_Comm_dup(MPI_COMM_WORLD, &g_world);
    if (code == MPI_SUCCESS) MPI_Comm_set_errhandler(g_world, MPI_ERRORS_RETURN);
    // the group's name as a non-negative color; the rank within the group orders it
    if (code == MPI_SUCCESS) code = MPI_Comm_split(g_world, id.creator * 65536 + id.serial % 65536, c->rank, &c->mpi);
  }
  if (code != MPI_SUCCESS) return c->fail(ncclSystemError, "communicator init: MPI: " + mpi_error(code));
  int n = 0;
  MPI_Comm_size(c->mpi, &n);
  if (n != c->nranks)
    return c->fail(ncclInvalidUsage, "communicator init: " + std::to_string(n) + " ranks called init with this id, " +
                                         std::to_string(c->nranks) + " expected");
  MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
  c->state = ncclSuccess;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

// The MPI type that moves (not reduces) elements of t.
MPI_Datatype move_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclFloat16: case ncclBfloat16: return MPI_UINT16_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

bool half_type(ncclDataType_t t) { return t == ncclFloat16 || t == ncclBfloat16; }

void widen(const void* src, float* dst, size_t n, ncclDataType_t t) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i)
    dst[i] = t == ncclBfloat16 ? zt::emu::bf16_bits_to_float(s[i]) : zt::emu::half_bits_to_float(s[i]);
}
void narrow(const float* src, void* dst, size_t n, ncclDataType_t t) {
  auto* d = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i)
    d[i] = t == ncclBfloat16 ? zt::emu::float_to_bf16_bits(src[i]) : zt::emu::float_to_half_bits(src[i]);
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    case ncclAvg: return MPI_OP_NULL;  // not modeled
  }
  return MPI_OP_NULL;
}

ncclResult_t check_comm(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  const ncclResult_t s = c->state;
  return s == ncclSuccess || s == ncclInProgress ? ncclSuccess : s;
}

// Enqueues `body` (returning an MPI code) on `stream` for communicator c, or holds it until
// ncclGroupEnd inside a group. Failures become the communicator's asynchronous error, as a
// failed kernel's would.
ncclResult_t enqueue(ncclComm_t c, cudaStream_t stream, const char* what, std::function<int()> body) {
  if (const ncclResult_t r = check_comm(c); r != ncclSuccess) return r;
  auto launch = [c, stream, what, body = std::move(body)] {
    zt::emu::collective_issued();
    const uint64_t order = order_launched(c, what);
    zt::emu::stream_enqueue(stream, what, [c, what, body, order] {
      struct Finished {
        ~Finished() { zt::emu::collective_finished(); }
      } finished;
      if (const std::string problem = order_started(c, order, what); !problem.empty()) {
        std::fprintf(stderr, "ztrain emulated NCCL: %s\n", problem.c_str());
        return c->fail(ncclInvalidUsage, problem);
      }
      // issued before a non-blocking init completed: the stream waits for it (state is atomic;
      // the init thread object itself belongs to the caller's thread)
      while (c->state == ncclInProgress) std::this_thread::yield();
      if (c->state != ncclSuccess) return;
      int code = MPI_ERR_OTHER;
      try {
        code = body();
      } catch (const std::exception& e) {
        return c->fail(ncclInternalError, std::string(what) + ": " + e.what());
      }
      if (code != MPI_SUCCESS) c->fail(ncclSystemError, std::string(what) + ": MPI: " + mpi_error(code));
    });
  };
  ++g_stats.collectives;
  if (tl_group_depth > 0) tl_group.push_back(std::move(launch));
  else launch();
  return ncclSuccess;
}

// NCCL takes buffers its kernels can reach (device memory, or pinned host memory under unified
// addressing) and answers ncclInvalidArgument for others (its argument check asks the CUDA
// runtime what each pointer is).
ncclResult_t check_buffer(const char* what, const char* which, const void* p, size_t bytes) {
  const std::string problem = zt::emu::device_reachable(p, bytes);
  if (problem.empty()) return ncclSuccess;
  g_last_error = std::string(what) + ": " + which + " " + problem;
  std::fprintf(stderr, "ztrain emulated NCCL: %s\n", g_last_error.c_str());
  return ncclInvalidArgument;
}
ncclResult_t check_buffers(const char* what, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes) {
  if (const ncclResult_t r = check_buffer(what, "sendbuff", send, send_bytes); r != ncclSuccess) return r;
  return check_buffer(what, "recvbuff", recv, recv_bytes);
}

// A reduction of n elements of t, in place in `buf` (fp32 for 16-bit types: widened, reduced,
// rounded once).
template <typename Reduce>
int reduce_as_float(void* buf, size_t n, ncclDataType_t t, Reduce reduce) {
  if (!half_type(t)) return reduce(buf, move_type(t), n);
  std::vector<float> wide(n);
  widen(buf, wide.data(), n, t);
  const int code = reduce(wide.data(), MPI_FLOAT, n);
  narrow(wide.data(), buf, n, t);
  return code;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  const IdBody body{kIdMagic, world_rank(), g_serial++};
  std::memcpy(id->internal, &body, sizeof body);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  IdBody id;
  std::memcpy(&id, commId.internal, sizeof id);
  if (id.magic != kIdMagic) {
    g_last_error = "communicator init: the unique id was not made by ncclGetUniqueId";
    return ncclInvalidArgument;
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    g_last_error = "the emulated NCCL runs MPI on the emulated streams' threads: MPI_THREAD_MULTIPLE is needed";
    return ncclInvalidUsage;
  }
  auto* c = new ncclComm;
  c->nranks = nranks, c->rank = rank;
  *out = c;
  const bool blocking = !config || config->blocking != 0;
  if (blocking) {
    initialize(c, id);
    return c->state == ncclSuccess ? ncclSuccess : c->state.load();
  }
  c->init = std::thread([c, id] { initialize(c, id); });
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return ncclInvalidArgument;
  *asyncError = comm->state;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  if (comm->init.joinable()) comm->init.join();
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  // An MPI collective in flight cannot be cancelled: the communicator is marked failed (work not
  // started is skipped) and left to the process's end; the caller aborts the job next.
  if (!comm) return ncclInvalidArgument;
  comm->fail(ncclRemoteError, "communicator aborted");
  if (comm->init.joinable()) comm->init.detach();
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (!comm) return g_last_error.c_str();
  std::lock_guard lock(comm->mu);
  return comm->error.c_str();
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (mpi_op(op) == MPI_OP_NULL || type_size(t) == 0) return ncclInvalidArgument;
  const size_t bytes = count * type_size(t);
  if (const ncclResult_t r = check_buffers("ncclAllReduce", send, bytes, recv, bytes); r != ncclSuccess) return r;
  return enqueue(comm, stream, "ncclAllReduce", [=] {
    if (send != recv) std::memcpy(recv, send, count * type_size(t));
    return reduce_as_float(recv, count, t, [&](void* buf, MPI_Datatype mt, size_t n) {
      return MPI_Allreduce(MPI_IN_PLACE, buf, int(n), mt, mpi_op(op), comm->mpi);
    });
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (mpi_op(op) == MPI_OP_NULL || type_size(t) == 0 || check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  const size_t recv_bytes = recvcount * type_size(t);
  if (const ncclResult_t r =
          check_buffers("ncclReduceScatter", send, recv_bytes * size_t(comm->nranks), recv, recv_bytes);
      r != ncclSuccess)
    return r;
  return enqueue(comm, stream, "ncclReduceScatter", [=] {
    // every rank's whole send buffer reduced (a copy: recv may lie inside send), then this rank's chunk
    const size_t total = recvcount * size_t(comm->nranks), es = type_size(t);
    std::vector<char> all(static_cast<const char*>(send), static_cast<const char*>(send) + total * es);
    const int code = reduce_as_float(all.data(), total, t, [&](void* buf, MPI_Datatype mt, size_t n) {
      return MPI_Allreduce(MPI_IN_PLACE, buf, int(n), mt, mpi_op(op), comm->mpi);
    });
    std::memcpy(recv, all.data() + size_t(comm->rank) * recvcount * es, recvcount * es);
    return code;
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
  if (type_size(t) == 0 || check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  const size_t send_bytes = sendcount * type_size(t);
  if (const ncclResult_t r = check_buffers("ncclAllGather", send, send_bytes, recv, send_bytes * size_t(comm->nranks));
      r != ncclSuccess)
    return r;
  return enqueue(comm, stream, "ncclAllGather", [=] {
    const size_t bytes = sendcount * type_size(t);
    char* mine = static_cast<char*>(recv) + size_t(comm->rank) * bytes;
    if (send != mine) std::memmove(mine, send, bytes);  // in place when send is this rank's part
    return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, int(sendcount), move_type(t), comm->mpi);
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (type_size(t) == 0) return ncclInvalidArgument;
  const size_t bytes = count * type_size(t);
  if (const ncclResult_t r = check_buffers("ncclBroadcast", send, bytes, recv, bytes); r != ncclSuccess) return r;
  return enqueue(comm, stream, "ncclBroadcast", [=] {
    if (comm->rank == root && send != recv) std::memcpy(recv, send, count * type_size(t));
    return MPI_Bcast(recv, int(count), move_type(t), root, comm->mpi);
  });
}

ncclResult_t ncclGroupStart() {
  ++tl_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tl_group_depth == 0) return ncclInvalidUsage;
  if (--tl_group_depth > 0) return ncclSuccess;
  std::vector<std::function<void()>> held;
  held.swap(tl_group);
  if (held.size() > 1) {
    ++g_stats.groups;
    if (long(held.size()) > g_stats.largest) g_stats.largest = long(held.size());
  }
  for (auto& launch : held) launch();  // in issue order, each on its own stream
  return ncclSuccess;
}

}  // extern "C"
