#include "sparse/activation_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "sparse/torch_file.h"

namespace pi::sparse {
namespace {

std::string layer_tensor(int64_t l) { return "blk." + std::to_string(l) + ".activation_counts"; }
std::string expert_tensor(int64_t l) { return "blk." + std::to_string(l) + ".expert_counts"; }
std::string reuse_tensor(int64_t l) { return "blk." + std::to_string(l) + ".expert_reuse"; }

// A 1-D f32 tensor of n values (n < 0: any length), or an error naming it.
Result<std::vector<float>> read_f32(const gguf::File& f, const std::string& path, const std::string& name,
                                    int64_t n) {
  auto t = f.tensor(name);
  if (!t.ok()) return t.error();
  if (t->type() != DType::F32 || t->shape().rank != 1 || (n >= 0 && t->shape()[0] != n)) {
    return err("%s: tensor '%s' must be 1-D f32%s", path.c_str(), name.c_str(),
               n >= 0 ? (" of " + std::to_string(n) + " values").c_str() : "");
  }
  std::vector<float> v(static_cast<size_t>(t->shape()[0]));
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

Status check_counts(const std::vector<float>& c, uint64_t n_tokens, const std::string& what,
                    int64_t layer) {
  for (size_t i = 0; i < c.size(); ++i) {
    const float v = c[i];
    if (!std::isfinite(v) || v < 0) {
      return err("%s: layer %lld neuron %zu: count %g is not a finite number >= 0", what.c_str(),
                 static_cast<long long>(layer), i, static_cast<double>(v));
    }
    // f32 counts of up to 2^24 tokens are exact; beyond that allow one part in 2^20 of rounding.
    if (n_tokens > 0 && static_cast<double>(v) > static_cast<double>(n_tokens) * (1 + 1e-6)) {
      return err("%s: layer %lld neuron %zu: count %g exceeds the %llu tokens counted",
                 what.c_str(), static_cast<long long>(layer), i, static_cast<double>(v),
                 static_cast<unsigned long long>(n_tokens));
    }
  }
  return Status::Ok();
}

Result<ActivationStats> read_stats_file(const std::string& path) {
  auto f = gguf::File::open(path);
  if (!f.ok()) return f.error();
  auto arch = f->get_string("general.architecture");
  if (!arch.ok()) return arch.error();
  if (*arch != kStatsArch) {
    return err("%s: general.architecture is '%s', not '%s': not an activation statistics file",
               path.c_str(), arch->c_str(), kStatsArch);
  }
  auto n_layer = f->get_int("activation_stats.block_count");
  if (!n_layer.ok()) return n_layer.error();
  if (*n_layer <= 0 || *n_layer > 100000) {
    return err("%s: activation_stats.block_count %lld is not in 1..100000", path.c_str(),
               static_cast<long long>(*n_layer));
  }
  auto n_tokens = f->get_int("activation_stats.n_tokens");
  if (!n_tokens.ok()) return n_tokens.error();
  if (*n_tokens < 0) return err("%s: activation_stats.n_tokens is negative", path.c_str());
  ActivationStats s;
  s.n_tokens = static_cast<uint64_t>(*n_tokens);
  if (auto src = f->get_string("activation_stats.source"); src.ok()) s.source = *src;
  if (f->find("activation_stats.model_fingerprint") != nullptr) {
    auto fp = f->get_string("activation_stats.model_fingerprint");
    if (!fp.ok()) return fp.error();
    s.model_fingerprint = *fp;
  }
  if (f->find("activation_stats.expert_count") != nullptr) {
    auto n = f->get_int("activation_stats.expert_count");
    auto k = f->get_int("activation_stats.expert_used_count");
    auto pairs = f->get_int("activation_stats.expert_pairs");
    if (!n.ok()) return n.error();
    if (!k.ok()) return k.error();
    if (!pairs.ok()) return pairs.error();
    if (*n <= 0 || *n > 65536 || *k <= 0 || *k > *n || *pairs < 0) {
      return err("%s: activation_stats.expert_count %lld, expert_used_count %lld, expert_pairs %lld: "
                 "want 0 < used <= count <= 65536 and pairs >= 0",
                 path.c_str(), static_cast<long long>(*n), static_cast<long long>(*k),
                 static_cast<long long>(*pairs));
    }
    s.n_expert = *n;
    s.n_expert_used = *k;
    s.expert_pairs = static_cast<uint64_t>(*pairs);
  }
  s.counts.resize(static_cast<size_t>(*n_layer));
  // A mixture of experts may have no neuron counts (experts that are not ReLU-family).
  const bool neurons = !s.has_experts() || f->find_tensor(layer_tensor(0)) != nullptr;
  for (int64_t l = 0; l < *n_layer; ++l) {
    if (neurons) {
      auto c = read_f32(*f, path, layer_tensor(l), -1);
      if (!c.ok()) return c.error();
      s.counts[static_cast<size_t>(l)] = std::move(*c);
      PI_TRY(check_counts(s.counts[static_cast<size_t>(l)], s.n_tokens, path, l));
    }
    if (!s.has_experts()) continue;
    auto e = read_f32(*f, path, expert_tensor(l), s.n_expert);
    if (!e.ok()) return e.error();
    PI_TRY(check_counts(*e, s.n_tokens, path, l));
    s.expert_counts.push_back(std::move(*e));
    auto r = read_f32(*f, path, reuse_tensor(l), 1);
    if (!r.ok()) return r.error();
    if (!std::isfinite((*r)[0]) || (*r)[0] < 0 || static_cast<double>((*r)[0]) > static_cast<double>(s.expert_pairs) * (1 + 1e-6)) {
      return err("%s: layer %lld: expert reuse %g is not in [0, expert_pairs = %llu]", path.c_str(),
                 static_cast<long long>(l), static_cast<double>((*r)[0]),
                 static_cast<unsigned long long>(s.expert_pairs));
    }
    s.expert_reuse.push_back((*r)[0]);
  }
  return s;
}

Result<ActivationStats> read_stats_dir(const std::string& dir) {
  // The original's activation_N.pt (torch) files, or .npy files; .npy where a directory holds
  // both.
  std::map<int64_t, std::string> npy, pt;  // ordered by layer number
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (auto n = layer_file_number(name, "activation_", ".npy")) npy[*n] = e.path().string();
    if (auto n = layer_file_number(name, "activation_", ".pt")) pt[*n] = e.path().string();
  }
  if (ec) return err("%s: cannot list directory: %s", dir.c_str(), ec.message().c_str());
  if (npy.empty() && pt.empty()) return err("%s: no activation_N.pt or activation_N.npy files", dir.c_str());
  const bool torch = npy.empty();
  const std::map<int64_t, std::string>& files = torch ? pt : npy;
  const char* ext = torch ? "pt" : "npy";
  ActivationStats s;
  s.source = ext;
  int64_t expect = 0;
  for (const auto& [layer, path] : files) {
    if (layer != expect) {
      return err("%s: activation_%lld.%s is missing (layers must be 0..%lld)", dir.c_str(),
                 static_cast<long long>(expect), ext, static_cast<long long>(files.rbegin()->first));
    }
    auto v = torch ? read_torch_1d(path) : read_npy_1d(path);
    if (!v.ok()) return v.error();
    PI_TRY(check_counts(*v, 0, path, layer));
    s.counts.push_back(std::move(*v));
    ++expect;
  }
  // Values all <= 1 are frequencies per token (synth's expected counts): n_tokens = 1.
  // Larger values are counts over an unknown number of tokens: relative (n_tokens = 0).
  bool frequencies = true;
  for (const auto& c : s.counts) {
    for (float v : c) frequencies = frequencies && v <= 1.0f;
  }
  s.n_tokens = frequencies ? 1 : 0;
  return s;
}

}  // namespace

double ActivationStats::count_scale() const {
  if (n_tokens > 0) return 1.0 / static_cast<double>(n_tokens);
  float mx = 0;
  for (const auto& c : counts) {
    for (float v : c) mx = std::max(mx, v);
  }
  return mx > 0 ? 1.0 / static_cast<double>(mx) : 0.0;
}

Status count_routes(ActivationStats& s, int64_t layer, std::span<const int32_t> ids) {
  const int64_t k = s.n_expert_used;
  auto& counts = s.expert_counts[static_cast<size_t>(layer)];
  float& reuse = s.expert_reuse[static_cast<size_t>(layer)];
  const auto n_tok = static_cast<int64_t>(ids.size()) / k;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * k + j)];
      if (e < 0 || e >= s.n_expert)
        return err("layer %lld token %lld: expert id %d outside [0, %lld)", static_cast<long long>(layer),
                   static_cast<long long>(t), e, static_cast<long long>(s.n_expert));
      counts[static_cast<size_t>(e)] += 1.0f;
      if (t == 0) continue;
      const auto prev = ids.subspan(static_cast<size_t>((t - 1) * k), static_cast<size_t>(k));
      if (std::find(prev.begin(), prev.end(), e) != prev.end()) reuse += 1.0f;
    }
  }
  if (layer == 0 && n_tok > 1) s.expert_pairs += static_cast<uint64_t>((n_tok - 1) * k);
  return Status::Ok();
}

