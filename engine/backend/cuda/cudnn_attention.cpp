// cuDNN's fused attention through its backend (graph) API, loaded with dlopen (see
// cudnn_attention.h). The graphs follow the patterns cuDNN's fused flash-attention engines
// match, as cuDNN's own frontend builds them for a causal, unbiased, dropout-free attention in
// training mode; on cuDNN 9.19 with an H100's description (no GPU: tests/cuda/cudnn_graphs.py)
// its heuristics find engines for both.
#include "engine/backend/cuda/cudnn_attention.h"

#if defined(ZT_CUDA_EMULATED) || !__has_include(<cudnn_graph.h>)

namespace zt::cuda::cudnn_attention {
#ifdef ZT_CUDA_EMULATED
static const char* kWhy = "the emulated device does not run cuDNN";
#else
static const char* kWhy = "built without cuDNN's headers";
#endif
std::string unavailable(const Shape&) { return kWhy; }
bool forward(const Shape&, void*, float*, const void*, float*, int64_t, cudaStream_t) { return false; }
bool backward(const Shape&, void*, const void*, const void*, const void*, const float*, float*, int64_t,
              cudaStream_t) {
  return false;
}
Support supported_on(const Shape&, const std::string&) { return {0, 0, kWhy}; }
}  // namespace zt::cuda::cudnn_attention

#else

#include <cudnn_graph.h>
#include <dlfcn.h>

#include "engine/backend/cuda_scratch.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace zt::cuda::cudnn_attention {

namespace {

using Desc = cudnnBackendDescriptor_t;

// The part of cuDNN's C API used here, resolved from libcudnn.so.9 (its shim loads the rest).
struct Lib {
  std::string error;  // why it is not loaded
  size_t version = 0;
  size_t (*get_version)() = nullptr;
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error)(char*, size_t) = nullptr;
  cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, Desc*) = nullptr;
  cudnnStatus_t (*destroy_desc)(Desc) = nullptr;
  cudnnStatus_t (*set_attr)(Desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                            const void*) = nullptr;
  cudnnStatus_t (*get_attr)(Desc const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, int64_t*,
                            void*) = nullptr;
  cudnnStatus_t (*finalize)(Desc) = nullptr;
  cudnnStatus_t (*execute)(cudnnHandle_t, Desc, Desc) = nullptr;
};

const Lib& lib() {
  static const Lib l = [] {
    Lib x;
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      x.error = std::string("libcudnn.so.9 not loaded: ") + (e ? e : "?");
      return x;
    }
    bool all = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      all = all && fn;
    };
    get(x.get_version, "cudnnGetVersion");
    get(x.create, "cudnnCreate");
    get(x.set_stream, "cudnnSetStream");
    get(x.error_string, "cudnnGetErrorString");
    get(x.last_error, "cudnnGetLastErrorString");
    get(x.create_desc, "cudnnBackendCreateDescriptor");
    get(x.destroy_desc, "cudnnBackendDestroyDescriptor");
    get(x.set_attr, "cudnnBackendSetAttribute");
    get(x.get_attr, "cudnnBackendGetAttribute");
    get(x.finalize, "cudnnBackendFinalize");
    get(x.execute, "cudnnBackendExecute");
    if (!all) {
      x.error = "libcudnn.so.9 lacks the backend API";
      return x;
    }
    x.version = x.get_version();
    Dl_info where{};
    const bool named = dladdr(reinterpret_cast<void*>(x.get_version), &where) && where.dli_fname;
    std::fprintf(stderr, "attention: cuDNN %zu.%zu.%zu loaded (%s)\n", x.version / 10000, x.version / 100 % 100,
                 x.version % 100, named ? where.dli_fname : "libcudnn.so.9");
    // 9.10.0 and 9.10.1 compute 16-bit fused attention wrongly (cuDNN's frontend refuses them)
    if (x.version < 90000 || (x.version >= 91000 && x.version < 91002))
      x.error = "cuDNN " + std::to_string(x.version) + " is not used for attention (9.x, not 9.10.0-9.10.1)";
    return x;
  }();
  return l;
}

