// Checkpoint directory files (see checkpoint_files.h).
#include "engine/checkpoint/checkpoint_files.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/checkpoint/h5_file.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt {

namespace fs = std::filesystem;

std::string checkpoint_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.h5", rank); }

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename().string();
    long long step = 0, job = 0;
    int used = 0;
    CheckpointEntry e;
    e.path = it->path().string();
    e.name = name;
    if (std::sscanf(name.c_str(), "step_%lld%n", &step, &used) == 1 && used == int(name.size())) {
      e.complete = true;
    } else if (std::sscanf(name.c_str(), "step_%lld.tmp-%lld%n", &step, &job, &used) == 2 && used == int(name.size())) {
      e.job_id = job;
    } else if (long long by = 0;  // an unfinished save set aside by an older ztrain: unfinished still
               std::sscanf(name.c_str(), "step_%lld.tmp-%lld.superseded-%lld%n", &step, &job, &by, &used) == 3 &&
               used == int(name.size())) {
      e.job_id = job;
    } else {
      continue;
    }
    e.step = step;
    for (auto f = fs::directory_iterator(it->path(), ec); !ec && f != fs::directory_iterator(); f.increment(ec))
      e.bytes += double(f->file_size(ec));
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.step != b.step ? a.step < b.step : a.complete < b.complete;
  });
  return out;
}

void write_latest(const std::string& dir, const std::string& name) {
  write_file_atomic((fs::path(dir) / "latest").string(), name + "\n", /*durable=*/true);
}

std::string read_latest(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "latest");
  std::string name;
  if (!(f >> name)) return "";
  return name;
}

std::string resolve_local_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::path(path).filename() == "checkpoint.h5" && fs::is_regular_file(path, ec))
    return fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
  if (fs::exists(fs::path(path) / "checkpoint.h5", ec)) return path;
  const std::string latest = read_latest(path);
  if (latest.empty())
    user_error("{}: not a checkpoint (no checkpoint.h5) nor a checkpoint directory (no latest)", path);
  return (fs::path(path) / latest).string();
}

namespace {
// The training state's scalars, in a fixed order: written under /meta, covered by /meta/crc32.
std::vector<std::pair<std::string, int64_t>> meta_ints(const TrainState& s) {
  return {{"format_version", kCheckpointFormat},
          {"step", s.step},
          {"adam_steps", s.adam_steps},
          {"scaler_clean_steps", s.scaler.clean},
          {"skipped_steps", s.scaler.skipped},
          {"data_next_sample", int64_t(s.data.next_sample)},
          {"data_seed", int64_t(s.data.seed)},
          {"data_fingerprint", int64_t(s.data.dataset_crc)},
          {"global_batch", s.data.global_batch},
          {"layout_world", s.world},
          {"layout_tensor", s.tensor},
          {"layout_data_parallel", s.data_parallel},
          {"layout_zero_stage", s.zero_stage}};
}

int64_t meta_crc(const TrainState& s) {
  std::string text;
  for (const auto& [k, v] : meta_ints(s)) text += fmt::format("{}={};", k, v);
  text += fmt::format("loss_scale={:a};spec={}", s.scaler.scale, s.spec_toml);
  if (!s.data.mixture.empty()) text += ";data_mixture=" + s.data.mixture;  // absent before mixtures
  if (!s.lora_base.empty()) text += fmt::format(";lora_base={}:{:016x}", s.lora_base, s.lora_base_fingerprint);
  if (s.probe.rows > 0) {  // absent before probes
    const uLong ids = crc32_z(crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(s.probe.inputs.data()),
                                      s.probe.inputs.size() * sizeof(int32_t)),
                              reinterpret_cast<const Bytef*>(s.probe.targets.data()),
                              s.probe.targets.size() * sizeof(int32_t));
    text += fmt::format(";probe={}x{}:{:a}:{}:{}:{}", s.probe.rows, s.probe.seq_len, s.probe.loss, s.probe.compute,
                        s.probe.computed_on, ids);
  }
  return int64_t(crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), text.size()));
}
}  // namespace

std::string rank_file_mismatch(const H5File& master, const H5File& f, int64_t step, int rank) {
  if (!master.has_attr("/", "job_id")) return "";  // written before rank files carried their save
  if (!f.has_attr("/", "job_id") || !f.has_attr("/", "step") || !f.has_attr("/", "rank"))
    return fmt::format("{}: not written by this checkpoint's save (it names no save)", f.path());
  const int64_t job = master.attr("/", "job_id"), its_job = f.attr("/", "job_id"), its_step = f.attr("/", "step");
  if (its_job != job || its_step != step)
    return fmt::format("{}: written by another save (job {}, step {}), not by this checkpoint's (job {}, step {}): "
                       "copied from another checkpoint?", f.path(), its_job, its_step, job, step);
  if (const int64_t its_rank = f.attr("/", "rank"); its_rank != rank)
    return fmt::format("{}: holds rank {}'s part, not rank {}'s: rank files swapped or renamed?", f.path(), its_rank,
                       rank);
  return "";
}

