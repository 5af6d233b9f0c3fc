// Standalone test of the emulated cuBLASLt (engine/backend/cuda_emu/cublaslt.cpp): cublasLtMatmul
// against a plain triple loop here (transposes, padded leading dimensions, fp32/bf16/fp16, beta,
// every emulated epilogue, awkward sizes) and the documented refusals. One line per case; exit 1 on failure.
// One file over 600 lines on purpose: one standalone executable, a case table with its reference.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

void report(const std::string& name, const std::string& problem) {
  if (problem.empty()) {
    std::printf("PASS %s\n", name.c_str());
  } else {
    std::printf("FAIL %s: %s\n", name.c_str(), problem.c_str());
    ++g_failures;
  }
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("FATAL %s: %s\n", what, cudaGetErrorString(e));
  std::exit(2);
}

void lt_ok(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::printf("FATAL %s: %s\n", what, cublasLtGetStatusName(s));
  std::exit(2);
}

std::string status_name(cublasStatus_t s) { return cublasLtGetStatusName(s); }

// ---- values: every host value is exactly representable in its matrix's type
size_t bytes_of(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
const char* type_name(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16"; }

float round_to(cudaDataType_t t, float x) {
  if (t == CUDA_R_16BF) return __bfloat162float(__float2bfloat16(x));
  if (t == CUDA_R_16F) return __half2float(__float2half(x));
  return x;
}

void put(unsigned char* p, cudaDataType_t t, float x) {
  if (t == CUDA_R_32F) {
    std::memcpy(p, &x, 4);
  } else if (t == CUDA_R_16BF) {
    const __nv_bfloat16 h = __float2bfloat16(x);
    std::memcpy(p, &h, 2);
  } else {
    const __half h = __float2half(x);
    std::memcpy(p, &h, 2);
  }
}

float get(const unsigned char* p, cudaDataType_t t) {
  if (t == CUDA_R_32F) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  if (t == CUDA_R_16BF) {
    __nv_bfloat16 h;
    std::memcpy(&h, p, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, p, 2);
  return __half2float(h);
}

// one unit in the last place of the type at |x| (0 for fp32, whose error bound covers rounding)
double ulp_of(cudaDataType_t t, double x) {
  if (t == CUDA_R_32F) return 0;
  const int mantissa = t == CUDA_R_16BF ? 7 : 10, emin = t == CUDA_R_16BF ? -126 : -14;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = f 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, emin) - mantissa);
}

struct Rng {
  uint64_t s;
  float uniform(float lo, float hi) {  // LCG, top 24 bits
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * float(s >> 40) * (1.0f / 16777216.0f);
  }
};

// A host matrix (rows, cols) column-major with ld >= rows; the padding rows hold NaN so a read of
// them poisons the result and a write to them is seen.
struct HostMat {
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> v;  // ld * cols
  float at(int64_t i, int64_t j) const { return v[size_t(i + j * ld)]; }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> b(v.size() * bytes_of(type));
    for (size_t i = 0; i < v.size(); ++i) put(&b[i * bytes_of(type)], type, v[i]);
    return b;
  }
};

HostMat random_mat(Rng& rng, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, float lo, float hi) {
  HostMat m{t, rows, cols, ld, std::vector<float>(size_t(std::max<int64_t>(ld, 1) * cols), NAN)};
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) m.v[size_t(i + j * ld)] = round_to(t, rng.uniform(lo, hi));
  return m;
}

HostMat nan_mat(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
  return {t, rows, cols, ld, std::vector<float>(size_t(ld * cols), NAN)};
}

// device memory (the emulated device's cudaMalloc), freed on scope exit
struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) { cuda_ok(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc"); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { cudaFree(p); }
  void upload(const std::vector<unsigned char>& b) {
    cuda_ok(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<unsigned char> download(cudaStream_t s) const {
    std::vector<unsigned char> b(n);
    cuda_ok(cudaMemcpyAsync(b.data(), p, n, cudaMemcpyDeviceToHost, s), "download");
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return b;
  }
};

// ---- descriptors
struct Lt {
  cublasLtHandle_t h = nullptr;
  cudaStream_t s = nullptr;
  Lt() {
    lt_ok(cublasLtCreate(&h), "cublasLtCreate");
    cuda_ok(cudaStreamCreate(&s), "cudaStreamCreate");
  }
  ~Lt() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    cublasLtDestroy(h);
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    lt_ok(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld), "layout");
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
};

struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit Desc(cublasComputeType_t ct = CUBLAS_COMPUTE_32F, cudaDataType_t st = CUDA_R_32F) {
    lt_ok(cublasLtMatmulDescCreate(&d, ct, st), "desc");
  }
  ~Desc() { cublasLtMatmulDescDestroy(d); }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t a, const T& v) {
    lt_ok(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v), "desc attribute");
  }
  void ops(bool ta, bool tb) {
    set(CUBLASLT_MATMUL_DESC_TRANSA, ta ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(CUBLASLT_MATMUL_DESC_TRANSB, tb ? CUBLAS_OP_T : CUBLAS_OP_N);
  }
  void epilogue(cublasLtEpilogue_t e) { set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(e)); }
  void bias(const void* p) { set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p); }
  void aux(const void* p, int64_t ld) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
  }
};

struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  explicit Pref(uint32_t align = 16, uint64_t workspace = 1 << 20) {
    lt_ok(cublasLtMatmulPreferenceCreate(&p), "preference");
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      set(a, align);
  }
  ~Pref() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t a, const T& v) {
    lt_ok(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v), "preference attribute");
  }
};

struct Heuristic {
  cublasStatus_t status;
  int found = 0;
  cublasLtMatmulHeuristicResult_t result{};
};
Heuristic heuristic(const Lt& lt, const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
                    const Pref& p) {
  Heuristic h;
  h.status = cublasLtMatmulAlgoGetHeuristic(lt.h, d.d, a.l, b.l, c.l, dl.l, p.p, 1, &h.result, &h.found);
  return h;
}

// ---- the epilogues' role split (mirrors the documentation's lists, kept independent of the library)
bool reads_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writes_aux(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool reads_aux(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
// length of the bias-gradient output, 0 when the epilogue writes none
int64_t bias_grad_len(cublasLtEpilogue_t e, int64_t m, int64_t n) {
  if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA) return m;
  if (e == CUBLASLT_EPILOGUE_BGRADB) return n;
  return 0;
}
const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "default";
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_GELU: return "gelu";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "gelu_bias";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu_aux";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "gelu_aux_bias";
    case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "dgelu_bgrad";
    case CUBLASLT_EPILOGUE_BGRADA: return "bgrada";
    case CUBLASLT_EPILOGUE_BGRADB: return "bgradb";
    default: return "?";
  }
}

// the documented GELU (tanh form) and its derivative, in double
double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double c = std::sqrt(2 / std::numbers::pi), t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, fp32's unit roundoff

// ---- a GEMM case and its check against the triple loop
struct Case {
  std::string name;
  int64_t m, n, k;
  bool ta = false, tb = false;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0, pad_d = 0;  // ld = rows + pad
  cudaDataType_t ab = CUDA_R_32F, dt = CUDA_R_32F;
  float alpha = 1, beta = 0;
  bool in_place = false;  // C is D (beta accumulates into D)
  bool c_broadcast = false;  // C is one column with ld 0
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  bool set_bias_type = false;  // set CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE to D's type explicitly
};

struct Inputs {
  HostMat a, b, c, d, aux;
  std::vector<float> bias;  // input bias (length m) or the gradient buffer's initial NaNs
  int64_t aux_ld = 0;
};

Inputs make_inputs(const Case& cs, Rng& rng) {
  Inputs in;
  const int64_t ar = cs.ta ? cs.k : cs.m, ac = cs.ta ? cs.m : cs.k;  // A as stored
  const int64_t br = cs.tb ? cs.n : cs.k, bc = cs.tb ? cs.k : cs.n;
  in.a = random_mat(rng, cs.ab, ar, ac, ar + cs.pad_a, -1, 1);
  in.b = random_mat(rng, cs.ab, br, bc, br + cs.pad_b, -1, 1);
  const int64_t ldd = cs.m + cs.pad_d;
  if (cs.in_place) {
    in.d = random_mat(rng, cs.dt, cs.m, cs.n, ldd, -1, 1);
    in.c = in.d;
  } else {
    in.d = nan_mat(cs.dt, cs.m, cs.n, ldd);
    in.c = cs.c_broadcast ? random_mat(rng, cs.dt, cs.m, 1, cs.m, -1, 1)
                          : random_mat(rng, cs.dt, cs.m, cs.n, cs.m + cs.pad_c, -1, 1);
    if (cs.c_broadcast) in.c.cols = cs.n, in.c.ld = 0;
  }
  in.aux_ld = (cs.m + 7) / 8 * 8 + 8;  // a multiple of 8 with padding rows after m
  if (reads_aux(cs.epi)) in.aux = random_mat(rng, cs.dt, cs.m, cs.n, in.aux_ld, -3, 3);
  if (writes_aux(cs.epi)) in.aux = nan_mat(cs.dt, cs.m, cs.n, in.aux_ld);
  const int64_t grad = bias_grad_len(cs.epi, cs.m, cs.n);
  if (reads_bias(cs.epi))
    for (int64_t i = 0; i < cs.m; ++i) in.bias.push_back(round_to(cs.dt, rng.uniform(-1, 1)));
  if (grad) in.bias.assign(size_t(grad) + 4, NAN);  // 4 guard elements must stay NaN
  return in;
}