// A graph under construction: each call adds descriptors (freed with it, or kept for the process
// with a plan), and the first failure is remembered with cuDNN's own words; later calls do nothing.
struct Graph {
  cudnnDataType_t io = CUDNN_DATA_BFLOAT16;
  std::vector<Desc> keep, ops;
  std::string error;
  bool for_the_process = false;  // a cached plan's: never freed
  Graph() = default;
  Graph(const Graph&) = delete;
  ~Graph() {
    if (!for_the_process)
      for (auto it = keep.rbegin(); it != keep.rend(); ++it) lib().destroy_desc(*it);
  }

  bool ok(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS || !error.empty()) return error.empty();
    char buf[1024] = {0};
    lib().last_error(buf, sizeof buf);
    error = std::string(what) + ": " + lib().error_string(s) + (buf[0] ? std::string(" (") + buf + ")" : "");
    return false;
  }
  Desc make(cudnnBackendDescriptorType_t type) {
    Desc d = nullptr;
    if (!ok(lib().create_desc(type, &d), "create descriptor")) return nullptr;
    keep.push_back(d);
    return d;
  }
  template <typename V>
  void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const V* v) {
    if (error.empty()) ok(lib().set_attr(d, name, type, n, v), "set attribute");
  }
  void desc(Desc d, cudnnBackendAttributeName_t name, Desc v) { set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v); }
  Desc done(Desc d, const char* what) {
    if (error.empty()) ok(lib().finalize(d), what);
    return d;
  }

  // A 4-d tensor: non-virtual ones are bound by uid at execution; by-value ones are host scalars.
  enum Kind { Memory, Virtual, ByValue };
  Desc tensor(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims, std::vector<int64_t> strides,
              Kind kind = Virtual) {
    Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!t) return nullptr;
    const int64_t align = 16;
    const bool yes = true;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (kind == Virtual) set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (kind == ByValue) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    return done(t, "tensor");
  }
  Desc scalar(int64_t uid) { return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, ByValue); }
  void op(Desc o, const char* what) {
    done(o, what);
    if (error.empty()) ops.push_back(o);
  }
  // y = mode(x[, b[, t]]), computed in `prec`; `axis` for GEN_INDEX
  void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc y, Desc b = nullptr, Desc t = nullptr,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!p) return;
    set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    done(p, "pointwise");
    Desc o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!o) return;
    const float one = 1.0f;
    desc(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p);
    desc(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    desc(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    if (b) desc(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) desc(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    op(o, "pointwise operation");
  }
  // c = a b over the last two dimensions (batched over the first two, broadcast where one is 1
  // or divides: the key/value heads of grouped-query attention)
  void matmul(Desc a, Desc b, Desc c) {
    Desc m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    if (!m) return;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    done(m, "matmul");
    Desc o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    if (!o) return;
    desc(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    desc(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    desc(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    desc(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    op(o, "matmul operation");
  }
  // y = reduce(x) over the dimensions where y has size 1
  void reduce(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    if (!r) return;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    const bool deterministic = false;  // as cuDNN's frontend sets it from 9.11
    if (lib().version >= 91100) set(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic);
    done(r, "reduction");
    Desc o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    if (!o) return;
    desc(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    desc(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    desc(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    op(o, "reduction operation");
  }
  // the same elements seen through y's strides (a transpose)
  void reshape(Desc x, Desc y) {
    Desc o = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    if (!o) return;
    desc(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    desc(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op(o, "reshape operation");
  }
  // `handle`: cuDNN before 9.8 needs the handle in the graph and the plan (the attributes are
  // deprecated since); null for the CI check's heuristics-only query
  Desc operation_graph(cudnnHandle_t handle) {
    Desc g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!g) return nullptr;
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
    if (handle && lib().version < 90800) set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    return done(g, "operation graph");
  }
};

// The tensors' uids (the variant pack binds these); virtual ones from 100.
enum Uid : int64_t { kQ = 1, kKt, kV, kO, kStats, kScale, kMaskFill, kDO, kDQ, kDK, kDV, kOne, kSoftmaxSum, kDQAcc };

// Dimensions [b, h, s, d] with ztrain's layouts: qkv rows of R = (NH + 2 NKV) hs elements (q heads,
// then k heads, then v heads), out and dout rows of C = NH hs, the statistics (B, NH, T).
struct Layout {
  int64_t b, hq, hk, s, d, R, C;
  explicit Layout(const Shape& x)
      : b(x.B), hq(x.NH), hk(x.NKV), s(x.T), d(x.hs), R(int64_t(x.NH + 2 * x.NKV) * x.hs), C(int64_t(x.NH) * x.hs) {}
  std::vector<int64_t> q() const { return {b, hq, s, d}; }
  std::vector<int64_t> qkv_strides() const { return {s * R, d, R, 1}; }
  std::vector<int64_t> kv() const { return {b, hk, s, d}; }
  std::vector<int64_t> kv_t() const { return {b, hk, d, s}; }  // K^T (or V^T): the same memory, strides swapped
  std::vector<int64_t> kv_t_strides() const { return {s * R, d, 1, R}; }
  std::vector<int64_t> o_strides() const { return {s * C, d, C, 1}; }
  std::vector<int64_t> scores() const { return {b, hq, s, s}; }
  std::vector<int64_t> score_strides() const { return {hq * s * s, s * s, s, 1}; }
  std::vector<int64_t> score_t_strides() const { return {hq * s * s, s * s, 1, s}; }
  std::vector<int64_t> rows() const { return {b, hq, s, 1}; }
  std::vector<int64_t> row_strides() const { return {hq * s, s, 1, 1}; }
  std::vector<int64_t> full_head_strides() const { return {hq * s * d, s * d, d, 1}; }
};

// The causal mask on scores x (keep key <= query: top-left, T queries and T keys): y = x where
// row >= col, else the mask fill. The indices come from GEN_INDEX over the scores' axes 2 and 3.
Desc causal(Graph& g, const Layout& L, Desc x, Desc fill, int64_t& uid) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  Desc row = g.tensor(uid++, CUDNN_DATA_INT32, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, nullptr, nullptr, f, 2);
  Desc col = g.tensor(uid++, CUDNN_DATA_INT32, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, nullptr, nullptr, f, 3);
  Desc keep = g.tensor(uid++, CUDNN_DATA_BOOLEAN, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
  Desc y = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, y, fill, keep);
  return y;
}

// Forward: S = Q K^T scale, masked; M = rowmax; E = exp(S - M); Z = rowsum E; stats = M + ln Z;
// P = E / Z (in the 16-bit type: the second product's A operand); O = P V.
void build_forward(Graph& g, const Layout& L) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  Desc Q = g.tensor(kQ, g.io, L.q(), L.qkv_strides(), Graph::Memory);
  Desc Kt = g.tensor(kKt, g.io, L.kv_t(), L.kv_t_strides(), Graph::Memory);
  Desc V = g.tensor(kV, g.io, L.kv(), L.qkv_strides(), Graph::Memory);
  Desc O = g.tensor(kO, g.io, L.q(), L.o_strides(), Graph::Memory);
  Desc stats = g.tensor(kStats, f, L.rows(), L.row_strides(), Graph::Memory);
  Desc scale = g.scalar(kScale), fill = g.scalar(kMaskFill);
  int64_t uid = 100;
  Desc S0 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.matmul(Q, Kt, S0);
  Desc S1 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, S0, S1, scale);
  Desc S2 = causal(g, L, S1, fill, uid);
  Desc M = g.tensor(uid++, f, L.rows(), L.row_strides());
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, S2, M);
  Desc S3 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, S2, S3, M);
  Desc E = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, S3, E);
  Desc Z = g.tensor(uid++, f, L.rows(), L.row_strides());
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, E, Z);
  Desc lnZ = g.tensor(uid++, f, L.rows(), L.row_strides());
  g.pointwise(CUDNN_POINTWISE_LOG, Z, lnZ);
  g.pointwise(CUDNN_POINTWISE_ADD, M, stats, lnZ);
  // P in the 16-bit type, as the second product's A operand must be (fp32 here is a planted fault
  // for tests/cuda/cudnn_graphs.py: cuDNN's fused engines then do not match the graph)
  const bool planted = std::getenv("ZTRAIN_TEST_CUDNN_P_FP32") != nullptr;
  Desc P = g.tensor(uid++, planted ? f : g.io, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_DIV, E, P, Z);
  g.matmul(P, V, O);
}

// Backward: D = rowsum(dO O) (into softmax_sum, in the scratch); P = exp(Q K^T scale - stats),
// masked; dV = P^T dO; dP = dO V^T; dS = P (dP - D) scale; dK = dS^T Q; dQ = dS K through the fp32
// accumulator. With grouped-query heads, dK and dV are summed over each group's query heads.
void build_backward(Graph& g, const Layout& L) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  Desc Q = g.tensor(kQ, g.io, L.q(), L.qkv_strides(), Graph::Memory);
  Desc Kt = g.tensor(kKt, g.io, L.kv_t(), L.kv_t_strides(), Graph::Memory);
  Desc Vt = g.tensor(kV, g.io, L.kv_t(), L.kv_t_strides(), Graph::Memory);
  Desc O = g.tensor(kO, g.io, L.q(), L.o_strides(), Graph::Memory);
  Desc stats = g.tensor(kStats, f, L.rows(), L.row_strides(), Graph::Memory);
  Desc dO = g.tensor(kDO, g.io, L.q(), L.o_strides(), Graph::Memory);
  Desc dQ = g.tensor(kDQ, g.io, L.q(), L.qkv_strides(), Graph::Memory);
  Desc dK = g.tensor(kDK, g.io, L.kv(), L.qkv_strides(), Graph::Memory);
  Desc dV = g.tensor(kDV, g.io, L.kv(), L.qkv_strides(), Graph::Memory);
  Desc scale = g.scalar(kScale), fill = g.scalar(kMaskFill), one = g.scalar(kOne);
  Desc softmax_sum = g.tensor(kSoftmaxSum, f, L.rows(), L.row_strides(), Graph::Memory);
  Desc dq_acc = g.tensor(kDQAcc, f, L.q(), L.full_head_strides(), Graph::Memory);
  int64_t uid = 100;
  Desc dOO = g.tensor(uid++, f, L.q(), L.full_head_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, dO, dOO, O);
  Desc rowsum = g.tensor(uid++, f, L.rows(), L.row_strides());
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, dOO, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, softmax_sum, one);  // as the frontend: its engine's workspace is small
  Desc S0 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.matmul(Q, Kt, S0);
  Desc S1 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, S0, S1, scale);
  Desc S2 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, S1, S2, stats);
  Desc S3 = causal(g, L, S2, fill, uid);
  Desc P = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, S3, P);
  Desc Pt = g.tensor(uid++, g.io, L.scores(), L.score_t_strides());
  g.reshape(P, Pt);
  const bool grouped = L.hq != L.hk;
  // dV (and dK): per query head first where heads are grouped, then summed over each group
  auto per_kv_head = [&](Desc a, Desc b, Desc out) {
    if (!grouped) return g.matmul(a, b, out);
    Desc full = g.tensor(uid++, g.io, L.q(), L.full_head_strides());
    g.matmul(a, b, full);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, full, out);
  };
  per_kv_head(Pt, dO, dV);
  Desc dP = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.matmul(dO, Vt, dP);
  Desc t1 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, dP, t1, softmax_sum);
  Desc t2 = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, t1, t2, P);
  Desc dS = g.tensor(uid++, f, L.scores(), L.score_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, t2, dS, scale);
  Desc dSt = g.tensor(uid++, g.io, L.scores(), L.score_t_strides());
  g.reshape(dS, dSt);
  per_kv_head(dSt, Q, dK);
  Desc K = g.tensor(uid++, f, L.kv(), L.qkv_strides());
  g.reshape(Kt, K);
  g.matmul(dS, K, dq_acc);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_acc, dQ);
}

