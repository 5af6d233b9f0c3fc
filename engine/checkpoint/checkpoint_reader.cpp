// Reading checkpoints (see checkpoint_reader.h).
#include "engine/checkpoint/checkpoint_reader.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/h5_file.h"
#include "engine/checkpoint/pieces.h"
#include "engine/core/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {
constexpr size_t kChunkElems = size_t(64) << 20 >> 2;  // 64 MiB of floats

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", s[i]);
  return out + ")";
}
}  // namespace

std::string verify_checkpoint(const std::string& ckpt_dir, int part, int parts) {
  try {
    const TrainState s = read_train_state(ckpt_dir);
    const H5File master((fs::path(ckpt_dir) / "checkpoint.h5").string(), H5File::Mode::Read);
    // what checkpoint.h5's virtual datasets take from each rank file: file -> dataset -> block
    std::map<std::string, std::map<std::string, std::pair<std::string, H5File::VirtualBlock>>> mapped;
    for (const char* st : kCheckpointStates)
      for (const std::string& tensor : master.children(std::string("/") + st))
        for (const H5File::VirtualBlock& b : master.virtual_blocks(fmt::format("/{}/{}", st, tensor)))
          mapped[b.src_file][b.src_dataset] = {tensor, b};
    for (int64_t r = part; r < s.world; r += parts) {
      const std::string path = (fs::path(ckpt_dir) / rank_file_name(int(r))).string();
      if (!fs::exists(path)) return fmt::format("{}: missing", path);
      const H5File f(path, H5File::Mode::Read);
      if (std::string problem = rank_file_mismatch(master, f, s.step, int(r)); !problem.empty()) return problem;
      // every block checkpoint.h5 maps from this file is here, of that shape, for that place
      for (const auto& [ds, where] : mapped[rank_file_name(int(r))]) {
        const auto& [tensor, b] = where;
        if (!f.exists(ds))
          return fmt::format("{}: no block {}, which checkpoint.h5 maps into tensor {}", path, ds, tensor);
        const std::vector<int64_t> shape = f.shape(ds);
        const std::vector<int64_t> start = shape.size() == 2
                                               ? std::vector<int64_t>{f.attr(ds, "row0"), f.attr(ds, "col0")}
                                               : std::vector<int64_t>{f.attr(ds, "col0")};
        if (shape != b.count || start != b.start)
          return fmt::format("{}: block {} is {} at {} here, where checkpoint.h5 maps {} at {} of tensor {}", path, ds,
                             shape_str(shape), shape_str(start), shape_str(b.count), shape_str(b.start), tensor);
      }
      std::vector<float> buf;
      for (const char* st : kCheckpointStates)
        for (const std::string& tensor : f.children(std::string("/") + st))
          for (const std::string& k : f.children(fmt::format("/{}/{}", st, tensor))) {
            const std::string ds = fmt::format("/{}/{}/{}", st, tensor, k);
            const std::vector<int64_t> shape = f.shape(ds);
            const int64_t row = shape.size() == 2 ? shape[1] : 1, rows = shape[0];
            const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunkElems) / row);
            uLong crc = crc32(0L, Z_NULL, 0);
            for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
              const int64_t n = std::min(chunk_rows, rows - r0);
              buf.resize(size_t(n * row));
              if (shape.size() == 2) f.read_block(ds, {r0, 0}, {n, row}, buf.data());
              else f.read_block(ds, {r0}, {n}, buf.data());
              crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), buf.size() * sizeof(float));
            }
            if (int64_t(crc) != f.attr(ds, "crc32"))
              return fmt::format("{}: tensor {} ({} block {}): checksum mismatch", path, tensor, st, k);
          }
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string model_mismatch(const std::string& ckpt_dir, const ParamTable& model) {
  const std::string path = (fs::path(ckpt_dir) / "checkpoint.h5").string();
  const H5File f(path, H5File::Mode::Read);
  std::vector<std::string> names = f.children("/params");
  for (const ParamInfo& p : model.params()) {
    if (!f.exists("/params/" + p.name))
      return fmt::format("{}: no tensor {} (this model has it, shape {})", path, p.name, shape_str(p.stored_shape));
    const std::vector<int64_t> s = f.shape("/params/" + p.name);
    if (s != p.stored_shape)
      return fmt::format("{}: tensor {} has shape {}, this model's is {}", path, p.name, shape_str(s),
                         shape_str(p.stored_shape));
    names.erase(std::remove(names.begin(), names.end(), p.name), names.end());
  }
  if (!names.empty()) return fmt::format("{}: tensor {} is not in this model", path, names.front());
  return "";
}

void load_states(const std::string& ckpt_dir, ModelStates& store, const ParamTable& model, bool weights_only, int part,
                 int parts) {
  const H5File f((fs::path(ckpt_dir) / "checkpoint.h5").string(), H5File::Mode::Read);
  // the virtual datasets read whatever file has a rank file's name: each must be this save's
  const int64_t step = f.read_int64("/meta/step"), files = f.read_int64("/meta/rank_files");
  for (int64_t r = part; r < files; r += parts) {
    const std::string path = (fs::path(ckpt_dir) / rank_file_name(int(r))).string();
    if (!fs::exists(path)) user_error("{}: missing", path);
    if (std::string problem = rank_file_mismatch(f, H5File(path, H5File::Mode::Read), step, int(r)); !problem.empty())
      user_error("{}", problem);
  }
  const auto& runs = store.global_runs();
  std::vector<TensorShape> shapes;
  for (const auto& p : model.params()) shapes.push_back({p.stored_shape});
  const ModelStates::State states[] = {ModelStates::State::Master, ModelStates::State::AdamM,
                                      ModelStates::State::AdamV};
  std::vector<float> buf;
  for (int si = 0; si < (weights_only ? 1 : 3); ++si)
    for (const auto& run : runs) {
      // this run's blocks of the full tensor, read through the virtual dataset (the real part: a
      // padding tail keeps its zeros)
      const size_t stored = model.params()[size_t(run.param)].stored_numel;
      if (run.global_begin >= stored) continue;
      for (const Piece& p : make_pieces({{run.param, run.global_begin, std::min(run.n, stored - run.global_begin)}}, shapes)) {
        const std::string ds = fmt::format("/{}/{}", kCheckpointStates[si], model.params()[size_t(run.param)].name);
        const bool two_d = shapes[size_t(run.param)].dims.size() == 2;
        const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunkElems) / p.cols);
        size_t off = p.sources.front().off;
        for (int64_t r0 = 0; r0 < p.rows; r0 += chunk_rows) {
          const int64_t n = std::min(chunk_rows, p.rows - r0);
          buf.resize(size_t(n * p.cols));
          if (two_d) f.read_block(ds, {p.row0 + r0, p.col0}, {n, p.cols}, buf.data());
          else f.read_block(ds, {p.col0}, {p.cols}, buf.data());
          for (float v : buf)
            if (v != v) user_error("{}: {} has missing blocks (NaN where a rank file should provide data)", f.path(), ds);
          store.write_run(states[si], run, off, buf.size(), buf.data());
          off += buf.size();
        }
      }
    }
}

}  // namespace zt