// the reference and its error bound per element of D (index i + j m)
struct Reference {
  std::vector<double> pre, pre_err, out, out_err;
};

Reference reference(const Case& cs, const Inputs& in) {
  Reference r;
  const size_t mn = size_t(cs.m * cs.n);
  r.pre.resize(mn), r.pre_err.resize(mn), r.out.resize(mn), r.out_err.resize(mn);
  for (int64_t j = 0; j < cs.n; ++j)
    for (int64_t i = 0; i < cs.m; ++i) {
      double s = 0, s_abs = 0;
      for (int64_t p = 0; p < cs.k; ++p) {
        const double a = cs.ta ? in.a.at(p, i) : in.a.at(i, p), b = cs.tb ? in.b.at(j, p) : in.b.at(p, j);
        s += a * b, s_abs += std::fabs(a * b);
      }
      const double c = cs.beta != 0 ? double(in.c.at(i, cs.c_broadcast ? 0 : j)) : 0.0;
      double pre = double(cs.alpha) * s + double(cs.beta) * c, mag = std::fabs(cs.alpha) * s_abs + std::fabs(cs.beta * c);
      if (reads_bias(cs.epi)) pre += in.bias[size_t(i)], mag += std::fabs(in.bias[size_t(i)]);
      // fp32 accumulation of k products plus a few more roundings (k + 4 unit roundoffs of the magnitude)
      const double pre_err = double(cs.k + 4) * kU * mag;
      double out = pre, out_err = pre_err;
      // the epilogue's tanh may be the fast instruction's, 2^-11 relative (cublaslt.cpp)
      constexpr double kTanh = 1.0 / 2048;
      if (has_gelu(cs.epi))
        out = gelu_ref(pre), out_err = 1.2 * pre_err + 16 * kU * (std::fabs(pre) + 1e-30) + 0.5 * std::fabs(pre) * kTanh;
      if (reads_aux(cs.epi)) {
        const double x = in.aux.at(i, j), g = gelu_grad_ref(x);
        const double g_err = kTanh * (0.5 + std::fabs(x) * 0.7978845608 * (1 + 3 * 0.044715 * x * x));
        out = pre * g, out_err = std::fabs(g) * pre_err + 32 * kU * std::fabs(pre) * (1 + x * x * std::fabs(x)) +
                                 std::fabs(pre) * g_err;
      }
      const size_t e = size_t(i + j * cs.m);
      r.pre[e] = pre, r.pre_err[e] = pre_err, r.out[e] = out, r.out_err[e] = out_err;
    }
  return r;
}

// |got - want| within err plus one ulp of the type (at the larger end of the interval)
bool close(cudaDataType_t t, double got, double want, double err) {
  if (!std::isfinite(got)) return false;
  return std::fabs(got - want) <= err + ulp_of(t, std::fabs(want) + err) + 1e-30;
}

// compares the m x n part of a downloaded matrix and checks its padding rows kept their bytes
std::string compare_matrix(const char* what, const HostMat& before, const std::vector<unsigned char>& got,
                           const std::vector<double>& want, const std::vector<double>& err) {
  const size_t eb = bytes_of(before.type);
  const std::vector<unsigned char> orig = before.bytes();
  char msg[256];
  for (int64_t j = 0; j < before.cols; ++j)
    for (int64_t i = 0; i < before.ld; ++i) {
      const size_t at = size_t(i + j * before.ld) * eb;
      if (i >= before.rows) {
        if (std::memcmp(&got[at], &orig[at], eb) != 0) {
          std::snprintf(msg, sizeof msg, "%s padding (%lld, %lld) was written", what, (long long)i, (long long)j);
          return msg;
        }
        continue;
      }
      const size_t e = size_t(i + j * before.rows);
      const double g = get(&got[at], before.type);
      if (!close(before.type, g, want[e], err[e])) {
        std::snprintf(msg, sizeof msg, "%s(%lld, %lld) = %.9g, want %.9g (+- %.3g)", what, (long long)i, (long long)j, g,
                      want[e], err[e]);
        return msg;
      }
    }
  return {};
}

