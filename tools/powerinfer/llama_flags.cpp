#include "llama_flags.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <string_view>
#include <tuple>

#include "backend/registry.h"
#include "core/log.h"
#include "sparse/placement.h"

namespace pi::cli {
namespace {

struct Spelling {
  const char* from;
  const char* to;
};

// llama.cpp's one-dash long options and the names registered here.
constexpr Spelling kRenamed[] = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
    {"-np", "--np"},           {"-npp", "--npp"},          {"-ntg", "--ntg"},
    {"-npl", "--npl"},         {"-pps", "--pps"},          {"-cnv", "--cnv"},
    {"-sys", "--sys"},         {"-jf", "--json-schema-file"}, {"-cmoe", "--cpu-moe"},
    {"-ncmoe", "--n-cpu-moe"}, {"-ot", "--override-tensor"},
};

// llama.cpp flags with no counterpart here, refused by name with what they do there.
constexpr Spelling kRefused[] = {
    {"-hf", "download a model from Hugging Face"},
    {"-hfr", "download a model from Hugging Face"},
    {"-hff", "download a model from Hugging Face"},
    {"-hft", "Hugging Face token"},
    {"-hfv", "download a vocoder from Hugging Face"},
    {"-hffv", "download a vocoder from Hugging Face"},
    {"-mu", "download a model from a URL"},
    {"--hf-repo", "download a model from Hugging Face"},
    {"--hf-file", "download a model from Hugging Face"},
    {"--model-url", "download a model from a URL"},
    {"-sm", "split the model across GPUs"},
    {"-ts", "split the model across GPUs"},
    {"-mg", "choose the main GPU"},
    {"-dev", "choose devices"},
    {"-nkvo", "keep the KV cache off the GPU"},
    {"-lcs", "lookup-decoding cache"},
    {"-lcd", "lookup-decoding cache"},
    {"-md", "speculative decoding draft model"},
    {"-ngld", "speculative decoding draft model"},
    {"-tb", "separate prompt-processing thread count"},
    {"-dt", "KV defragmentation threshold"},
    {"-mli", "multi-line input"},
    {"-cml", "ChatML chat mode"},
    {"-lv", "log verbosity levels"},
    {"--lora", "LoRA adapters"},
    {"--mirostat", "Mirostat sampling"},
    {"--numa", "NUMA placement"},
};

// Options whose value may legitimately look like a one-dash word (a prompt, a path).
bool takes_text(std::string_view a) {
  for (const char* o : {"-p", "--prompt", "-f", "--file", "-m", "--model", "-o", "--output",
                        "--kl-save", "--kl-base", "--kl-divergence-base", "--activation-dir"})
    if (a == o) return true;
  return false;
}

bool is_one_dash_word(std::string_view a) {
  if (a.size() < 3 || a[0] != '-' || a[1] == '-') return false;
  if (a == "-inf" || a == "-nan" || a == "-infinity") return false;
  return std::all_of(a.begin() + 1, a.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }) && std::isalpha(static_cast<unsigned char>(a[1]));
}

bool is_fa_value(std::string_view v) { return v == "on" || v == "off" || v == "auto"; }

}  // namespace