// The engine configurations cuDNN's heuristics (mode A) propose for graph `og`, in their order.
std::vector<Desc> engine_configs(Graph& g, Desc og, Desc device_prop = nullptr) {
  Desc h = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  if (!h) return {};
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.desc(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
  g.set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (device_prop) g.desc(h, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, device_prop);
  g.done(h, "engine heuristics");
  int64_t n = 0;
  if (!g.error.empty() || !g.ok(lib().get_attr(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                               nullptr), "heuristics' results"))
    return {};
  std::vector<Desc> cfgs;
  for (int64_t i = 0; i < n; ++i) cfgs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t got = 0;
  if (n > 0 && !g.ok(lib().get_attr(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                    cfgs.data()), "heuristics' results"))
    return {};
  cfgs.resize(size_t(got));  // configurations cuDNN cannot support are left out
  return cfgs;
}

bool build(Graph& g, const Shape& s, bool backward) {
  const Layout L(s);
  if (backward) build_backward(g, L);
  else build_forward(g, L);
  return g.error.empty();
}

// A plan ready to execute, or why there is none.
struct Plan {
  Graph graph;
  Desc plan = nullptr;
  int64_t workspace = 0;
};

cudnnHandle_t handle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t x = nullptr;
    if (lib().create(&x) != CUDNN_STATUS_SUCCESS) x = nullptr;
    return x;
  }();
  return h;
}