// the bias gradient: DGELU_BGRAD sums D's columns, BGRADA sums op(A) over k, BGRADB op(B) over k
std::string compare_bias_grad(const Case& cs, const Inputs& in, const Reference& r, const std::vector<unsigned char>& got) {
  const int64_t len = bias_grad_len(cs.epi, cs.m, cs.n);
  const size_t eb = bytes_of(cs.dt);
  char msg[256];
  for (int64_t x = 0; x < len + 4; ++x) {
    const float g = get(&got[size_t(x) * eb], cs.dt);
    if (x >= len) {
      if (!std::isnan(g)) return "bias gradient written past its end";
      continue;
    }
    double want = 0, err = 0, mag = 0;
    if (cs.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      for (int64_t j = 0; j < cs.n; ++j) {
        const size_t e = size_t(x + j * cs.m);
        want += r.out[e], err += r.out_err[e], mag += std::fabs(r.out[e]);
      }
      err += double(cs.n + 2) * kU * mag;
    } else {
      for (int64_t p = 0; p < cs.k; ++p) {
        const double v = cs.epi == CUBLASLT_EPILOGUE_BGRADA ? (cs.ta ? in.a.at(p, x) : in.a.at(x, p))
                                                              : (cs.tb ? in.b.at(x, p) : in.b.at(p, x));
        want += v, mag += std::fabs(v);
      }
      err = double(cs.k + 2) * kU * mag;
    }
    if (!close(cs.dt, g, want, err)) {
      std::snprintf(msg, sizeof msg, "bias_grad[%lld] = %.9g, want %.9g (+- %.3g)", (long long)x, double(g), want, err);
      return msg;
    }
  }
  return {};
}

std::vector<unsigned char> vector_bytes(const std::vector<float>& v, cudaDataType_t t) {
  std::vector<unsigned char> b(v.size() * bytes_of(t));
  for (size_t i = 0; i < v.size(); ++i) put(&b[i * bytes_of(t)], t, v[i]);
  return b;
}

std::string run_case(const Lt& lt, const Case& cs, Rng& rng) {
  Inputs in = make_inputs(cs, rng);
  DevBuf a(in.a.v.size() * bytes_of(cs.ab)), b(in.b.v.size() * bytes_of(cs.ab)), d(in.d.v.size() * bytes_of(cs.dt));
  a.upload(in.a.bytes()), b.upload(in.b.bytes()), d.upload(in.d.bytes());
  DevBuf c(cs.in_place ? 0 : in.c.v.size() * bytes_of(cs.dt));
  if (!cs.in_place) c.upload(in.c.bytes());
  DevBuf bias(in.bias.size() * bytes_of(cs.dt)), aux(in.aux.v.size() * bytes_of(cs.dt));
  if (!in.bias.empty()) bias.upload(vector_bytes(in.bias, cs.dt));
  if (!in.aux.v.empty()) aux.upload(in.aux.bytes());
  DevBuf workspace(1 << 20);

  Desc desc;
  desc.ops(cs.ta, cs.tb);
  desc.epilogue(cs.epi);
  if (!in.bias.empty()) desc.bias(bias.p);
  if (!in.aux.v.empty()) desc.aux(aux.p, in.aux_ld);
  if (cs.set_bias_type) desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(cs.dt));
  Layout la(cs.ab, in.a.rows, in.a.cols, in.a.ld), lb(cs.ab, in.b.rows, in.b.cols, in.b.ld);
  Layout lc(cs.dt, cs.m, cs.n, in.c.ld), ld(cs.dt, cs.m, cs.n, in.d.ld);
  Pref pref;
  const Heuristic h = heuristic(lt, desc, la, lb, cs.in_place ? ld : lc, ld, pref);
  if (h.status != CUBLAS_STATUS_SUCCESS || h.found != 1)
    return "heuristic: " + status_name(h.status) + ", " + std::to_string(h.found) + " results";
  if (h.result.workspaceSize != 0 || h.result.state != CUBLAS_STATUS_SUCCESS) return "heuristic result fields";

  float alpha = cs.alpha, beta = cs.beta;
  const void* c_ptr = cs.in_place ? d.p : c.p;
  const cublasStatus_t st = cublasLtMatmul(lt.h, desc.d, &alpha, a.p, la.l, b.p, lb.l, &beta, c_ptr,
                                           cs.in_place ? ld.l : lc.l, d.p, ld.l, &h.result.algo, workspace.p,
                                           workspace.n, lt.s);
  if (st != CUBLAS_STATUS_SUCCESS) return "cublasLtMatmul: " + status_name(st);
  // the call must have copied what it needs: none of this may reach the enqueued work
  alpha = NAN, beta = NAN;
  desc.epilogue(CUBLASLT_EPILOGUE_DEFAULT);
  desc.bias(nullptr);
  desc.aux(nullptr, 0);

  const Reference r = reference(cs, in);
  if (std::string e = compare_matrix("D", in.d, d.download(lt.s), r.out, r.out_err); !e.empty()) return e;
  if (writes_aux(cs.epi))
    if (std::string e = compare_matrix("aux", in.aux, aux.download(lt.s), r.pre, r.pre_err); !e.empty()) return e;
  if (bias_grad_len(cs.epi, cs.m, cs.n))
    if (std::string e = compare_bias_grad(cs, in, r, bias.download(lt.s)); !e.empty()) return e;
  return {};
}