void add_model_flags(CLI::App* sub, ModelFlags& f) {
  sub->add_option("--n-gpu-layers,--ngl", f.n_gpu_layers,
                  "Whole layers on the device (llama.cpp's -ngl; -1: all and the output head) "
                  "for dense files, with --device sim|cuda; default: as many as --vram-budget "
                  "holds. PowerInfer files run sparse are placed by --vram-budget")
      ->each([&f](const std::string&) { f.ngl_given = true; });
  sub->add_flag("--cpu-moe", f.cpu_moe,
                "Mixtures of experts: keep every layer's router and experts on the CPU, the "
                "rest of the placed layers (attention, norms, KV cache) on the device "
                "(llama.cpp's --cpu-moe)");
  sub->add_option("--n-cpu-moe", f.n_cpu_moe,
                  "Mixtures of experts: keep the routers and experts of the first N layers on "
                  "the CPU (llama.cpp's --n-cpu-moe)");
  sub->add_option("--expert-cache", f.expert_cache,
                  "Mixtures of experts placed by --vram-budget: N device slots per layer hold recently "
                  "used experts (an LRU cache: an expert the CPU ran is uploaded for the next tokens), "
                  "beside the most chosen ones; `powerinfer profile --expert-cache` measures whether it pays");
  sub->add_option("--moe-ram", f.moe_ram,
                  "Mixtures of experts larger than memory, on the CPU: hold the weights in this many GiB, "
                  "those besides the experts resident and the rest a cache of recently used experts read "
                  "from the file on demand (direct I/O) and ahead of need; the same output as with the "
                  "whole model in memory. Maps the file (no --no-mmap)");
  sub->add_option("--override-tensor", f.override_tensor,
                  "llama.cpp's -ot REGEX=CPU[,REGEX=CPU...] (repeatable): a layer whose FFN "
                  "matrices the pattern finds in their names keeps its FFN (a mixture's router and "
                  "experts) on the CPU, e.g. -ot exps=CPU or -ot 'blk\\.[0-9]\\.ffn_.*_exps=CPU'");
  sub->add_option("--vram-budget", f.vram_budget,
                  "Device memory to use, GiB (weights, KV cache, scratch, margin: every byte "
                  "counted), with --device sim|cuda; default: the device's free memory");
  sub->add_option("--stats", f.stats,
                  "Activation statistics for the hot/cold split (powerinfer profile); default: "
                  "MODEL.activations.gguf when present");
  sub->add_option("--gpu-index", f.gpu_index, "The plan's index file (default: MODEL.generated.gpuidx)");
  sub->add_flag("--reset-gpu-index", f.reset_gpu_index, "Solve the placement again even if the index matches");
  sub->add_flag("--disable-gpu-index", f.disable_gpu_index,
                "Keep every FFN neuron on the CPU (no hot neurons on the device); no index");
  sub->add_option("--flash-attn", f.flash_attn,
                  "on, off or auto (llama.cpp's -fa): accepted, no effect (attention reads the KV "
                  "cache in one streaming pass already)");
  sub->add_option("--cache-type-k", f.cache_type_k,
                  "KV cache type of keys (-ctk): f16, q8_0 (about half the bytes) or q4_0 (about "
                  "a quarter); q8_0/q4_0 need head_dim a multiple of 32")
      ->capture_default_str();
  sub->add_option("--cache-type-v", f.cache_type_v,
                  "KV cache type of values (-ctv): f16, q8_0 or q4_0, as -ctk")
      ->capture_default_str();
  sub->add_flag("--swa-full", f.swa_full,
                "Sliding-window layers (gpt-oss, SmallThinker) keep the whole context instead of "
                "their window's cells (n_seq x (window - 1) + batch): more memory, and a conversation "
                "or cached prompt can then be cut back to any point without evaluating it again");
  sub->add_flag("--mlock", f.mlock,
                "Lock the model in RAM so it is never paged out (a warning when the lock fails, "
                "e.g. ulimit -l)");
  sub->add_flag("--check-tensors", f.check_tensors,
                "Check every weight for NaN/Inf at load (reads the whole file; the norms and "
                "small tensors are always checked)");
  sub->add_flag("!--no-repack", f.repack,
                "Keep Q4_0 weights as the file lays them out; by default an AVX-512 CPU copies "
                "transposed ones (calibrated and PowerInfer files) into the layout its axpy reads "
                "fastest (same results), and an AVX-512 or AVX2 CPU the matrices only dense "
                "products read into 16-row groups (prompts ~2x faster; last-bit differences). "
                "The copies take their size in RAM");
}

Status check_model_flags(const ModelFlags& f) {
  for (const auto& [flag, v] : {std::pair{"-ctk", &f.cache_type_k}, {"-ctv", &f.cache_type_v}}) {
    std::string lower = *v;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!kv_cache_type_from_name(lower)) {
      return err("%s %s: unknown KV cache type (supported: f16, q8_0, q4_0)", flag, v->c_str());
    }
  }
  if (f.n_cpu_moe < 0)
    return err("--n-cpu-moe must be >= 0 (got %lld)", static_cast<long long>(f.n_cpu_moe));
  if (f.expert_cache < 0 || f.expert_cache > 65536)
    return err("--expert-cache must be 0..65536 (got %lld)", static_cast<long long>(f.expert_cache));
  if (f.n_gpu_layers < -1)
    return err("-ngl must be >= -1 (-1: all layers; got %lld)",
               static_cast<long long>(f.n_gpu_layers));
  if (!f.flash_attn.empty() && !is_fa_value(f.flash_attn))
    return err("-fa %s: expected on, off or auto", f.flash_attn.c_str());
  if (f.flash_attn == "on")
    log_info("note: -fa has no effect here: attention already reads the KV cache in one pass");
  return Status::Ok();
}

Result<std::optional<uint64_t>> vram_budget_bytes(const std::string& gib) {
  if (gib.empty()) return std::optional<uint64_t>();
  char* end = nullptr;
  const double v = std::strtod(gib.c_str(), &end);
  if (end == gib.c_str() || *end != '\0')
    return err("--vram-budget: '%s' is not a number of GiB", gib.c_str());
  auto b = sparse::budget_from_gib(v);
  if (!b.ok()) return b.error();
  return std::optional<uint64_t>(*b);
}

Result<uint64_t> moe_ram_bytes(const std::string& gib) {
  if (gib.empty()) return uint64_t{0};
  char* end = nullptr;
  const double v = std::strtod(gib.c_str(), &end);
  if (end == gib.c_str() || *end != '\0' || !(v > 0) || v > 1e6)
    return err("--moe-ram: '%s' is not a positive number of GiB", gib.c_str());
  return static_cast<uint64_t>(v * 1073741824.0);
}

