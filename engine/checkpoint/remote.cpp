// Checkpoints in object storage (see remote.h).
#include "engine/checkpoint/remote.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "engine/core/status.h"

namespace zt {

namespace fs = std::filesystem;

bool is_remote_dir(const std::string& dir) { return dir.rfind("s3://", 0) == 0; }

std::string local_checkpoint_root(const RunSpec& spec) {
  const auto& k = spec.checkpoint;
  if (!k.dir.empty() && !is_remote_dir(k.dir)) return k.dir;
  return !k.local_dir.empty() ? k.local_dir : (fs::path(spec.run.out_dir) / "checkpoints").string();
}

std::unique_ptr<data::ObjectStore> open_checkpoint_store(const RunSpec& spec, data::StoreOptions data,
                                                         const std::string& uri) {
  data.part_bytes = uint64_t(spec.checkpoint.upload_part_mb) << 20;
  return data::open_store(uri, data);
}

namespace {
// step name -> the object names under it
std::map<std::string, std::vector<std::string>> remote_steps(data::ObjectStore& store) {
  std::map<std::string, std::vector<std::string>> out;
  for (const std::string& key : store.list("step_")) {
    const size_t slash = key.find('/');
    if (slash == std::string::npos) continue;
    out[key.substr(0, slash)].push_back(key.substr(slash + 1));
  }
  return out;
}
bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

std::vector<std::string> remote_checkpoints(data::ObjectStore& store) {
  std::vector<std::string> out;
  for (const auto& [name, files] : remote_steps(store))
    if (has(files, "checkpoint.h5")) out.push_back(name);
  return out;  // map order: step_%08d sorts by step
}

std::string download_checkpoint(data::ObjectStore& store, const std::string& name, const std::string& local_root,
                                bool* fetched) {
  const fs::path dst = fs::path(local_root) / name;
  if (fetched) *fetched = false;
  const auto steps = remote_steps(store);
  const auto it = steps.find(name);
  if (it == steps.end() || !has(it->second, "checkpoint.h5")) {
    if (fs::exists(dst / "checkpoint.h5")) return dst.string();  // saved here, not (yet) in the store
    user_error("{}: no complete checkpoint there", store.describe(name));
  }
  // The local copy is the cache. On several machines each holds the files its own ranks wrote
  // (and rank 0's, checkpoint.h5): the others' come from the store, one file at a time.
  if (fs::exists(dst / "checkpoint.h5")) {
    for (const std::string& file : it->second)
      if (!fs::exists(dst / file)) {
        const fs::path part = dst / fmt::format("{}.download-{}", file, ::getpid());
        try {
          store.download(name + "/" + file, part.string());
        } catch (...) {
          std::error_code ec;
          fs::remove(part, ec);
          throw;
        }
        fs::rename(part, dst / file);
        if (fetched) *fetched = true;
      }
    return dst.string();
  }
  if (fetched) *fetched = true;
  const fs::path tmp = fs::path(local_root) / fmt::format("{}.download-{}", name, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const std::string& file : it->second) store.download(name + "/" + file, (tmp / file).string());
  std::error_code ec;
  fs::remove_all(dst, ec);  // an incomplete local copy
  fs::rename(tmp, dst);
  return dst.string();
}

void prune_remote(data::ObjectStore& store, int64_t keep_last) {
  const auto steps = remote_steps(store);
  std::vector<std::string> complete;
  for (const auto& [name, files] : steps)
    if (has(files, "checkpoint.h5")) complete.push_back(name);
  if (complete.empty()) return;
  std::set<std::string> drop;
  if (keep_last > 0 && int64_t(complete.size()) > keep_last)
    drop.insert(complete.begin(), complete.end() - keep_last);
  for (const auto& [name, files] : steps)
    if (!has(files, "checkpoint.h5") && name < complete.back()) drop.insert(name);
  for (const std::string& name : drop) {
    // checkpoint.h5 goes first: the checkpoint stops counting as complete before it loses files
    const auto& files = steps.at(name);
    if (has(files, "checkpoint.h5")) store.remove(name + "/checkpoint.h5");
    for (const std::string& file : files)
      if (file != "checkpoint.h5") store.remove(name + "/" + file);
  }
}

}  // namespace zt