std::string case_name(const Case& cs) {
  char b[160];
  std::snprintf(b, sizeof b, "%s %s%s %s->%s m=%lld n=%lld k=%lld beta=%g%s", cs.name.c_str(), cs.ta ? "T" : "N",
                cs.tb ? "T" : "N", type_name(cs.ab), type_name(cs.dt), (long long)cs.m, (long long)cs.n,
                (long long)cs.k, double(cs.beta), cs.in_place ? " (C==D)" : "");
  return b;
}

std::vector<Case> gemm_cases() {
  std::vector<Case> v;
  for (int t = 0; t < 4; ++t) {  // every transpose pair, every leading dimension padded
    Case c{"transpose", 33, 7, 17};
    c.ta = t & 1, c.tb = t & 2, c.pad_a = 3, c.pad_b = 5, c.pad_c = 1, c.pad_d = 2;
    v.push_back(c);
  }
  for (cudaDataType_t ab : {CUDA_R_16BF, CUDA_R_16F})
    for (cudaDataType_t dt : {CUDA_R_32F, ab})
      for (float beta : {0.0f, 1.0f}) {
        Case c{"precision", 19, 9, 40};
        c.ta = true, c.ab = ab, c.dt = dt, c.beta = beta, c.in_place = beta != 0, c.pad_d = 3;
        v.push_back(c);
      }
  Case acc{"accumulate", 24, 10, 31};
  acc.beta = 1, acc.in_place = true, acc.pad_a = 2, acc.pad_b = 1, acc.pad_d = 5;
  v.push_back(acc);
  Case scaled{"alpha_beta_out_of_place", 17, 11, 9};
  scaled.ab = scaled.dt = CUDA_R_16BF, scaled.alpha = 0.5f, scaled.beta = -0.75f, scaled.pad_c = 6, scaled.pad_d = 1,
  scaled.tb = true;
  v.push_back(scaled);
  Case bcast{"c_ld0_broadcast", 13, 6, 5};
  bcast.beta = 1, bcast.c_broadcast = true;
  v.push_back(bcast);
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 1, 33}, {1, 33, 7}, {33, 7, 1}, {65, 5, 70}, {300, 6, 9}};
  int s = 0;
  for (const auto& sz : sizes) {  // awkward sizes across the 4-column and 256-row blocks
    Case c{"size", sz[0], sz[1], sz[2]};
    c.ta = s & 1, c.tb = s & 2, c.ab = s % 3 == 0 ? CUDA_R_32F : s % 3 == 1 ? CUDA_R_16BF : CUDA_R_16F;
    c.dt = s % 2 ? c.ab : CUDA_R_32F;
    ++s;
    v.push_back(c);
  }
  const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_BIAS,      CUBLASLT_EPILOGUE_GELU,
                                          CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                          CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                          CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,
                                          CUBLASLT_EPILOGUE_BGRADB};
  const cudaDataType_t types[][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16F, CUDA_R_32F},
                                     {CUDA_R_16F, CUDA_R_16F}};
  int r = 0;
  for (cublasLtEpilogue_t e : epilogues)
    for (const auto& t : types) {
      Case c{std::string("epilogue_") + epilogue_name(e), 21, 6, 13};
      c.epi = e, c.ab = t[0], c.dt = t[1], c.ta = r & 1, c.tb = r & 2, c.pad_a = 1, c.pad_d = 2;
      c.set_bias_type = r % 3 == 0;
      ++r;
      v.push_back(c);
    }
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_BGRADB}) {
    Case c{std::string("epilogue_") + epilogue_name(e), 16, 9, 8};  // with beta: C == D accumulates
    c.epi = e, c.ab = c.dt = CUDA_R_16BF, c.beta = 1, c.in_place = true, c.alpha = 2;
    v.push_back(c);
  }
  return v;
}

// ---- refusals: each builds a small problem and expects the documented status

