// Runs -> rectangular checkpoint blocks: every element of a run lands in exactly one block at its
// global (row, col), blocks are as few as the run shapes allow, and the sources list the run's
// elements in the block's row-major order.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "engine/checkpoint/pieces.h"

using namespace zt;

namespace {
// For every piece element: (param, global flat index) <- (run, offset within run).
std::map<std::pair<int, size_t>, std::pair<size_t, size_t>> placements(const std::vector<Piece>& pieces,
                                                                       const std::vector<TensorShape>& shapes) {
  std::map<std::pair<int, size_t>, std::pair<size_t, size_t>> out;
  for (const Piece& p : pieces) {
    size_t e = 0;
    for (const auto& s : p.sources)
      for (size_t k = 0; k < s.n; ++k, ++e) {
        const size_t row = size_t(p.row0) + e / size_t(p.cols), col = size_t(p.col0) + e % size_t(p.cols);
        const size_t g = row * size_t(shapes[size_t(p.param)].cols()) + col;
        REQUIRE(out.emplace(std::make_pair(p.param, g), std::make_pair(s.run, s.off + k)).second);
      }
    REQUIRE(e == p.numel());
  }
  return out;
}
}  // namespace

TEST_CASE("a run splits into partial row, whole rows, partial row", "[checkpoint]") {
  const std::vector<TensorShape> shapes = {{{5, 4}}};
  const auto pieces = make_pieces({{0, 2, 13}}, shapes);  // elements 2..14: row 0 cols 2-3, rows 1-2, row 3 cols 0-2
  REQUIRE(pieces.size() == 3);
  CHECK((pieces[0].row0 == 0 && pieces[0].col0 == 2 && pieces[0].rows == 1 && pieces[0].cols == 2));
  CHECK((pieces[1].row0 == 1 && pieces[1].col0 == 0 && pieces[1].rows == 2 && pieces[1].cols == 4));
  CHECK((pieces[2].row0 == 3 && pieces[2].col0 == 0 && pieces[2].rows == 1 && pieces[2].cols == 3));
}

TEST_CASE("a row-parallel slice (one run per row) becomes one block", "[checkpoint]") {
  const std::vector<TensorShape> shapes = {{{6, 8}}};
  std::vector<RunRef> runs;
  for (size_t r = 0; r < 6; ++r) runs.push_back({0, r * 8 + 4, 4});  // columns 4..7 of every row
  const auto pieces = make_pieces(runs, shapes);
  REQUIRE(pieces.size() == 1);
  CHECK((pieces[0].row0 == 0 && pieces[0].col0 == 4 && pieces[0].rows == 6 && pieces[0].cols == 4));
  CHECK(pieces[0].sources.size() == 6);
}

TEST_CASE("random runs: every element placed once, at its global index, in row-major order", "[checkpoint]") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TensorShape> shapes;
    for (int t = 0; t < 3; ++t) {
      const int64_t rows = 1 + int64_t(rng() % 7), cols = 1 + int64_t(rng() % 9);
      shapes.push_back(rng() % 3 == 0 ? TensorShape{{rows * cols}} : TensorShape{{rows, cols}});
    }
    // cut every tensor into random consecutive runs, then drop some (another rank owns them)
    std::vector<RunRef> runs;
    for (int t = 0; t < 3; ++t) {
      const size_t n = size_t(shapes[size_t(t)].rows() * shapes[size_t(t)].cols());
      for (size_t at = 0; at < n;) {
        const size_t len = 1 + rng() % std::min<size_t>(n - at, 20);
        if (rng() % 4 != 0) runs.push_back({t, at, len});
        at += len;
      }
    }
    const auto pieces = make_pieces(runs, shapes);
    const auto placed = placements(pieces, shapes);
    size_t total = 0;
    for (size_t i = 0; i < runs.size(); ++i)
      for (size_t k = 0; k < runs[i].n; ++k, ++total) {
        const auto it = placed.find({runs[i].param, runs[i].global_begin + k});
        REQUIRE(it != placed.end());
        CHECK(it->second == std::make_pair(i, k));
      }
    CHECK(placed.size() == total);
  }
}
