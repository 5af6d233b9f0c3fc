// The backend interface: an op a backend lacks is an answer, not a crash; pinned host memory is
// counted apart from device memory; single-writer activation gradients are written.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/status.h"
#include "engine/model/registry.h"
#include "engine/plan/plan_backend.h"

using namespace zt;

namespace {
// A backend with memory but no ops, as a new backend starts out.
class MemoryOnlyBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CPU; }
  std::string name() const override { return "memory-only"; }
  void* alloc(size_t, MemTag, MemKind) override { return nullptr; }
  void free(void*) override {}
  void copy_to_device(void*, const void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  void copy_device(void*, const void*, size_t) override {}
  void fill_zero(void*, size_t) override {}
  MemoryStats memory_stats() const override { return {}; }
  void convert(void*, DType, const void*, DType, int64_t) override {}
};
}  // namespace

TEST_CASE("an op the backend lacks says which op and which backend", "[backend]") {
  MemoryOnlyBackend be;
  try {
    be.gelu_backward(nullptr, nullptr, nullptr, 4);
    FAIL("no exception");
  } catch (const RuntimeFailure& e) {
    REQUIRE(std::string(e.what()) == "op gelu_backward is not supported on backend memory-only");
  }
  REQUIRE_THROWS_AS(be.adamw_update(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 0, 0, 0, 0, 1), RuntimeFailure);
}

TEST_CASE("whether a backend runs an op is an answer before the run", "[backend]") {
  MemoryOnlyBackend bare;
  auto cpu = make_cpu_backend(1);
  PlanBackend gpu_plan(DeviceKind::CUDA), cpu_plan(DeviceKind::CPU);
  for (const std::string& op : Backend::op_names()) {
    CAPTURE(op);
    REQUIRE(cpu->supports({op, DType::BF16, 256}).empty());  // the reference runs everything
    REQUIRE(bare.supports({op}) == "the memory-only backend does not implement " + op);
  }
  REQUIRE(cpu->supports({"flash_decode"}) == "there is no op flash_decode");
  // the CUDA kernels' limit, answered by the planner for a GPU too
  REQUIRE(gpu_plan.supports({"attention_forward", DType::BF16, 128}).empty());
  REQUIRE(gpu_plan.supports({"attention_backward", DType::BF16, 256}) ==
          "head size 256 is above 128, the largest the CUDA attention kernels take");
  REQUIRE(cpu_plan.supports({"attention_backward", DType::BF16, 256}).empty());
  // every family declares only ops that exist (that a run asks for every op it calls:
  // tests/unit/plan/test_plan.cpp, "a run asks the backend for every op ...")
  for (const ModelFamily* f : model_families()) {
    CAPTURE(f->name());
    RunSpec::Model m;
    m.arch = f->name();
    m.n_head = 2, m.d_model = 512;  // head size 256
    for (const Backend::OpRequest& r : f->ops(m, DType::BF16)) REQUIRE(cpu->supports(r).empty());
    REQUIRE(unsupported_op(*cpu, m, DType::BF16).empty());
    REQUIRE(unsupported_op(gpu_plan, m, DType::BF16) ==
            "attention_forward: head size 256 is above 128, the largest the CUDA attention kernels take");
    REQUIRE(unsupported_op(bare, m, DType::F32).rfind("embedding_forward: the memory-only backend", 0) == 0);
  }
}

TEST_CASE("pinned host memory is counted apart from device memory", "[backend]") {
  auto be = make_cpu_backend(1);
  const MemoryStats before = be->memory_stats();
  auto* pinned = static_cast<float*>(be->alloc(1000, MemTag::OptimStates, MemKind::PinnedHost));
  void* device = be->alloc(640, MemTag::Params);
  pinned[249] = 1.0f;  // usable host memory, zero-filled
  REQUIRE(pinned[0] == 0.0f);
  MemoryStats s = be->memory_stats();
  REQUIRE(s.pinned_host == before.pinned_host + 1024);  // 64-byte rounded
  REQUIRE(s.allocated == before.allocated + 640);
  REQUIRE(s.by_tag[size_t(MemTag::OptimStates)] == before.by_tag[size_t(MemTag::OptimStates)]);
  be->free(pinned);
  be->free(device);
  s = be->memory_stats();
  REQUIRE(s.pinned_host == before.pinned_host);
  REQUIRE(s.allocated == before.allocated);
}

