#include "sparse/act_sparsity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pi::sparse {
namespace {

// Levels are stored as f32 and asked for in decimal: 0.9 and 0.9f are the same level.
constexpr double kLevelSlack = 1e-6;

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

// The method key `key` of f is `want`, or an error naming the file, key and both values.
Status check_method(const gguf::File& f, const char* key, const char* want) {
  auto method = f.get_string(key);
  if (!method.ok()) return method.error();
  if (*method != want) {
    return err("%s: key %s is '%s'; this engine knows '%s'", f.path().c_str(), key,
               method->c_str(), want);
  }
  return Status::Ok();
}

// The allocation keys of a calibrated file into c (its sites, levels and n_layer read).
Status read_allocation(const gguf::File& f, ActSparsityCalibration& c) {
  const std::string& path = f.path();
  PI_TRY(check_method(f, kAllocMethodKey, kAllocMethod));
  auto levels = numbers(f, kAllocLevelsKey);
  if (!levels.ok()) return levels.error();
  c.alloc_levels = std::move(*levels);
  if (c.alloc_levels.empty() || c.alloc_levels[0] != 0.0 || !(c.alloc_levels.back() < 1.0))
    return err("%s: key %s must start at 0 and stay below 1", path.c_str(), kAllocLevelsKey);
  for (size_t i = 1; i < c.alloc_levels.size(); ++i) {
    if (!(c.alloc_levels[i] > c.alloc_levels[i - 1]))
      return err("%s: key %s must be strictly ascending", path.c_str(), kAllocLevelsKey);
  }
  const size_t want = c.alloc_levels.size() * static_cast<size_t>(c.n_layer);
  for (Site s : kAllSites) {
    if (!has_site(c.sites, s)) continue;
    const std::string key = allocation_key(s);
    if (f.find(key) == nullptr) {
      return err("%s: key %s is missing (the file has an allocation and lists site %s)",
                 path.c_str(), key.c_str(), site_name(s));
    }
    auto a = numbers(f, key);
    if (!a.ok()) return a.error();
    if (a->size() != want) {
      return err("%s: key %s holds %zu levels, expected %zu (%zu model-wide levels x %lld layers)",
                 path.c_str(), key.c_str(), a->size(), want, c.alloc_levels.size(),
                 static_cast<long long>(c.n_layer));
    }
    std::vector<float>& dst = c.alloc[static_cast<size_t>(s)];
    for (double x : *a) {
      if (!(x >= 0.0 && x <= c.levels.back() + kLevelSlack))
        return err("%s: key %s holds %g (site levels must be within the calibrated 0 to %g)",
                   path.c_str(), key.c_str(), x, c.levels.back());
      dst.push_back(static_cast<float>(x));
    }
  }
  return Status::Ok();
}

// Linear interpolation on an ascending grid: the two points around x and x's weight
// between them (x beyond the last point: the last point).
struct Bracket {
  size_t lo, hi;
  double w;
};
Bracket bracket(const std::vector<double>& g, double x) {
  size_t hi = 0;
  while (hi + 1 < g.size() && g[hi] < x) ++hi;
  const size_t lo = hi > 0 && g[hi] > x ? hi - 1 : hi;
  const double span = g[hi] - g[lo];
  return {lo, hi, span > 0 ? (x - g[lo]) / span : 0.0};
}

// The threshold of site s, layer l at `level` (linear between the calibrated levels around it).
float threshold_at(const ActSparsityCalibration& c, Site s, int64_t l, double level) {
  const Bracket b = bracket(c.levels, level);
  const double lo = c.threshold(s, l, b.lo), hi = c.threshold(s, l, b.hi);
  return static_cast<float>(lo + b.w * (hi - lo));
}

// The allocation's level of site s, layer l at model-wide sparsity m (within alloc_levels).
double alloc_level_at(const ActSparsityCalibration& c, Site s, int64_t l, double m) {
  const Bracket b = bracket(c.alloc_levels, m);
  const double lo = c.alloc_level(s, b.lo, l), hi = c.alloc_level(s, b.hi, l);
  return lo + b.w * (hi - lo);
}

// A level in [0, 1) from text, or an error naming `what`.
Result<double> parse_level(std::string_view text, const char* what) {
  const std::string t(text);
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !(x >= 0.0 && x < 1.0)) {
    return err("%s '%s': a level must be a number in [0, 1) (the share of activations zeroed, "
               "e.g. 0.4)",
               what, t.c_str());
  }
  return x;
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
std::string allocation_key(Site s) { return std::string(kKeyPrefix) + site_name(s) + ".allocation"; }

bool has_act_sparsity(const gguf::File& f) { return f.find(kMethodKey) != nullptr; }

Result<ActSparsityCalibration> read_act_sparsity(const gguf::File& f, int64_t n_layer) {
  const std::string& path = f.path();
  PI_TRY(check_method(f, kMethodKey, kMethod));
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
  if (f.find(kAllocLevelsKey) != nullptr) PI_TRY(read_allocation(f, c));
  c.tokens = static_cast<uint64_t>(std::max<int64_t>(0, f.get_int_or(kTokensKey, 0)));
  if (const gguf::Value* v = f.find(kTextKey); v != nullptr && v->as_string() != nullptr)
    c.text = *v->as_string();
  return c;
}

Status parse_level_request(std::string_view text, const char* what, LevelRequest& r) {
  if (text.empty()) return err("%s: empty (give a level such as 0.4, or SITE=LEVEL)", what);
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      auto x = parse_level(item, what);
      if (!x.ok()) return x.error();
      r.sparsity = *x;
      continue;
    }
    auto site = parse_site(item.substr(0, eq));
    if (!site) {
      return err("%s: unknown site '%.*s' in '%.*s' (sites: attn_in, attn_out, ffn_in, ffn_gate)",
                 what, static_cast<int>(eq), item.data(), static_cast<int>(item.size()),
                 item.data());
    }
    auto x = parse_level(item.substr(eq + 1), what);
    if (!x.ok()) return x.error();
    r.site[static_cast<size_t>(*site)] = *x;
  }
  return Status::Ok();
}

