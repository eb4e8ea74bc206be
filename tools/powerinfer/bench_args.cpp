#include "bench_args.h"

#include "backend/registry.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "cli_checks.h"

namespace pi::cli {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// A whole-string base-10 integer in [lo, hi].
Result<int64_t> parse_int(const char* flag, const std::string& item, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(item.c_str(), &end, 10);
  if (item.empty() || end != item.c_str() + item.size() || errno == ERANGE)
    return err("%s: '%s' is not an integer", flag, item.c_str());
  if (v < lo || v > hi)
    return err("%s: %lld is out of range [%lld, %lld]", flag, v, static_cast<long long>(lo),
               static_cast<long long>(hi));
  return static_cast<int64_t>(v);
}

Result<std::vector<int64_t>> int_list(const char* flag, const std::vector<std::string>& raw,
                                      const std::vector<int64_t>& fallback, int64_t lo,
                                      int64_t hi) {
  if (raw.empty()) return fallback;
  auto items = split_list(flag, raw);
  if (!items.ok()) return items.error();
  std::vector<int64_t> out;
  for (const std::string& s : *items) {
    auto v = parse_int(flag, s, lo, hi);
    if (!v.ok()) return v.error();
    if (std::find(out.begin(), out.end(), *v) == out.end()) out.push_back(*v);
  }
  return out;
}

}  // namespace

const char* mode_name(BenchMode m) { return m == BenchMode::Dense ? "dense" : "sparse"; }

const char* format_name(BenchFormat f) {
  switch (f) {
    case BenchFormat::Markdown:
      return "md";
    case BenchFormat::Json:
      return "json";
    case BenchFormat::Csv:
      return "csv";
  }
  return "?";
}

Result<std::vector<std::string>> split_list(const char* flag, const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (const std::string& whole : v) {
    size_t begin = 0;
    while (true) {
      const size_t comma = whole.find(',', begin);
      const std::string item =
          trim(whole.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
      if (item.empty()) return err("%s: empty item in list '%s'", flag, whole.c_str());
      out.push_back(item);
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  }
  return out;
}

Result<BenchOptions> validate_bench_flags(const BenchFlags& f, int default_threads) {
  BenchOptions o;
  o.probe_only = f.probe_only;
  o.load = f.load;
  PI_TRY(check_model_flags(f));
  o.model_flags = f;

  constexpr int64_t kMaxTokens = int64_t{1} << 20;
  auto threads = int_list("-t", f.threads, {default_threads}, 1, kMaxThreads);
  if (!threads.ok()) return threads.error();
  for (int64_t t : *threads) {
    PI_TRY(check_threads("-t", t));
    o.threads.push_back(static_cast<int>(t));
  }

  if (f.output == "md" || f.output == "markdown") {
    o.format = BenchFormat::Markdown;
  } else if (f.output == "json") {
    o.format = BenchFormat::Json;
  } else if (f.output == "csv") {
    o.format = BenchFormat::Csv;
  } else {
    return err("-o: unknown format '%s' (md, json or csv)", f.output.c_str());
  }
  if (f.probe_mib < 1 || f.probe_mib > (int64_t{1} << 20))
    return err("--probe-mib: %lld is out of range [1, 1048576]",
               static_cast<long long>(f.probe_mib));
  o.probe_bytes = static_cast<size_t>(f.probe_mib) << 20;
  if (f.probe_passes < 1 || f.probe_passes > 1000)
    return err("--probe-passes: %d is out of range [1, 1000]", f.probe_passes);
  o.probe_passes = f.probe_passes;
  if (!(f.scatter_fraction > 0.0 && f.scatter_fraction <= 1.0))
    return err("--scatter-fraction: %g is out of range (0, 1]", f.scatter_fraction);
  o.scatter_fraction = f.scatter_fraction;
  if (o.probe_only) {
    if (!f.prompts.empty() || !f.gens.empty() || !f.modes.empty() || f.dense || f.sparse)
      return err(
          "--probe runs only the probes: it takes no -p, -n, --mode, --dense or --sparse (-m FILE: "
          "the disk's direct-read rate of that file too)");
    auto files = split_list("-m", f.models);
    if (!files.ok()) return files.error();
    o.models = std::move(*files);
    return o;
  }

  auto models = split_list("-m", f.models);
  if (!models.ok()) return models.error();
  if (models->empty()) return err("no model given: pass -m FILE (repeatable, or a comma list)");
  o.models = std::move(*models);

  auto prompts = int_list("-p", f.prompts, {512}, 0, kMaxTokens);
  if (!prompts.ok()) return prompts.error();
  auto gens = int_list("-n", f.gens, {128}, 0, kMaxTokens);
  if (!gens.ok()) return gens.error();
  for (int64_t p : *prompts)
    if (p > 0) o.n_prompt.push_back(p);
  for (int64_t n : *gens)
    if (n > 0) o.n_gen.push_back(n);
  if (o.n_prompt.empty() && o.n_gen.empty())
    return err("nothing to run: every -p and -n value is 0");

  bool dense = f.dense, sparse = f.sparse;
  auto modes = split_list("--mode", f.modes);
  if (!modes.ok()) return modes.error();
  for (const std::string& m : *modes) {
    if (m == "dense") {
      dense = true;
    } else if (m == "sparse") {
      sparse = true;
    } else {
      return err("--mode: unknown mode '%s' (dense or sparse)", m.c_str());
    }
  }
  if (dense) o.modes.push_back(BenchMode::Dense);
  if (sparse) o.modes.push_back(BenchMode::Sparse);

  if (f.reps < 1 || f.reps > 1000) return err("-r: %d is out of range [1, 1000]", f.reps);
  o.reps = f.reps;
  if (f.n_batch < 1 || f.n_batch > kMaxTokens)
    return err("-b: %lld is out of range [1, %lld]", static_cast<long long>(f.n_batch),
               static_cast<long long>(kMaxTokens));
  o.n_batch = f.n_batch;
  if (f.warmup_gen < 0 || f.warmup_gen > kMaxTokens)
    return err("--warmup-gen: %d is out of range [0, %lld]", f.warmup_gen,
               static_cast<long long>(kMaxTokens));
  o.warmup_gen = f.warmup_gen;

  o.device = f.device;
  if (!f.vram_budget.empty()) {
    if (backend::is_host_device(f.device))
      return err("--vram-budget: rows per budget need a GPU-like device (--device sim|cuda), "
                 "not %s", f.device.c_str());
    auto items = split_list("--vram-budget", {f.vram_budget});
    if (!items.ok()) return items.error();
    o.budgets.clear();
    for (const std::string& g : *items) {
      auto b = vram_budget_bytes(g);
      if (!b.ok()) return b.error();
      o.budgets.push_back(*b);
    }
  }
  auto sparsities = split_list("--sparsity", f.sparsities);
  if (!sparsities.ok()) return sparsities.error();
  for (const std::string& s : *sparsities) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !(v >= 0.0 && v < 1.0))
      return err("--sparsity %s: must be in [0, 1) (the share of activations zeroed, e.g. 0.4)",
                 s.c_str());
    o.sparsities.push_back(v);
  }
  o.sparsity_sites = f.sparsity_sites;
  return o;
}

}  // namespace pi::cli
