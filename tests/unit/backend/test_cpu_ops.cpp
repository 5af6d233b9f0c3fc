// Every CPU op, forward and backward: backward against central finite differences (in double),
// forward and backward of the float instantiation against the double one, at awkward sizes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"
#include "tests/unit/op_test_util.h"

using namespace zt;
using namespace zt::test;

namespace {
constexpr double kFdTol = 1e-6;     // double-precision finite differences, h = 1e-5
constexpr double kFloatTol = 2e-5;  // float vs double, normalized error
}  // namespace

TEST_CASE("matmul backward matches finite differences and float matches double", "[ops][matmul]") {
  for (auto [N, C, OC] : {std::tuple{1, 1, 1}, {7, 33, 7}, {33, 7, 127}, {127, 33, 1}}) {
    CAPTURE(N, C, OC);
    auto x = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), b = randn(OC, 3);
    const auto R = randn(size_t(N) * OC, 4);
    std::vector<double> out(size_t(N) * OC);
    auto loss = [&] {
      cpu::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
      return dot(out, R);
    };
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    cpu::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC);
    for (auto* p : {&x, &w, &b}) {
      const auto& analytic = p == &x ? dx : p == &w ? dw : db;
      auto [idx, num] = numeric_grad(*p, loss);
      REQUIRE(rel_err(gather(analytic, idx), num) < kFdTol);
    }
    // float path
    auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b), Rf = cast<float>(R);
    std::vector<float> outf(out.size()), dxf(x.size()), dwf(w.size()), dbf(b.size());
    cpu::matmul_forward(outf.data(), xf.data(), wf.data(), bf.data(), N, C, OC);
    loss();
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::matmul_backward(dxf.data(), dwf.data(), dbf.data(), Rf.data(), xf.data(), wf.data(), N, C, OC);
    REQUIRE(rel_err(dxf, dx) < kFloatTol);
    REQUIRE(rel_err(dwf, dw) < kFloatTol);
    REQUIRE(rel_err(dbf, db) < kFloatTol);
    REQUIRE(all_finite(dwf));
  }
}

TEST_CASE("matmul backward accumulates into existing gradients", "[ops][matmul]") {
  const int N = 7, C = 33, OC = 7;
  auto x = randn(N * C, 1), w = randn(OC * C, 2), R = randn(N * OC, 3);
  std::vector<double> dx1(x.size()), dw1(w.size()), db1(OC);
  cpu::matmul_backward(dx1.data(), dw1.data(), db1.data(), R.data(), x.data(), w.data(), N, C, OC);
  auto dx2 = dx1, dw2 = dw1, db2 = db1;
  cpu::matmul_backward(dx2.data(), dw2.data(), db2.data(), R.data(), x.data(), w.data(), N, C, OC);
  for (size_t i = 0; i < dw1.size(); ++i) REQUIRE(dw2[i] == Approx(2 * dw1[i]));
  for (size_t i = 0; i < dx1.size(); ++i) REQUIRE(dx2[i] == Approx(2 * dx1[i]));
}

TEST_CASE("layernorm backward matches finite differences and float matches double", "[ops][layernorm]") {
  for (auto [N, C] : {std::pair{1, 1}, {7, 33}, {33, 7}, {3, 127}}) {
    CAPTURE(N, C);
    auto x = randn(size_t(N) * C, 5, 2.0), w = randn(C, 6), b = randn(C, 7);
    const auto R = randn(size_t(N) * C, 8);
    std::vector<double> out(x.size()), mean(N), rstd(N);
    auto loss = [&] {
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
      return dot(out, R);
    };
    loss();
    std::vector<double> dx(x.size()), dw(C), db(C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    if (C > 1) {  // with C = 1 the output does not depend on x (a constant: the bias)
      auto [idx, num] = numeric_grad(x, loss);
      REQUIRE(rel_err(gather(dx, idx), num) < kFdTol);
    }
    {
      auto [idx, num] = numeric_grad(w, loss);
      if (C > 1) REQUIRE(rel_err(gather(dw, idx), num) < kFdTol);
    }
    {
      auto [idx, num] = numeric_grad(b, loss);
      REQUIRE(rel_err(gather(db, idx), num) < kFdTol);
    }
    loss();
    auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b), Rf = cast<float>(R);
    std::vector<float> outf(x.size()), meanf(N), rstdf(N), dxf(x.size()), dwf(C), dbf(C);
    cpu::layernorm_forward(outf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), Rf.data(), xf.data(), wf.data(),
                            meanf.data(), rstdf.data(), N, C);
    if (C > 1) REQUIRE(rel_err(dxf, dx) < 1e-4);
    if (C > 1) REQUIRE(rel_err(dwf, dw) < kFloatTol);  // with C = 1, xhat = 0: dw is 0 on both
    REQUIRE(rel_err(dbf, db) < kFloatTol);
    REQUIRE(all_finite(dxf));
  }
}