struct Small {  // a 12 x 5 x 7 fp32 problem with its buffers, all 256-byte aligned
  static constexpr int64_t m = 12, n = 5, k = 7;
  DevBuf a{1024 * 4}, b{1024 * 4}, d{1024 * 4}, bias{256 * 4}, aux{1024 * 4}, ws{1 << 16};
  Layout la, lb, ld;
  explicit Small(cudaDataType_t ab = CUDA_R_32F, cudaDataType_t dt = CUDA_R_32F, int64_t lda = m)
      : la(ab, m, k, lda), lb(ab, k, n, k), ld(dt, m, n, m) {
    a.upload(std::vector<unsigned char>(a.n, 0));
    b.upload(std::vector<unsigned char>(b.n, 0));
    d.upload(std::vector<unsigned char>(d.n, 0x5a));
  }
  // D = op(A) op(B) in place of D, with the given A pointer (default: the buffer's start) and workspace
  cublasStatus_t matmul_ws(const Lt& lt, const Desc& desc, const cublasLtMatmulAlgo_t* algo, const void* A,
                           void* workspace, size_t ws_bytes) {
    const float alpha = 1, beta = 0;
    return cublasLtMatmul(lt.h, desc.d, &alpha, A ? A : a.p, la.l, b.p, lb.l, &beta, d.p, ld.l, d.p, ld.l, algo,
                          workspace, ws_bytes, lt.s);
  }
  cublasStatus_t matmul(const Lt& lt, const Desc& desc, const cublasLtMatmulAlgo_t* algo, const void* A = nullptr) {
    return matmul_ws(lt, desc, algo, A, ws.p, ws.n);
  }
  bool d_untouched(const Lt& lt) const {
    const auto got = d.download(lt.s);
    return std::all_of(got.begin(), got.end(), [](unsigned char x) { return x == 0x5a; });
  }
};

std::string expect_heuristic(const Lt& lt, const Desc& desc, const Small& s, const Pref& pref, cublasStatus_t want) {
  const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, pref);
  if (h.status != want) return "heuristic returned " + status_name(h.status) + ", want " + status_name(want);
  if (want != CUBLAS_STATUS_SUCCESS && h.found != 0) return "refused heuristic still reported results";
  return {};
}

void refusal_aux_ld(const Lt& lt) {
  Small s;
  Desc desc;
  desc.epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  desc.aux(s.aux.p, 12);  // m = 12: enough rows, but not divisible by 8
  report("refuse AUX_LD=12 (not divisible by 8) in the heuristic", expect_heuristic(lt, desc, s, Pref(), CUBLAS_STATUS_NOT_SUPPORTED));
  desc.aux(s.aux.p, 8);  // divisible by 8, fewer than m rows
  report("refuse AUX_LD=8 < m=12 in the heuristic", expect_heuristic(lt, desc, s, Pref(), CUBLAS_STATUS_NOT_SUPPORTED));
  desc.aux(s.aux.p, 16);
  const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref());
  if (h.found != 1) return report("refuse AUX_LD=12 in cublasLtMatmul", "no algorithm for AUX_LD=16");
  desc.aux(s.aux.p, 12);
  const cublasStatus_t st = s.matmul(lt, desc, &h.result.algo);
  report("refuse AUX_LD=12 in cublasLtMatmul (INVALID_VALUE, D untouched)",
         st != CUBLAS_STATUS_INVALID_VALUE ? "got " + status_name(st) : s.d_untouched(lt) ? "" : "D was written");
}

void refusal_types(const Lt& lt) {
  struct Combo {
    const char* name;
    cudaDataType_t a, b, d;
    cublasComputeType_t compute;
    cudaDataType_t scale;
  };
  const Combo combos[] = {
      {"A bf16 with B f16", CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"A/B f32 with D bf16", CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"A/B bf16 with D f16", CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"A/B f64", CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"compute 32F with scale 16F", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_16F},
      {"compute 16F (not emulated)", CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F, CUDA_R_16F},
  };
  for (const Combo& c : combos) {
    Small s(c.a, c.d);
    Layout lb(c.b, s.k, s.n, s.k);
    Desc desc(c.compute, c.scale);
    const Heuristic h = heuristic(lt, desc, s.la, lb, s.ld, s.ld, Pref(8));
    std::string problem = h.status != CUBLAS_STATUS_NOT_SUPPORTED || h.found ? "heuristic: " + status_name(h.status) : "";
    const float one = 1, zero = 0;
    const cublasStatus_t st = cublasLtMatmul(lt.h, desc.d, &one, s.a.p, s.la.l, s.b.p, lb.l, &zero, s.d.p, s.ld.l,
                                             s.d.p, s.ld.l, nullptr, s.ws.p, s.ws.n, lt.s);
    if (problem.empty() && st != CUBLAS_STATUS_NOT_SUPPORTED) problem = "cublasLtMatmul(algo=NULL): " + status_name(st);
    report(std::string("refuse type combination: ") + c.name, problem);
  }
}