void write_master_file(const std::string& ckpt_dir, const std::vector<std::vector<RankBlock>>& blocks_of,
                       int64_t job_id, const ParamTable& model, const TrainState& state) {
  const int rank_files = int(blocks_of.size());
  // Every rank file's blocks, per (state, tensor).
  std::map<std::string, std::vector<H5File::VirtualBlock>> blocks;
  for (int r = 0; r < rank_files; ++r) {
    const std::string file = rank_file_name(r);
    for (const char* st : kCheckpointStates) {
      std::map<int, int> count;  // blocks per tensor so far
      for (const RankBlock& b : blocks_of[size_t(r)]) {
        const ParamInfo& p = model.params()[size_t(b.param)];
        const std::string ds = fmt::format("/{}/{}/{}", st, p.name, count[b.param]++);
        const bool two_d = p.stored_shape.size() == 2;
        blocks[fmt::format("/{}/{}", st, p.name)].push_back(
            two_d ? H5File::VirtualBlock{file, ds, {b.row0, b.col0}, {b.rows, b.cols}}
                  : H5File::VirtualBlock{file, ds, {b.col0}, {b.cols}});
      }
    }
  }
  H5File m((fs::path(ckpt_dir) / "checkpoint.h5").string(), H5File::Mode::Create);
  for (const char* st : kCheckpointStates)
    for (const ParamInfo& p : model.params()) {
      const std::string name = fmt::format("/{}/{}", st, p.name);
      m.write_virtual(name, p.stored_shape, blocks[name]);
    }
  for (const auto& [k, v] : meta_ints(state)) m.write("/meta/" + k, &v, {});
  m.write("/meta/loss_scale", &state.scaler.scale, {});
  m.write_string("/meta/spec", state.spec_toml);
  m.write_string("/meta/data_mixture", state.data.mixture);  // the sources' positions (JSON)
  if (!state.lora_base.empty()) {  // the frozen base the adapters were trained on
    m.write_string("/meta/lora_base", state.lora_base);
    m.write_string("/meta/lora_base_fingerprint", fmt::format("{:016x}", state.lora_base_fingerprint));
  }
  if (state.probe.rows > 0) {
    const std::vector<int64_t> shape{state.probe.rows, state.probe.seq_len};
    m.write("/meta/probe/inputs", state.probe.inputs.data(), shape);
    m.write("/meta/probe/targets", state.probe.targets.data(), shape);
    m.write("/meta/probe/loss", &state.probe.loss, {});
    m.write_string("/meta/probe/compute", state.probe.compute);
    m.write_string("/meta/probe/computed_on", state.probe.computed_on);
  }
  const int64_t crc = meta_crc(state), files = rank_files;
  m.write("/meta/rank_files", &files, {});
  m.write("/meta/crc32", &crc, {});
  m.set_attr("/", "job_id", job_id);
  m.close();
  fsync_path((fs::path(ckpt_dir) / "checkpoint.h5").string());
}

TrainState read_train_state(const std::string& ckpt_dir) {
  const std::string path = (fs::path(ckpt_dir) / "checkpoint.h5").string();
  const H5File f(path, H5File::Mode::Read);
  if (!f.exists("/meta/format_version")) user_error("{}: not a ztrain checkpoint (no /meta)", path);
  const int64_t version = f.read_int64("/meta/format_version");
  if (version != kCheckpointFormat)
    user_error("{}: checkpoint format {} (this ztrain reads format {})", path, version, kCheckpointFormat);
  TrainState s;
  s.step = f.read_int64("/meta/step");
  s.adam_steps = f.read_int64("/meta/adam_steps");
  s.scaler.clean = f.read_int64("/meta/scaler_clean_steps");
  s.scaler.skipped = f.read_int64("/meta/skipped_steps");
  s.scaler.scale = f.read_double("/meta/loss_scale");
  s.data.next_sample = uint64_t(f.read_int64("/meta/data_next_sample"));
  s.data.seed = uint64_t(f.read_int64("/meta/data_seed"));
  s.data.dataset_crc = uint64_t(f.read_int64("/meta/data_fingerprint"));
  s.data.global_batch = f.read_int64("/meta/global_batch");
  s.world = f.read_int64("/meta/layout_world");
  s.tensor = f.read_int64("/meta/layout_tensor");
  s.data_parallel = f.read_int64("/meta/layout_data_parallel");
  s.zero_stage = f.read_int64("/meta/layout_zero_stage");
  s.spec_toml = f.read_string("/meta/spec");
  if (f.exists("/meta/data_mixture")) s.data.mixture = f.read_string("/meta/data_mixture");
  if (f.exists("/meta/lora_base")) {
    s.lora_base = f.read_string("/meta/lora_base");
    s.lora_base_fingerprint = std::stoull(f.read_string("/meta/lora_base_fingerprint"), nullptr, 16);
  }
  if (f.exists("/meta/probe/loss")) {
    const std::vector<int64_t> shape = f.shape("/meta/probe/inputs");
    if (shape.size() != 2 || f.shape("/meta/probe/targets") != shape || shape[0] < 1 || shape[0] > 64 ||
        shape[1] < 1 || shape[1] > (int64_t(1) << 24))
      user_error("{}: /meta/probe: inputs and targets are not two (rows, seq_len) arrays of 1-64 rows", path);
    s.probe.rows = shape[0], s.probe.seq_len = shape[1];
    s.probe.inputs = f.read_int32s("/meta/probe/inputs");
    s.probe.targets = f.read_int32s("/meta/probe/targets");
    s.probe.loss = f.read_double("/meta/probe/loss");
    s.probe.compute = f.read_string("/meta/probe/compute");
    s.probe.computed_on = f.read_string("/meta/probe/computed_on");
  }
  if (meta_crc(s) != f.read_int64("/meta/crc32"))
    user_error("{}: /meta: checksum mismatch (the training state is damaged)", path);
  return s;
}

}  // namespace zt
