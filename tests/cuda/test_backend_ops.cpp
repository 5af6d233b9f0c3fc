// test-backend-ops for CUDA: every op of the interface on the CUDA backend and the CPU backend with
// the same inputs at awkward shapes, in fp32, bf16 and fp16 compute; normalized error per op
// (tolerances derived per op at tol_for below), explicit NaN/Inf checks, and guard regions before
// and after every tensor that must come back untouched (catches out-of-bounds writes). Output is
// line-buffered and each op is synchronized and checked before the next, so a crash or an
// exception names the op it happened in. Exits 77 (ctest: skipped) without a visible GPU.
// On the emulated device (tests/cuda_emu/race_check.py): ZTRAIN_OPS_DIGEST=FILE writes a hash of
// every checked GPU output, so two runs under different thread orders can be compared bit for
// bit; ZTRAIN_OPS_SECTIONS=a,b runs only those op families (embedding, layernorm, matmul, fp8,
// attention, llama, elementwise, crossentropy); ZTRAIN_OPS_DTYPES=bf16,fp16 only those types.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/fp8_recipe.h"

using namespace zt;

namespace {

constexpr int kGuard = 64;
constexpr float kSentinel = 12345.678f;
int failures = 0, checks = 0;
std::string last_checked = "(none yet)";  // named when an op throws: the failing one came after it
FILE* digest = nullptr;                    // ZTRAIN_OPS_DIGEST: one "hash name" line per check

// Whether the op family `section` runs (ZTRAIN_OPS_SECTIONS: a comma list; unset: all).
bool wanted(const char* section) {
  const char* v = std::getenv("ZTRAIN_OPS_SECTIONS");
  if (!v || !*v) return true;
  const std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + section + ",") != std::string::npos;
}
uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A tensor present on both backends in type t: same initial contents (rounded to t), guard
// regions of kGuard elements before and after the data (c and g point past the front one).
struct Pair {
  Backend &cpu, &gpu;
  size_t n;
  DType t;
  void *c, *g;
  Pair(Backend& cb, Backend& gb, const std::vector<float>& init, DType type = DType::F32)
      : cpu(cb), gpu(gb), n(init.size()), t(type) {
    std::vector<float> h(kGuard, kSentinel);
    h.insert(h.end(), init.begin(), init.end());
    h.resize(n + 2 * kGuard, kSentinel);
    std::vector<char> raw(h.size() * dtype_size(t));
    convert_host(raw.data(), t, h.data(), DType::F32, int64_t(h.size()));
    c = front(cpu.alloc(raw.size()), +1);
    g = front(gpu.alloc(raw.size()), +1);
    cpu.copy_to_device(front(c, -1), raw.data(), raw.size());
    gpu.copy_to_device(front(g, -1), raw.data(), raw.size());
  }
  ~Pair() {
    cpu.free(front(c, -1));
    gpu.free(front(g, -1));
  }
  void* front(void* p, int dir) const { return static_cast<char*>(p) + dir * kGuard * int64_t(dtype_size(t)); }
  float* fc() { return static_cast<float*>(c); }
  float* fg() { return static_cast<float*>(g); }
  // Whether each side holds exactly the bits `o`'s same side holds (same size and type), counted
  // as a check like check()'s.
  void check_same_bits(const Pair& o, const std::string& what) {
    gpu.synchronize();
    last_checked = what;
    const size_t bytes = n * dtype_size(t);
    std::vector<char> a(bytes), b(bytes), x(bytes), y(bytes);
    cpu.copy_to_host(a.data(), c, bytes);
    cpu.copy_to_host(b.data(), o.c, bytes);
    gpu.copy_to_host(x.data(), g, bytes);
    gpu.copy_to_host(y.data(), o.g, bytes);
    const bool ok = n == o.n && t == o.t && a == b && x == y;
    ++checks;
    if (!ok) ++failures;
    std::printf("  %-4s %-44s %s\n", dtype_name(t), what.c_str(), ok ? "bit-identical ok" : "FAIL: the bits differ");
  }
  void check(const std::string& what, double tol) {
    gpu.synchronize();  // an asynchronous kernel error surfaces here, before the next op runs
    last_checked = what;
    const size_t es = dtype_size(t);
    std::vector<char> rc((n + 2 * kGuard) * es), rg(rc.size());
    cpu.copy_to_host(rc.data(), front(c, -1), rc.size());
    gpu.copy_to_host(rg.data(), front(g, -1), rg.size());
    std::vector<float> hc(n), hg(n);
    convert_host(hc.data(), DType::F32, rc.data() + kGuard * es, t, int64_t(n));
    convert_host(hg.data(), DType::F32, rg.data() + kGuard * es, t, int64_t(n));
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
      finite &= std::isfinite(hg[i]);
      num += double(hg[i] - hc[i]) * (hg[i] - hc[i]);
      den += double(hc[i]) * hc[i];
    }
    const std::vector<float> sentinel(kGuard, kSentinel);
    std::vector<char> want(kGuard * es);
    convert_host(want.data(), t, sentinel.data(), DType::F32, kGuard);
    // both backends' guards: the CPU reference must not write out of bounds either
    bool guard = true;
    for (const auto* r : {&rc, &rg})
      guard &= std::memcmp(r->data(), want.data(), want.size()) == 0 &&
               std::memcmp(r->data() + (kGuard + n) * es, want.data(), want.size()) == 0;
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    if (digest)
      std::fprintf(digest, "%016llx %s %s\n", (unsigned long long)fnv1a(rg.data(), rg.size()), dtype_name(t),
                   what.c_str());
    ++checks;
    const bool ok = finite && guard && err <= tol;
    if (!ok) ++failures;
    std::printf("  %-4s %-44s nmse-err %.2e (tol %.1e)%s%s %s\n", dtype_name(t), what.c_str(), err, tol,
                finite ? "" : " NaN/Inf", guard ? "" : " GUARD-OVERWRITTEN", ok ? "ok" : "FAIL");
  }
};

struct IntPair {
  Backend &cpu, &gpu;
  int32_t *c, *g;
  IntPair(Backend& cb, Backend& gb, const std::vector<int32_t>& v) : cpu(cb), gpu(gb) {
    c = static_cast<int32_t*>(cpu.alloc(v.size() * 4));
    g = static_cast<int32_t*>(gpu.alloc(v.size() * 4));
    cpu.copy_to_device(c, v.data(), v.size() * 4);
    gpu.copy_to_device(g, v.data(), v.size() * 4);
  }
  ~IntPair() {
    cpu.free(c);
    gpu.free(g);
  }
};