void refusal_alignment(const Lt& lt) {
  {
    Small s(CUDA_R_16BF, CUDA_R_16BF);
    Desc desc;
    const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref(16));
    const void* a_off = static_cast<const char*>(s.a.p) + 2;  // one bf16 element: 2-byte aligned only
    const cublasStatus_t st = h.found ? s.matmul(lt, desc, &h.result.algo, a_off) : CUBLAS_STATUS_SUCCESS;
    report("refuse A 2-byte aligned when 16 was promised (NOT_SUPPORTED, D untouched)",
           !h.found ? "no algorithm" : st != CUBLAS_STATUS_NOT_SUPPORTED ? "got " + status_name(st)
                                                                         : s.d_untouched(lt) ? "" : "D was written");
    const cublasStatus_t ok = h.found ? s.matmul(lt, desc, &h.result.algo, static_cast<const char*>(s.a.p) + 16)
                                      : CUBLAS_STATUS_NOT_SUPPORTED;
    report("accept A 16-byte aligned when 16 was promised", ok == CUBLAS_STATUS_SUCCESS ? "" : "got " + status_name(ok));
  }
  {
    Small s;  // cudaMalloc'd buffers: 256-byte aligned
    Desc desc;
    const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref(512));
    const cublasStatus_t st = h.found ? s.matmul(lt, desc, &h.result.algo) : CUBLAS_STATUS_NOT_SUPPORTED;
    report("accept a promise of 512-byte alignment with 256-byte aligned buffers",
           st == CUBLAS_STATUS_SUCCESS ? "" : "got " + status_name(st));
    const cublasStatus_t implicit = s.matmul(lt, desc, nullptr);
    report("accept algo = NULL (implicit heuristic, default 256-byte alignment)",
           implicit == CUBLAS_STATUS_SUCCESS ? "" : "got " + status_name(implicit));
    const cublasStatus_t off = s.matmul(lt, desc, nullptr, static_cast<const char*>(s.a.p) + 16);
    report("refuse algo = NULL with A 16-byte aligned (default promise is 256)",
           off == CUBLAS_STATUS_NOT_SUPPORTED ? "" : "got " + status_name(off));
  }
  {
    Small s;
    Desc desc;
    report("refuse a promise of 2-byte alignment for f32 matrices",
           expect_heuristic(lt, desc, s, Pref(2), CUBLAS_STATUS_NOT_SUPPORTED));
  }
  {
    Small s;
    Desc desc;
    desc.epilogue(CUBLASLT_EPILOGUE_BIAS);
    desc.bias(s.bias.p);  // 256-byte aligned when the heuristic looks at it
    const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref(16));
    desc.bias(static_cast<const char*>(s.bias.p) + 4);
    const cublasStatus_t st = h.found ? s.matmul(lt, desc, &h.result.algo) : CUBLAS_STATUS_SUCCESS;
    report("refuse a bias pointer less aligned than at the heuristic query",
           !h.found ? "no algorithm" : st == CUBLAS_STATUS_NOT_SUPPORTED ? "" : "got " + status_name(st));
  }
  {
    Small s;
    Desc desc;
    const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref(16));
    void* ws = static_cast<char*>(s.ws.p) + 64;
    const cublasStatus_t st =
        h.found ? s.matmul_ws(lt, desc, &h.result.algo, nullptr, ws, 1024) : CUBLAS_STATUS_SUCCESS;
    report("refuse a workspace that is not 256-byte aligned", st == CUBLAS_STATUS_INVALID_VALUE ? "" : "got " + status_name(st));
    const cublasStatus_t st0 = h.found ? s.matmul_ws(lt, desc, &h.result.algo, nullptr, nullptr, 0) : CUBLAS_STATUS_NOT_SUPPORTED;
    report("accept no workspace (the algorithm needs 0 bytes)", st0 == CUBLAS_STATUS_SUCCESS ? "" : "got " + status_name(st0));
  }
}

