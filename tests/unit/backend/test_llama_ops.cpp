// The Llama family's CPU ops (RMSNorm, rotary embedding, SwiGLU, grouped-query attention):
// backward against central finite differences in double, float against double, and each
// forward against its definition written out here.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/backend/cpu/ops.h"
#include "tests/unit/op_test_util.h"

using namespace zt;
using namespace zt::test;

namespace {
constexpr double kFdTol = 1e-6;
constexpr double kFloatTol = 2e-5;
}  // namespace

TEST_CASE("rmsnorm backward matches finite differences and float matches double", "[ops][rmsnorm]") {
  for (auto [N, C] : {std::pair{1, 1}, {7, 33}, {33, 7}, {3, 127}}) {
    CAPTURE(N, C);
    auto x = randn(size_t(N) * C, 21, 2.0), w = randn(C, 22);
    const auto R = randn(size_t(N) * C, 23);
    std::vector<double> out(x.size()), rstd(N);
    auto loss = [&] {
      cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      return dot(out, R);
    };
    loss();
    // definition: x / sqrt(mean(x^2) + eps) * w
    for (int n = 0; n < N; ++n) {
      double ss = 0;
      for (int c = 0; c < C; ++c) ss += x[size_t(n) * C + c] * x[size_t(n) * C + c];
      const double s = 1.0 / std::sqrt(ss / C + 1e-5);
      for (int c = 0; c < C; ++c) REQUIRE(out[size_t(n) * C + c] == Approx(x[size_t(n) * C + c] * s * w[c]).epsilon(1e-12));
    }
    std::vector<double> dx(x.size()), dw(C);
    cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    {
      auto [idx, num] = numeric_grad(x, loss);
      REQUIRE(rel_err(gather(dx, idx), num) < kFdTol);
    }
    {
      auto [idx, num] = numeric_grad(w, loss);
      REQUIRE(rel_err(gather(dw, idx), num) < kFdTol);
    }
    loss();
    auto xf = cast<float>(x), wf = cast<float>(w), Rf = cast<float>(R);
    std::vector<float> outf(x.size()), rstdf(N), dxf(x.size()), dwf(C);
    cpu::rmsnorm_forward(outf.data(), rstdf.data(), xf.data(), wf.data(), N, C, 1e-5f);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::rmsnorm_backward(dxf.data(), dwf.data(), Rf.data(), xf.data(), wf.data(), rstdf.data(), N, C);
    // with C = 1 the output is sign(x) w: dx is eps-sized, all cancellation, in either type
    if (C > 1) REQUIRE(rel_err(dxf, dx) < 1e-4);
    REQUIRE(rel_err(dwf, dw) < kFloatTol);
  }
}