std::vector<double> ActivationStats::per_token(const std::vector<float>& c) const {
  const double k = count_scale();
  std::vector<double> f(c.size());
  for (size_t i = 0; i < c.size(); ++i) f[i] = std::min(1.0, static_cast<double>(c[i]) * k);
  return f;
}

std::vector<double> ActivationStats::expert_shares(int64_t layer) const {
  return per_token(expert_counts[static_cast<size_t>(layer)]);
}

double ActivationStats::reuse_rate(int64_t layer) const {
  if (expert_pairs == 0) return 0.0;
  return static_cast<double>(expert_reuse[static_cast<size_t>(layer)]) / static_cast<double>(expert_pairs);
}

std::vector<double> ActivationStats::frequencies(int64_t layer) const {
  return per_token(counts[static_cast<size_t>(layer)]);
}

Status write_activation_stats(const std::string& path, const ActivationStats& s) {
  if (s.counts.empty()) return err("%s: activation statistics have no layers", path.c_str());
  gguf::Writer w;
  PI_TRY(w.add_kv("general.architecture", gguf::Value(std::string(kStatsArch))));
  PI_TRY(w.add_kv("activation_stats.block_count", gguf::Value(static_cast<uint32_t>(s.n_layer()))));
  PI_TRY(w.add_kv("activation_stats.n_tokens", gguf::Value(s.n_tokens)));
  PI_TRY(w.add_kv("activation_stats.source", gguf::Value(s.source)));
  if (!s.model_fingerprint.empty()) {
    PI_TRY(w.add_kv("activation_stats.model_fingerprint", gguf::Value(s.model_fingerprint)));
  }
  const auto n_layer = static_cast<size_t>(s.n_layer());
  if (s.has_experts()) {
    if (s.expert_counts.size() != n_layer || s.expert_reuse.size() != n_layer || s.n_expert_used <= 0 ||
        s.n_expert_used > s.n_expert) {
      return err("%s: expert statistics of %zu / %zu layers (want %zu), %lld of %lld experts per token",
                 path.c_str(), s.expert_counts.size(), s.expert_reuse.size(), n_layer,
                 static_cast<long long>(s.n_expert_used), static_cast<long long>(s.n_expert));
    }
    PI_TRY(w.add_kv("activation_stats.expert_count", gguf::Value(static_cast<uint32_t>(s.n_expert))));
    PI_TRY(w.add_kv("activation_stats.expert_used_count", gguf::Value(static_cast<uint32_t>(s.n_expert_used))));
    PI_TRY(w.add_kv("activation_stats.expert_pairs", gguf::Value(s.expert_pairs)));
  }
  // Neuron counts: every layer, or (a mixture of experts that are not ReLU-family) none.
  const bool neurons = !s.has_experts() || !s.counts[0].empty();
  std::vector<std::span<const float>> parts;
  for (size_t l = 0; l < n_layer; ++l) {
    const auto il = static_cast<int64_t>(l);
    const auto& c = s.counts[l];
    if (neurons) {
      if (c.empty()) return err("%s: layer %lld has no neurons", path.c_str(), static_cast<long long>(il));
      PI_TRY(check_counts(c, s.n_tokens, path, il));
      PI_TRY(w.add_tensor(layer_tensor(il), DType::F32, Shape{static_cast<int64_t>(c.size())}));
      parts.emplace_back(c);
    } else if (!c.empty()) {
      return err("%s: layer %lld has neuron counts, layer 0 none", path.c_str(), static_cast<long long>(il));
    }
    if (!s.has_experts()) continue;
    const auto& e = s.expert_counts[l];
    if (static_cast<int64_t>(e.size()) != s.n_expert)
      return err("%s: layer %lld has %zu expert counts, want %lld", path.c_str(), static_cast<long long>(il),
                 e.size(), static_cast<long long>(s.n_expert));
    PI_TRY(check_counts(e, s.n_tokens, path, il));
    PI_TRY(w.add_tensor(expert_tensor(il), DType::F32, Shape{s.n_expert}));
    parts.emplace_back(e);
    PI_TRY(w.add_tensor(reuse_tensor(il), DType::F32, Shape{int64_t{1}}));
    parts.emplace_back(&s.expert_reuse[l], 1);
  }
  PI_TRY(w.begin(path));
  for (std::span<const float> p : parts) PI_TRY(w.write(std::as_bytes(p)));
  return w.finish();
}

