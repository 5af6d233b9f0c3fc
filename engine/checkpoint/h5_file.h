// A small RAII wrapper over the HDF5 C API: create a file, write float / int32 / double datasets
// by path ("/params/transformer.wte.weight"), creating intermediate groups as needed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

class H5File {
 public:
  enum class Mode { Create, Read };
  H5File(const std::string& path, Mode mode);
  ~H5File();
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  void write(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  void write(const std::string& name, const int32_t* data, const std::vector<int64_t>& shape);
  void write(const std::string& name, const double* data, const std::vector<int64_t>& shape);
  // Writes everything to disk and closes; the destructor does the same, silently.
  void close();

 private:
  void ensure_groups(const std::string& name);
  int64_t file_ = -1;  // hid_t
  std::string path_;
};

}  // namespace zt