// Qwen3's q/k norm: each of the first H heads (hs wide) of rows `stride` apart is a row of the norm
// above with one shared weight; what lies after the heads is left alone.
TEST_CASE("head rmsnorm is the row norm on each strided head and its backward matches finite differences", "[ops][rmsnorm]") {
  for (auto [N, H, hs, extra] : {std::tuple{1, 1, 2, 0}, {5, 3, 6, 7}, {4, 2, 10, 21}}) {
    CAPTURE(N, H, hs, extra);
    const int64_t stride = int64_t(H) * hs + extra, n = int64_t(N) * stride;
    auto x = randn(size_t(n), 31, 2.0), w = randn(size_t(hs), 32);
    const auto R = randn(size_t(n), 33);
    std::vector<double> out = randn(size_t(n), 34), rstd(size_t(N) * H);
    const std::vector<double> out0 = out;
    auto loss = [&] {
      cpu::head_rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, H, hs, stride, 1e-6f);
      return dot(out, R);
    };
    loss();
    for (int64_t r = 0; r < N; ++r) {
      for (int h = 0; h < H; ++h) {  // each head: the row norm's output on it
        std::vector<double> head(x.begin() + r * stride + h * hs, x.begin() + r * stride + (h + 1) * hs), want(hs);
        double s = 0;
        cpu::rmsnorm_forward(want.data(), &s, head.data(), w.data(), 1, hs, 1e-6f);
        for (int c = 0; c < hs; ++c) REQUIRE(out[size_t(r * stride + h * hs + c)] == Approx(want[size_t(c)]).epsilon(1e-12));
        REQUIRE(rstd[size_t(r * H + h)] == Approx(s).epsilon(1e-12));
      }
      for (int64_t c = int64_t(H) * hs; c < stride; ++c) REQUIRE(out[size_t(r * stride + c)] == out0[size_t(r * stride + c)]);
    }
    std::vector<double> dx(static_cast<size_t>(n), 7.0), dw(static_cast<size_t>(hs));
    cpu::head_rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, H, hs, stride);
    std::vector<double> dx_heads, rest;  // finite differences see only the heads (the rest is not an input)
    for (int64_t i = 0; i < n; ++i) (i % stride < int64_t(H) * hs ? dx_heads : rest).push_back(dx[size_t(i)]);
    for (double v : rest) REQUIRE(v == 7.0);  // left alone
    {
      auto [idx, num] = numeric_grad(x, loss);
      std::vector<double> got, want;
      for (size_t k = 0; k < idx.size(); ++k)
        if (int64_t(idx[k]) % stride < int64_t(H) * hs) got.push_back(dx[idx[k]]), want.push_back(num[k]);
      REQUIRE(rel_err(got, want) < kFdTol);
    }
    {
      auto [idx, num] = numeric_grad(w, loss);
      REQUIRE(rel_err(gather(dw, idx), num) < kFdTol);
    }
    // in place (the model's use): the heads of dout become dinp's, what follows them stays
    std::vector<double> d = R, dw2(static_cast<size_t>(hs));
    loss();
    cpu::head_rmsnorm_backward(d.data(), dw2.data(), d.data(), x.data(), w.data(), rstd.data(), N, H, hs, stride);
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(d[size_t(i)] == (i % stride < int64_t(H) * hs ? dx[size_t(i)] : R[size_t(i)]));
    REQUIRE(dw2 == dw);
  }
}

TEST_CASE("rope rotates the two halves of each head as Hugging Face does, and inverse undoes it", "[ops][rope]") {
  // B 2, T 5, 3 rotated heads of hs 6 in rows of stride 26 (the rest is left alone)
  const int B = 2, T = 5, H = 3, hs = 6, stride = 26;
  const float theta = 500.0f;
  const auto x0 = randn(size_t(B) * T * stride, 24);
  auto x = x0;
  cpu::rope(x.data(), B, T, H, hs, stride, theta, false);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t row = (size_t(b) * T + t) * stride;
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < hs / 2; ++i) {
          // q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1)
          const double f = 1.0 / std::pow(double(theta), 2.0 * i / hs), a = t * f;
          const double lo = x0[row + h * hs + i], hi = x0[row + h * hs + i + hs / 2];
          REQUIRE(x[row + h * hs + i] == Approx(lo * std::cos(a) - hi * std::sin(a)).margin(1e-6));
          REQUIRE(x[row + h * hs + i + hs / 2] == Approx(hi * std::cos(a) + lo * std::sin(a)).margin(1e-6));
        }
      for (int c = H * hs; c < stride; ++c) REQUIRE(x[row + c] == x0[row + c]);
    }
  // backward = the inverse rotation: for loss = R . rope(x), dloss/dx = rope^-1(R)
  const auto R = randn(x.size(), 25);
  auto loss = [&] {
    auto y = x;
    cpu::rope(y.data(), B, T, H, hs, stride, theta, false);
    return dot(y, R);
  };
  x = x0;
  auto dx = R;
  cpu::rope(dx.data(), B, T, H, hs, stride, theta, true);
  auto [idx, num] = numeric_grad(x, loss);
  REQUIRE(rel_err(gather(dx, idx), num) < kFdTol);
  auto back = x0;
  cpu::rope(back.data(), B, T, H, hs, stride, theta, false);
  cpu::rope(back.data(), B, T, H, hs, stride, theta, true);
  REQUIRE(rel_err(back, x0) < 1e-12);
  auto xf = cast<float>(x0);
  cpu::rope(xf.data(), B, T, H, hs, stride, theta, false);
  auto xd = x0;
  cpu::rope(xd.data(), B, T, H, hs, stride, theta, false);
  REQUIRE(rel_err(xf, xd) < kFloatTol);
}