std::string site_levels_string(const std::array<std::optional<double>, kNumSites>& site) {
  std::string out;
  for (Site s : kAllSites) {
    const auto& v = site[static_cast<size_t>(s)];
    if (!v) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s=%.17g", out.empty() ? "" : ",", site_name(s), *v);
    out += buf;
  }
  return out;
}

double model_wide(const std::array<double, kNumSites>& weight,
                  const std::array<double, kNumSites>& level) {
  double m = 0;
  for (size_t i = 0; i < kNumSites; ++i) m += weight[i] * level[i];
  return m;
}

Result<SiteThresholds> resolve_thresholds(const ActSparsityCalibration& c, const LevelRequest& req,
                                          SiteSet wanted, const char* what) {
  const double last = c.levels.back();
  const double sparsity = req.sparsity.value_or(c.target);
  const bool allocated = c.allocated() && !req.uniform;
  if ((wanted & ~c.sites) != 0) {
    return err("%s: the file has no thresholds for %s (it has %s)", what,
               site_list(wanted & ~c.sites).c_str(), site_list(c.sites).c_str());
  }
  bool all_overridden = true;
  for (Site s : kAllSites) {
    const auto& o = req.site[static_cast<size_t>(s)];
    if (!has_site(wanted, s)) continue;
    all_overridden = all_overridden && o.has_value();
    if (o && !(*o >= 0.0 && *o <= last + kLevelSlack)) {
      return err("%s %s=%g: the file is calibrated for levels 0 to %g", what, site_name(s), *o,
                 last);
    }
  }
  if (!all_overridden) {
    if (allocated && !(sparsity >= 0.0 && sparsity <= c.alloc_levels.back() + kLevelSlack)) {
      return err("%s %g: the file's allocation covers model-wide sparsities 0 to %.3f (add "
                 "--sparsity-alloc uniform for the same level at every site, up to %g)",
                 what, sparsity, c.alloc_levels.back(), last);
    }
    if (!allocated && !(sparsity >= 0.0 && sparsity <= last + kLevelSlack)) {
      return err("%s %g: the file is calibrated for sparsities 0 to %g (a share of activations "
                 "zeroed; e.g. 0.4)",
                 what, sparsity, last);
    }
  }
  SiteThresholds r;
  r.sparsity = sparsity;
  r.allocated = allocated && !all_overridden;  // some level comes from the allocation
  r.sites = wanted;
  for (Site s : kAllSites) {
    if (!has_site(wanted, s)) continue;
    const auto i = static_cast<size_t>(s);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const double level = req.site[i]        ? *req.site[i]
                           : allocated        ? alloc_level_at(c, s, l, sparsity)
                                              : sparsity;
      // Within the slack of the last level (f32 keys against decimal levels): the last level.
      const double clamped = std::min(level, last);
      r.levels[i].push_back(static_cast<float>(clamped));
      r.per_layer[i].push_back(threshold_at(c, s, l, clamped));
    }
  }
  return r;
}

}  // namespace pi::sparse