TEST_CASE("attention backward matches finite differences and float matches double", "[ops][attention]") {
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, {2, 7, 12, 3}, {1, 33, 8, 2}, {1, 127, 4, 1}}) {
    CAPTURE(B, T, C, NH);
    auto qkv = randn(size_t(B) * T * 3 * C, 9);
    const auto R = randn(size_t(B) * T * C, 10);
    std::vector<double> out(size_t(B) * T * C), lse(size_t(B) * NH * T);
    auto loss = [&] {
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH);
      return dot(out, R);
    };
    loss();
    std::vector<double> dqkv(qkv.size());
    cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), lse.data(), B, T, C, NH, NH);
    auto [idx, num] = numeric_grad(qkv, loss, 300);
    REQUIRE(rel_err(gather(dqkv, idx), num) < kFdTol);
    loss();
    // causality: the output at t must not depend on positions after t
    if (T > 1) {
      auto qkv2 = qkv;
      for (int c = 0; c < 3 * C; ++c) qkv2[size_t(T - 1) * 3 * C + c] += 1.0;
      std::vector<double> out2(out.size()), lse2(lse.size());
      cpu::attention_forward(out2.data(), lse2.data(), qkv2.data(), B, T, C, NH, NH);
      for (int t = 0; t < T - 1; ++t)
        for (int c = 0; c < C; ++c) REQUIRE(out2[size_t(t) * C + c] == out[size_t(t) * C + c]);
    }
    auto qf = cast<float>(qkv), Rf = cast<float>(R);
    std::vector<float> outf(out.size()), lsef(lse.size()), dqf(qkv.size());
    cpu::attention_forward(outf.data(), lsef.data(), qf.data(), B, T, C, NH, NH);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::attention_backward(dqf.data(), Rf.data(), qf.data(), lsef.data(), B, T, C, NH, NH);
    REQUIRE(rel_err(dqf, dqkv) < 1e-4);
    REQUIRE(all_finite(dqf));
  }
}

TEST_CASE("gelu backward matches finite differences and float matches double", "[ops][gelu]") {
  for (int n : {1, 7, 33, 127}) {
    auto x = randn(n, 11, 3.0);
    const auto R = randn(n, 12);
    std::vector<double> out(n);
    auto loss = [&] {
      cpu::gelu_forward(out.data(), x.data(), n);
      return dot(out, R);
    };
    std::vector<double> dx(n);
    cpu::gelu_backward(dx.data(), x.data(), R.data(), n);
    auto [idx, num] = numeric_grad(x, loss);
    REQUIRE(rel_err(gather(dx, idx), num) < kFdTol);
    loss();
    // spot value: gelu_tanh(1) = 0.8411919906082768
    std::vector<double> one = {1.0}, g1(1);
    cpu::gelu_forward(g1.data(), one.data(), 1);
    REQUIRE(g1[0] == Approx(0.8411919906082768).epsilon(1e-12));
    auto xf = cast<float>(x), Rf = cast<float>(R);
    std::vector<float> outf(n), dxf(n);
    cpu::gelu_forward(outf.data(), xf.data(), n);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::gelu_backward(dxf.data(), xf.data(), Rf.data(), n);
    REQUIRE(rel_err(dxf, dx) < kFloatTol);
  }
}

