// A small RAII wrapper over the HDF5 C API: write and read float / int32 / int64 / double / string
// datasets by path ("/params/transformer.wte.weight"), creating intermediate groups as needed;
// blocks (hyperslabs) of 1-D and 2-D datasets; integer attributes; and virtual datasets (a
// dataset of the full shape whose blocks live in datasets of other files: checkpoints).
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/atomic_file.h"  // fsync_path
#include <vector>

namespace zt {

class H5File {
 public:
  // Create writes PATH.tmp and renames it to PATH on close(), so a crash never leaves a
  // half-written file under the final name. Read opens PATH read-only (UserError if it is not an
  // HDF5 file).
  enum class Mode { Create, Read, Update };  // Update: an existing file, read-write, in place
  H5File(const std::string& path, Mode mode);
  ~H5File();
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  void write(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  void write(const std::string& name, const int32_t* data, const std::vector<int64_t>& shape);
  void write(const std::string& name, const int64_t* data, const std::vector<int64_t>& shape);
  void write(const std::string& name, const double* data, const std::vector<int64_t>& shape);
  void write_string(const std::string& name, const std::string& text);

  // A float dataset of `shape` (1-D or 2-D) written block by block: rows [row0, row0 + rows) of
  // all its columns (1-D: elements [row0, row0 + rows)).
  void create_floats(const std::string& name, const std::vector<int64_t>& shape);
  void write_rows(const std::string& name, int64_t row0, int64_t rows, const float* data);
  // Creates or overwrites an integer attribute.
  void set_attr(const std::string& name, const std::string& attr, int64_t value);
  // Where a dataset made by create_floats (contiguous, allocated at creation) starts in the file:
  // its raw float bytes may be written there directly (pwrite), as fast as the disk takes them.
  int64_t offset(const std::string& name) const;

  // One block of a virtual dataset: `src_dataset` of `src_file` (its whole extent, a path relative
  // to this file's directory) appears at [start, start + count) of the virtual dataset.
  struct VirtualBlock {
    std::string src_file, src_dataset;
    std::vector<int64_t> start, count;
  };
  void write_virtual(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<VirtualBlock>& blocks);

  // Reading. The block reads take start and count per dimension (1-D or 2-D) into `out`.
  bool exists(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  std::vector<std::string> children(const std::string& group) const;  // names, alphabetical
  void read_block(const std::string& name, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& count, float* out) const;
  std::vector<float> read_floats(const std::string& name) const;
  std::vector<int32_t> read_int32s(const std::string& name) const;
  double read_double(const std::string& name) const;  // a scalar
  int64_t read_int64(const std::string& name) const;  // a scalar
  std::string read_string(const std::string& name) const;
  int64_t attr(const std::string& name, const std::string& attr) const;
  bool has_attr(const std::string& name, const std::string& attr) const;
  // The blocks a virtual dataset takes from other files, in mapping order (empty when `name` is
  // not virtual).
  std::vector<VirtualBlock> virtual_blocks(const std::string& name) const;

  // Writes everything to disk, renames PATH.tmp to PATH (Create) and closes; the destructor does
  // the same, silently, unless an exception is unwinding through it: then PATH.tmp is removed. Durable files also need fsync_path() after this.
  void close();
  const std::string& path() const { return display_; }

 private:
  void ensure_groups(const std::string& name);
  int64_t file_ = -1;  // hid_t
  std::string path_;     // the final name (Create), empty when nothing is to be renamed
  std::string display_;  // for messages
  int exceptions_at_open_;  // std::uncaught_exceptions() then: more at destruction = an error
};

}  // namespace zt