namespace {
// n floats into a new device buffer of the backend's compute type, and back
void* upload(Backend& be, const std::vector<float>& v) {
  const size_t n = v.size();
  void* f = be.alloc(n * 4);
  be.copy_to_device(f, v.data(), n * 4);
  void* p = be.alloc(n * be.compute_size());
  be.convert(p, be.compute_dtype(), f, DType::F32, int64_t(n));
  be.free(f);
  return p;
}
std::vector<float> download(Backend& be, const void* p, size_t n) {
  void* f = be.alloc(n * 4);
  be.convert(f, DType::F32, p, be.compute_dtype(), int64_t(n));
  std::vector<float> v(n);
  be.copy_to_host(v.data(), f, n * 4);
  be.free(f);
  return v;
}
std::vector<float> noise(size_t n, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * float(i) + phase);
  return v;
}
}  // namespace

TEST_CASE("activation gradients with one writer are written, whatever the buffer held", "[backend]") {
  for (const DType dt : {DType::F32, DType::BF16}) {
    CAPTURE(int(dt));
    auto be = make_cpu_backend(1);
    be->set_compute_dtype(dt);
    const int N = 6, C = 16, OC = 8, B = 1, T = 6, NH = 2;
    void* x = upload(*be, noise(size_t(N) * C, 0.1f));
    void* w = upload(*be, noise(size_t(OC) * C, 0.2f));
    void* pre = upload(*be, noise(size_t(N) * C, 0.3f));
    void* dout = upload(*be, noise(size_t(N) * OC, 0.4f));
    float* dw = static_cast<float*>(be->alloc(size_t(OC) * C * 4));
    // each op twice: into zeros, then into noise; the results must not differ
    auto twice = [&](size_t n, const std::function<void(void*)>& op) {
      void* zeros = upload(*be, std::vector<float>(n));
      void* noisy = upload(*be, noise(n, 0.9f));
      op(zeros);
      op(noisy);
      const auto a = download(*be, zeros, n), b = download(*be, noisy, n);
      be->free(zeros);
      be->free(noisy);
      REQUIRE(a == b);
      return a;
    };
    const auto dx = twice(size_t(N) * C, [&](void* d) { be->matmul_backward(d, dw, nullptr, dout, x, w, N, C, OC); });
    const auto dpre = twice(size_t(N) * C, [&](void* d) {
      be->matmul_gelu_backward(d, dw, nullptr, dout, x, w, pre, N, C, OC);
    });
    // the fused op is the matmul's dinp through gelu' (in place here: dinp = dout)
    void* chain = upload(*be, dx);
    be->gelu_backward(chain, pre, chain, int64_t(N) * C);
    REQUIRE(download(*be, chain, size_t(N) * C) == dpre);
    be->free(chain);
    twice(size_t(N) * C, [&](void* d) { be->gelu_backward(d, pre, x, int64_t(N) * C); });
    twice(size_t(N) * C, [&](void* d) { be->swiglu_backward(d, x, pre, N, C / 2); });
    float* lse = static_cast<float*>(be->alloc(size_t(B) * NH * T * 4));
    void* qkv = upload(*be, noise(size_t(B) * T * 3 * C, 0.5f));
    void* att = upload(*be, std::vector<float>(size_t(B) * T * C));
    be->attention_forward(att, lse, qkv, B, T, C, NH, NH);
    twice(size_t(B) * T * 3 * C, [&](void* d) { be->attention_backward(d, x, att, qkv, lse, B, T, C, NH, NH); });
    for (void* p : {x, w, pre, dout, qkv, att}) be->free(p);
    be->free(dw);
    be->free(lse);
  }
}
