// The part of MPI's C API that ztrain's NCCL communicator (engine/comm/comm_nccl.cpp) calls, for one
// process without MPI: the GPU machine has no MPI, and the GPU check's NCCL smoke test
// (tools/gpu_check/nccl_smoke.cpp) runs ztrain's communicator on one rank there. Every group is
// the process alone: its size is 1, its rank 0, a broadcast from rank 0 is already done.
#pragma once
#include <cstdio>
#include <cstdlib>

using MPI_Comm = int;
using MPI_Datatype = int;
using MPI_Request = int;
struct MPI_Status {
  int unused;
};
constexpr MPI_Comm MPI_COMM_WORLD = 0;
constexpr MPI_Datatype MPI_BYTE = 1;
#define MPI_STATUS_IGNORE nullptr
constexpr int MPI_SUCCESS = 0;
constexpr int MPI_THREAD_MULTIPLE = 3;

inline int MPI_Init_thread(int*, char***, int, int* provided) {
  if (provided) *provided = MPI_THREAD_MULTIPLE;
  return MPI_SUCCESS;
}
inline int MPI_Finalize() { return MPI_SUCCESS; }
inline int MPI_Comm_size(MPI_Comm, int* size) {
  *size = 1;
  return MPI_SUCCESS;
}
inline int MPI_Comm_rank(MPI_Comm, int* rank) {
  *rank = 0;
  return MPI_SUCCESS;
}
inline int MPI_Ibcast(void*, int, MPI_Datatype, int, MPI_Comm, MPI_Request* req) {
  *req = 0;
  return MPI_SUCCESS;
}
inline int MPI_Test(MPI_Request*, int* done, MPI_Status*) {
  *done = 1;
  return MPI_SUCCESS;
}
[[noreturn]] inline int MPI_Abort(MPI_Comm, int code) {
  std::fflush(stderr);
  std::exit(code);
}