TEST_CASE("softmax cross-entropy gradient matches finite differences", "[ops][crossentropy]") {
  for (auto [N, V] : {std::pair{1, 2}, {7, 33}, {33, 7}, {3, 127}}) {
    CAPTURE(N, V);
    auto logits = randn(size_t(N) * V, 13, 3.0);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; ++n) tgt[n] = (n * 5 + 3) % V;
    const double scale = 0.37;
    std::vector<double> losses(N);
    auto loss = [&] {
      auto tmp = logits;
      cpu::softmax_crossentropy(losses.data(), tmp.data(), tgt.data(), N, V, V, 0.0);
      double s = 0;
      for (double l : losses) s += l;
      return scale * s;
    };
    auto grad = logits;
    cpu::softmax_crossentropy(losses.data(), grad.data(), tgt.data(), N, V, V, scale);
    auto [idx, num] = numeric_grad(logits, loss);
    REQUIRE(rel_err(gather(grad, idx), num) < kFdTol);
    // large logits must not overflow
    std::vector<double> big = {1000.0, 0.0, -1000.0}, l1(1);
    std::vector<int32_t> t0 = {1};
    cpu::softmax_crossentropy(l1.data(), big.data(), t0.data(), 1, 3, 3, 0.0);
    REQUIRE(l1[0] == Approx(1000.0));
    auto lf = cast<float>(logits);
    std::vector<float> lossf(N);
    cpu::softmax_crossentropy(lossf.data(), lf.data(), tgt.data(), N, V, V, float(scale));
    loss();
    // A loss near 0 is a difference of two logit-sized numbers: float error scales with the
    // logits (about 3 here), not with the loss.
    for (int n = 0; n < N; ++n) REQUIRE(std::abs(lossf[n] - losses[n]) < 1e-5);
    for (size_t i = 0; i < grad.size(); ++i) REQUIRE(std::abs(lf[i] - grad[i]) < 1e-6);  // p - 1 cancels too
  }
}

TEST_CASE("embedding backward matches finite differences, repeated tokens included", "[ops][embedding]") {
  for (auto [B, T, C, V] : {std::tuple{1, 1, 1, 2}, {2, 7, 33, 5}, {3, 33, 7, 127}}) {
    CAPTURE(B, T, C, V);
    auto wte = randn(size_t(V) * C, 14), wpe = randn(size_t(T) * C, 15);
    std::vector<int32_t> inp(size_t(B) * T);
    for (size_t i = 0; i < inp.size(); ++i) inp[i] = int32_t((i * 7 + 1) % V);
    const auto R = randn(size_t(B) * T * C, 16);
    std::vector<double> out(R.size());
    auto loss = [&] {
      cpu::embedding_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
      return dot(out, R);
    };
    std::vector<double> dwte(wte.size()), dwpe(wpe.size());
    cpu::embedding_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), B, T, C);
    {
      auto [idx, num] = numeric_grad(wte, loss);
      REQUIRE(rel_err(gather(dwte, idx), num) < kFdTol);
    }
    {
      auto [idx, num] = numeric_grad(wpe, loss);
      REQUIRE(rel_err(gather(dwpe, idx), num) < kFdTol);
    }
  }
}

TEST_CASE("adamw matches the closed form of torch.optim.AdamW for every element", "[ops][adamw]") {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  std::vector<double> p = {0.5, -0.25, 0.0}, g = {0.1, -0.2, 0.3}, m(3), v(3);
  auto pf = cast<float>(p), gf = cast<float>(g);
  std::vector<float> mf(3), vf(3);
  std::vector<double> pe = p, me(3, 0.0), ve(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, t);
    cpu::adamw_update(pf.data(), gf.data(), mf.data(), vf.data(), 3, lr, b1, b2, eps, wd, t);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(t, i);
      pe[i] *= 1 - double(lr) * wd;
      me[i] = b1 * me[i] + (1 - double(b1)) * g[i];
      ve[i] = b2 * ve[i] + (1 - double(b2)) * g[i] * g[i];
      const double mhat = me[i] / (1 - std::pow(double(b1), t)), vhat = ve[i] / (1 - std::pow(double(b2), t));
      pe[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      REQUIRE(p[i] == Approx(pe[i]).epsilon(1e-6));
      REQUIRE(m[i] == Approx(me[i]).epsilon(1e-6));  // the first moment, as torch keeps exp_avg
      REQUIRE(v[i] == Approx(ve[i]).epsilon(1e-6));
    }
  }
  REQUIRE(rel_err(pf, p) < 1e-6);
}

TEST_CASE("sum_squares is exact for known values and independent of chunking", "[ops][elementwise]") {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(100003)}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = float((i % 5) - 2);  // squares 4,1,0,1,4: exact in any order
    double expect = 0;
    for (float v : x) expect += double(v) * v;
    REQUIRE(cpu::sum_squares(x.data(), n) == expect);
    // Non-integer data, whose sum depends on the order: within double rounding of the sequential
    // sum (a float accumulator would be off by ~1e-4 at n = 100003), and the same on every call.
    for (int64_t i = 0; i < n; ++i) x[i] = float(std::sin(0.37 * double(i)) * 1.7);
    long double exact = 0;
    for (float v : x) exact += (long double)v * v;
    const double got = cpu::sum_squares(x.data(), n);
    REQUIRE(std::abs(got - double(exact)) <= 1e-13 * double(exact));
    REQUIRE(cpu::sum_squares(x.data(), n) == got);
  }
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, out(3);
  cpu::add(out.data(), a.data(), b.data(), 3);
  REQUIRE(out == std::vector<float>{11, 22, 33});
  cpu::scale(out.data(), 0.5f, 3);
  REQUIRE(out == std::vector<float>{5.5f, 11, 16.5f});
}

