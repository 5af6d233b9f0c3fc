// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {string: string}, NAME: {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...],
// "data_offsets": [begin, end]}, ...}, then the tensors' bytes, offsets relative to their start.
// Large models are split into several files with model.safetensors.index.json naming the file of
// each tensor. The reader checks everything before it trusts an offset: a malformed header,
// offsets outside the file, overlapping tensors, a size that does not match dtype x shape are
// one UserError naming the file and the tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace zt {

struct SafeTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the file's data section
  std::string file;             // the file that holds it
  uint64_t data_start = 0;      // where the data section starts in that file
  uint64_t numel() const;
};

// The tensors described by a header (the JSON text) of a file whose data section holds
// `data_size` bytes; `file` names it in errors. Rejects (UserError) anything malformed, a dtype
// other than F32/BF16/F16, offsets out of range or overlapping, a size that is not the shape's.
std::vector<SafeTensor> parse_safetensors_header(const std::string& header, uint64_t data_size,
                                                 const std::string& file);
// The same from a whole file's bytes (the fuzz target's entry).
std::vector<SafeTensor> parse_safetensors_bytes(const uint8_t* data, size_t size, const std::string& file);

// The weights of a Hugging Face model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists (`stem`: PEFT's adapter_model.safetensors).
class SafetensorsDir {
 public:
  explicit SafetensorsDir(const std::string& dir, const std::string& stem = "model");
  const std::string& dir() const { return dir_; }
  const std::map<std::string, SafeTensor>& tensors() const { return tensors_; }
  const SafeTensor* find(const std::string& name) const;
  // out (n floats) <- elements [first, first + n) of the tensor, converted to fp32.
  void read(const SafeTensor& t, uint64_t first, uint64_t n, float* out) const;

 private:
  void add_file(const std::string& path);
  std::string dir_;
  std::map<std::string, SafeTensor> tensors_;
};

// One tensor to write: its name, shape, and a function that fills n fp32 values from element
// `first` on (the writer converts them to the file's dtype, in blocks).
struct TensorSource {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(uint64_t first, uint64_t n, float* out)> read;
};

// A name write_safetensors writes with `stem` (model.safetensors, model-0000k-of-0000n.safetensors,
// the index; PEFT's adapter_model.safetensors).
bool weights_file_name(const std::string& name, const std::string& stem = "model");

// Writes `tensors` in `dtype` (F32, BF16 or F16) to DIR/model.safetensors, or, when they exceed
// max_file_bytes, to DIR/model-0000k-of-0000n.safetensors with model.safetensors.index.json,
// each file with metadata {"format": "pt"} (Hugging Face's loaders require it). Each file is
// written beside its name and renamed into place when complete. Returns the files written.
// `stem` names the files (PEFT's adapters: "adapter_model").
std::vector<std::string> write_safetensors(const std::string& dir, const std::vector<TensorSource>& tensors,
                                           DType dtype, uint64_t max_file_bytes, const std::string& stem = "model");

const char* safetensors_dtype_name(DType t);  // "F32", "BF16", "F16"

}  // namespace zt
