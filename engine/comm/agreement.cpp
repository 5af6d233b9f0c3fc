// Start-up agreement over the world group: failures and the spec. Everything travels through
// Comm::all_reduce_doubles (a sum): each rank writes its own slot and leaves the others zero, which
// makes the sum an all-gather, with the group's timeout.
#include "engine/comm/agreement.h"

#include <cstdint>
#include <cstdio>

#include "engine/core/status.h"

namespace zt {

void agree_on_failure(Comm& world, std::exception_ptr error) {
  if (world.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const int code = error ? exit_code_of(error) : 0;
  std::vector<double> codes(size_t(world.size()), 0.0);  // [world]: each rank's exit status
  codes[size_t(world.rank())] = code;
  world.all_reduce_doubles(codes.data(), codes.size());
  int failed = 0, job_code = 2;
  for (double c : codes) {
    failed += c != 0;
    if (c == 1) job_code = 1;
  }
  if (failed == 0) return;
  const bool everywhere = failed == world.size();
  if (error && (!everywhere || world.rank() == 0)) print_error(error, everywhere ? -1 : world.rank());
  std::fflush(stderr);
  throw PeerFailure(job_code, "start-up failed");
}

void run_agreed(Comm& world, const std::function<void()>& f) {
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_failure(world, error);
}

namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string joined(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  for (const auto& [name, value] : entries) out += name + '\t' + value + '\n';
  return out;
}

// Rank 0's text on every rank: the length, then 6 bytes per double (exact below 2^53).
std::string text_of_rank0(Comm& world, const std::string& mine) {
  double len = world.rank() == 0 ? double(mine.size()) : 0.0;
  world.all_reduce_doubles(&len, 1);
  std::vector<double> packed((size_t(len) + 5) / 6, 0.0);
  if (world.rank() == 0)
    for (size_t i = 0; i < mine.size(); ++i)
      packed[i / 6] += double(static_cast<unsigned char>(mine[i])) * double(uint64_t(1) << (8 * (i % 6)));
  world.all_reduce_doubles(packed.data(), packed.size());
  std::string out(size_t(len), '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = char((uint64_t(packed[i / 6]) >> (8 * (i % 6))) & 0xff);
  return out;
}

}  // namespace

void agree_on_spec(Comm& world, const std::vector<std::pair<std::string, std::string>>& entries) {
  if (world.size() == 1) return;
  const std::string mine = joined(entries);
  const uint64_t h = fnv1a(mine);
  std::vector<double> hashes(2 * size_t(world.size()), 0.0);  // [world][2]: 32-bit halves
  hashes[2 * size_t(world.rank())] = double(h >> 32);
  hashes[2 * size_t(world.rank()) + 1] = double(h & 0xffffffffu);
  world.all_reduce_doubles(hashes.data(), hashes.size());
  int first_differing = -1;
  for (int r = 1; r < world.size() && first_differing < 0; ++r)
    if (hashes[2 * size_t(r)] != hashes[0] || hashes[2 * size_t(r) + 1] != hashes[1]) first_differing = r;
  if (first_differing < 0) return;
  const std::string reference = text_of_rank0(world, mine);
  if (world.rank() == first_differing) {
    // the first line that differs: "[section] key\tvalue"
    size_t a = 0, b = 0;
    std::string line_here, line_there;
    while (a < mine.size() && b < reference.size()) {
      const size_t ea = mine.find('\n', a), eb = reference.find('\n', b);
      line_here = mine.substr(a, ea - a), line_there = reference.substr(b, eb - b);
      if (line_here != line_there) break;
      a = ea + 1, b = eb + 1;
    }
    const auto split = [](const std::string& line) {
      const size_t tab = line.find('\t');
      return std::pair{line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1)};
    };
    const auto [key, here] = split(line_here);
    const auto there = split(line_there).second;
    std::fprintf(stderr,
                 "ztrain: error: rank %d runs a different spec than rank 0: %s = %s on rank %d, %s on rank 0 "
                 "(every rank must be started with the same spec and --set options)\n",
                 world.rank(), key.c_str(), here.c_str(), world.rank(), there.c_str());
    std::fflush(stderr);
  }
  throw PeerFailure(2, "the ranks' specs differ");
}

}  // namespace zt