std::string shape_name(const Shape& s) {
  return "B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " heads " + std::to_string(s.NH) + "/" +
         std::to_string(s.NKV) + " of " + std::to_string(s.hs) + (s.fp16 ? " fp16" : " bf16");
}

// The shape's plan, built at its first use (heuristics, then the first configuration whose plan
// finalizes; cuDNN compiles its kernels there) and kept.
const Plan& plan_for(const Shape& s, bool backward) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, int, bool, bool>, std::unique_ptr<Plan>> plans;
  std::lock_guard lock(mu);
  auto& p = plans[{s.B, s.T, s.NH, s.NKV, s.hs, s.fp16, backward}];
  if (p) return *p;
  p = std::make_unique<Plan>();
  Graph& g = p->graph;
  g.for_the_process = true;
  g.io = s.fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  if (!handle()) g.error = "cudnnCreate failed (no GPU?)";
  cudnnHandle_t h = handle();
  Desc og = g.error.empty() && build(g, s, backward) ? g.operation_graph(h) : nullptr;
  const std::vector<Desc> cfgs = og && g.error.empty() ? engine_configs(g, og) : std::vector<Desc>{};
  if (g.error.empty() && cfgs.empty()) g.error = "cuDNN's heuristics found no engine";
  for (Desc cfg : cfgs) {
    Desc plan = g.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    g.desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    if (lib().version < 90800) g.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (!g.error.empty()) break;
    if (lib().finalize(plan) != CUDNN_STATUS_SUCCESS) continue;  // the next configuration
    int64_t n = 0;
    if (g.ok(lib().get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &p->workspace),
             "workspace size"))
      p->plan = plan;
    break;
  }
  if (!p->plan && g.error.empty()) g.error = "no engine configuration's plan finalized";
  if (!p->plan)
    std::fprintf(stderr, "attention: cuDNN's fused attention %s for %s not built: %s; ztrain's kernels run\n",
                 backward ? "backward" : "forward", shape_name(s).c_str(), g.error.c_str());
  return *p;
}

