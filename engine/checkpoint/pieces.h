// A rank's share of a checkpoint as rectangular blocks of the global tensors (pure arithmetic;
// tests/unit/checkpoint/test_pieces.cpp).
//
// ModelStates::global_runs() gives this rank's states as runs: consecutive elements of a tensor's
// full row-major layout. A tensor is viewed as (rows, cols), cols = its last dimension (a 1-D
// tensor is one row). A run that starts or ends inside a row splits into up to three segments
// (a partial row, whole rows, a partial row); segments of the same columns in consecutive rows
// merge into one block. So a row-parallel weight's slice is one block (all rows, its columns),
// a ZeRO shard of a column-parallel one at most three: few HDF5 datasets, each a plain hyperslab
// of the virtual dataset that shows the full tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

struct TensorShape {
  std::vector<int64_t> dims;  // 1-D or 2-D
  int64_t rows() const { return dims.size() == 2 ? dims[0] : 1; }
  int64_t cols() const { return dims.back(); }
};

struct RunRef {  // the parts of ModelStates::GlobalRun this needs
  int param;
  size_t global_begin, n;
};

struct Piece {
  int param;
  int64_t row0, col0, rows, cols;  // the block [row0, row0 + rows) x [col0, col0 + cols)
  // Where its elements are, in row-major order: `n` elements from element `off` of run `run`
  // (an index into the runs given to make_pieces), one source after the other.
  struct Source {
    size_t run, off, n;
  };
  std::vector<Source> sources;
  size_t numel() const { return size_t(rows) * size_t(cols); }
};

std::vector<Piece> make_pieces(const std::vector<RunRef>& runs, const std::vector<TensorShape>& shapes);

}  // namespace zt
