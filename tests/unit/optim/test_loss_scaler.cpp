// Dynamic and fixed loss scaling (fp16), and that bf16 / fp32 never scale or skip.
#include <catch2/catch.hpp>

#include "engine/core/status.h"
#include "engine/optim/loss_scaler.h"

using namespace zt;

TEST_CASE("dynamic loss scaling halves on overflow, doubles after a clean window, stops at the minimum") {
  RunSpec::Precision p;
  p.initial_scale = 1024;
  p.scale_window = 3;
  p.min_scale = 256;
  LossScaler s(p, DType::F16);
  REQUIRE(s.active());
  REQUIRE(s.scale() == 1024);
  REQUIRE_FALSE(s.update(false));  // overflow: skip, halve
  REQUIRE(s.scale() == 512);
  REQUIRE(s.skipped() == 1);
  REQUIRE(s.update(true));
  REQUIRE(s.update(true));
  REQUIRE(s.scale() == 512);
  REQUIRE(s.update(true));  // third clean step in a row: double
  REQUIRE(s.scale() == 1024);
  REQUIRE(s.update(true));
  REQUIRE_FALSE(s.update(false));  // an overflow resets the clean count
  REQUIRE(s.scale() == 512);
  REQUIRE(s.update(true));
  REQUIRE(s.update(true));
  REQUIRE(s.scale() == 512);
  REQUIRE_FALSE(s.update(false));
  REQUIRE(s.scale() == 256);
  REQUIRE(s.skipped() == 3);
  REQUIRE_THROWS_AS(s.update(false), RuntimeFailure);  // overflow at the minimum scale
}

TEST_CASE("a fixed loss scale never changes, and an overflow at it stops the run") {
  RunSpec::Precision p;
  p.loss_scale = 128;
  LossScaler s(p, DType::F16);
  REQUIRE(s.scale() == 128);
  for (int i = 0; i < 5000; ++i) REQUIRE(s.update(true));
  REQUIRE(s.scale() == 128);
  REQUIRE_THROWS_AS(s.update(false), RuntimeFailure);  // skipping every step alike would train nothing
}

TEST_CASE("bf16 and fp32 use scale 1 and never skip") {
  RunSpec::Precision p;
  for (DType t : {DType::BF16, DType::F32}) {
    LossScaler s(p, t);
    REQUIRE_FALSE(s.active());
    REQUIRE(s.scale() == 1);
    REQUIRE(s.update(false));
    REQUIRE(s.skipped() == 0);
  }
}