TEST_CASE("swiglu backward matches finite differences and float matches double", "[ops][swiglu]") {
  for (auto [N, F] : {std::pair{1, 1}, {7, 33}, {5, 4}}) {
    CAPTURE(N, F);
    auto x = randn(size_t(N) * 2 * F, 26, 3.0);
    const auto R = randn(size_t(N) * F, 27);
    std::vector<double> out(size_t(N) * F);
    auto loss = [&] {
      cpu::swiglu_forward(out.data(), x.data(), N, F);
      return dot(out, R);
    };
    loss();
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < F; ++i) {
        const double g = x[size_t(n) * 2 * F + i], u = x[size_t(n) * 2 * F + F + i];
        REQUIRE(out[size_t(n) * F + i] == Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-12));
      }
    std::vector<double> dx(x.size());
    cpu::swiglu_backward(dx.data(), x.data(), R.data(), N, F);
    auto [idx, num] = numeric_grad(x, loss);
    REQUIRE(rel_err(gather(dx, idx), num) < kFdTol);
    auto xf = cast<float>(x), Rf = cast<float>(R);
    std::vector<float> outf(out.size()), dxf(x.size());
    cpu::swiglu_forward(outf.data(), xf.data(), N, F);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::swiglu_backward(dxf.data(), xf.data(), Rf.data(), N, F);
    REQUIRE(rel_err(dxf, dx) < kFloatTol);
  }
}

TEST_CASE("grouped-query attention equals multi-head attention on repeated key/value heads", "[ops][attention][gqa]") {
  for (auto [B, T, NH, NKV, hs] : {std::tuple{1, 7, 6, 2, 5}, {2, 9, 4, 1, 3}, {1, 5, 3, 3, 4}}) {
    CAPTURE(B, T, NH, NKV, hs);
    const int C = NH * hs, C3 = (NH + 2 * NKV) * hs, group = NH / NKV;
    auto qkv = randn(size_t(B) * T * C3, 28);
    const auto R = randn(size_t(B) * T * C, 29);
    std::vector<double> out(size_t(B) * T * C), lse(size_t(B) * NH * T);
    auto loss = [&] {
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
      return dot(out, R);
    };
    loss();
    // the same through multi-head attention with each key/value head repeated for its group
    std::vector<double> mha(size_t(B) * T * 3 * C), out_mha(out.size()), lse_mha(lse.size());
    for (int bt = 0; bt < B * T; ++bt)
      for (int h = 0; h < NH; ++h)
        for (int c = 0; c < hs; ++c) {
          const double* src = qkv.data() + size_t(bt) * C3;
          double* dst = mha.data() + size_t(bt) * 3 * C;
          dst[h * hs + c] = src[h * hs + c];
          dst[C + h * hs + c] = src[C + (h / group) * hs + c];
          dst[2 * C + h * hs + c] = src[C + NKV * hs + (h / group) * hs + c];
        }
    cpu::attention_forward(out_mha.data(), lse_mha.data(), mha.data(), B, T, C, NH, NH);
    REQUIRE(rel_err(out, out_mha) < 1e-14);
    std::vector<double> dqkv(qkv.size());
    cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), lse.data(), B, T, C, NH, NKV);
    auto [idx, num] = numeric_grad(qkv, loss, 300);
    REQUIRE(rel_err(gather(dqkv, idx), num) < kFdTol);
    loss();
    auto qf = cast<float>(qkv), Rf = cast<float>(R);
    std::vector<float> outf(out.size()), lsef(lse.size()), dqf(qkv.size());
    cpu::attention_forward(outf.data(), lsef.data(), qf.data(), B, T, C, NH, NKV);
    REQUIRE(rel_err(outf, out) < kFloatTol);
    cpu::attention_backward(dqf.data(), Rf.data(), qf.data(), lsef.data(), B, T, C, NH, NKV);
    REQUIRE(rel_err(dqf, dqkv) < 1e-4);
  }
}
