// The NVMe tier's I/O primitives on their own: an NvmeFile holds what was written (aligned blocks
// and any ranges through the bounce buffer), leaves no name behind, and AsyncIo's requests in
// flight (io_uring or threads) give the same bytes as the synchronous calls; the start-up checks
// of nvme_path refuse with one message.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/offload/async_io.h"
#include "engine/offload/nvme_file.h"

using namespace zt;

namespace {
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<float, AlignedFree> aligned_floats(size_t n) {
  return std::unique_ptr<float, AlignedFree>(static_cast<float*>(std::aligned_alloc(NvmeFile::kAlign, n * 4)));
}
std::string temp_dir(const char* name) {
  const auto d = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(d);
  return d.string();
}
}  // namespace

TEST_CASE("an NVMe file holds aligned blocks and any ranges, and leaves no name behind", "[offload][nvme]") {
  const std::string dir = temp_dir("zt_nvme_unit");
  const size_t n = 3 * NvmeFile::kAlign / 4;  // three blocks of floats
  {
    NvmeFile f(dir, "states", n * 4);
    REQUIRE(std::filesystem::is_empty(dir));  // unlinked at once: the space goes with the process
    auto out = aligned_floats(n), in = aligned_floats(n);
    std::iota(out.get(), out.get() + n, 0.5f);
    f.write(0, out.get(), n * 4);
    f.read(0, in.get(), n * 4);
    REQUIRE(std::equal(out.get(), out.get() + n, in.get()));
    // an unaligned range (a checkpoint's run) through the bounce buffer, read back both ways
    const std::vector<float> run = {7, 8, 9, 10, 11};
    f.write_any(4 * 1001, run.data(), run.size() * 4);
    std::vector<float> back(run.size());
    f.read_any(4 * 1001, back.data(), back.size() * 4);
    REQUIRE(back == run);
    f.read(0, in.get(), n * 4);
    REQUIRE(in.get()[1000] == 1000.5f);  // the neighbours of the run are untouched
    REQUIRE(in.get()[1001] == 7.0f);
    REQUIRE(in.get()[1006] == 1006.5f);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("requests in flight give the bytes the synchronous calls do", "[offload][nvme]") {
  const std::string dir = temp_dir("zt_nvme_async");
  const size_t block = NvmeFile::kAlign / 4, blocks = 6;
  {
    NvmeFile f(dir, "states", blocks * block * 4);
    AsyncIo io(3);
    std::vector<std::unique_ptr<float, AlignedFree>> bufs;
    std::vector<AsyncIo::Ticket> writes;
    for (size_t b = 0; b < blocks; ++b) {
      bufs.push_back(aligned_floats(block));
      std::fill(bufs.back().get(), bufs.back().get() + block, float(b + 1));
      writes.push_back(io.write(f, b * block * 4, bufs.back().get(), block * 4));
    }
    for (AsyncIo::Ticket t : writes) io.wait(t);
    auto in = aligned_floats(blocks * block);
    f.read(0, in.get(), blocks * block * 4);
    for (size_t b = 0; b < blocks; ++b) REQUIRE(in.get()[b * block + 7] == float(b + 1));
    // and reads in flight see what the file holds
    std::vector<AsyncIo::Ticket> reads;
    for (size_t b = 0; b < blocks; ++b) reads.push_back(io.read(f, b * block * 4, bufs[b].get(), block * 4));
    for (size_t b = 0; b < blocks; ++b) {
      io.wait(reads[b]);
      REQUIRE(bufs[b].get()[block - 1] == float(b + 1));
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("nvme_path's start-up checks refuse with one message", "[offload][nvme]") {
  const std::string dir = temp_dir("zt_nvme_checks");
  auto refusal = [](const std::string& d, uint64_t bytes) -> std::string {
    try {
      check_nvme_path(d, bytes);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  REQUIRE(refusal(dir, 1 << 20).empty());
  REQUIRE(refusal(dir + "/missing", 1).find("not an existing directory") != std::string::npos);
  REQUIRE(refusal(dir, uint64_t(1) << 62).find("[offload] nvme_path") != std::string::npos);  // no room
  std::filesystem::remove_all(dir);
}