TEST_CASE("the vectorizable float exp and tanh are within a few ulp of libm", "[ops][vec_math]") {
  double worst_exp = 0, worst_tanh = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * float(i) / 200000.0f;
    const double ref = std::exp(double(x));
    worst_exp = std::max(worst_exp, std::abs(double(cpu::exp_f32(x)) - ref) / ref);
    const float u = -10.0f + 20.0f * float(i) / 200000.0f;
    worst_tanh = std::max(worst_tanh, std::abs(double(cpu::vtanh(u)) - std::tanh(double(u))));
  }
  CAPTURE(worst_exp, worst_tanh);
  REQUIRE(worst_exp < 4e-7);   // ~3 ulp
  REQUIRE(worst_tanh < 3e-7);  // absolute
  REQUIRE(cpu::exp_f32(-100.0f) == 0.0f);
  REQUIRE(cpu::exp_f32(0.0f) == 1.0f);
  REQUIRE(std::isfinite(cpu::exp_f32(1000.0f)));
  REQUIRE(cpu::vtanh(50.0f) == 1.0f);
  REQUIRE(cpu::vtanh(-50.0f) == -1.0f);
}

TEST_CASE("padding columns take no part in the loss and get a zero gradient", "[ops][crossentropy]") {
  // Rows of V = 40 held columns, the first Vr = 33 real: the padding holds logits far above the
  // real ones (and +inf), which would own the softmax if it were not left out.
  const int N = 5, V = 40, Vr = 33;
  auto real = randn(size_t(N) * Vr, 22, 2.0);
  std::vector<double> padded(size_t(N) * V);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < V; ++i)
      padded[size_t(n) * V + i] = i < Vr ? real[size_t(n) * Vr + i] : i == V - 1 ? INFINITY : 1e4;
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; ++n) tgt[n] = (n * 7 + 2) % Vr;
  std::vector<double> want(N), got(N);
  cpu::softmax_crossentropy(want.data(), real.data(), tgt.data(), N, Vr, Vr, 0.5);
  cpu::softmax_crossentropy(got.data(), padded.data(), tgt.data(), N, V, Vr, 0.5);
  for (int n = 0; n < N; ++n) {
    REQUIRE(got[n] == Approx(want[n]).epsilon(1e-14));
    for (int i = 0; i < V; ++i)
      if (i < Vr) REQUIRE(padded[size_t(n) * V + i] == Approx(real[size_t(n) * Vr + i]).margin(1e-15));
      else REQUIRE(padded[size_t(n) * V + i] == 0.0);
  }
}

TEST_CASE("vocabulary-parallel cross-entropy pieces equal the fused op", "[ops][crossentropy][tp]") {
  // V = 31 real ids held as 4 slices ("ranks") of 11: the last slice's 2 columns and all of the
  // fourth are padding (their logits set huge). Reduce like the model does, and compare losses and
  // gradients with softmax_crossentropy on the unpadded rows.
  const int N = 7, V = 31, P = 4, Vl = 11;
  auto logits = randn(size_t(N) * V, 21, 2.0);
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; ++n) tgt[n] = (n * 13 + 5) % V;
  auto fused = logits;
  std::vector<double> fused_loss(N);
  cpu::softmax_crossentropy(fused_loss.data(), fused.data(), tgt.data(), N, V, V, 0.5);
  std::vector<std::vector<double>> slices(P, std::vector<double>(size_t(N) * Vl));
  auto real_of = [&](int r) { return std::clamp(V - r * Vl, 0, Vl); };
  for (int r = 0; r < P; ++r)
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < Vl; ++i)
        slices[r][size_t(n) * Vl + i] = i < real_of(r) ? logits[size_t(n) * V + r * Vl + i] : 1e4;
  std::vector<double> mx(N, -1e300), sum(N, 0), pick(N, 0), part(N);
  for (int r = 0; r < P; ++r) {
    cpu::logits_row_max(part.data(), slices[r].data(), N, Vl, real_of(r));
    for (int n = 0; n < N; ++n) mx[n] = std::max(mx[n], part[n]);
  }
  for (int r = 0; r < P; ++r) {
    cpu::logits_row_sumexp(part.data(), slices[r].data(), mx.data(), N, Vl, real_of(r));
    for (int n = 0; n < N; ++n) sum[n] += part[n];
    cpu::logits_pick_target(part.data(), slices[r].data(), tgt.data(), N, Vl, r * Vl);
    for (int n = 0; n < N; ++n) pick[n] += part[n];
  }
  std::vector<double> lse(N);
  for (int n = 0; n < N; ++n) {
    lse[n] = mx[n] + std::log(sum[n]);
    REQUIRE(lse[n] - pick[n] == Approx(fused_loss[n]).epsilon(1e-12));
  }
  for (int r = 0; r < P; ++r) {
    cpu::crossentropy_grad_from_lse(slices[r].data(), lse.data(), tgt.data(), N, Vl, real_of(r), r * Vl, 0.5);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < Vl; ++i)
        if (i < real_of(r))
          REQUIRE(slices[r][size_t(n) * Vl + i] == Approx(fused[size_t(n) * V + r * Vl + i]).margin(1e-12));
        else
          REQUIRE(slices[r][size_t(n) * Vl + i] == 0.0);
  }
}