// Tolerances: normalized RMS error against the CPU backend running the same compute type. The CPU
// emulates 16-bit storage with the same round-to-nearest-even, so both sides round fp32 values
// that differ only by fp32 summation order (the fp32 tolerance of the op), and a stored element
// differs by at most one ulp of the storage type where that difference moves it across a
// rounding boundary: one ulp is 2^-7 relative for bf16 (7 stored significand bits), 2^-10 for
// fp16. So an op whose 16-bit output is rounded once from fp32 arithmetic gets its fp32 tolerance
// + 1 ulp (the bound if every element flipped; in practice far fewer do); an op that stores a
// 16-bit intermediate and reads it back (residual_layernorm_forward's residual, then the
// normalized output; the GELU epilogue on a pre-activation the CPU reads back rounded) gets one
// ulp per rounding on its path. Outputs kept in fp32 (gradients of weights, statistics, moments)
// get the fp32 tolerance only.
//  fp32: reassociation error growing with the reduction length: 2e-5 (parameter-gradient
//        column sums over 1000+ rows: 1e-4).
double ulp(DType t) { return t == DType::BF16 ? 0x1p-7 : t == DType::F16 ? 0x1p-10 : 0.0; }
double tol_for(DType t, double fp32_tol, int roundings = 1) { return fp32_tol + roundings * ulp(t); }
constexpr double kTol = 2e-5;

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a crash must not take buffered results with it
  if (cuda_device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  if (const char* d = std::getenv("ZTRAIN_OPS_DIGEST")) digest = std::fopen(d, "w");
  auto cpu = make_cpu_backend(0);
  auto gpu = make_backend(DeviceChoice::Cuda, 0);
  Backend &C = *cpu, &G = *gpu;
  std::printf("test-backend-ops: %s vs %s\n", G.name().c_str(), C.name().c_str());
  const auto F = DType::F32;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
  if (const char* only = std::getenv("ZTRAIN_OPS_DTYPES"); only && !std::strstr(only, dtype_name(dt))) continue;
  try {
  C.set_compute_dtype(dt);
  G.set_compute_dtype(dt);
  auto tol = [&](double t32, int roundings = 1) { return tol_for(dt, t32, roundings); };
  if (wanted("embedding"))
  for (auto [B, T, Ch, V] : {std::tuple{1, 1, 8, 7}, {2, 7, 33, 127}, {3, 33, 64, 1025}, {4, 300, 12, 50}}) {
    std::vector<int32_t> ids(size_t(B) * T);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % V);
    if (V == 50)  // the long case: a token of a third of the rows (a space, padding) and skipped (-1) rows
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 3 == 0 ? 7 : i % 11 == 0 ? -1 : ids[i];
    IntPair inp(C, G, ids);
    Pair wte(C, G, randn(size_t(V) * Ch, 1), dt), wpe(C, G, randn(size_t(T) * Ch, 2), dt),
        out(C, G, randn(size_t(B) * T * Ch, 3), dt);
    C.embedding_forward(out.c, inp.c, wte.c, wpe.c, B, T, Ch);
    G.embedding_forward(out.g, inp.g, wte.g, wpe.g, B, T, Ch);
    out.check("embedding_forward B" + std::to_string(B) + " T" + std::to_string(T), tol(kTol));
    Pair dwte(C, G, std::vector<float>(size_t(V) * Ch, 0.f)), dwpe(C, G, std::vector<float>(size_t(T) * Ch, 0.f));
    C.embedding_backward(dwte.fc(), dwpe.fc(), out.c, inp.c, B, T, Ch);
    G.embedding_backward(dwte.fg(), dwpe.fg(), out.g, inp.g, B, T, Ch);
    dwte.check("embedding_backward dwte", kTol);
    dwpe.check("embedding_backward dwpe", kTol);
    // [run] deterministic: the CPU backend's order, so its sums bit for bit (accumulated onto
    // nonzero gradients, as with several micro-batches), and bit-identical on a rerun
    G.set_deterministic(true);
    Pair dwte2(C, G, randn(size_t(V) * Ch, 8)), dwpe2(C, G, randn(size_t(T) * Ch, 9));
    C.embedding_backward(dwte2.fc(), dwpe2.fc(), out.c, inp.c, B, T, Ch);
    G.embedding_backward(dwte2.fg(), dwpe2.fg(), out.g, inp.g, B, T, Ch);
    dwte2.check("embedding_backward deterministic dwte", kTol);
    dwpe2.check("embedding_backward deterministic dwpe", kTol);
    for (Pair* p : {&dwte2, &dwpe2}) {
      const size_t n = p == &dwte2 ? size_t(V) * Ch : size_t(T) * Ch;
      std::vector<float> c(n), g(n);
      C.copy_to_host(c.data(), p->fc(), n * 4);
      G.copy_to_host(g.data(), p->fg(), n * 4);
      const bool same = std::memcmp(c.data(), g.data(), n * 4) == 0;
      ++checks;
      failures += !same;
      std::printf("  %-49s %s\n", p == &dwte2 ? "embedding_backward deterministic dwte == CPU bits"
                                               : "embedding_backward deterministic dwpe == CPU bits",
                  same ? "ok" : "FAIL");
    }
    {
      std::vector<float> a(size_t(V) * Ch), b(a.size());
      G.copy_to_host(a.data(), dwte2.fg(), a.size() * 4);
      const auto te0 = randn(size_t(V) * Ch, 8), pe0 = randn(size_t(T) * Ch, 9);  // the same start
      G.copy_to_device(dwte2.fg(), te0.data(), te0.size() * 4);
      G.copy_to_device(dwpe2.fg(), pe0.data(), pe0.size() * 4);
      G.embedding_backward(dwte2.fg(), dwpe2.fg(), out.g, inp.g, B, T, Ch);
      G.copy_to_host(b.data(), dwte2.fg(), b.size() * 4);
      const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
      ++checks;
      failures += !same;
      std::printf("  %-49s %s\n", "embedding_backward deterministic: rerun bit-identical", same ? "ok" : "FAIL");
    }
    G.set_deterministic(false);
  }
  if (wanted("layernorm"))
  for (auto [N, Ch] : {std::pair{1, 7}, {33, 127}, {127, 1025}, {1031, 64}}) {
    Pair x(C, G, randn(size_t(N) * Ch, 4, 2.f), dt), w(C, G, randn(Ch, 5), dt), b(C, G, randn(Ch, 6), dt),
        out(C, G, std::vector<float>(size_t(N) * Ch), dt);
    Pair mean(C, G, std::vector<float>(N)), rstd(C, G, std::vector<float>(N));
    C.layernorm_forward(out.c, mean.fc(), rstd.fc(), x.c, w.c, b.c, N, Ch, 1e-5f);
    G.layernorm_forward(out.g, mean.fg(), rstd.fg(), x.g, w.g, b.g, N, Ch, 1e-5f);
    out.check("layernorm_forward " + std::to_string(N) + "x" + std::to_string(Ch), tol(kTol));
    mean.check("layernorm_forward mean", kTol);
    rstd.check("layernorm_forward rstd", kTol);
    Pair y(C, G, randn(size_t(N) * Ch, 40), dt), res(C, G, std::vector<float>(size_t(N) * Ch), dt);
    C.residual_layernorm_forward(res.c, out.c, mean.fc(), rstd.fc(), x.c, y.c, w.c, b.c, N, Ch, 1e-5f);
    G.residual_layernorm_forward(res.g, out.g, mean.fg(), rstd.fg(), x.g, y.g, w.g, b.g, N, Ch, 1e-5f);
    res.check("residual_layernorm_forward residual", tol(kTol));
    out.check("residual_layernorm_forward out", tol(kTol, 2));
    Pair dout(C, G, randn(size_t(N) * Ch, 7), dt), dx(C, G, randn(size_t(N) * Ch, 8), dt), dw(C, G, randn(Ch, 9)),
        db(C, G, randn(Ch, 10));
    C.layernorm_backward(dx.c, dw.fc(), db.fc(), dout.c, x.c, w.c, mean.fc(), rstd.fc(), N, Ch);
    G.layernorm_backward(dx.g, dw.fg(), db.fg(), dout.g, x.g, w.g, mean.fg(), rstd.fg(), N, Ch);
    dx.check("layernorm_backward dinp", tol(kTol));
    dw.check("layernorm_backward dweight", 1e-4);
    db.check("layernorm_backward dbias", 1e-4);
    // a frozen weight (LoRA's base): no weight gradient, the same input gradient
    C.layernorm_backward(dx.c, nullptr, nullptr, dout.c, x.c, w.c, mean.fc(), rstd.fc(), N, Ch);
    G.layernorm_backward(dx.g, nullptr, nullptr, dout.g, x.g, w.g, mean.fg(), rstd.fg(), N, Ch);
    dx.check("layernorm_backward dinp, frozen weight", tol(kTol));
  }
  // 16-bit GEMMs on tensor cores accumulate in fp32 in blocked orders: the fp32 tolerance applies
  // to the fp32 weight gradient; outputs stored in 16 bits get the storage tolerance.
  if (wanted("matmul"))
  for (auto [N, Ch, OC] : {std::tuple{1, 1, 1}, {7, 33, 127}, {127, 256, 33}, {1025, 64, 257}, {256, 128, 512}}) {
    Pair x(C, G, randn(size_t(N) * Ch, 11), dt), w(C, G, randn(size_t(OC) * Ch, 12), dt), b(C, G, randn(OC, 13), dt),
        out(C, G, std::vector<float>(size_t(N) * OC), dt);
    const std::string tag = std::to_string(N) + "x" + std::to_string(Ch) + "x" + std::to_string(OC);
    C.matmul_forward(out.c, x.c, w.c, b.c, N, Ch, OC);
    G.matmul_forward(out.g, x.g, w.g, b.g, N, Ch, OC);
    out.check("matmul_forward " + tag, tol(kTol));
    Pair pre(C, G, std::vector<float>(size_t(N) * OC), dt), act(C, G, std::vector<float>(size_t(N) * OC), dt);
    C.matmul_gelu_forward(act.c, pre.c, x.c, w.c, b.c, N, Ch, OC);
    G.matmul_gelu_forward(act.g, pre.g, x.g, w.g, b.g, N, Ch, OC);
    pre.check("matmul_gelu_forward pre-activation " + tag, tol(kTol));
    act.check("matmul_gelu_forward gelu " + tag, tol(1e-4, 2));  // cuBLASLt's GELU epilogue: its own tanh
    Pair dout(C, G, randn(size_t(N) * OC, 14), dt), dx(C, G, randn(size_t(N) * Ch, 15), dt),
        dw(C, G, randn(size_t(OC) * Ch, 16)), db(C, G, randn(OC, 17));
    C.matmul_backward(dx.c, dw.fc(), db.fc(), dout.c, x.c, w.c, N, Ch, OC);
    G.matmul_backward(dx.g, dw.fg(), db.fg(), dout.g, x.g, w.g, N, Ch, OC);
    dx.check("matmul_backward dinp", tol(kTol));
    dw.check("matmul_backward dweight", 1e-4);
    db.check("matmul_backward dbias", 1e-4);
    // fused GELU backward (cuBLASLt's DGELU epilogue where C % 8 == 0, else GEMM + in-place kernel);
    // dpre is prefilled with noise: it must be written, not accumulated
    Pair xpre(C, G, randn(size_t(N) * Ch, 18, 2.f), dt), dpre(C, G, randn(size_t(N) * Ch, 19), dt);
    C.matmul_gelu_backward(dpre.c, dw.fc(), db.fc(), dout.c, x.c, w.c, xpre.c, N, Ch, OC);
    G.matmul_gelu_backward(dpre.g, dw.fg(), db.fg(), dout.g, x.g, w.g, xpre.g, N, Ch, OC);
    dpre.check("matmul_gelu_backward dpre " + tag, tol(1e-4, 2));  // the epilogue's own tanh, as forward
    dw.check("matmul_gelu_backward dweight " + tag, 1e-4);
    db.check("matmul_gelu_backward dbias " + tag, 1e-4);
  }
  // FP8 linear layers (engine/backend/fp8_recipe.h): the CUDA backend's FP8 GEMMs against the CPU
  // reference of the same recipe. Both quantize the same operands with the same scales to the same
  // FP8 bits; only the products' summation order and the output's rounding differ, so the usual
  // tolerances hold. The last shape (not multiples of 16) runs in the compute type on both.
  if (wanted("fp8"))
  for (auto [N, Ch, OC] : {std::tuple{64, 32, 48}, {128, 64, 96}, {48, 128, 16}, {7, 33, 127}}) {
    Pair x(C, G, randn(size_t(N) * Ch, 51, 3.f), dt), w(C, G, randn(size_t(OC) * Ch, 52), dt), b(C, G, randn(OC, 53), dt),
        out(C, G, std::vector<float>(size_t(N) * OC), dt);
    const std::string tag = std::to_string(N) + "x" + std::to_string(Ch) + "x" + std::to_string(OC);
    C.matmul_forward_fp8(out.c, x.c, w.c, b.c, N, Ch, OC, nullptr);
    G.matmul_forward_fp8(out.g, x.g, w.g, b.g, N, Ch, OC, nullptr);
    out.check("matmul_forward_fp8 " + tag, tol(kTol));
    Pair dout(C, G, randn(size_t(N) * OC, 54, 0.01f), dt), dx(C, G, randn(size_t(N) * Ch, 55), dt),
        dw(C, G, randn(size_t(OC) * Ch, 56)), db(C, G, randn(OC, 57));
    C.matmul_backward_fp8(dx.c, dw.fc(), db.fc(), dout.c, x.c, w.c, N, Ch, OC, nullptr);
    G.matmul_backward_fp8(dx.g, dw.fg(), db.fg(), dout.g, x.g, w.g, N, Ch, OC, nullptr);
    dx.check("matmul_backward_fp8 dinp " + tag, tol(kTol));
    dw.check("matmul_backward_fp8 dweight " + tag, 1e-4);
    db.check("matmul_backward_fp8 dbias " + tag, 1e-4);
    if (!fp8_recipe::applies(N, Ch, OC)) continue;
    // The weight cast once into its copy (fp8_weight_copy), as the models keep it between updates
    // at ZeRO 0-2: the same bits as the weight cast in each product, on each backend; the copy of
    // another weight (a copy kept past an update) is caught.
    const size_t copy_bytes = size_t(fp8_recipe::weight_copy_bytes(OC, Ch));
    void *wc = C.alloc(copy_bytes), *wg = G.alloc(copy_bytes);
    C.fp8_weight_copy(wc, w.c, OC, Ch);
    G.fp8_weight_copy(wg, w.g, OC, Ch);
    Pair out_copy(C, G, std::vector<float>(size_t(N) * OC), dt), dx_copy(C, G, randn(size_t(N) * Ch, 58), dt);
    C.matmul_forward_fp8(out_copy.c, x.c, w.c, b.c, N, Ch, OC, wc);
    G.matmul_forward_fp8(out_copy.g, x.g, w.g, b.g, N, Ch, OC, wg);
    out_copy.check("matmul_forward_fp8, weight copy " + tag, tol(kTol));
    out_copy.check_same_bits(out, "  = without the copy");
    C.matmul_backward_fp8(dx_copy.c, nullptr, nullptr, dout.c, x.c, w.c, N, Ch, OC, wc);
    G.matmul_backward_fp8(dx_copy.g, nullptr, nullptr, dout.g, x.g, w.g, N, Ch, OC, wg);
    dx_copy.check("matmul_backward_fp8 dinp, weight copy " + tag, tol(kTol));
    dx_copy.check_same_bits(dx, "  = without the copy");
    // both gradients in one call (the row-parallel layers'), with and without the copy
    Pair dx_both(C, G, randn(size_t(N) * Ch, 60), dt), dw_a(C, G, std::vector<float>(size_t(OC) * Ch)),
        dw_b(C, G, std::vector<float>(size_t(OC) * Ch));
    C.matmul_backward_fp8(dx_both.c, dw_a.fc(), nullptr, dout.c, x.c, w.c, N, Ch, OC, wc);
    G.matmul_backward_fp8(dx_both.g, dw_a.fg(), nullptr, dout.g, x.g, w.g, N, Ch, OC, wg);
    C.matmul_backward_fp8(dx_copy.c, dw_b.fc(), nullptr, dout.c, x.c, w.c, N, Ch, OC, nullptr);
    G.matmul_backward_fp8(dx_copy.g, dw_b.fg(), nullptr, dout.g, x.g, w.g, N, Ch, OC, nullptr);
    dx_both.check("matmul_backward_fp8 dinp + dweight, copy " + tag, tol(kTol));
    dx_both.check_same_bits(dx_copy, "  dinp = without the copy");
    dw_a.check("matmul_backward_fp8 dweight, copy " + tag, 1e-4);
    dw_a.check_same_bits(dw_b, "  dweight = without the copy");
    // The copy made piece by piece, as ZeRO-3's FP8 shards are (engine/parallel/param_store.h): the
    // pieces' amax into one, then each piece cast with it: fp8_weight_copy's scales and bytes, on
    // each backend; the products take it without the weight (gathered as FP8 alone): the same bits.
    {
      const int64_t n = int64_t(OC) * Ch, cut[] = {0, n / 3, n / 3 + n / 5 + 1, n};
      const int64_t es = int64_t(dtype_size(dt)), head = fp8_recipe::kWeightScalesBytes;
      Pair out_pieces(C, G, std::vector<float>(size_t(N) * OC), dt), dx_pieces(C, G, randn(size_t(N) * Ch, 61), dt);
      for (Backend* be : {&C, &G}) {
        const bool cpu = be == &C;
        char* pc = static_cast<char*>(be->alloc(size_t(fp8_recipe::weight_copy_bytes(OC, Ch))));
        float* amax = static_cast<float*>(be->alloc(sizeof(float)));
        be->fill_zero(amax, sizeof(float));
        const char* wp = static_cast<const char*>(cpu ? w.c : w.g);
        for (int i = 0; i < 3; ++i) be->fp8_amax(amax, wp + cut[i] * es, cut[i + 1] - cut[i]);
        for (int i = 0; i < 3; ++i)
          be->fp8_cast_with_amax(pc + head + cut[i], reinterpret_cast<float*>(pc), wp + cut[i] * es, cut[i + 1] - cut[i],
                                 amax);
        be->synchronize();
        std::vector<char> got(size_t(head + n)), want(got.size());
        be->copy_to_host(got.data(), pc, got.size());
        be->copy_to_host(want.data(), cpu ? wc : wg, want.size());
        const bool same = std::equal(got.begin(), got.begin() + 8, want.begin()) &&
                          std::equal(got.begin() + head, got.end(), want.begin() + head);
        ++checks;
        failures += !same;
        std::printf("  %-4s %-44s %s\n", dtype_name(dt), (std::string(cpu ? "CPU" : "GPU") + " copy by pieces " + tag).c_str(),
                    same ? "ok" : "FAIL: not fp8_weight_copy's scales and bytes");
        if (cpu) {
          C.matmul_forward_fp8(out_pieces.c, x.c, nullptr, b.c, N, Ch, OC, pc);
          C.matmul_backward_fp8(dx_pieces.c, nullptr, nullptr, dout.c, x.c, nullptr, N, Ch, OC, pc);
        } else {
          G.matmul_forward_fp8(out_pieces.g, x.g, nullptr, b.g, N, Ch, OC, pc);
          G.matmul_backward_fp8(dx_pieces.g, nullptr, nullptr, dout.g, x.g, nullptr, N, Ch, OC, pc);
        }
        be->synchronize();
        be->free(pc);
        be->free(amax);
      }
      out_pieces.check_same_bits(out, "  forward, pieces' copy, no weight = without the copy");
      dx_pieces.check_same_bits(dx, "  dinp, pieces' copy, no weight = without the copy");
    }
    Pair w2(C, G, randn(size_t(OC) * Ch, 59), dt), out_stale(C, G, std::vector<float>(size_t(N) * OC), dt);
    C.fp8_weight_copy(wc, w2.c, OC, Ch);
    G.fp8_weight_copy(wg, w2.g, OC, Ch);
    C.matmul_forward_fp8(out_stale.c, x.c, w.c, b.c, N, Ch, OC, wc);
    G.matmul_forward_fp8(out_stale.g, x.g, w.g, b.g, N, Ch, OC, wg);
    out_stale.check("matmul_forward_fp8, another weight's copy " + tag, tol(kTol));  // CPU = GPU still
    G.synchronize();
    {
      std::vector<char> a(size_t(N) * OC * dtype_size(dt)), b2(a.size());
      G.copy_to_host(a.data(), out_stale.g, a.size());
      G.copy_to_host(b2.data(), out.g, b2.size());
      ++checks;
      if (a == b2) ++failures;
      std::printf("  %-4s %-44s %s\n", dtype_name(dt), "  another weight's copy differs",
                  a == b2 ? "FAIL: a stale copy went unseen" : "ok");
    }
    C.free(wc);
    G.free(wg);
  }
  // NKV < NH: grouped-query attention (Llama); head sizes 16-multiple (tensor cores) and not.
  if (wanted("attention"))
  for (auto [B, T, Ch, NH, NKV] : {std::tuple{1, 1, 32, 1, 1}, {2, 7, 96, 3, 3}, {1, 127, 64, 2, 2},
                                   {2, 257, 768, 12, 12}, {1, 70, 200, 2, 2}, {1, 65, 21, 3, 3},
                                   {2, 97, 384, 6, 2}, {1, 130, 30, 6, 2}, {1, 64, 512, 8, 1},
                                   {1, 200, 256, 2, 1}, {1, 33, 64, 1, 1}}) {
    const int64_t C3 = int64_t(NH + 2 * NKV) * (Ch / NH);
    Pair qkv(C, G, randn(size_t(B) * T * C3, 18), dt), out(C, G, std::vector<float>(size_t(B) * T * Ch), dt),
        lse(C, G, std::vector<float>(size_t(B) * NH * T));
    C.attention_forward(out.c, lse.fc(), qkv.c, B, T, Ch, NH, NKV);
    G.attention_forward(out.g, lse.fg(), qkv.g, B, T, Ch, NH, NKV);
    const std::string tag = " B" + std::to_string(B) + " T" + std::to_string(T) + " C" + std::to_string(Ch) +
                            " NH" + std::to_string(NH) + " NKV" + std::to_string(NKV);
    out.check("attention_forward" + tag, tol(kTol));
    lse.check("attention_forward lse", kTol);
    // dqkv prefilled with noise: the gradient is written, not accumulated
    Pair dout(C, G, randn(size_t(B) * T * Ch, 19), dt), dqkv(C, G, randn(size_t(B) * T * C3, 20), dt);
    C.attention_backward(dqkv.c, dout.c, out.c, qkv.c, lse.fc(), B, T, Ch, NH, NKV);
    G.attention_backward(dqkv.g, dout.g, out.g, qkv.g, lse.fg(), B, T, Ch, NH, NKV);
    dqkv.check("attention_backward" + tag, tol(1e-4));
    // [run] deterministic: no atomics (the 16-bit FlashAttention-2 backward's 7-unit plan)
    G.set_deterministic(true);
    Pair dqkv2(C, G, randn(size_t(B) * T * C3, 21), dt);
    C.attention_backward(dqkv2.c, dout.c, out.c, qkv.c, lse.fc(), B, T, Ch, NH, NKV);
    G.attention_backward(dqkv2.g, dout.g, out.g, qkv.g, lse.fg(), B, T, Ch, NH, NKV);
    dqkv2.check("attention_backward deterministic" + tag, tol(1e-4));
    G.set_deterministic(false);
  }
  // Packed documents (positions restart at each document's first token): attention never crosses a
  // boundary, on every kernel family (FlashAttention-2 at head sizes 64 and 128, WMMA at 32, SIMT
  // at 21 and in fp32), with documents of 1 token, ending on and next to 64-key tile edges, longer
  // than a tile; the position embedding and RoPE read each token's position.
  if (wanted("documents"))
  for (auto [B, T, Ch, NH, NKV] : {std::tuple{2, 200, 128, 2, 1}, {2, 190, 256, 2, 2}, {2, 97, 96, 3, 3},
                                   {1, 70, 42, 2, 2}}) {
    const int64_t C3 = int64_t(NH + 2 * NKV) * (Ch / NH);
    std::vector<int32_t> positions(size_t(B) * T);
    const std::vector<int> edges = {1, 63, 64, 1, 65, 7, 130, 2};  // row 0's document lengths, in turn
    // row 0 cycles through `edges`, the other rows take pseudo-random lengths of 1-90
    uint32_t lcg = 12345;
    for (int b = 0; b < B; ++b) {
      int left = 0, k = 0, p = 0;
      for (int t = 0; t < T; ++t, ++p, --left) {
        if (left == 0) {
          lcg = lcg * 1664525u + 1013904223u;
          left = b == 0 ? edges[size_t(k++) % edges.size()] : int(1 + (lcg >> 8) % 90);
          p = 0;
        }
        positions[size_t(b) * T + t] = p;
      }
    }
    IntPair pos(C, G, positions);
    const std::string tag = " B" + std::to_string(B) + " T" + std::to_string(T) + " C" + std::to_string(Ch) + " NH" +
                            std::to_string(NH) + " NKV" + std::to_string(NKV) + " documents";
    Pair qkv(C, G, randn(size_t(B) * T * C3, 60), dt), out(C, G, std::vector<float>(size_t(B) * T * Ch), dt),
        lse(C, G, std::vector<float>(size_t(B) * NH * T));
    C.attention_forward(out.c, lse.fc(), qkv.c, B, T, Ch, NH, NKV, pos.c);
    G.attention_forward(out.g, lse.fg(), qkv.g, B, T, Ch, NH, NKV, pos.g);
    out.check("attention_forward" + tag, tol(kTol));
    lse.check("attention_forward lse", kTol);
    Pair dout(C, G, randn(size_t(B) * T * Ch, 61), dt), dqkv(C, G, randn(size_t(B) * T * C3, 62), dt);
    C.attention_backward(dqkv.c, dout.c, out.c, qkv.c, lse.fc(), B, T, Ch, NH, NKV, pos.c);
    G.attention_backward(dqkv.g, dout.g, out.g, qkv.g, lse.fg(), B, T, Ch, NH, NKV, pos.g);
    dqkv.check("attention_backward" + tag, tol(1e-4));
    G.set_deterministic(true);
    Pair dqkv2(C, G, randn(size_t(B) * T * C3, 63), dt);
    C.attention_backward(dqkv2.c, dout.c, out.c, qkv.c, lse.fc(), B, T, Ch, NH, NKV, pos.c);
    G.attention_backward(dqkv2.g, dout.g, out.g, qkv.g, lse.fg(), B, T, Ch, NH, NKV, pos.g);
    dqkv2.check("attention_backward deterministic" + tag, tol(1e-4));
    G.set_deterministic(false);
    if (NH != 2 || NKV != 2) continue;
    // the position embedding and RoPE by position (the embedding's shapes are the attention's)
    const int V = 50;
    std::vector<int32_t> ids(size_t(B) * T);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % V);
    IntPair inp(C, G, ids);
    Pair wte(C, G, randn(size_t(V) * Ch, 64), dt), wpe(C, G, randn(size_t(T) * Ch, 65), dt),
        emb(C, G, randn(size_t(B) * T * Ch, 66), dt);
    C.embedding_forward(emb.c, inp.c, wte.c, wpe.c, B, T, Ch, pos.c);
    G.embedding_forward(emb.g, inp.g, wte.g, wpe.g, B, T, Ch, pos.g);
    emb.check("embedding_forward" + tag, tol(kTol));
    for (bool det : {false, true}) {
      G.set_deterministic(det);
      Pair dwte(C, G, randn(size_t(V) * Ch, 67)), dwpe(C, G, randn(size_t(T) * Ch, 68));
      C.embedding_backward(dwte.fc(), dwpe.fc(), emb.c, inp.c, B, T, Ch, pos.c);
      G.embedding_backward(dwte.fg(), dwpe.fg(), emb.g, inp.g, B, T, Ch, pos.g);
      dwte.check(std::string("embedding_backward dwte") + tag + (det ? " deterministic" : ""), kTol);
      dwpe.check(std::string("embedding_backward dwpe") + tag + (det ? " deterministic (CPU bits)" : ""),
                 det ? 0.0 : kTol);
    }
    G.set_deterministic(false);
    const int hs = Ch / NH;
    C.rope(qkv.c, B, T, NH + NKV, hs, C3, 10000.0f, false, pos.c);
    G.rope(qkv.g, B, T, NH + NKV, hs, C3, 10000.0f, false, pos.g);
    qkv.check("rope" + tag, tol(kTol));
  }
  // Llama's ops: RMSNorm (plain and fused with the residual), rotary embedding, SwiGLU.
  if (wanted("llama"))
  for (auto [N, Ch] : {std::pair{1, 1}, {7, 33}, {127, 768}, {1025, 4096}}) {
    const std::string tag = " " + std::to_string(N) + "x" + std::to_string(Ch);
    Pair x(C, G, randn(size_t(N) * Ch, 40, 2.f), dt), y(C, G, randn(size_t(N) * Ch, 41), dt),
        w(C, G, randn(Ch, 42), dt), out(C, G, std::vector<float>(size_t(N) * Ch), dt),
        res(C, G, std::vector<float>(size_t(N) * Ch), dt), rstd(C, G, std::vector<float>(N));
    C.rmsnorm_forward(out.c, rstd.fc(), x.c, w.c, N, Ch, 1e-5f);
    G.rmsnorm_forward(out.g, rstd.fg(), x.g, w.g, N, Ch, 1e-5f);
    out.check("rmsnorm_forward" + tag, tol(kTol));
    rstd.check("rmsnorm_forward rstd", kTol);
    C.residual_rmsnorm_forward(res.c, out.c, rstd.fc(), x.c, y.c, w.c, N, Ch, 1e-5f);
    G.residual_rmsnorm_forward(res.g, out.g, rstd.fg(), x.g, y.g, w.g, N, Ch, 1e-5f);
    res.check("residual_rmsnorm_forward residual" + tag, tol(kTol));
    out.check("residual_rmsnorm_forward" + tag, tol(kTol));
    Pair dout(C, G, randn(size_t(N) * Ch, 43), dt), dx(C, G, randn(size_t(N) * Ch, 44), dt), dw(C, G, randn(Ch, 45));
    C.rmsnorm_backward(dx.c, dw.fc(), dout.c, res.c, w.c, rstd.fc(), N, Ch);
    G.rmsnorm_backward(dx.g, dw.fg(), dout.g, res.g, w.g, rstd.fg(), N, Ch);
    dx.check("rmsnorm_backward dinp" + tag, tol(1e-4));
    dw.check("rmsnorm_backward dweight" + tag, 1e-4);
    C.rmsnorm_backward(dx.c, nullptr, dout.c, res.c, w.c, rstd.fc(), N, Ch);  // a frozen weight (LoRA's base)
    G.rmsnorm_backward(dx.g, nullptr, dout.g, res.g, w.g, rstd.fg(), N, Ch);
    dx.check("rmsnorm_backward dinp, frozen weight" + tag, tol(1e-4));
  }
  if (wanted("llama"))
  for (auto [B, T, H, hs, extra] : {std::tuple{1, 1, 1, 2, 0}, {2, 37, 8, 64, 128}, {1, 129, 3, 30, 60}}) {
    const int64_t stride = int64_t(H) * hs + extra;
    const std::string tag = " B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) +
                            " hs" + std::to_string(hs);
    Pair x(C, G, randn(size_t(B) * T * stride, 46), dt);
    C.rope(x.c, B, T, H, hs, stride, 10000.0f, false);
    G.rope(x.g, B, T, H, hs, stride, 10000.0f, false);
    x.check("rope" + tag, tol(kTol));
    C.rope(x.c, B, T, H, hs, stride, 500000.0f, true);
    G.rope(x.g, B, T, H, hs, stride, 500000.0f, true);
    x.check("rope inverse" + tag, tol(kTol));
    // Llama 3.1's frequencies: kept, interpolated and scaled bands at theta 500, original context 16
    const RopeScaling llama31{8.0f, 1.0f, 4.0f, 16.0f};
    C.rope(x.c, B, T, H, hs, stride, 500.0f, false, nullptr, llama31);
    G.rope(x.g, B, T, H, hs, stride, 500.0f, false, nullptr, llama31);
    x.check("rope llama3 scaling" + tag, tol(kTol));
  }
  // Qwen3's per-head q/k norm on strided heads: the elements after the heads (k, v) keep their
  // values; odd widths take the scalar path, 64 and 128 the 128-bit one; backward in place as
  // the model calls it, and into another buffer.
  if (wanted("llama"))
  for (auto [N, H, hs, extra] : {std::tuple{1, 1, 2, 0}, {37, 7, 64, 96}, {129, 3, 10, 17}, {5, 16, 128, 512}}) {
    const int64_t stride = int64_t(H) * hs + extra, n = int64_t(N) * stride;
    const std::string tag = " N" + std::to_string(N) + " H" + std::to_string(H) + " hs" + std::to_string(hs) +
                            " stride" + std::to_string(stride);
    Pair x(C, G, randn(size_t(n), 90, 2.f), dt), w(C, G, randn(size_t(hs), 91), dt),
        out(C, G, randn(size_t(n), 92), dt), rstd(C, G, std::vector<float>(size_t(N) * H));
    C.head_rmsnorm_forward(out.c, rstd.fc(), x.c, w.c, N, H, hs, stride, 1e-6f);
    G.head_rmsnorm_forward(out.g, rstd.fg(), x.g, w.g, N, H, hs, stride, 1e-6f);
    out.check("head_rmsnorm_forward" + tag, tol(kTol));
    rstd.check("head_rmsnorm_forward rstd" + tag, kTol);
    Pair y(C, G, randn(size_t(n), 90, 2.f), dt);  // x's values, normed in place
    C.head_rmsnorm_forward(y.c, rstd.fc(), y.c, w.c, N, H, hs, stride, 1e-6f);
    G.head_rmsnorm_forward(y.g, rstd.fg(), y.g, w.g, N, H, hs, stride, 1e-6f);
    y.check("head_rmsnorm_forward in place" + tag, tol(kTol));
    Pair d(C, G, randn(size_t(n), 93), dt), dw(C, G, randn(size_t(hs), 94)), dx(C, G, randn(size_t(n), 95), dt);
    C.head_rmsnorm_backward(dx.c, dw.fc(), d.c, x.c, w.c, rstd.fc(), N, H, hs, stride);
    G.head_rmsnorm_backward(dx.g, dw.fg(), d.g, x.g, w.g, rstd.fg(), N, H, hs, stride);
    dx.check("head_rmsnorm_backward dinp" + tag, tol(1e-4));
    dw.check("head_rmsnorm_backward dweight" + tag, 1e-4);
    C.head_rmsnorm_backward(d.c, dw.fc(), d.c, x.c, w.c, rstd.fc(), N, H, hs, stride);
    G.head_rmsnorm_backward(d.g, dw.fg(), d.g, x.g, w.g, rstd.fg(), N, H, hs, stride);
    d.check("head_rmsnorm_backward in place" + tag, tol(1e-4));
    dw.check("head_rmsnorm_backward dweight, accumulated" + tag, 1e-4);
  }
  if (wanted("llama"))
  for (auto [N, Fd] : {std::pair{1, 1}, {7, 33}, {255, 1376}}) {
    const std::string tag = " " + std::to_string(N) + "x" + std::to_string(Fd);
    Pair x(C, G, randn(size_t(N) * 2 * Fd, 47, 3.f), dt), out(C, G, std::vector<float>(size_t(N) * Fd), dt),
        dout(C, G, randn(size_t(N) * Fd, 48), dt), dx(C, G, randn(size_t(N) * 2 * Fd, 49), dt);
    C.swiglu_forward(out.c, x.c, N, Fd);
    G.swiglu_forward(out.g, x.g, N, Fd);
    out.check("swiglu_forward" + tag, tol(kTol));
    C.swiglu_backward(dx.c, x.c, dout.c, N, Fd);
    G.swiglu_backward(dx.g, x.g, dout.g, N, Fd);
    dx.check("swiglu_backward" + tag, tol(kTol));
  }
  // y += alpha x over rows of C of strided buffers (a low-rank adapter's update into one column slice
  // of the packed [q | k | v]): the elements between the rows keep their values.
  if (wanted("elementwise"))
  for (auto [N, Cc, ldy, ldx] : {std::tuple{1, 1, 1, 1}, {37, 10, 31, 10}, {129, 64, 200, 70}}) {
    const std::string tag = " " + std::to_string(N) + "x" + std::to_string(Cc) + " ld " + std::to_string(ldy) + "/" +
                            std::to_string(ldx);
    Pair y(C, G, randn(size_t(N) * ldy, 60), dt), x(C, G, randn(size_t(N) * ldx, 61), dt);
    C.add_rows_scaled(y.c, ldy, x.c, ldx, N, Cc, 1.25f);
    G.add_rows_scaled(y.g, ldy, x.g, ldx, N, Cc, 1.25f);
    y.check("add_rows_scaled" + tag, tol(kTol));
    // LoRA's dropout: the same Philox mask on both (bit-identical in fp32), in place and not, at a
    // column offset of a wider global tensor; about p of the elements zeroed
    Pair d(C, G, std::vector<float>(size_t(N) * ldy), dt);
    C.dropout(d.c, y.c, N, Cc, ldy, 0.25f, 0x1234567890ull, 77, 500, 13);
    G.dropout(d.g, y.g, N, Cc, ldy, 0.25f, 0x1234567890ull, 77, 500, 13);
    d.check("dropout" + tag, dt == DType::F32 ? 0 : tol(kTol));
    C.dropout(y.c, y.c, N, Cc, ldy, 0.5f, 99, 0, Cc, 0);
    G.dropout(y.g, y.g, N, Cc, ldy, 0.5f, 99, 0, Cc, 0);
    y.check("dropout in place" + tag, dt == DType::F32 ? 0 : tol(kTol));
    if (dt == DType::F32 && N * Cc >= 4096) {  // the fraction kept (GPU side): 1 - p within 5 sigma
      std::vector<float> host(size_t(N) * ldy);
      G.copy_to_host(host.data(), d.g, host.size() * sizeof(float));
      double kept = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int c = 0; c < Cc; ++c) kept += host[size_t(n * ldy + c)] != 0;
      const double frac = kept / double(N * Cc), sigma = std::sqrt(0.25 * 0.75 / double(N * Cc));
      const bool ok = std::abs(frac - 0.75) <= 5 * sigma;
      ++checks, failures += !ok;
      std::printf("  fp32 dropout p 0.25: kept %.4f (expected 0.75 +- %.4f) %s\n", frac, 5 * sigma, ok ? "ok" : "FAIL");
    }
  }
  if (wanted("elementwise"))
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1025), int64_t(100003), int64_t(65536)}) {
    Pair x(C, G, randn(n, 20, 3.f), dt), dout(C, G, randn(n, 21), dt), dx(C, G, randn(n, 22), dt);
    C.gelu_backward(dx.c, x.c, dout.c, n);
    G.gelu_backward(dx.g, x.g, dout.g, n);
    dx.check("gelu_backward n" + std::to_string(n), tol(kTol));
    Pair gx(C, G, std::vector<float>(size_t(n)), dt);
    C.gelu_forward(gx.c, x.c, n);
    G.gelu_forward(gx.g, x.g, n);
    gx.check("gelu_forward n" + std::to_string(n), tol(kTol));
    Pair xf(C, G, randn(n, 20, 3.f)), y(C, G, randn(n, 23)), out(C, G, std::vector<float>(n));
    C.add(out.fc(), xf.fc(), y.fc(), n);
    G.add(out.fg(), xf.fg(), y.fg(), n);
    out.check("add", kTol);
    C.scale(out.fc(), 0.37f, n);
    G.scale(out.fg(), 0.37f, n);
    out.check("scale", kTol);
    Pair conv(C, G, std::vector<float>(n), dt);
    C.convert(conv.c, dt, xf.c, F, n);
    G.convert(conv.g, dt, xf.g, F, n);
    conv.check("convert fp32 -> compute", 0);  // both round to nearest even: bit-identical
    C.convert(out.c, F, conv.c, dt, n);
    G.convert(out.g, F, conv.g, dt, n);
    out.check("convert compute -> fp32", 0);
    auto sum_squares = [&](Backend& be, const float* x) {  // a fresh accumulator: the plain sum of squares
      double* acc = static_cast<double*>(be.alloc(sizeof(double)));
      be.sum_squares_accumulate(acc, x, n);
      double h = 0;
      be.copy_to_host(&h, acc, sizeof h);
      be.free(acc);
      return h;
    };
    const double sc = sum_squares(C, xf.fc()), sg = sum_squares(G, xf.fg()), sg2 = sum_squares(G, xf.fg());
    ++checks;
    const bool ok = std::abs(sc - sg) <= 1e-9 * std::abs(sc) && sg == sg2;  // and the same on a rerun
    failures += !ok;
    std::printf("  %-49s %.9g vs %.9g %s\n", "sum_squares (and rerun bit-identical)", sg, sc, ok ? "ok" : "FAIL");
    {  // device-side accumulators: acc += sum x^2, then acc += 0.5 * sum x
      double* ac = static_cast<double*>(C.alloc(sizeof(double)));
      double* ag = static_cast<double*>(G.alloc(sizeof(double)));
      C.sum_squares_accumulate(ac, xf.fc(), n);
      G.sum_squares_accumulate(ag, xf.fg(), n);
      C.sum_accumulate(ac, xf.fc(), n, 0.5);
      G.sum_accumulate(ag, xf.fg(), n, 0.5);
      double hc = 0, hg = 0;
      C.copy_to_host(&hc, ac, sizeof hc);
      G.copy_to_host(&hg, ag, sizeof hg);
      const bool acc_ok = std::abs(hc - hg) <= 1e-9 * std::max(1.0, std::abs(hc));
      ++checks;
      failures += !acc_ok;
      std::printf("  %-49s %.9g vs %.9g %s\n", "sum_squares_accumulate + sum_accumulate", hg, hc, acc_ok ? "ok" : "FAIL");
      C.free(ac);
      G.free(ag);
    }
    Pair p(C, G, randn(n, 24)), g(C, G, randn(n, 25)), m(C, G, std::vector<float>(n)), v(C, G, std::vector<float>(n)),
        pc(C, G, std::vector<float>(n), dt);
    for (int t = 1; t <= 3; ++t) {
      C.adamw_update(p.fc(), g.fc(), m.fc(), v.fc(), pc.c, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
      G.adamw_update(p.fg(), g.fg(), m.fg(), v.fg(), pc.g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    p.check("adamw_update x3 params", kTol);
    m.check("adamw_update x3 first moment", kTol);
    v.check("adamw_update x3 second moment", kTol);
    pc.check("adamw_update x3 compute copy", tol(kTol));
  }
  // Vr < V: the columns past Vr are padding (GPT-2's 50257 ids held as 50304), set to logits far
  // above the real ones: they must take no part in the softmax and get a zero gradient
  if (wanted("crossentropy"))
  for (auto [N, V, Vr] : {std::tuple{1, 2, 2}, {7, 127, 127}, {5, 1024, 1000}, {33, 50304, 50257}}) {
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; ++n) tg[n] = N > 1 && n % 3 == 1 ? -1 : (n * 131 + 7) % Vr;  // -1: no loss (loss and gradient 0)
    IntPair targets(C, G, tg);
    auto padded = [&](unsigned seed) {
      std::vector<float> x = randn(size_t(N) * V, seed, 3.f);
      for (int n = 0; n < N; ++n) std::fill(x.begin() + int64_t(n) * V + Vr, x.begin() + int64_t(n + 1) * V, 1e4f);
      return x;
    };
    const std::string shape = " N" + std::to_string(N) + " V" + std::to_string(V) + " real " + std::to_string(Vr);
    Pair logits(C, G, padded(26), dt), losses(C, G, std::vector<float>(N));
    C.softmax_crossentropy(losses.fc(), logits.c, targets.c, N, V, Vr, 0.25f);
    G.softmax_crossentropy(losses.fg(), logits.g, targets.g, N, V, Vr, 0.25f);
    losses.check("softmax_crossentropy loss" + shape, kTol);
    logits.check("softmax_crossentropy dlogits", tol(kTol));
    Pair l2(C, G, padded(27), dt), mx(C, G, std::vector<float>(N)), se(C, G, std::vector<float>(N)),
        pk(C, G, std::vector<float>(N));
    C.logits_row_max(mx.fc(), l2.c, N, V, Vr);
    G.logits_row_max(mx.fg(), l2.g, N, V, Vr);
    mx.check("logits_row_max" + shape, 0);
    C.logits_row_sumexp(se.fc(), l2.c, mx.fc(), N, V, Vr);
    G.logits_row_sumexp(se.fg(), l2.g, mx.fg(), N, V, Vr);
    se.check("logits_row_sumexp" + shape, kTol);
    C.logits_pick_target(pk.fc(), l2.c, targets.c, N, V, 0);
    G.logits_pick_target(pk.fg(), l2.g, targets.g, N, V, 0);
    pk.check("logits_pick_target", 0);
    C.crossentropy_grad_from_lse(l2.c, mx.fc(), targets.c, N, V, Vr, 0, 0.5f);
    G.crossentropy_grad_from_lse(l2.g, mx.fg(), targets.g, N, V, Vr, 0, 0.5f);
    l2.check("crossentropy_grad_from_lse" + shape, tol(kTol));
  }
  // masked logits (-inf) at any position of a row, the first of a thread's elements included
  if (wanted("crossentropy"))
  for (auto [N, V] : {std::pair{3, 127}, {2, 1024}}) {
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; ++n) tg[n] = (n * 131 + 7) % V;
    IntPair targets(C, G, tg);
    std::vector<float> init = randn(size_t(N) * V, 28, 3.f);
    for (int n = 0; n < N; ++n)
      for (int v : {0, 1, 5, 8, 64, V - 1})
        if (v != tg[n]) init[size_t(n) * V + v] = -INFINITY;
    Pair logits(C, G, init, dt), losses(C, G, std::vector<float>(N));
    C.softmax_crossentropy(losses.fc(), logits.c, targets.c, N, V, V, 0.25f);
    G.softmax_crossentropy(losses.fg(), logits.g, targets.g, N, V, V, 0.25f);
    losses.check("softmax_crossentropy -inf logits loss V" + std::to_string(V), kTol);
    logits.check("softmax_crossentropy -inf logits dlogits", tol(kTol));
  }
  } catch (const std::exception& e) {  // the next compute type still runs
    ++failures;
    std::printf("  %-4s EXCEPTION in the op after \"%s\": %s\n", dtype_name(dt), last_checked.c_str(), e.what());
  }
  }
  const MemoryStats ms = G.memory_stats();
  std::printf("device allocator: %zu B allocated, %zu B reserved, %zu B peak, fragmentation %.1f%%\n", ms.allocated,
              ms.reserved, ms.peak, 100.0 * ms.fragmentation());
  std::printf("%d passed, %d failed\n", checks - failures, failures);
  if (digest) std::fclose(digest);
  return failures ? 1 : 0;
}
