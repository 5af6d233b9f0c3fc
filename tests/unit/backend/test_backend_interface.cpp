// The backend interface: an op a backend lacks is an answer, not a crash; pinned host memory is
// counted apart from device memory.
#include <catch2/catch.hpp>

#include "engine/backend/backend.h"
#include "engine/core/status.h"

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
