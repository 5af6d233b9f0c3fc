// Local directories (and file:// URIs) as an ObjectStore.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/store/object_store.h"
#include "engine/core/status.h"

namespace zt::data {

namespace {

class LocalStore final : public ObjectStore {
 public:
  explicit LocalStore(std::string dir) : dir_(std::move(dir)) {}
  std::string describe(const std::string& name) const override { return local_path(name); }
  bool is_local() const override { return true; }
  std::string local_path(const std::string& name) const override {
    return (std::filesystem::path(dir_) / name).string();
  }
  std::string get(const std::string& name) override {
    std::ifstream f(local_path(name), std::ios::binary);
    if (!f) user_error("{}: cannot open", local_path(name));
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  uint64_t download(const std::string& name, const std::string& path) override {
    std::filesystem::copy_file(local_path(name), path, std::filesystem::copy_options::overwrite_existing);
    return std::filesystem::file_size(path);
  }
  int64_t size(const std::string& name) override {
    std::error_code ec;
    const auto n = std::filesystem::file_size(local_path(name), ec);
    if (ec) user_error("{}: cannot open: {}", local_path(name), ec.message());
    return int64_t(n);
  }
  void put(const std::string& name, const std::string& path) override {
    namespace fs = std::filesystem;
    const fs::path dst(local_path(name)), tmp(local_path(name) + ".part");
    fs::create_directories(dst.parent_path());
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, dst);
  }
  std::vector<std::string> list(const std::string& prefix) override {
    namespace fs = std::filesystem;
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string rel = fs::relative(it->path(), dir_).generic_string();
      if (rel.rfind(prefix, 0) == 0) out.push_back(rel);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void remove(const std::string& name) override {
    std::error_code ec;
    std::filesystem::remove(local_path(name), ec);
  }

 private:
  std::string dir_;
};

}  // namespace

std::unique_ptr<ObjectStore> make_local_store(const std::string& dir) { return std::make_unique<LocalStore>(dir); }

}  // namespace zt::data
