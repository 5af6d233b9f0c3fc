// H5File over the HDF5 C API. Files are written to PATH.tmp and renamed on close(), so a crash
// never leaves a half-written file under the final name.
#include "engine/checkpoint/h5_file.h"

#include <hdf5.h>

#include <filesystem>

#include "engine/core/status.h"

namespace zt {

H5File::H5File(const std::string& path, Mode mode) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, not printed by HDF5
  if (mode == Mode::Create) {
    file_ = H5Fcreate((path + ".tmp").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file_ < 0) throw RuntimeFailure(fmt::format("{}: cannot create HDF5 file", path + ".tmp"));
  } else {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) user_error("{}: cannot open as an HDF5 file", path);
    path_.clear();  // nothing to rename on close
  }
}

H5File::~H5File() {
  try {
    close();
  } catch (...) {
  }
}

void H5File::close() {
  if (file_ < 0) return;
  const herr_t rc = H5Fclose(hid_t(file_));
  file_ = -1;
  if (rc < 0) throw RuntimeFailure(fmt::format("{}: HDF5 close failed", path_));
  if (!path_.empty()) std::filesystem::rename(path_ + ".tmp", path_);
}

void H5File::ensure_groups(const std::string& name) {
  for (size_t pos = name.find('/', 1); pos != std::string::npos; pos = name.find('/', pos + 1)) {
    const std::string g = name.substr(0, pos);
    if (H5Lexists(hid_t(file_), g.c_str(), H5P_DEFAULT) > 0) continue;
    const hid_t id = H5Gcreate2(hid_t(file_), g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (id < 0) throw RuntimeFailure(fmt::format("{}: cannot create group {}", path_, g));
    H5Gclose(id);
  }
}

namespace {
void write_dataset(int64_t file, const std::string& path, const std::string& name, hid_t type,
                   const void* data, const std::vector<int64_t>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(hid_t(file), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = ds >= 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (!ok) throw RuntimeFailure(fmt::format("{}: cannot write dataset {}", path, name));
}
}  // namespace

void H5File::write(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, path_, name, H5T_NATIVE_FLOAT, data, shape);
}

void H5File::write(const std::string& name, const int32_t* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, path_, name, H5T_NATIVE_INT32, data, shape);
}

void H5File::write(const std::string& name, const double* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, path_, name, H5T_NATIVE_DOUBLE, data, shape);
}

}  // namespace zt
