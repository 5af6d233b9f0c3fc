// The run dashboard (see report.h).
#include "engine/observe/report.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/config/spec.h"
#include "engine/core/atomic_file.h"
#include "engine/core/run_program.h"
#include "engine/core/status.h"
#include "engine/core/user_path.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The realized mixture: each log interval's share of tokens per source (from the cumulative
// tokens_by_source of the train rows), beside the configured share in force.
struct MixtureSeries {
  std::vector<std::string> names;  // the sources, in the first row's order
  std::vector<std::pair<double, std::vector<double>>> rows;  // (step, cumulative tokens per source)

  void add(double step, const nlohmann::json& by_source) {
    if (!by_source.is_object()) return;
    if (names.empty())
      for (const auto& [name, v] : by_source.items()) names.push_back(name);
    std::vector<double> t;
    for (const auto& n : names) {
      const auto it = by_source.find(n);
      t.push_back(it != by_source.end() && it->is_number() ? it->get<double>() : 0.0);
    }
    rows.emplace_back(step, std::move(t));
  }
  // step, then per source: realized %, configured % (nan where not known)
  std::string table(const std::function<std::vector<double>(double)>& configured) const {
    std::string out;
    for (size_t i = 1; i < rows.size(); ++i) {
      double total = 0;
      for (size_t k = 0; k < names.size(); ++k) total += rows[i].second[k] - rows[i - 1].second[k];
      if (total <= 0) continue;  // a resumed launch's first row repeats the step
      const std::vector<double> want = configured(rows[i].first - 1);
      out += fmt::format("{}", rows[i].first);
      for (size_t k = 0; k < names.size(); ++k)
        out += fmt::format(" {} {}", 100 * (rows[i].second[k] - rows[i - 1].second[k]) / total,
                           want.empty() ? std::string("nan") : fmt::format("{}", 100 * want[k]));
      out += "\n";
    }
    return out.empty() ? "nan\n" : out;
  }
  std::string plot() const {
    std::string p = "unset label 1\nset title \"data mixture: realized share per log interval (solid) vs configured (dashed)\"\n"
                    "set xlabel \"step\"; set ylabel \"% of tokens\"; set yrange [0:100]; set key outside right\nplot ";
    for (size_t k = 0; k < names.size(); ++k) {
      std::string name = names[k];  // gnuplot sees names only as data: characters it interprets become '?'
      for (char& c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/')) c = '?';
      p += fmt::format("{}\"mix.dat\" using 1:{} with lines lw 2 lc {} title \"{}\", \"\" using 1:{} with lines dt 2 lc {} "
                       "notitle", k ? ", " : "", 2 + 2 * k, k + 1, name, 3 + 2 * k, k + 1);
    }
    return p + "\nset autoscale y; set key inside\n";
  }
};

// The configured weights at a step, normalized, in `names` order, from the run's resolved spec;
// an empty function result where there is none.
std::function<std::vector<double>(double)> configured_weights(const RunSpec* spec,
                                                              const std::vector<std::string>& names) {
  if (!spec) return [](double) { return std::vector<double>(); };
  const auto train = spec->data.of_split("train");
  return [train, stages = spec->data.stages, names](double step) {
    std::vector<double> w;
    for (const auto& s : train) w.push_back(s.weight);
    for (const auto& st : stages)
      if (step >= double(st.step)) w = st.weights;
    double total = 0;
    for (double x : w) total += x;
    std::vector<double> out;
    for (const auto& n : names) {
      size_t i = 0;
      while (i < train.size() && train[i].name != n) ++i;
      if (i == train.size() || total <= 0) return std::vector<double>();
      out.push_back(w[i] / total);
    }
    return out;
  };
}

}  // namespace

