// make_pieces (see pieces.h).
#include "engine/checkpoint/pieces.h"

#include <algorithm>

#include "engine/core/status.h"

namespace zt {

std::vector<Piece> make_pieces(const std::vector<RunRef>& runs, const std::vector<TensorShape>& shapes) {
  std::vector<Piece> out;
  auto add = [&](int param, int64_t row, int64_t col, int64_t rows, int64_t width, size_t run, size_t off) {
    const size_t n = size_t(rows) * size_t(width);
    if (!out.empty()) {
      Piece& last = out.back();
      if (last.param == param && last.col0 == col && last.cols == width && last.row0 + last.rows == row) {
        last.rows += rows;
        Piece::Source& s = last.sources.back();
        if (s.run == run && s.off + s.n == off) s.n += n;
        else last.sources.push_back({run, off, n});
        return;
      }
    }
    out.push_back({param, row, col, rows, width, {{run, off, n}}});
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRef& r = runs[i];
    const TensorShape& t = shapes[size_t(r.param)];
    ZT_CHECK(t.dims.size() == 1 || t.dims.size() == 2, "checkpoint: tensor {} is {}-D", r.param, t.dims.size());
    const int64_t cols = t.cols();
    ZT_CHECK(int64_t(r.global_begin + r.n) <= t.rows() * cols, "checkpoint: run beyond tensor {}", r.param);
    size_t g = r.global_begin, off = 0, left = r.n;
    while (left > 0) {
      const int64_t row = int64_t(g) / cols, col = int64_t(g) % cols;
      if (col != 0 || int64_t(left) < cols) {  // a (partial) row
        const int64_t w = std::min<int64_t>(int64_t(left), cols - col);
        add(r.param, row, col, 1, w, i, off);
        g += size_t(w), off += size_t(w), left -= size_t(w);
      } else {  // whole rows
        const int64_t rows = int64_t(left) / cols;
        add(r.param, row, 0, rows, cols, i, off);
        const size_t n = size_t(rows * cols);
        g += n, off += n, left -= n;
      }
    }
  }
  return out;
}

}  // namespace zt
