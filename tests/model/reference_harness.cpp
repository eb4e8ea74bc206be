#include "model/reference_harness.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace pi::testing {
namespace {

const std::string kPython = PI_PYTHON;
const std::string kRefDir = std::string(PI_SOURCE_DIR) + "/tests/reference/";

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

std::string TinyPyModel::file_name() const {
  std::string n =
      "py_" + arch + "_" + outtype + "_kv" + std::to_string(kv_heads) + "_s" + std::to_string(seed);
  if (!act.empty()) n += "_" + act;
  if (tied) n += "_tied";
  if (head_dim > 0) n += "_hd" + std::to_string(head_dim);
  if (experts > 0) n += "_e" + std::to_string(experts);
  if (experts_used > 0) n += "_k" + std::to_string(experts_used);
  if (expert_ff > 0) n += "_f" + std::to_string(expert_ff);
  if (!gating.empty()) n += "_" + gating;
  if (swa > 0) n += "_swa" + std::to_string(swa);
  if (transpose_down) n += "_dt";
  if (yarn > 0) n += "_yarn" + std::to_string(yarn);
  return n + (pwri ? ".pwri.gguf" : ".gguf");
}

bool python_available() {
  if (!std::filesystem::exists(kPython)) return false;
  return run_command(kPython + " -c 'import numpy'").exit_code == 0;
}

Result<std::string> make_py_model(const TinyPyModel& m) {
  const std::string path = temp_path(m.file_name());
  if (std::filesystem::exists(path)) return path;
  std::string cmd = kPython + " " + kRefDir + "make_tiny_model.py --arch " + m.arch +
                    " --outtype " + m.outtype + " --kv-heads " + std::to_string(m.kv_heads) +
                    " --seed " + std::to_string(m.seed) + " --out " + path;
  if (m.pwri) cmd += " --pwri";
  if (!m.act.empty()) cmd += " --act " + m.act;
  if (m.tied) cmd += " --tied";
  if (m.head_dim > 0) cmd += " --head-dim " + std::to_string(m.head_dim);
  if (m.experts > 0) cmd += " --experts " + std::to_string(m.experts);
  if (m.experts_used > 0) cmd += " --experts-used " + std::to_string(m.experts_used);
  if (m.expert_ff > 0) cmd += " --expert-ff " + std::to_string(m.expert_ff);
  if (!m.gating.empty()) cmd += " --gating " + m.gating;
  if (m.swa > 0) cmd += " --swa " + std::to_string(m.swa);
  if (m.transpose_down) cmd += " --transpose-down";
  if (m.yarn > 0) cmd += " --yarn " + std::to_string(m.yarn);
  CommandResult r = run_command(cmd);
  if (r.exit_code != 0) return err("make_tiny_model.py failed: %s", r.output.c_str());
  return path;
}

Result<std::vector<float>> reference_logits(const std::string& path,
                                            const std::vector<int32_t>& tokens, Oracle oracle) {
  const bool f16kv = oracle == Oracle::F16Kv;
  const std::string out =
      path + "." + std::to_string(tokens.size()) + (f16kv ? ".f16kv" : "") + ".logits.bin";
  const std::string script = f16kv ? std::string(PI_SOURCE_DIR) + "/tests/model/reference_f16kv.py"
                                   : kRefDir + "reference_forward.py";
  CommandResult r = run_command(kPython + " " + script + " " + path + " --tokens " + join(tokens) +
                                " --out " + out);
  if (r.exit_code != 0) return err("reference_forward.py failed: %s", r.output.c_str());
  std::ifstream in(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> logits(bytes.size() / sizeof(float));
  std::memcpy(logits.data(), bytes.data(), logits.size() * sizeof(float));
  return logits;
}

Result<std::vector<float>> reference_hidden(const std::string& path,
                                            const std::vector<int32_t>& tokens) {
  const std::string out = path + "." + std::to_string(tokens.size()) + ".hidden.bin";
  CommandResult r = run_command(kPython + " " + kRefDir + "reference_forward.py " + path +
                                " --tokens " + join(tokens) + " --hidden " + out);
  if (r.exit_code != 0) return err("reference_forward.py failed: %s", r.output.c_str());
  std::ifstream in(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> h(bytes.size() / sizeof(float));
  std::memcpy(h.data(), bytes.data(), h.size() * sizeof(float));
  return h;
}

Result<std::vector<int32_t>> reference_greedy(const std::string& path,
                                              const std::vector<int32_t>& tokens, int n) {
  CommandResult r = run_command(kPython + " " + kRefDir + "reference_forward.py " + path +
                                " --tokens " + join(tokens) + " --greedy " + std::to_string(n));
  if (r.exit_code != 0) return err("reference_forward.py failed: %s", r.output.c_str());
  std::vector<int32_t> ids;
  std::istringstream ss(r.output);
  int32_t t;
  while (ss >> t) ids.push_back(t);
  return ids;
}

namespace {

template <typename T>
std::vector<T> read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

Result<ForcedRoutes> reference_forced_routes(const std::string& path, const std::vector<int32_t>& tokens,
                                             const std::vector<int32_t>& routes, Oracle oracle) {
  const bool f16kv = oracle == Oracle::F16Kv;
  const std::string base = path + "." + std::to_string(tokens.size()) + (f16kv ? ".f16kv" : "") + ".forced";
  {
    std::ofstream out(base + ".routes.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(routes.data()), static_cast<std::streamsize>(routes.size() * sizeof(int32_t)));
  }
  const std::string script = f16kv ? std::string(PI_SOURCE_DIR) + "/tests/model/reference_f16kv.py"
                                   : kRefDir + "reference_forward.py";
  CommandResult r = run_command(kPython + " " + script + " " + path + " --tokens " + join(tokens) +
                                " --force-routes " + base + ".routes.bin --out " + base + ".logits.bin --route-probs " +
                                base + ".probs.bin");
  if (r.exit_code != 0) return err("reference_forward.py failed: %s", r.output.c_str());
  return ForcedRoutes{read_binary<float>(base + ".logits.bin"), read_binary<double>(base + ".probs.bin")};
}

std::vector<int32_t> test_tokens(int n, int32_t lo, int32_t hi, uint32_t seed) {
  std::vector<int32_t> t;
  uint32_t x = seed * 2654435761u + 12345u;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(lo + static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(hi - lo)));
  }
  return t;
}

}  // namespace pi::testing
