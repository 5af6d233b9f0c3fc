// Drives the backend on the emulated device for the mutation checks (tests/cuda_emu/mutations.py)
// where test-backend-ops cannot show the bug: its tensors carry guard regions inside their
// allocations, and it never uploads on the copy stream.
//   mutant_driver add N   out = a + b on allocations of exactly N floats (an off-by-one kernel
//                         writes past them: the guard page or the redzone must catch it)
//   mutant_driver upload  upload_pinned_async from pinned memory, then scale on the compute
//                         stream at once (without the stream wait the scale reads old data)
// Prints "ok" and exits 0 when the results are right; "WRONG ..." and exits 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/backend.h"

using namespace zt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mutant_driver add N | upload\n");
    return 2;
  }
  auto g = make_backend(DeviceChoice::Cuda, 0);
  const std::string mode = argv[1];
  if (mode == "add") {
    const int64_t n = argc > 2 ? std::atoll(argv[2]) : 7;
    std::vector<float> a(n), b(n), out(n);
    for (int64_t i = 0; i < n; ++i) a[i] = float(i), b[i] = 0.5f;
    auto* da = static_cast<float*>(g->alloc(n * 4)), *db = static_cast<float*>(g->alloc(n * 4)),
         *dc = static_cast<float*>(g->alloc(n * 4));
    g->copy_to_device(da, a.data(), n * 4);
    g->copy_to_device(db, b.data(), n * 4);
    g->add(dc, da, db, n);
    g->copy_to_host(out.data(), dc, n * 4);
    for (int64_t i = 0; i < n; ++i)
      if (out[i] != a[i] + b[i]) {
        std::printf("WRONG: out[%lld] = %g\n", (long long)i, out[i]);
        return 1;
      }
    std::puts("ok");
    return 0;
  }
  if (mode == "upload") {
    const int64_t n = 4096;
    auto* pinned = static_cast<float*>(g->alloc(n * 4, MemTag::Other, MemKind::PinnedHost));
    auto* d = static_cast<float*>(g->alloc(n * 4));  // zero-filled
    for (int64_t i = 0; i < n; ++i) pinned[i] = float(i % 97);
    g->upload_pinned_async(d, pinned, n * 4, 0);
    g->scale(d, 2.0f, n);  // must see the uploaded values
    std::vector<float> out(n);
    g->copy_to_host(out.data(), d, n * 4);
    for (int64_t i = 0; i < n; ++i)
      if (out[i] != 2.0f * float(i % 97)) {
        std::printf("WRONG: element %lld is %g after the upload and the scale, expected %g\n", (long long)i, out[i],
                    2.0f * float(i % 97));
        return 1;
      }
    std::puts("ok");
    return 0;
  }
  std::fprintf(stderr, "mutant_driver: unknown mode %s\n", mode.c_str());
  return 2;
}