std::string write_report(const std::string& run_dir, const std::string& png_in, const RunSpec* run_spec) {
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  std::ifstream in(metrics);
  if (!in) user_error("{}: no metrics.jsonl (is it a run's out_dir?)", run_dir);
  std::string train, eval, device;
  size_t n_train = 0, n_device = 0;
  MixtureSeries mix;
  const char* parts[] = {"data_wait_ms", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms", "checkpoint_ms", "other_ms"};
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object() || !r.contains("kind")) continue;
    const std::string kind = r["kind"].is_string() ? r["kind"].get<std::string>() : "";
    auto num = [&](const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<double>() : 0.0; };
    if (kind == "train" && r.contains("loss")) {
      train += fmt::format("{} {} {} {}", num("step"), num("loss"), num("tokens_per_s"), 100 * num("mfu"));
      const double total = std::max(num("step_ms"), 1e-9);
      for (const char* p : parts) train += fmt::format(" {}", 100 * num(p) / total);
      train += "\n";
      ++n_train;
      if (r.contains("tokens_by_source")) mix.add(num("step"), r["tokens_by_source"]);
    } else if (kind == "eval") {
      eval += fmt::format("{} {}\n", num("step"), num("val_loss"));
    } else if (kind == "device") {
      const double mib = (r.contains("rss_bytes") ? num("rss_bytes") : num("mem_used_bytes")) / 1048576.0;
      device += fmt::format("{} {}\n", num("t"), mib);
      ++n_device;
    }
  }
  if (n_train == 0) user_error("{}: no train rows to draw", metrics.string());
  const std::string png = png_in.empty() ? (fs::path(run_dir) / "report.png").string() : png_in;
  std::error_code ec;
  check_output_file(png, png_in.empty() ? "report" : "report: --out");
  // gnuplot runs in a private directory on files with fixed names, started without a shell: no
  // path the user chose ever reaches its script or a shell, and only --out is written.
  const fs::path tmp = fs::temp_directory_path() / fmt::format("ztrain-report-{}", ::getpid());
  fs::create_directories(tmp);
  const auto path = [&](const char* name) { return (tmp / name).string(); };
  write_file_atomic(path("train.dat"), train);
  write_file_atomic(path("eval.dat"), eval.empty() ? "nan nan\n" : eval);
  write_file_atomic(path("device.dat"), device.empty() ? "nan nan\n" : device);
  const bool mixed = mix.names.size() > 1;
  if (mixed) write_file_atomic(path("mix.dat"), mix.table(configured_weights(run_spec, mix.names)));
  // The title names the run; characters gnuplot would interpret (quotes, backquotes, macros,
  // backslashes) become '?'.
  std::string title = run_dir;
  for (char& c : title)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string_view(" ._-/+=,:()[]").find(c) != std::string_view::npos))
      c = '?';
  std::string script = fmt::format(R"GP(set terminal pngcairo noenhanced size 1400,{height} font ",10"
set output "report.png"
set datafile missing "nan"
set multiplot layout {rows},2 title "ztrain run: {run}"
set grid
set title "loss"; set xlabel "step"
plot "train.dat" using 1:2 with lines lw 2 title "train", "eval.dat" using 1:2 with linespoints lw 2 title "val"
set title "throughput"; set ylabel "tokens/s"; set y2label "MFU %"; set y2tics; set ytics nomirror
plot "train.dat" using 1:3 with lines lw 2 title "tokens/s", "" using 1:4 axes x1y2 with lines lw 2 title "MFU %"
unset y2tics; unset y2label; set ytics mirror
set title "where each step's time went (% of the step)"; set ylabel "%"; set yrange [0:100]; set key outside right
plot "train.dat" using 1:($5+$6+$7+$8+$9+$10+$11) with filledcurves x1 title "other", \
     "" using 1:($5+$6+$7+$8+$9+$10) with filledcurves x1 title "checkpoint", \
     "" using 1:($5+$6+$7+$8+$9) with filledcurves x1 title "comm", \
     "" using 1:($5+$6+$7+$8) with filledcurves x1 title "optimizer", \
     "" using 1:($5+$6+$7) with filledcurves x1 title "backward", \
     "" using 1:($5+$6) with filledcurves x1 title "forward", \
     "" using 1:5 with filledcurves x1 title "data"
set autoscale y; set key inside
set title "memory over time"; set xlabel "seconds"; set ylabel "MiB"
{memory_plot}
{mixture_plot}unset multiplot
)GP",
                                        fmt::arg("run", title), fmt::arg("height", mixed ? 1300 : 900),
                                        fmt::arg("rows", mixed ? 3 : 2), fmt::arg("mixture_plot", mixed ? mix.plot() : ""),
                                        fmt::arg("memory_plot",
                                                 n_device > 0
                                                     ? std::string("plot \"device.dat\" using 1:2 with lines lw 2 "
                                                                   "title \"resident / device memory used\"")
                                                     : std::string("set label 1 \"no device telemetry rows "
                                                                   "([run] telemetry_s)\" at graph 0.5,0.5 center\n"
                                                                   "plot [0:1][0:1] NaN notitle")));
  write_file_atomic(path("report.gp"), script);
  const int rc = run_program({"gnuplot", "report.gp"}, tmp.string(), path("gnuplot.err"));
  if (rc < 0 && errno == ENOENT) {
    fs::remove_all(tmp, ec);
    user_error("ztrain report draws with gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)");
  }
  std::ifstream err(path("gnuplot.err"));
  const std::string why((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  std::ifstream drawn(path("report.png"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(drawn)), std::istreambuf_iterator<char>());
  fs::remove_all(tmp, ec);
  if (rc != 0 || bytes.empty()) throw RuntimeFailure(fmt::format("gnuplot failed drawing {}: {}", png, why));
  write_file_atomic(png, bytes);
  return png;
}

}  // namespace zt
