// The host AdamW that optimizer offload runs ([offload] optimizer = "cpu" / "nvme"), against this
// machine's memory bandwidth measured in the same process: AdamW is memory-bound (30 bytes per
// parameter with a bf16 copy: read p, g, m, v; write p, m, v and the copy), so its rate is judged
// as a fraction of what a STREAM-style kernel moving the same arrays achieves.
//   ztrain-bench-adamw [--params N] [--threads T] [--reps R]
// Prints one JSON object.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cpu/ops.h"
#include "engine/core/byte_size.h"
#include "engine/core/status.h"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t(64) << 20;  // 64M parameters: 1.9 GB of states, far beyond the caches
  int threads = 0, reps = 5;
  const char* usage = "usage: ztrain-bench-adamw [--params N] [--threads T] [--reps R]\n";
  try {  // counts parsed strictly: a bad argument exits 2 with the usage, never runs with a default
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help") {
        std::fputs(usage, stdout);
        return 0;
      }
      if (i + 1 >= argc) zt::user_error("{} needs a value", a);
      const std::string v = argv[++i];
      if (a == "--params") n = zt::parse_count(v, a, 1, int64_t(1) << 32);
      else if (a == "--threads") threads = int(zt::parse_count(v, a, 0, 4096));
      else if (a == "--reps") reps = int(zt::parse_count(v, a, 1, 1000));
      else zt::user_error("unknown option {}", a);
    }
  } catch (const zt::UserError& e) {
    std::fprintf(stderr, "ztrain-bench-adamw: error: %s\n%s", e.what(), usage);
    return 2;
  }
  if (threads > 0) omp_set_num_threads(threads);
  std::vector<float> p(n), g(n), m(n), v(n);
  std::vector<uint16_t> copy(n);
#pragma omp parallel for schedule(static)  // first touch by the threads that will use the pages
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * float(i % 1000), g[i] = 1e-3f * float(i % 77) - 0.03f, m[i] = 0, v[i] = 0;
    copy[i] = 0;
  }
  // Bandwidth: the same traffic pattern without the maths: read 4 arrays, write 3 and the copy.
  double bw = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float s = p[i] + g[i] + m[i] + v[i];
      p[i] = s, m[i] = s * 0.5f, v[i] = s * 0.25f;
      copy[i] = uint16_t(i);
    }
    bw = std::max(bw, 30.0 * double(n) / (now() - t0));
  }
  // each body this CPU has, best first; the copy in bf16 and in fp16
  std::string bodies;
  double best = 0;
  for (const zt::cpu::AdamwBody body : {zt::cpu::AdamwBody::Best, zt::cpu::AdamwBody::Avx2, zt::cpu::AdamwBody::Scalar})
    for (const zt::DType ct : {zt::DType::BF16, zt::DType::F16}) {
      zt::cpu::force_adamw_body(body);
      double adamw = 0;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        zt::cpu::adamw_update_with_copy(p.data(), g.data(), m.data(), v.data(), copy.data(), ct, n, 1e-3f, 0.9f,
                                        0.95f, 1e-8f, 0.1f, r + 1);
        adamw = std::max(adamw, 30.0 * double(n) / (now() - t0));
      }
      if (body == zt::cpu::AdamwBody::Best && ct == zt::DType::BF16) best = adamw;
      bodies += std::string(bodies.empty() ? "" : ", ") + "\"" + zt::cpu::adamw_body_name() + "_" +
                (ct == zt::DType::BF16 ? "bf16" : "fp16") + "_gb_s\": " + std::to_string(adamw / 1e9);
    }
  zt::cpu::force_adamw_body(zt::cpu::AdamwBody::Best);
  std::printf("{\"params\": %lld, \"threads\": %d, \"body\": \"%s\", \"stream_gb_s\": %.2f, \"adamw_gb_s\": %.2f, "
              "\"adamw_params_per_s\": %.3e, \"ratio_to_bandwidth\": %.3f, %s}\n",
              (long long)n, omp_get_max_threads(), zt::cpu::adamw_body_name(), bw / 1e9, best / 1e9, best / 30.0,
              best / bw, bodies.c_str());
  return 0;
}
