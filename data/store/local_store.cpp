// Local directories (and file:// URIs) as an ObjectStore.
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

 private:
  std::string dir_;
};

}  // namespace

std::unique_ptr<ObjectStore> make_local_store(const std::string& dir) { return std::make_unique<LocalStore>(dir); }

}  // namespace zt::data
