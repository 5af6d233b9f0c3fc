// H5File over the HDF5 C API (see h5_file.h).
#include "engine/checkpoint/h5_file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>

#include "engine/core/status.h"

namespace zt {

namespace {

// Closes an HDF5 identifier when it goes out of scope.
struct Id {
  hid_t id;
  herr_t (*close)(hid_t);
  Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Id() {
    if (id >= 0) close(id);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  operator hid_t() const { return id; }
  bool ok() const { return id >= 0; }
};

hid_t simple_space(const std::vector<int64_t>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
}

// Selects [start, start + count) of `space` (count may have fewer dimensions than the space when
// the caller passes a 1-D block of a 1-D dataset; both must agree in rank here).
bool select_block(hid_t space, const std::vector<int64_t>& start, const std::vector<int64_t>& count) {
  std::vector<hsize_t> s(start.begin(), start.end()), c(count.begin(), count.end());
  return H5Sselect_hyperslab(space, H5S_SELECT_SET, s.data(), nullptr, c.data(), nullptr) >= 0;
}

// The system's reason for HDF5's last failure, from its error stack (the file driver records
// "errno = 28, error message = 'No space left on device'"), as ": <reason>", or "".
std::string system_reason() {
  std::string innermost;
  auto walk = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    if (out->empty() && e->desc) *out = e->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &innermost);  // upward: the most specific first
  const std::string key = "error message = '";
  const size_t at = innermost.find(key);
  if (at == std::string::npos) return innermost.empty() ? "" : ": " + innermost;
  const size_t end = innermost.find('\'', at + key.size());
  return ": " + innermost.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
}

}  // namespace

H5File::H5File(const std::string& path, Mode mode)
    : path_(path), display_(path), exceptions_at_open_(std::uncaught_exceptions()) {
  // No HDF5 clean-up at exit: after a failed H5Fclose (a full disk) the library keeps a half-closed
  // file that its exit handler dereferences (SIGSEGV in H5F__close_cb). Every file is closed by
  // its H5File, so nothing is left for that handler to do. Must precede the first HDF5 call.
  static const bool no_atexit = (H5dont_atexit(), true);
  (void)no_atexit;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, not printed by HDF5
  if (mode == Mode::Create) {
    file_ = H5Fcreate((path + ".tmp").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file_ < 0) throw RuntimeFailure(fmt::format("{}: cannot create HDF5 file{}", path + ".tmp", system_reason()));
  } else if (mode == Mode::Update) {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file_ < 0) throw RuntimeFailure(fmt::format("{}: cannot open for update", path));
    path_.clear();
  } else {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) user_error("{}: cannot open as an HDF5 file (missing, truncated or not HDF5)", path);
    path_.clear();  // nothing to rename on close
  }
}

H5File::~H5File() {
  if (std::uncaught_exceptions() > exceptions_at_open_ && file_ >= 0) {
    // destroyed by an error while being written: the file is incomplete, PATH.tmp goes
    H5Fclose(hid_t(file_));
    file_ = -1;
    if (!path_.empty()) std::remove((path_ + ".tmp").c_str());
    return;
  }
  try {
    close();
  } catch (...) {
  }
}

void H5File::close() {
  if (file_ < 0) return;
  const herr_t rc = H5Fclose(hid_t(file_));
  file_ = -1;
  if (rc < 0) {
    const std::string why = system_reason();
    if (!path_.empty()) std::remove((path_ + ".tmp").c_str());
    throw RuntimeFailure(fmt::format("{}: cannot write{}", display_, why.empty() ? " (HDF5 close failed)" : why));
  }
  if (!path_.empty() && std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove((path_ + ".tmp").c_str());
    throw RuntimeFailure(fmt::format("{}: cannot write: {}", display_, std::strerror(err)));
  }
}

void H5File::ensure_groups(const std::string& name) {
  for (size_t pos = name.find('/', 1); pos != std::string::npos; pos = name.find('/', pos + 1)) {
    const std::string g = name.substr(0, pos);
    if (H5Lexists(hid_t(file_), g.c_str(), H5P_DEFAULT) > 0) continue;
    const hid_t id = H5Gcreate2(hid_t(file_), g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (id < 0) throw RuntimeFailure(fmt::format("{}: cannot create group {}", display_, g));
    H5Gclose(id);
  }
}

namespace {
void write_dataset(int64_t file, const std::string& path, const std::string& name, hid_t type,
                   const void* data, const std::vector<int64_t>& shape) {
  Id space(simple_space(shape), H5Sclose);
  Id ds(H5Dcreate2(hid_t(file), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!ds.ok() || H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw RuntimeFailure(fmt::format("{}: cannot write dataset {}{}", path, name, system_reason()));
}
}  // namespace

void H5File::write(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, display_, name, H5T_NATIVE_FLOAT, data, shape);
}

void H5File::write(const std::string& name, const int32_t* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, display_, name, H5T_NATIVE_INT32, data, shape);
}

void H5File::write(const std::string& name, const int64_t* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, display_, name, H5T_NATIVE_INT64, data, shape);
}