bool execute(const Plan& p, cudaStream_t stream, std::vector<int64_t> uids, std::vector<void*> ptrs, void* workspace,
             const char* what) {
  Graph g;  // the variant pack's descriptor, freed with it
  Desc vp = g.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  g.set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  g.set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
  g.set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  g.done(vp, "variant pack");
  if (g.error.empty()) g.ok(lib().set_stream(handle(), stream), "set stream");
  if (g.error.empty()) g.ok(lib().execute(handle(), p.plan, vp), what);
  if (!g.error.empty()) std::fprintf(stderr, "attention: cuDNN %s failed: %s\n", what, g.error.c_str());
  // the descriptors of a variant pack are host objects: destroyed at once (execution has copied them)
  return g.error.empty();
}

float mask_fill() { return lib().version >= 91000 ? -INFINITY : -FLT_MAX; }

// The backward's scratch: the dQ accumulator, softmax_sum, then cuDNN's workspace, each on a
// 256-byte boundary (the engine's pointers must be at least 16-byte aligned).
int64_t softmax_sum_offset(const Shape& s) { return cuda_scratch::round64(int64_t(s.B) * s.NH * s.T * s.hs); }
int64_t workspace_offset(const Shape& s) {
  return cuda_scratch::cudnn_attention_backward_fixed(s.B, s.T, s.NH * s.hs, s.NH);
}

}  // namespace