Status apply_hybrid_flags(const ModelFlags& f, SessionOptions& so) {
  so.repack = f.repack;
  auto ram = moe_ram_bytes(f.moe_ram);
  if (!ram.ok()) return ram.error();
  so.moe_ram = *ram;
  so.swa_full = f.swa_full;
  for (auto [flag, name, type] : {std::tuple{"-ctk", &f.cache_type_k, &so.kv_type_k},
                                  std::tuple{"-ctv", &f.cache_type_v, &so.kv_type_v}}) {
    std::string lower = *name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto t = kv_cache_type_from_name(lower);
    if (!t) return err("%s %s: unknown KV cache type (supported: f16, q8_0, q4_0)", flag, name->c_str());
    *type = *t;
  }
  auto budget = vram_budget_bytes(f.vram_budget);
  if (!budget.ok()) return budget.error();
  if (backend::is_host_device(so.device)) {
    if (budget->has_value())
      log_warn("--vram-budget applies to a GPU-like device (--device sim|cuda): ignored on %s",
               so.device.c_str());
    if (f.ngl_given && f.n_gpu_layers != 0)
      log_warn("no GPU device selected (--device sim|cuda): -ngl ignored, running on %s",
               so.device.c_str());
    if (f.cpu_moe || f.n_cpu_moe > 0)
      log_warn("no GPU device selected (--device sim|cuda): every expert runs on %s already",
               so.device.c_str());
    if (!f.override_tensor.empty())
      log_warn("no GPU device selected (--device sim|cuda): -ot ignored, every tensor is on %s",
               so.device.c_str());
    if (f.expert_cache > 0)
      log_warn("no GPU device selected (--device sim|cuda): --expert-cache ignored, every expert is on %s",
               so.device.c_str());
    return Status::Ok();
  }
  so.vram_budget = *budget;
  so.activation_stats = f.stats;
  so.gpu_index = f.gpu_index;
  so.reset_gpu_index = f.reset_gpu_index;
  so.disable_gpu_index = f.disable_gpu_index;
  if (f.ngl_given)
    so.n_gpu_layers = f.n_gpu_layers < 0 ? INT32_MAX : static_cast<int>(std::min<int64_t>(f.n_gpu_layers, INT32_MAX));
  so.tensor_overrides = f.override_tensor;
  so.n_cpu_moe = f.cpu_moe ? INT32_MAX : static_cast<int>(std::min<int64_t>(f.n_cpu_moe, INT32_MAX));
  so.expert_cache = static_cast<int>(f.expert_cache);
  return Status::Ok();
}

LoadOptions load_options(const ModelFlags& f, ModelLoad load) {
  LoadOptions o;
  o.load = load;
  if (!f.moe_ram.empty()) {
    // The experts are read from the file as needed: the rest is mapped, never read whole.
    if (load == ModelLoad::Read) log_warn("--moe-ram maps the model file: --no-mmap ignored");
    o.load = ModelLoad::Map;
  }
  o.mlock = f.mlock;
  o.check_tensors = f.check_tensors;
  o.repack = f.repack;
  return o;
}

Result<std::vector<std::string>> normalize_args(const std::vector<std::string>& args,
                                                bool* log_disable) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool value_of_text = i > 0 && takes_text(args[i - 1]);
    if (i == 0 || value_of_text) {
      out.push_back(a);
      continue;
    }
    if (a == "--log-disable") {
      *log_disable = true;
      continue;
    }
    if (a == "-fa" || a == "--flash-attn") {
      // llama.cpp's -fa is a bare flag in older versions and takes on|off|auto in newer ones.
      if (i + 1 < args.size() && is_fa_value(args[i + 1])) {
        out.push_back("--flash-attn=" + args[++i]);
      } else {
        out.push_back("--flash-attn=on");
      }
      continue;
    }
    const std::string_view name = std::string_view(a).substr(0, a.find('='));
    bool done = false;
    for (const Spelling& s : kRenamed) {
      if (name == s.from) {
        out.push_back(s.to + a.substr(name.size()));
        done = true;
        break;
      }
    }
    for (const Spelling& s : kRefused) {
      if (name == s.from) {
        return err("%.*s: llama.cpp's flag to %s is not supported by powerinfer",
                   static_cast<int>(name.size()), name.data(), s.to);
      }
    }
    if (done) continue;
    if (is_one_dash_word(a)) {
      return err("%s: unknown option (one-dash long options are llama.cpp spellings; this one is "
                 "not implemented; see --help)", a.c_str());
    }
    out.push_back(a);
  }
  return out;
}

void add_load_flags(CLI::App* sub, ModelLoad& load) {
  CLI::Option* map = sub->add_flag_callback(
      "--mmap", [&load] { load = ModelLoad::Map; },
      "Map the model file instead of reading it into memory: instant load, pages shared with "
      "other processes (several servers on one file), slower decoding. The default when the "
      "memory available holds less than the file and 1 GiB, or huge pages are off");
  CLI::Option* read = sub->add_flag_callback(
      "--no-mmap", [&load] { load = ModelLoad::Read; },
      "Read the model into memory backed by transparent huge pages even when the memory "
      "available holds less than the file and 1 GiB (by default it is read whenever it "
      "does): a copy at load, the file's size in RAM, faster decoding");
  map->excludes(read);
}

}  // namespace pi::cli