void H5File::write(const std::string& name, const double* data, const std::vector<int64_t>& shape) {
  ensure_groups(name);
  write_dataset(file_, display_, name, H5T_NATIVE_DOUBLE, data, shape);
}

void H5File::write_string(const std::string& name, const std::string& text) {
  ensure_groups(name);
  // A fixed-length UTF-8 string: h5py reads it as bytes (`.decode()`).
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, text.size()));
  H5Tset_cset(type, H5T_CSET_UTF8);
  std::string padded = text.empty() ? std::string(1, '\0') : text;
  write_dataset(file_, display_, name, type, padded.data(), {});
}

void H5File::create_floats(const std::string& name, const std::vector<int64_t>& shape) {
  ZT_CHECK(shape.size() == 1 || shape.size() == 2, "{}: {}-D dataset", name, shape.size());
  ensure_groups(name);
  Id space(simple_space(shape), H5Sclose);
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);  // the bytes have their place now (offset())
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);     // and are not written twice
  Id ds(H5Dcreate2(hid_t(file_), name.c_str(), H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw RuntimeFailure(fmt::format("{}: cannot create dataset {}{}", display_, name, system_reason()));
}

int64_t H5File::offset(const std::string& name) const {
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  const haddr_t at = ds.ok() ? H5Dget_offset(ds) : HADDR_UNDEF;
  if (at == HADDR_UNDEF) throw RuntimeFailure(fmt::format("{}: no storage for dataset {}", display_, name));
  return int64_t(at);
}

void H5File::write_rows(const std::string& name, int64_t row0, int64_t rows, const float* data) {
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw RuntimeFailure(fmt::format("{}: no dataset {}", display_, name));
  Id space(H5Dget_space(ds), H5Sclose);
  const std::vector<int64_t> dims = shape(name);
  std::vector<int64_t> start{row0}, count{rows};
  if (dims.size() == 2) start.push_back(0), count.push_back(dims[1]);
  Id mem(simple_space(count), H5Sclose);
  if (!select_block(space, start, count) || H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, data) < 0)
    throw RuntimeFailure(fmt::format("{}: cannot write rows {}..{} of {}", display_, row0, row0 + rows, name));
}

