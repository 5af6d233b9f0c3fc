// GPT-2 model: initialization is a pure function of (seed, parameter name, element index) with
// GPT-2's scaled residual projections, and the parameter table follows the documented layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>

#include "engine/backend/backend.h"
#include "engine/core/rng.h"
#include "engine/model/registry.h"
#include "models/gpt2.h"

using namespace zt;

TEST_CASE("every parameter element comes from (seed, name, index)", "[model][init]") {
  auto be = make_cpu_backend(2);
  GPT2Config small{2, 2, 8, 32, 50, 16}, deeper{3, 2, 8, 32, 50, 16};
  GPT2 a(small, *be, 1), b(deeper, *be, 4);
  std::vector<float> va(a.num_params()), vb(b.num_params());
  a.init_range(5, 0, va.size(), va.data());
  b.init_range(5, 0, vb.size(), vb.data());
  const float* pa = va.data();
  const float* pb = vb.data();
  // Any sub-range gives the same values as the whole (what a ZeRO-3 shard initializes).
  std::vector<float> part(1000);
  a.init_range(5, 777, 1777, part.data());
  for (size_t i = 0; i < part.size(); ++i) REQUIRE(part[i] == va[777 + i]);
  // Same name -> same values, whatever else the model holds (layer count, batch capacity).
  for (size_t i = 0; i < a.params().size() - 2; ++i) {
    const ParamInfo& p = a.params()[i];
    const ParamInfo& q = b.params()[i];
    REQUIRE(p.name == q.name);
    if (p.init_std == q.init_std) {
      for (size_t k = 0; k < p.numel; ++k) REQUIRE(pa[p.offset + k] == pb[q.offset + k]);
    } else {  // residual projections: std scales with depth, the underlying normals do not
      REQUIRE(p.name.find("c_proj.weight") != std::string::npos);
      for (size_t k = 0; k < p.numel; ++k)
        REQUIRE(pa[p.offset + k] / p.init_std == Approx(pb[q.offset + k] / q.init_std).epsilon(1e-5));
    }
  }
  // And the value is the documented formula.
  const ParamInfo& wte = a.params()[0];
  REQUIRE(wte.name == "transformer.wte.weight");
  REQUIRE(wte.shape == std::vector<int64_t>{50, 8});
  for (size_t k = 0; k < wte.numel; k += 37)
    REQUIRE(pa[wte.offset + k] == float(normal_at(5, name_hash(wte.name), k) * double(0.02f)));
  for (const auto& p : a.params()) {
    if (p.name.find("c_proj.weight") != std::string::npos)
      REQUIRE(p.init_std == Approx(0.02 / std::sqrt(2.0 * 2)));
    if (p.name.find("ln_") != std::string::npos && p.name.find("weight") != std::string::npos)
      REQUIRE((p.init_value == 1.0f && !p.decay));
    if (p.name.find("bias") != std::string::npos) REQUIRE((p.init_value == 0.0f && !p.decay));
  }
  REQUIRE(a.params()[4].name == "transformer.h.0.attn.c_attn.weight");
  REQUIRE(a.params()[4].shape == std::vector<int64_t>{24, 8});
}

TEST_CASE("the footprint computed from the spec matches what the model allocates", "[model][plan]") {
  for (const DType dt : {DType::F32, DType::BF16}) {
    for (const auto& [L, NH, C, V, T, B, multiple] :
         {std::tuple{2, 2, 16, 50, 16, 4, 1}, std::tuple{3, 4, 32, 257, 24, 2, 64}, std::tuple{1, 1, 8, 10, 64, 8, 1},
          std::tuple{1, 1, 8, 10, 64, 8, 128}}) {
      auto be = make_cpu_backend(1);
      be->set_compute_dtype(dt);
      const size_t before = be->memory_stats().by_tag[size_t(MemTag::Activations)];
      const int held = (V + multiple - 1) / multiple * multiple;
      GPT2 model(GPT2Config{L, NH, C, 4 * C, V, T, held}, *be, B);
      const double measured = double(be->memory_stats().by_tag[size_t(MemTag::Activations)] - before);
      RunSpec::Model m;
      m.n_layer = L, m.n_head = NH, m.d_model = C, m.d_ff = 4 * C, m.vocab_size = V, m.seq_len = T;
      m.vocab_multiple = multiple;
      const ModelFootprint f = model_footprint(m, B, 1, dtype_size(dt));
      REQUIRE(f.params == double(model.num_params()));
      // the activation buffer; the rest of the tag is token and loss scratch plus 64-byte alignment
      REQUIRE(f.activation_bytes <= measured);
      REQUIRE(f.activation_bytes >= 0.85 * measured);
    }
  }
}