void refusal_missing_pointers(const Lt& lt) {
  const struct {
    const char* name;
    cublasLtEpilogue_t e;
  } cases[] = {{"BIAS without a bias pointer", CUBLASLT_EPILOGUE_BIAS},
               {"BGRADB without a bias pointer", CUBLASLT_EPILOGUE_BGRADB},
               {"DGELU without an aux pointer", CUBLASLT_EPILOGUE_DGELU}};
  for (const auto& c : cases) {
    Small s;
    Desc desc;
    desc.epilogue(c.e);
    if (c.e == CUBLASLT_EPILOGUE_DGELU) desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(16));
    const Heuristic h = heuristic(lt, desc, s.la, s.lb, s.ld, s.ld, Pref());
    const cublasStatus_t st = h.found ? s.matmul(lt, desc, &h.result.algo) : CUBLAS_STATUS_SUCCESS;
    report(std::string("refuse ") + c.name + " (INVALID_VALUE, D untouched)",
           !h.found ? "no algorithm" : st != CUBLAS_STATUS_INVALID_VALUE ? "got " + status_name(st)
                                                                         : s.d_untouched(lt) ? "" : "D was written");
  }
}

void refusal_misc(const Lt& lt) {
  {
    Small s(CUDA_R_16BF, CUDA_R_16BF);
    Desc desc;
    desc.epilogue(CUBLASLT_EPILOGUE_BIAS);
    desc.bias(s.bias.p);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F));
    report("refuse an f32 bias with a bf16 D (table: Bias Type = Ctype)",
           expect_heuristic(lt, desc, s, Pref(), CUBLAS_STATUS_NOT_SUPPORTED));
  }
  {
    Small s(CUDA_R_32F, CUDA_R_32F, Small::m - 1);  // lda < rows of A
    Desc desc;
    std::string p = expect_heuristic(lt, desc, s, Pref(), CUBLAS_STATUS_NOT_SUPPORTED);
    const Small good;
    const Heuristic h = heuristic(lt, desc, good.la, good.lb, good.ld, good.ld, Pref());
    const cublasStatus_t st = s.matmul(lt, desc, &h.result.algo);
    if (p.empty() && st != CUBLAS_STATUS_INVALID_VALUE) p = "cublasLtMatmul: " + status_name(st);
    report("refuse lda smaller than the rows of A", p);
  }
  {
    Layout la(CUDA_R_32F, 4, 0, 4), lb(CUDA_R_32F, 0, 3, 1), ld(CUDA_R_32F, 4, 3, 4);  // k = 0
    Desc desc;
    const Heuristic h = heuristic(lt, desc, la, lb, ld, ld, Pref());
    report("refuse k = 0 (docs silent: refused)", h.status == CUBLAS_STATUS_NOT_SUPPORTED && !h.found ? "" : "accepted");
  }
  {
    Small s;
    Desc desc;
    Pref pref;
    cublasLtMatmulHeuristicResult_t r;
    int found = 7;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.h, desc.d, s.la.l, s.lb.l, s.ld.l, s.ld.l, pref.p, 0, &r, &found);
    report("refuse requestedAlgoCount = 0", st == CUBLAS_STATUS_INVALID_VALUE ? "" : "got " + status_name(st));
  }
  {
    Small s;
    Desc plain, with_gelu;
    with_gelu.epilogue(CUBLASLT_EPILOGUE_GELU);
    const Heuristic h = heuristic(lt, plain, s.la, s.lb, s.ld, s.ld, Pref());
    const cublasStatus_t st = s.matmul(lt, with_gelu, &h.result.algo);
    report("refuse an algo chosen for another epilogue",
           st == CUBLAS_STATUS_INVALID_VALUE ? "" : "got " + status_name(st));
    cublasLtMatmulAlgo_t zero{};
    const cublasStatus_t st0 = s.matmul(lt, plain, &zero);
    report("refuse an algo the heuristic never returned", st0 == CUBLAS_STATUS_INVALID_VALUE ? "" : "got " + status_name(st0));
  }
  {
    Desc desc;
    const int64_t ld = 40;
    int32_t small = 0;
    std::string p;
    if (cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &small, sizeof small) !=
        CUBLAS_STATUS_INVALID_VALUE)
      p = "AUX_LD set with a 4-byte value";
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    int64_t back = 0;
    size_t written = 0, needed = 0;
    if (cublasLtMatmulDescGetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &back, sizeof back, &written) !=
            CUBLAS_STATUS_SUCCESS ||
        back != ld || written != 8)
      p = "AUX_LD did not read back";
    if (cublasLtMatmulDescGetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, nullptr, 0, &needed) != CUBLAS_STATUS_SUCCESS ||
        needed != 4)
      p = "size query of EPILOGUE";
    report("descriptor attributes: exact sizes, read back", p);
  }
}

}  // namespace

int main() {
  Lt lt;
  Rng rng{12345};
  for (const Case& c : gemm_cases()) report(case_name(c), run_case(lt, c, rng));
  refusal_aux_ld(lt);
  refusal_types(lt);
  refusal_alignment(lt);
  refusal_missing_pointers(lt);
  refusal_misc(lt);
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