void H5File::set_attr(const std::string& name, const std::string& attr, int64_t value) {
  Id obj(H5Oopen(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Oclose);
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const bool exists = obj.ok() && H5Aexists(obj, attr.c_str()) > 0;
  Id a(!obj.ok() ? -1
       : exists  ? H5Aopen(obj, attr.c_str(), H5P_DEFAULT)
                 : H5Acreate2(obj, attr.c_str(), H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT),
       H5Aclose);
  if (!a.ok() || H5Awrite(a, H5T_NATIVE_INT64, &value) < 0)
    throw RuntimeFailure(fmt::format("{}: cannot write attribute {} of {}{}", display_, attr, name, system_reason()));
}

void H5File::write_virtual(const std::string& name, const std::vector<int64_t>& shape,
                           const std::vector<VirtualBlock>& blocks) {
  ensure_groups(name);
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const float fill = std::nanf("");  // a block no file provides reads as NaN, never as zeros
  H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill);
  Id vspace(simple_space(shape), H5Sclose);
  for (const VirtualBlock& b : blocks) {
    Id src(simple_space(b.count), H5Sclose);
    if (!select_block(vspace, b.start, b.count) ||
        H5Pset_virtual(dcpl, vspace, b.src_file.c_str(), b.src_dataset.c_str(), src) < 0)
      throw RuntimeFailure(fmt::format("{}: cannot map {}:{} into {}", display_, b.src_file, b.src_dataset, name));
  }
  H5Sselect_all(vspace);
  Id ds(H5Dcreate2(hid_t(file_), name.c_str(), H5T_NATIVE_FLOAT, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw RuntimeFailure(fmt::format("{}: cannot create virtual dataset {}", display_, name));
}

bool H5File::exists(const std::string& name) const {
  // every component must exist for H5Lexists on the full path to be well-defined
  for (size_t pos = name.find('/', 1);; pos = name.find('/', pos + 1)) {
    const std::string part = pos == std::string::npos ? name : name.substr(0, pos);
    if (H5Lexists(hid_t(file_), part.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

std::vector<int64_t> H5File::shape(const std::string& name) const {
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) user_error("{}: no dataset {}", display_, name);
  Id space(H5Dget_space(ds), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::vector<std::string> H5File::children(const std::string& group) const {
  std::vector<std::string> out;
  Id g(H5Gopen2(hid_t(file_), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.ok()) return out;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  // names in alphabetical order
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &out) < 0)
    user_error("{}: cannot list group {}", display_, group);
  return out;
}

void H5File::read_block(const std::string& name, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& count, float* out) const {
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) user_error("{}: no dataset {}", display_, name);
  Id space(H5Dget_space(ds), H5Sclose);
  Id mem(simple_space(count), H5Sclose);
  if (!select_block(space, start, count) || H5Dread(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out) < 0)
    user_error("{}: cannot read {} (damaged file, or a rank file of the checkpoint is missing)", display_, name);
}

namespace {
// A whole dataset converted to T by HDF5 (the block readers' path is read_block).
template <typename T>
std::vector<T> read_all(const H5File& f, int64_t file, const std::string& display, const std::string& name, hid_t type) {
  const std::vector<int64_t> dims = f.shape(name);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<T> out(size_t(std::max<int64_t>(n, 0)));
  Id ds(H5Dopen2(hid_t(file), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (n > 0 && H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    user_error("{}: cannot read {}", display, name);
  return out;
}
}  // namespace

std::vector<float> H5File::read_floats(const std::string& name) const {
  return read_all<float>(*this, file_, display_, name, H5T_NATIVE_FLOAT);
}

std::vector<int32_t> H5File::read_int32s(const std::string& name) const {
  return read_all<int32_t>(*this, file_, display_, name, H5T_NATIVE_INT32);
}

namespace {
template <typename T>
T read_scalar(int64_t file, const std::string& path, const std::string& name, hid_t type) {
  Id ds(H5Dopen2(hid_t(file), name.c_str(), H5P_DEFAULT), H5Dclose);
  T v{};
  if (!ds.ok() || H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
    user_error("{}: cannot read {}", path, name);
  return v;
}
}  // namespace

double H5File::read_double(const std::string& name) const {
  return read_scalar<double>(file_, display_, name, H5T_NATIVE_DOUBLE);
}

int64_t H5File::read_int64(const std::string& name) const {
  return read_scalar<int64_t>(file_, display_, name, H5T_NATIVE_INT64);
}

std::string H5File::read_string(const std::string& name) const {
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) user_error("{}: no dataset {}", display_, name);
  Id type(H5Dget_type(ds), H5Tclose);
  const size_t n = H5Tget_size(type);
  std::string s(n, '\0');
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0 ||
      H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()) < 0)
    user_error("{}: cannot read string {}", display_, name);
  s.resize(std::strlen(s.c_str()));
  return s;
}

int64_t H5File::attr(const std::string& name, const std::string& attr) const {
  Id a(H5Aopen_by_name(hid_t(file_), name.c_str(), attr.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  int64_t v = 0;
  if (!a.ok() || H5Aread(a, H5T_NATIVE_INT64, &v) < 0)
    user_error("{}: no attribute {} on {}", display_, attr, name);
  return v;
}

bool H5File::has_attr(const std::string& name, const std::string& attr) const {
  return H5Aexists_by_name(hid_t(file_), name.c_str(), attr.c_str(), H5P_DEFAULT) > 0;
}

std::vector<H5File::VirtualBlock> H5File::virtual_blocks(const std::string& name) const {
  std::vector<VirtualBlock> out;
  Id ds(H5Dopen2(hid_t(file_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) user_error("{}: no dataset {}", display_, name);
  Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl.ok() || H5Pget_layout(dcpl) != H5D_VIRTUAL) return out;
  size_t n = 0;
  if (H5Pget_virtual_count(dcpl, &n) < 0) user_error("{}: cannot read the mapping of {}", display_, name);
  auto text = [&](ssize_t (*get)(hid_t, size_t, char*, size_t), size_t i) {
    const ssize_t len = get(dcpl, i, nullptr, 0);
    std::string v(size_t(std::max<ssize_t>(len, 0)) + 1, '\0');
    if (len < 0 || get(dcpl, i, v.data(), v.size()) < 0) user_error("{}: cannot read the mapping of {}", display_, name);
    v.resize(size_t(len));
    return v;
  };
  for (size_t i = 0; i < n; ++i) {
    VirtualBlock b{text(H5Pget_virtual_filename, i), text(H5Pget_virtual_dsetname, i), {}, {}};
    Id vspace(H5Pget_virtual_vspace(dcpl, i), H5Sclose);
    const int rank = vspace.ok() ? H5Sget_simple_extent_ndims(vspace) : -1;
    std::vector<hsize_t> lo(size_t(std::max(rank, 0))), hi(lo.size());
    if (rank < 0 || H5Sget_select_bounds(vspace, lo.data(), hi.data()) < 0)
      user_error("{}: cannot read the mapping of {}", display_, name);
    for (size_t d = 0; d < lo.size(); ++d) b.start.push_back(int64_t(lo[d])), b.count.push_back(int64_t(hi[d] - lo[d] + 1));
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace zt
