// test-backend-ops for CUDA: every op of the interface on the CUDA backend and the CPU backend with
// the same inputs at awkward shapes; normalized error per op (fp32 tolerances below), explicit
// NaN/Inf checks, and a guard region after every output that must come back untouched (catches
// out-of-bounds writes). Exits 77 (ctest: skipped) without a visible GPU.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"

using namespace zt;

namespace {

constexpr int kGuard = 64;
constexpr float kSentinel = 12345.678f;
int failures = 0, checks = 0;

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A tensor present on both backends: same initial contents, guard region after the data.
struct Pair {
  Backend &cpu, &gpu;
  size_t n;
  float *c, *g;
  Pair(Backend& cb, Backend& gb, const std::vector<float>& init) : cpu(cb), gpu(gb), n(init.size()) {
    std::vector<float> h(init);
    h.resize(n + kGuard, kSentinel);
    c = static_cast<float*>(cpu.alloc(h.size() * sizeof(float)));
    g = static_cast<float*>(gpu.alloc(h.size() * sizeof(float)));
    cpu.copy_to_device(c, h.data(), h.size() * sizeof(float));
    gpu.copy_to_device(g, h.data(), h.size() * sizeof(float));
  }
  ~Pair() {
    cpu.free(c);
    gpu.free(g);
  }
  void check(const std::string& what, double tol) {
    std::vector<float> hc(n + kGuard), hg(n + kGuard);
    cpu.copy_to_host(hc.data(), c, hc.size() * sizeof(float));
    gpu.copy_to_host(hg.data(), g, hg.size() * sizeof(float));
    double num = 0, den = 0;
    bool finite = true, guard = true;
    for (size_t i = 0; i < n; ++i) {
      finite &= std::isfinite(hg[i]);
      num += double(hg[i] - hc[i]) * (hg[i] - hc[i]);
      den += double(hc[i]) * hc[i];
    }
    for (size_t i = n; i < n + kGuard; ++i) guard &= hg[i] == kSentinel;
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    ++checks;
    const bool ok = finite && guard && err <= tol;
    if (!ok) ++failures;
    std::printf("  %-44s nmse-err %.2e (tol %.0e)%s%s %s\n", what.c_str(), err, tol, finite ? "" : " NaN/Inf",
                guard ? "" : " GUARD-OVERWRITTEN", ok ? "ok" : "FAIL");
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

// fp32 on both sides; the GPU sums in another order (and attention/LayerNorm parameter gradients
// use atomics), so allow reassociation error that grows with the reduction length.
constexpr double kTol = 2e-5;

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  auto cpu = make_cpu_backend(0);
  auto gpu = make_backend("cuda", 0);
  Backend &C = *cpu, &G = *gpu;
  std::printf("test-backend-ops: %s vs %s\n", G.name().c_str(), C.name().c_str());

  for (auto [B, T, Ch, V] : {std::tuple{1, 1, 8, 7}, {2, 7, 33, 127}, {3, 33, 64, 1025}}) {
    std::vector<int32_t> ids(size_t(B) * T);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % V);
    IntPair inp(C, G, ids);
    Pair wte(C, G, randn(size_t(V) * Ch, 1)), wpe(C, G, randn(size_t(T) * Ch, 2)), out(C, G, randn(size_t(B) * T * Ch, 3));
    C.embedding_forward(out.c, inp.c, wte.c, wpe.c, B, T, Ch);
    G.embedding_forward(out.g, inp.g, wte.g, wpe.g, B, T, Ch);
    out.check("embedding_forward B" + std::to_string(B) + " T" + std::to_string(T), kTol);
    Pair dwte(C, G, std::vector<float>(size_t(V) * Ch, 0.f)), dwpe(C, G, std::vector<float>(size_t(T) * Ch, 0.f));
    C.embedding_backward(dwte.c, dwpe.c, out.c, inp.c, B, T, Ch);
    G.embedding_backward(dwte.g, dwpe.g, out.g, inp.g, B, T, Ch);
    dwte.check("embedding_backward dwte", kTol);
    dwpe.check("embedding_backward dwpe", kTol);
  }
  for (auto [N, Ch] : {std::pair{1, 7}, {33, 127}, {127, 1025}}) {
    Pair x(C, G, randn(size_t(N) * Ch, 4, 2.f)), w(C, G, randn(Ch, 5)), b(C, G, randn(Ch, 6)), out(C, G, std::vector<float>(size_t(N) * Ch));
    Pair mean(C, G, std::vector<float>(N)), rstd(C, G, std::vector<float>(N));
    C.layernorm_forward(out.c, mean.c, rstd.c, x.c, w.c, b.c, N, Ch, 1e-5f);
    G.layernorm_forward(out.g, mean.g, rstd.g, x.g, w.g, b.g, N, Ch, 1e-5f);
    out.check("layernorm_forward " + std::to_string(N) + "x" + std::to_string(Ch), kTol);
    Pair dout(C, G, randn(size_t(N) * Ch, 7)), dx(C, G, randn(size_t(N) * Ch, 8)), dw(C, G, randn(Ch, 9)), db(C, G, randn(Ch, 10));
    C.layernorm_backward(dx.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N, Ch);
    G.layernorm_backward(dx.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g, N, Ch);
    dx.check("layernorm_backward dinp", kTol);
    dw.check("layernorm_backward dweight", 1e-4);
    db.check("layernorm_backward dbias", 1e-4);
  }
  for (auto [N, Ch, OC] : {std::tuple{1, 1, 1}, {7, 33, 127}, {127, 256, 33}, {1025, 64, 257}}) {
    Pair x(C, G, randn(size_t(N) * Ch, 11)), w(C, G, randn(size_t(OC) * Ch, 12)), b(C, G, randn(OC, 13)), out(C, G, std::vector<float>(size_t(N) * OC));
    C.matmul_forward(out.c, x.c, w.c, b.c, N, Ch, OC);
    G.matmul_forward(out.g, x.g, w.g, b.g, N, Ch, OC);
    out.check("matmul_forward " + std::to_string(N) + "x" + std::to_string(Ch) + "x" + std::to_string(OC), kTol);
    Pair dout(C, G, randn(size_t(N) * OC, 14)), dx(C, G, randn(size_t(N) * Ch, 15)), dw(C, G, randn(size_t(OC) * Ch, 16)), db(C, G, randn(OC, 17));
    C.matmul_backward(dx.c, dw.c, db.c, dout.c, x.c, w.c, N, Ch, OC);
    G.matmul_backward(dx.g, dw.g, db.g, dout.g, x.g, w.g, N, Ch, OC);
    dx.check("matmul_backward dinp", kTol);
    dw.check("matmul_backward dweight", kTol);
    db.check("matmul_backward dbias", kTol);
  }
  for (auto [B, T, Ch, NH] : {std::tuple{1, 1, 32, 1}, {2, 7, 96, 3}, {1, 127, 64, 2}, {2, 257, 768, 12}}) {
    Pair qkv(C, G, randn(size_t(B) * T * 3 * Ch, 18)), out(C, G, std::vector<float>(size_t(B) * T * Ch)), lse(C, G, std::vector<float>(size_t(B) * NH * T));
    C.attention_forward(out.c, lse.c, qkv.c, B, T, Ch, NH);
    G.attention_forward(out.g, lse.g, qkv.g, B, T, Ch, NH);
    const std::string tag = " B" + std::to_string(B) + " T" + std::to_string(T) + " C" + std::to_string(Ch) + " NH" + std::to_string(NH);
    out.check("attention_forward" + tag, kTol);
    lse.check("attention_forward lse", kTol);
    Pair dout(C, G, randn(size_t(B) * T * Ch, 19)), dqkv(C, G, std::vector<float>(size_t(B) * T * 3 * Ch));
    C.attention_backward(dqkv.c, dout.c, qkv.c, lse.c, B, T, Ch, NH);
    G.attention_backward(dqkv.g, dout.g, qkv.g, lse.g, B, T, Ch, NH);
    dqkv.check("attention_backward" + tag, 1e-4);
  }
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1025), int64_t(100003)}) {
    Pair x(C, G, randn(n, 20, 3.f)), out(C, G, std::vector<float>(n)), dout(C, G, randn(n, 21)), dx(C, G, randn(n, 22));
    C.gelu_forward(out.c, x.c, n);
    G.gelu_forward(out.g, x.g, n);
    out.check("gelu_forward n" + std::to_string(n), kTol);
    C.gelu_backward(dx.c, x.c, dout.c, n);
    G.gelu_backward(dx.g, x.g, dout.g, n);
    dx.check("gelu_backward", kTol);
    Pair y(C, G, randn(n, 23));
    C.add(out.c, x.c, y.c, n);
    G.add(out.g, x.g, y.g, n);
    out.check("add", kTol);
    C.scale(out.c, 0.37f, n);
    G.scale(out.g, 0.37f, n);
    out.check("scale", kTol);
    const double sc = C.sum_squares(x.c, n), sg = G.sum_squares(x.g, n);
    ++checks;
    const bool ok = std::abs(sc - sg) <= 1e-9 * std::abs(sc);
    failures += !ok;
    std::printf("  %-44s %.9g vs %.9g %s\n", "sum_squares", sg, sc, ok ? "ok" : "FAIL");
    Pair p(C, G, randn(n, 24)), g(C, G, randn(n, 25)), m(C, G, std::vector<float>(n)), v(C, G, std::vector<float>(n));
    for (int t = 1; t <= 3; ++t) {
      C.adamw_update(p.c, g.c, m.c, v.c, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
      G.adamw_update(p.g, g.g, m.g, v.g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    p.check("adamw_update x3 params", kTol);
    v.check("adamw_update x3 second moment", kTol);
  }
  for (auto [N, V] : {std::pair{1, 2}, {7, 127}, {33, 50304}}) {
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; ++n) tg[n] = (n * 131 + 7) % V;
    IntPair targets(C, G, tg);
    Pair logits(C, G, randn(size_t(N) * V, 26, 3.f)), losses(C, G, std::vector<float>(N));
    C.softmax_crossentropy(losses.c, logits.c, targets.c, N, V, 0.25f);
    G.softmax_crossentropy(losses.g, logits.g, targets.g, N, V, 0.25f);
    losses.check("softmax_crossentropy loss N" + std::to_string(N) + " V" + std::to_string(V), kTol);
    logits.check("softmax_crossentropy dlogits", kTol);
    Pair l2(C, G, randn(size_t(N) * V, 27, 3.f)), mx(C, G, std::vector<float>(N)), se(C, G, std::vector<float>(N)), pk(C, G, std::vector<float>(N));
    C.logits_row_max(mx.c, l2.c, N, V);
    G.logits_row_max(mx.g, l2.g, N, V);
    mx.check("logits_row_max", 0);
    C.logits_row_sumexp(se.c, l2.c, mx.c, N, V);
    G.logits_row_sumexp(se.g, l2.g, mx.g, N, V);
    se.check("logits_row_sumexp", kTol);
    C.logits_pick_target(pk.c, l2.c, targets.c, N, V, 0);
    G.logits_pick_target(pk.g, l2.g, targets.g, N, V, 0);
    pk.check("logits_pick_target", 0);
    C.crossentropy_grad_from_lse(l2.c, mx.c, targets.c, N, V, 0, 0.5f);
    G.crossentropy_grad_from_lse(l2.g, mx.g, targets.g, N, V, 0, 0.5f);
    l2.check("crossentropy_grad_from_lse", kTol);
  }
  const MemoryStats ms = G.memory_stats();
  std::printf("device allocator: %zu B allocated, %zu B peak\n", ms.allocated, ms.peak);
  std::printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
