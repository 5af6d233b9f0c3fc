// bf16 / fp16 conversions against an independent oracle: the nearest representable value found
// by search over every 16-bit pattern (in double), ties to the even pattern, fp16 overflow to inf.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/backend/backend.h"
#include "engine/core/dtype.h"

using namespace zt;

namespace {
// Every finite non-negative value of a 16-bit format with its bit pattern, ascending.
std::vector<std::pair<double, uint16_t>> finite_values(float (*decode)(uint16_t)) {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t h = 0; h < 0x8000; ++h) {
    const float f = decode(uint16_t(h));
    if (std::isfinite(f)) v.push_back({double(f), uint16_t(h)});
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Round-to-nearest-even by search; `inf_at`: the magnitude from which the format rounds to inf.
uint16_t oracle(float x, const std::vector<std::pair<double, uint16_t>>& vals, double inf_at, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a >= inf_at) return sign | inf_bits;
  auto hi = std::lower_bound(vals.begin(), vals.end(), std::make_pair(a, uint16_t(0)));
  if (hi == vals.end()) return sign | vals.back().second;
  if (hi->first == a || hi == vals.begin()) return sign | hi->second;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1) ? hi->second : lo->second);  // tie: the even pattern
}

std::vector<float> probe_values() {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                           6.1e-5f, 3.3895e38f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048};
  std::mt19937 g(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_float(bits(g));
    if (std::isfinite(f)) xs.push_back(f);
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) xs.push_back(nd(g) * std::pow(2.0f, float(i % 40 - 28)));
  // exact ties between neighbouring 16-bit values
  for (uint32_t h = 0x3c00; h < 0x3c40; ++h) xs.push_back(0.5f * (fp16_to_float(uint16_t(h)) + fp16_to_float(uint16_t(h + 1))));
  for (uint32_t h = 0x3f80; h < 0x3fc0; ++h)
    xs.push_back(float(0.5 * (double(bf16_to_float(uint16_t(h))) + bf16_to_float(uint16_t(h + 1)))));
  return xs;
}
}  // namespace

TEST_CASE("fp16 conversion rounds to nearest even, overflows to inf, keeps subnormals") {
  const auto vals = finite_values(fp16_to_float);
  for (float x : probe_values()) {
    INFO("x = " << x);
    REQUIRE(float_to_fp16(x) == oracle(x, vals, 65520.0, 0x7c00));
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every pattern survives a round trip (NaNs stay NaN)
    const float f = fp16_to_float(uint16_t(h));
    if (std::isnan(f)) REQUIRE(std::isnan(fp16_to_float(float_to_fp16(f))));
    else REQUIRE(float_to_fp16(f) == h);
  }
  REQUIRE(std::isinf(fp16_to_float(float_to_fp16(1e6f))));
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN") {
  const auto vals = finite_values(bf16_to_float);
  // bf16's largest finite value is (2 - 2^-7) * 2^127; values from halfway to the next binade
  // round to inf.
  const double inf_at = (2.0 - 1.0 / 256) * std::ldexp(1.0, 127);
  for (float x : probe_values()) {
    INFO("x = " << x);
    REQUIRE(float_to_bf16(x) == oracle(x, vals, inf_at, 0x7f80));
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    if (std::isnan(f)) REQUIRE(std::isnan(bf16_to_float(float_to_bf16(f))));
    else REQUIRE(float_to_bf16(f) == h);
  }
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST_CASE("the CPU backend in bf16 computes in fp32 on rounded inputs and rounds its outputs once") {
  auto be = make_cpu_backend(1);
  const int N = 5, C = 7, OC = 3;
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(N * C), w(OC * C), b(OC);
  for (auto* v : {&x, &w, &b})
    for (auto& e : *v) e = nd(g);
  auto to16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> r(v.size());
    convert_host(r.data(), DType::BF16, v.data(), DType::F32, int64_t(v.size()));
    return r;
  };
  auto round = [](std::vector<float> v) {
    for (auto& e : v) e = bf16_to_float(float_to_bf16(e));
    return v;
  };
  // fp32 reference on the rounded inputs
  std::vector<float> ref(N * OC);
  be->set_compute_dtype(DType::F32);
  const auto xr = round(x), wr = round(w), br = round(b);
  be->matmul_forward(ref.data(), xr.data(), wr.data(), br.data(), N, C, OC);
  be->set_compute_dtype(DType::BF16);
  const auto x16 = to16(x), w16 = to16(w), b16 = to16(b);
  std::vector<uint16_t> out(N * OC);
  be->matmul_forward(out.data(), x16.data(), w16.data(), b16.data(), N, C, OC);
  for (int i = 0; i < N * OC; ++i) REQUIRE(out[i] == float_to_bf16(ref[i]));
}
