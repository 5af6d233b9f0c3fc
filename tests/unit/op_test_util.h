// Helpers for op tests: seeded random tensors, normalized error, and a finite-difference checker.
// Every op is checked in double against central differences (exact enough to prove the backward),
// then the float instantiation the engine runs is checked against the double one.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace zt::test {

inline std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

template <typename To, typename From>
std::vector<To> cast(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// ||a - b|| / max(||b||, tiny): the normalized error of ggml's test-backend-ops.
template <typename A, typename B>
double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

template <typename T>
bool all_finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(double(x)); });
}

// Numerical gradient of loss() w.r.t. x[i] for up to max_checks indices (spread over x).
// Returns (indices, numeric grads).
inline std::pair<std::vector<size_t>, std::vector<double>> numeric_grad(
    std::vector<double>& x, const std::function<double()>& loss, size_t max_checks = 256,
    double h = 1e-5) {
  std::vector<size_t> idx;
  const size_t stride = std::max<size_t>(1, x.size() / max_checks);
  for (size_t i = 0; i < x.size(); i += stride) idx.push_back(i);
  std::vector<double> g;
  for (size_t i : idx) {
    const double old = x[i];
    x[i] = old + h;
    const double lp = loss();
    x[i] = old - h;
    const double lm = loss();
    x[i] = old;
    g.push_back((lp - lm) / (2 * h));
  }
  return {idx, g};
}

inline std::vector<double> gather(const std::vector<double>& v, const std::vector<size_t>& idx) {
  std::vector<double> out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace zt::test
