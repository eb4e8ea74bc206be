#include "sparse/act_sparsity.h"

#include <algorithm>
#include <cmath>

namespace pi::sparse {
namespace {

constexpr std::array<const char*, kNumSites> kSiteNames = {"attn_in", "attn_out", "ffn_in",
                                                           "ffn_gate"};

// The numbers of an array-valued key, or an error naming the file and key.
Result<std::vector<double>> numbers(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return err("%s: key %s is missing", f.path().c_str(), key.c_str());
  const gguf::Array* a = v->as_array();
  if (a == nullptr) return err("%s: key %s must be an array of numbers", f.path().c_str(), key.c_str());
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const gguf::Value& item : a->items) {
    auto x = item.as_number();
    if (!x) return err("%s: key %s must be an array of numbers", f.path().c_str(), key.c_str());
    out.push_back(*x);
  }
  return out;
}

}  // namespace

const char* site_name(Site s) { return kSiteNames[static_cast<size_t>(s)]; }

std::optional<Site> parse_site(std::string_view name) {
  for (Site s : kAllSites)
    if (name == site_name(s)) return s;
  return std::nullopt;
}

Result<SiteSet> parse_sites(std::string_view list, const char* what) {
  SiteSet out = 0;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (name.empty()) continue;
    auto s = parse_site(name);
    if (!s) {
      return err("%s: unknown site '%.*s' (sites: attn_in, attn_out, ffn_in, ffn_gate)", what,
                 static_cast<int>(name.size()), name.data());
    }
    out |= site_bit(*s);
  }
  return out;
}

std::string site_list(SiteSet s) {
  std::string out;
  for (Site site : kAllSites) {
    if (!has_site(s, site)) continue;
    if (!out.empty()) out += ',';
    out += site_name(site);
  }
  return out;
}

std::string thresholds_key(Site s) { return std::string(kKeyPrefix) + site_name(s) + ".thresholds"; }

bool has_act_sparsity(const gguf::File& f) { return f.find(kMethodKey) != nullptr; }

Result<ActSparsityCalibration> read_act_sparsity(const gguf::File& f, int64_t n_layer) {
  const std::string& path = f.path();
  auto method = f.get_string(kMethodKey);
  if (!method.ok()) return method.error();
  if (*method != kMethod) {
    return err("%s: key %s is '%s'; this engine knows '%s'", path.c_str(), kMethodKey,
               method->c_str(), kMethod);
  }
  ActSparsityCalibration c;
  c.n_layer = n_layer;
  const gguf::Value* sites = f.find(kSitesKey);
  const gguf::Array* sa = sites != nullptr ? sites->as_array() : nullptr;
  if (sa == nullptr) return err("%s: key %s (an array of site names) is missing", path.c_str(), kSitesKey);
  for (const gguf::Value& v : sa->items) {
    const std::string* name = v.as_string();
    auto s = name != nullptr ? parse_site(*name) : std::nullopt;
    if (!s) {
      return err("%s: key %s: unknown site '%s' (sites: attn_in, attn_out, ffn_in, ffn_gate)",
                 path.c_str(), kSitesKey, name != nullptr ? name->c_str() : "?");
    }
    c.sites |= site_bit(*s);
  }
  if (c.sites == 0) return err("%s: key %s lists no site", path.c_str(), kSitesKey);

  auto levels = numbers(f, kLevelsKey);
  if (!levels.ok()) return levels.error();
  c.levels = std::move(*levels);
  if (c.levels.empty() || c.levels[0] != 0.0 || c.levels.back() > kMaxSparsity) {
    return err("%s: key %s must start at 0 and end at most at %.2f", path.c_str(), kLevelsKey,
               kMaxSparsity);
  }
  for (size_t i = 1; i < c.levels.size(); ++i) {
    if (!(c.levels[i] > c.levels[i - 1]))
      return err("%s: key %s must be strictly ascending", path.c_str(), kLevelsKey);
  }
  auto target = f.get_number(kTargetKey);
  if (!target.ok()) return target.error();
  c.target = *target;
  if (!(c.target >= 0.0 && c.target <= c.levels.back())) {
    return err("%s: key %s = %g is outside the calibrated levels [0, %g]", path.c_str(),
               kTargetKey, c.target, c.levels.back());
  }
  const size_t want = static_cast<size_t>(n_layer) * c.levels.size();
  for (Site s : kAllSites) {
    if (!has_site(c.sites, s)) continue;
    const std::string key = thresholds_key(s);
    if (f.find(key) == nullptr) {
      return err("%s: key %s is missing (the file lists site %s in %s)", path.c_str(),
                 key.c_str(), site_name(s), kSitesKey);
    }
    auto t = numbers(f, key);
    if (!t.ok()) return t.error();
    if (t->size() != want) {
      return err("%s: key %s holds %zu thresholds, expected %zu (%lld layers x %zu levels)",
                 path.c_str(), key.c_str(), t->size(), want, static_cast<long long>(n_layer),
                 c.levels.size());
    }
    std::vector<float>& dst = c.thresholds[static_cast<size_t>(s)];
    for (double x : *t) {
      if (!(x >= 0.0) || !std::isfinite(x))
        return err("%s: key %s holds %g (thresholds must be finite and >= 0)", path.c_str(),
                   key.c_str(), x);
      dst.push_back(static_cast<float>(x));
    }
  }
  c.tokens = static_cast<uint64_t>(std::max<int64_t>(0, f.get_int_or(kTokensKey, 0)));
  if (const gguf::Value* v = f.find(kTextKey); v != nullptr && v->as_string() != nullptr)
    c.text = *v->as_string();
  return c;
}

Result<SiteThresholds> resolve_thresholds(const ActSparsityCalibration& c, double sparsity,
                                          SiteSet wanted, const char* what) {
  const double last = c.levels.back();
  if (!(sparsity >= 0.0 && sparsity <= last)) {
    return err("%s %g: the file is calibrated for sparsities 0 to %g (a share of activations "
               "zeroed; e.g. 0.4)",
               what, sparsity, last);
  }
  if ((wanted & ~c.sites) != 0) {
    return err("%s: the file has no thresholds for %s (it has %s)", what,
               site_list(wanted & ~c.sites).c_str(), site_list(c.sites).c_str());
  }
  SiteThresholds r;
  r.sparsity = sparsity;
  r.sites = wanted;
  // The bracketing levels: lo <= sparsity <= hi.
  size_t hi = 0;
  while (hi + 1 < c.levels.size() && c.levels[hi] < sparsity) ++hi;
  const size_t lo = hi > 0 && c.levels[hi] > sparsity ? hi - 1 : hi;
  const double span = c.levels[hi] - c.levels[lo];
  const double w = span > 0 ? (sparsity - c.levels[lo]) / span : 0.0;
  for (Site s : kAllSites) {
    if (!has_site(wanted, s)) continue;
    std::vector<float>& out = r.per_layer[static_cast<size_t>(s)];
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const double a = c.threshold(s, l, lo), b = c.threshold(s, l, hi);
      out.push_back(static_cast<float>(a + w * (b - a)));
    }
  }
  return r;
}

}  // namespace pi::sparse