TEST_CASE("embedding skips negative ids and a null position table", "[ops][embedding][tp]") {
  const int B = 1, T = 3, C = 2;
  std::vector<double> wte = {1, 2, 3, 4}, wpe = {10, 20, 30, 40, 50, 60}, out(6), dwte(4), dwpe(6);
  std::vector<int32_t> inp = {1, -1, 0};
  cpu::embedding_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  REQUIRE(out == std::vector<double>{13, 24, 30, 40, 51, 62});
  cpu::embedding_forward(out.data(), inp.data(), wte.data(), (const double*)nullptr, B, T, C);
  REQUIRE(out == std::vector<double>{3, 4, 0, 0, 1, 2});
  const std::vector<double> d = {1, 1, 5, 5, 2, 2};
  cpu::embedding_backward(dwte.data(), (double*)nullptr, d.data(), inp.data(), B, T, C);
  REQUIRE(dwte == std::vector<double>{2, 2, 1, 1});
}

TEST_CASE("adamw's AVX-512 and AVX2 bodies equal the scalar reference bit for bit, with every compute copy",
          "[ops][adamw]") {
  for (const cpu::AdamwBody body : {cpu::AdamwBody::Best, cpu::AdamwBody::Avx2})
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(17), int64_t(1000), int64_t(4099)})
    for (const DType ct : {DType::F32, DType::BF16, DType::F16}) {
      cpu::force_adamw_body(body);
      CAPTURE(cpu::adamw_body_name(), n, int(ct));
      auto p = cast<float>(randn(size_t(n), 31)), g = cast<float>(randn(size_t(n), 32, 1e-2));
      auto m = cast<float>(randn(size_t(n), 33, 1e-3)), v = cast<float>(randn(size_t(n), 34, 1e-3));
      for (auto& x : v) x = x * x;
      if (n > 3) p[2] = std::numeric_limits<float>::quiet_NaN(), p[3] = -INFINITY;  // NaN and inf copies
      if (n > 16) {  // fp16's edges: a subnormal, overflow to inf, the largest half, a NaN with a payload
        p[4] = 3e-6f, p[5] = -1e5f, p[6] = 65519.f, p[8] = 6.1e-5f;
        const uint32_t snan = 0x7fa00001u;
        std::memcpy(&p[7], &snan, 4);
      }
      auto p2 = p, m2 = m, v2 = v;
      std::vector<uint16_t> c1(size_t(n) * 2), c2(size_t(n) * 2);
      for (int t = 1; t <= 3; ++t) {
        cpu::adamw_update_with_copy(p.data(), g.data(), m.data(), v.data(), c1.data(), ct, n, 1e-3f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, t);
        cpu::adamw_update_reference(p2.data(), g.data(), m2.data(), v2.data(), c2.data(), ct, n, 1e-3f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, t);
      }
      REQUIRE(std::memcmp(p.data(), p2.data(), size_t(n) * 4) == 0);
      REQUIRE(std::memcmp(m.data(), m2.data(), size_t(n) * 4) == 0);
      REQUIRE(std::memcmp(v.data(), v2.data(), size_t(n) * 4) == 0);
      REQUIRE(std::memcmp(c1.data(), c2.data(), size_t(n) * dtype_size(ct)) == 0);
      cpu::force_adamw_body(cpu::AdamwBody::Best);
    }
}
