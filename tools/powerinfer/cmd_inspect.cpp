// `powerinfer inspect FILE`: header, metadata and tensor table of a GGUF or PowerInfer
// file. Reads only the header region (tensor data stays unread in the mapping), so it is
// instant on multi-GB files.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>

#include "commands.h"
#include "core/log.h"
#include "gguf/reader.h"

namespace pi::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  size_t max_items = 8;
};

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

nlohmann::json value_json(const gguf::Value& v, size_t max_items) {
  return std::visit(
      [&](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, gguf::Array>) {
          nlohmann::json a = nlohmann::json::array();
          for (size_t i = 0; i < x.items.size() && i < max_items; ++i)
            a.push_back(value_json(x.items[i], max_items));
          return a;
        } else {
          return nlohmann::json(x);
        }
      },
      v.data);
}

int print_json(const gguf::File& f, const InspectOptions& o) {
  nlohmann::json j;
  j["path"] = f.path();
  j["magic"] = f.is_powerinfer() ? "PWRI" : "GGUF";
  j["sparse"] = f.is_powerinfer();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  nlohmann::json md = nlohmann::json::object();
  for (const auto& kv : f.metadata()) {
    nlohmann::json e;
    e["type"] = std::string(gguf::value_type_name(kv.value.type()));
    if (const auto* a = kv.value.as_array()) {
      e["elem_type"] = std::string(gguf::value_type_name(a->elem_type));
      e["count"] = a->items.size();
    }
    e["value"] = value_json(kv.value, o.max_items);
    md[kv.key] = e;
  }
  j["metadata"] = md;
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : f.tensors()) {
    nlohmann::json e;
    e["name"] = t.name;
    e["type"] = std::string(dtype_name(t.type));
    e["shape"] = std::vector<int64_t>(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
    e["bytes"] = t.nbytes;
    e["offset"] = f.data_offset() + t.offset;
    ts.push_back(e);
  }
  j["tensors"] = ts;
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

int print_text(const gguf::File& f, const InspectOptions& o) {
  std::printf("file:       %s (%s)\n", f.path().c_str(), human_bytes(f.file_size()).c_str());
  std::string kind = f.is_powerinfer() ? "PowerInfer file: runs sparse" : "ordinary GGUF: runs dense";
  const auto arch = f.get_string("general.architecture");
  if (arch.ok() && f.find(*arch + ".expert_count") != nullptr && f.find(*arch + ".expert_used_count") != nullptr) {
    auto n = f.get_int(*arch + ".expert_count");
    auto k = f.get_int(*arch + ".expert_used_count");
    if (n.ok() && k.ok()) {
      // Which experts skip their zero gates' rows (ReGLU) is the architecture's: run or bench says.
      kind = "ordinary GGUF: a mixture of " + std::to_string(*n) + " experts, " + std::to_string(*k) +
             " per token";
    }
  }
  std::printf("magic:      %s (%s)\n", f.is_powerinfer() ? "PWRI" : "GGUF", kind.c_str());
  std::printf("version:    %u\n", f.version());
  std::printf("alignment:  %u\n", f.alignment());
  std::printf("data at:    %llu\n", static_cast<unsigned long long>(f.data_offset()));
  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  for (const auto& kv : f.metadata()) {
    std::string type(gguf::value_type_name(kv.value.type()));
    if (const auto* a = kv.value.as_array()) {
      type += "[" + std::string(gguf::value_type_name(a->elem_type)) + "; " +
              std::to_string(a->items.size()) + "]";
    }
    std::printf("  %-44s %-14s %s\n", kv.key.c_str(), type.c_str(),
                kv.value.to_string(o.max_items).c_str());
  }
  std::printf("\ntensors (%zu):\n", f.tensors().size());
  std::printf("  %-40s %-6s %-24s %12s %14s\n", "name", "type", "shape", "bytes", "offset");
  std::map<std::string, std::pair<size_t, uint64_t>> by_type;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    std::string type(dtype_name(t.type));
    std::printf("  %-40s %-6s %-24s %12llu %14llu\n", t.name.c_str(), type.c_str(),
                t.shape.str().c_str(), static_cast<unsigned long long>(t.nbytes),
                static_cast<unsigned long long>(f.data_offset() + t.offset));
    auto& e = by_type[type];
    e.first += 1;
    e.second += t.nbytes;
    total += t.nbytes;
  }
  std::printf("\ntotals by type:\n");
  for (const auto& [type, e] : by_type) {
    std::printf("  %-6s %5zu tensors %12s\n", type.c_str(), e.first, human_bytes(e.second).c_str());
  }
  std::printf("  %-6s %5zu tensors %12s\n", "all", f.tensors().size(), human_bytes(total).c_str());
  return 0;
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "Show the header, metadata and tensors of a GGUF/PowerInfer file");
  sub->add_option("file", opts->path, "Model file (.gguf, PowerInfer .gguf, .gpuidx)")->required();
  sub->add_flag("--json", opts->json, "Machine-readable JSON output");
  sub->add_option("--max-items", opts->max_items, "Array items shown before abbreviating")
      ->check(CLI::PositiveNumber);
  return [opts]() -> int {
    auto f = gguf::File::open(opts->path);
    if (!f.ok()) {
      log_error("%s", f.error().message.c_str());
      return 1;
    }
    return opts->json ? print_json(*f, *opts) : print_text(*f, *opts);
  };
}

}  // namespace pi::cli