std::string unavailable(const Shape& s) {
  if (!lib().error.empty()) return lib().error;
  if (s.hs % 8 != 0 || s.hs > 128) return "head size " + std::to_string(s.hs) + " (cuDNN's graph: a multiple of 8, at most 128)";
  if (s.T < 2) return "a sequence of one token";
  if (s.NH % s.NKV != 0) return "query heads not a multiple of key/value heads";
  // before 9.16 cuDNN's frontend adds a padding mask where the keys are not a multiple of 128
  if (lib().version < 91600 && s.T % 128 != 0) return "a sequence length not a multiple of 128 on cuDNN before 9.16";
  return "";
}

bool forward(const Shape& s, void* out, float* lse, const void* qkv, float* workspace, int64_t workspace_floats,
             cudaStream_t stream) {
  if (!unavailable(s).empty()) return false;
  const Plan& p = plan_for(s, /*backward=*/false);
  if (!p.plan || p.workspace > workspace_floats * int64_t(sizeof(float))) return false;
  const Layout L(s);
  const size_t elem = 2;
  float scale = 1.0f / std::sqrt(float(s.hs)), fill = mask_fill();
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  return execute(p, stream, {kQ, kKt, kV, kO, kStats, kScale, kMaskFill},
                 {base, base + L.C * elem, base + (L.C + L.hk * L.d) * elem, out, lse, &scale, &fill}, workspace,
                 "attention forward");
}

bool backward(const Shape& s, void* dqkv, const void* dout, const void* out, const void* qkv, const float* lse,
              float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  // the accumulator and softmax_sum first: no plan is built for a call they do not fit
  if (!unavailable(s).empty() || workspace_offset(s) > scratch_floats) return false;
  const Plan& p = plan_for(s, /*backward=*/true);
  if (!p.plan) return false;
  if (const int64_t need = workspace_offset(s) + (p.workspace + 3) / 4; need > scratch_floats) {
    static bool said = false;
    if (!said)
      std::fprintf(stderr, "attention: cuDNN's backward for %s needs %lld bytes of scratch, %lld reserved: ztrain's "
                   "kernels run it\n", shape_name(s).c_str(), (long long)need * 4, (long long)scratch_floats * 4);
    said = true;
    return false;
  }
  const Layout L(s);
  const size_t elem = 2;
  float scale = 1.0f / std::sqrt(float(s.hs)), fill = mask_fill(), one = 1.0f;
  // cuDNN's frontend zeroed the accumulator before 9.6; the engines since do it themselves
  if (lib().version < 90600 &&
      cudaMemsetAsync(scratch, 0, size_t(L.b * L.hq * L.s * L.d) * sizeof(float), stream) != cudaSuccess)
    return false;
  char* q = static_cast<char*>(const_cast<void*>(qkv));
  char* dq = static_cast<char*>(dqkv);
  const int64_t k_off = L.C * elem, v_off = (L.C + L.hk * L.d) * elem;
  return execute(p, stream,
                 {kQ, kKt, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kMaskFill, kOne, kSoftmaxSum, kDQAcc},
                 {q, q + k_off, q + v_off, const_cast<void*>(out), const_cast<float*>(lse), const_cast<void*>(dout), dq,
                  dq + k_off, dq + v_off, &scale, &fill, &one, scratch + softmax_sum_offset(s), scratch},
                 scratch + workspace_offset(s), "attention backward");
}

Support supported_on(const Shape& s, const std::string& device_json) {
  Support r;
  if (!lib().error.empty()) return r.error = lib().error, r;
  for (bool backward : {false, true}) {
    Graph g;
    g.io = s.fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    Desc dp = g.make(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    g.set(dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(device_json.size() + 1),
          device_json.c_str());
    g.done(dp, "device description");
    Desc og = g.error.empty() && build(g, s, backward) ? g.operation_graph(nullptr) : nullptr;
    const size_t n = og && g.error.empty() ? engine_configs(g, og, dp).size() : 0;
    if (!g.error.empty()) return r.error = (backward ? "backward: " : "forward: ") + g.error, r;
    (backward ? r.backward_engines : r.forward_engines) = int64_t(n);
  }
  return r;
}

}  // namespace zt::cuda::cudnn_attention

#endif
