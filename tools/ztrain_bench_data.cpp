// ztrain-bench-data: data pipeline throughput for a run spec's training data (every source, mixed).
//   cold: every shard downloaded into an emptied cache, one after the other (bytes/s)
//   warm: the background loader assembling micro-batches from the cache (tokens/s, one rank), timed
//         on a second pass over the same batches (the first pays each shard's first open)
// Prints one JSON object. `ztrain-bench-data SPEC.toml [--set k=v ...] [--batches N]`
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/loader.h"
#include "engine/hf/spec_loading.h"
#include "engine/core/byte_size.h"
#include "engine/core/status.h"
#include "engine/train/training_data.h"

using namespace zt;

int main(int argc, char** argv) {
  try {
    std::string spec_path;
    std::vector<std::string> sets;
    int batches = 2000;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) user_error("{} needs a value", a);
        return argv[++i];
      };
      if (a == "--set") sets.push_back(value());
      else if (a == "--batches") batches = int(parse_count(value(), "--batches", 1, 100'000'000));
      else if (a == "--help") {
        std::puts("usage: ztrain-bench-data SPEC.toml [--set section.key=value ...] [--batches N]");
        return 0;
      } else if (a.size() > 1 && a[0] == '-') user_error("unknown option {} (see --help)", a);
      else if (spec_path.empty()) spec_path = a;
      else user_error("unexpected argument '{}'", a);
    }
    if (spec_path.empty()) user_error("missing SPEC.toml");
    const RunSpec spec = load_run_spec(spec_path, sets);
    TrainingData data(spec);  // every training source, mixed as the run would mix them
    data::MixedData& mixed = data.mixed();
    double cold_s = 0;
    uint64_t bytes = 0;
    size_t shards = 0;
    for (data::TokenDataset* ds : mixed.sets) {
      shards += ds->n_shards();
      if (!ds->cache()) continue;
      std::filesystem::remove_all(ds->cache()->dir());
      std::filesystem::create_directories(ds->cache()->dir());
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t s = 0; s < ds->n_shards(); ++s) {
        ds->cache()->ensure(s);
        bytes += ds->manifest().shards[s].bytes;
      }
      cold_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const int B = int(spec.train.micro_batch), T = int(spec.model.seq_len);
    std::vector<int32_t> in(size_t(B) * T), tg(in.size());
    {  // a first pass, untimed: each shard's once-per-process costs (its first open, the check of its
       // ids) are paid here, so that warm is the loader's steady state whatever the number of sources
      data::BatchLoader loader(mixed, mixed.schedule.start(), B, [B](uint64_t k) { return k * uint64_t(B); }, 0, 8,
                               int(spec.data.prefetch));
      for (int k = 0; k < batches; ++k) loader.next(in.data(), tg.data(), nullptr);
    }
    const auto t0 = std::chrono::steady_clock::now();
    {
      data::BatchLoader loader(mixed, mixed.schedule.start(), B, [B](uint64_t k) { return k * uint64_t(B); }, 0, 8,
                               int(spec.data.prefetch));
      for (int k = 0; k < batches; ++k) loader.next(in.data(), tg.data(), nullptr);
    }
    const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"shards\": %zu, \"bytes\": %llu, \"cold_seconds\": %.4f, \"cold_mb_per_s\": %.2f, "
                "\"warm_tokens\": %lld, \"warm_seconds\": %.4f, \"warm_tokens_per_s\": %.0f}\n",
                shards, (unsigned long long)bytes, cold_s, cold_s > 0 ? bytes / cold_s / 1e6 : 0.0,
                (long long)batches * B * T, warm_s, double(batches) * B * T / warm_s);
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "ztrain-bench-data: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ztrain-bench-data: failure: %s\n", e.what());
    return 1;
  }
}