Result<ActivationStats> read_activation_stats(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return read_stats_dir(path);
  if (!std::filesystem::exists(path, ec)) {
    return err("%s: no such activation statistics file or directory", path.c_str());
  }
  return read_stats_file(path);
}

Status check_stats_fit(const ActivationStats& s, int64_t n_layer, int64_t n_ff,
                       const std::string& fingerprint, const std::string& what) {
  if (!s.model_fingerprint.empty() && !fingerprint.empty() && s.model_fingerprint != fingerprint) {
    return err("%s: statistics were measured on another model (fingerprint %s, this model %s)",
               what.c_str(), s.model_fingerprint.c_str(), fingerprint.c_str());
  }
  if (s.n_layer() != n_layer) {
    return err("%s: statistics have %lld layers, the model %lld", what.c_str(),
               static_cast<long long>(s.n_layer()), static_cast<long long>(n_layer));
  }
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto n = static_cast<int64_t>(s.counts[static_cast<size_t>(l)].size());
    if (n != n_ff) {
      return err("%s: layer %lld has %lld neurons, the model %lld", what.c_str(),
                 static_cast<long long>(l), static_cast<long long>(n),
                 static_cast<long long>(n_ff));
    }
  }
  return Status::Ok();
}

std::optional<int64_t> layer_file_number(std::string_view filename, std::string_view prefix,
                                         std::string_view ext) {
  if (filename.size() <= prefix.size() + ext.size()) return std::nullopt;
  if (filename.substr(0, prefix.size()) != prefix) return std::nullopt;
  if (filename.substr(filename.size() - ext.size()) != ext) return std::nullopt;
  std::string_view digits = filename.substr(prefix.size(), filename.size() - prefix.size() - ext.size());
  if (digits.size() > 9) return std::nullopt;
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  int64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

Result<std::vector<float>> read_npy_1d(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("%s: cannot open", path.c_str());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    return err("%s: offset 0: not a NumPy .npy file", path.c_str());
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return err("%s: offset 8: truncated .npy header", path.c_str());
    uint32_t n = 0;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    header_at = 12;
  } else {
    return err("%s: offset 6: unsupported .npy version %u", path.c_str(), major);
  }
  if (header_at + header_len > bytes.size()) {
    return err("%s: offset %zu: .npy header runs past end of file", path.c_str(), header_at);
  }
  const std::string header = bytes.substr(header_at, header_len);
  auto field = [&](const char* key) -> std::string {
    const size_t k = header.find(key);
    if (k == std::string::npos) return {};
    size_t v = header.find(':', k);
    if (v == std::string::npos) return {};
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    size_t end = v;
    if (end < header.size() && header[end] == '(') {
      end = header.find(')', end);
      return end == std::string::npos ? std::string() : header.substr(v, end - v + 1);
    }
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
    return header.substr(v, end - v);
  };
  const std::string descr = field("'descr'");
  const std::string fortran = field("'fortran_order'");
  const std::string shape = field("'shape'");
  size_t elem = 0;
  if (descr == "'<f4'" || descr == "'<i4'") elem = 4;
  else if (descr == "'<f8'" || descr == "'<i8'") elem = 8;
  else return err("%s: .npy dtype %s is not one of <f4 <f8 <i4 <i8", path.c_str(), descr.c_str());
  if (fortran != "False" && fortran != "True") {
    return err("%s: .npy header has no fortran_order", path.c_str());
  }
  // A 1-D shape reads "(n,)".
  if (shape.size() < 4 || shape.front() != '(' || shape.substr(shape.size() - 2) != ",)") {
    return err("%s: .npy shape %s is not 1-D", path.c_str(), shape.c_str());
  }
  int64_t n = 0;
  for (size_t i = 1; i + 2 < shape.size(); ++i) {
    const char c = shape[i];
    if (c < '0' || c > '9' || n > (int64_t{1} << 40)) {
      return err("%s: .npy shape %s is not 1-D", path.c_str(), shape.c_str());
    }
    n = n * 10 + (c - '0');
  }
  const size_t data_at = header_at + header_len;
  if (n <= 0 || (bytes.size() - data_at) / elem < static_cast<size_t>(n)) {
    return err("%s: offset %zu: .npy data of %lld elements runs past end of file", path.c_str(),
               data_at, static_cast<long long>(n));
  }
  std::vector<float> out(static_cast<size_t>(n));
  const char* p = bytes.data() + data_at;
  for (size_t i = 0; i < out.size(); ++i, p += elem) {
    if (descr == "'<f4'") { float v; std::memcpy(&v, p, 4); out[i] = v; }
    else if (descr == "'<f8'") { double v; std::memcpy(&v, p, 8); out[i] = static_cast<float>(v); }
    else if (descr == "'<i4'") { int32_t v; std::memcpy(&v, p, 4); out[i] = static_cast<float>(v); }
    else { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<float>(v); }
  }
  return out;
}

}  // namespace pi::sparse
