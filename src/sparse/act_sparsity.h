// Training-free activation sparsity for ordinary (SiLU) models: the calibration that
// `powerinfer calibrate` writes into a model file and the thresholds a run resolves from it.
//
// Per layer, four "sites" may be sparsified, each by zeroing the entries whose magnitude is
// below a per-layer threshold (docs/ACT_SPARSITY.md):
//
//   attn_in   the normalized attention input h, read by q, k, v    (skips rows of attn_{q,k,v}_t)
//   attn_out  the attention output, read by the output projection (skips rows of attn_output_t)
//   ffn_in    the normalized FFN input x, read by gate and up      (skips rows of ffn_gate_t)
//   ffn_gate  the gate activation act(gate · x): neuron i is computed only where
//             |act(gate_i · x)| >= t (the rows of ffn_up and ffn_down_t of the others are skipped)
//
// A threshold is calibrated for a grid of sparsity levels (the share of entries it zeroes on
// the calibration text), so a run picks any level up to the grid's last by interpolating
// between neighbours; the file's target is the default.
//
// A file may also hold an allocation (calibrate's greedy search): for a grid of model-wide
// sparsities (the share of the layers' projection weight bytes left unread) the level of every
// site of every layer, so that a run asking for a model-wide share gets the mix of site levels
// that costs the least accuracy instead of the same level everywhere.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/layer_tensors.h"
#include "model/model.h"

namespace pi::sparse {

// The sites are the model's (model/layer_tensors.h, whose rows say which matrices each skips).
using model::kAllSites;
using model::kNumSites;
using model::Site;

const char* site_name(Site s);  // "attn_in", "attn_out", "ffn_in", "ffn_gate"
std::optional<Site> parse_site(std::string_view name);
// A set of sites as bits (1 << Site).
using SiteSet = unsigned;
inline constexpr SiteSet kAllSiteBits = 0xF;
inline bool has_site(SiteSet s, Site site) { return (s >> static_cast<int>(site)) & 1u; }
inline SiteSet site_bit(Site s) { return 1u << static_cast<int>(s); }
// "attn_in,ffn_gate" -> bits; fails naming `what` (a flag) and the unknown name.
Result<SiteSet> parse_sites(std::string_view list, const char* what);
std::string site_list(SiteSet s);  // "attn_in,ffn_gate"

// Metadata keys (docs/FORMATS.md). Per-site thresholds: kKeyPrefix + site + ".thresholds".
inline constexpr const char* kKeyPrefix = "powerinfer.act_sparsity.";
inline constexpr const char* kMethodKey = model::kCalibrationKey;
inline constexpr const char* kMethod = "magnitude_threshold";
inline constexpr const char* kSitesKey = "powerinfer.act_sparsity.sites";
inline constexpr const char* kTargetKey = "powerinfer.act_sparsity.target";
inline constexpr const char* kLevelsKey = "powerinfer.act_sparsity.levels";
inline constexpr const char* kTokensKey = "powerinfer.act_sparsity.calibration_tokens";
inline constexpr const char* kTextKey = "powerinfer.act_sparsity.calibration_text";
std::string thresholds_key(Site s);
// Allocation keys: the model-wide levels, the method, and per site kKeyPrefix + site + ".allocation".
inline constexpr const char* kAllocLevelsKey = "powerinfer.act_sparsity.allocation.levels";
inline constexpr const char* kAllocMethodKey = "powerinfer.act_sparsity.allocation.method";
inline constexpr const char* kAllocMethod = "greedy_kl";
std::string allocation_key(Site s);

// The largest sparsity a run may ask for (the last calibrated level is at most this).
inline constexpr double kMaxSparsity = 0.95;

// What a calibrated file holds.
struct ActSparsityCalibration {
  SiteSet sites = 0;
  double target = 0;
  std::vector<double> levels;  // ascending, levels[0] == 0
  int64_t n_layer = 0;
  // Per site: thresholds [n_layer][levels] (layer-major); empty for sites not calibrated.
  std::array<std::vector<float>, kNumSites> thresholds;
  uint64_t tokens = 0;
  std::string text;
  // The allocation, when the file has one: model-wide levels ascending from 0, and per
  // calibrated site the level of each layer at each of them, [point][layer] (point-major).
  std::vector<double> alloc_levels;
  std::array<std::vector<float>, kNumSites> alloc;

  float threshold(Site s, int64_t layer, size_t level) const {
    return thresholds[static_cast<size_t>(s)][static_cast<size_t>(layer) * levels.size() + level];
  }
  bool allocated() const { return !alloc_levels.empty(); }
  float alloc_level(Site s, size_t point, int64_t layer) const {
    return alloc[static_cast<size_t>(s)][point * static_cast<size_t>(n_layer) +
                                         static_cast<size_t>(layer)];
  }
};

// True when the file declares a calibration (powerinfer.act_sparsity.method).
bool has_act_sparsity(const gguf::File& f);

// Reads and checks the calibration of `f` for a model of n_layer layers. Fails with one line
// naming the file and key for: an unknown method, an empty or unknown site list, levels that
// are not ascending from 0 within [0, kMaxSparsity], a target outside them, a missing
// thresholds key for a listed site, a thresholds array of the wrong length, negative or NaN
// thresholds; and for an allocation (optional): an unknown method, model-wide levels not
// strictly ascending from 0 within [0, 1), a listed site without its allocation key, arrays of
// the wrong length, site levels outside the calibrated levels.
Result<ActSparsityCalibration> read_act_sparsity(const gguf::File& f, int64_t n_layer);

// What a run asks for: a sparsity (model-wide through the file's allocation when it has one
// and `uniform` is not set, else the level of every site; unset: the file's target) and levels
// for single sites that override it.
struct LevelRequest {
  std::optional<double> sparsity;
  std::array<std::optional<double>, kNumSites> site;
  bool uniform = false;
};

// Parses "0.4", "ffn_in=0.3,attn_out=0.6" or "0.4,ffn_in=0.3" into `r` (a number sets
// r.sparsity, SITE=LEVEL a site's level); each level in [0, 1). Errors name `what`.
Status parse_level_request(std::string_view text, const char* what, LevelRequest& r);
// "attn_in=0.3,ffn_gate=0.55" for the sites set in `site` (the inverse of the site part).
std::string site_levels_string(const std::array<std::optional<double>, kNumSites>& site);

// The thresholds a run uses: per site, one value per layer (empty for sites switched off).
struct SiteThresholds {
  double sparsity = 0;   // the sparsity asked for (model-wide when `allocated`)
  bool allocated = false;  // site levels from the file's allocation
  SiteSet sites = 0;
  std::array<std::vector<float>, kNumSites> per_layer;
  std::array<std::vector<float>, kNumSites> levels;  // the level of each layer's threshold

  bool on(Site s) const { return has_site(sites, s); }
  float at(Site s, int64_t layer) const {
    return per_layer[static_cast<size_t>(s)][static_cast<size_t>(layer)];
  }
};

// Counters of one site of one layer, summed over the tokens run since the last reset.
struct SiteLayerStats {
  int64_t tokens = 0;
  int64_t entries = 0;  // entries thresholded (tokens x width)
  int64_t kept = 0;     // entries at or above the threshold
  uint64_t bytes = 0;   // weight bytes the products of the kept entries read
  double seconds = 0;   // wall time of the site's products
};
using SiteStats = std::array<std::vector<SiteLayerStats>, kNumSites>;  // [site][layer]

// The thresholds for `req` of the calibrated sites in `wanted`. A site's level is its override,
// else the allocation's level of each layer at req.sparsity (linear interpolation between the
// model-wide levels around it) when the file has an allocation and the request is not uniform,
// else req.sparsity; the threshold of a level interpolates linearly between the two calibrated
// levels around it. Fails for a level outside [0, last level], a model-wide sparsity beyond
// the allocation (naming `what`, e.g. the flag) or a wanted site the file has not calibrated.
Result<SiteThresholds> resolve_thresholds(const ActSparsityCalibration& c, const LevelRequest& req,
                                          SiteSet wanted, const char* what);

// The model-wide sparsity of per-site levels: sum over sites of weight[s] * level[s], where
// weight[s] is the share of the layers' projection bytes whose reads site s cuts.
double model_wide(const std::array<double, kNumSites>& weight,
                  const std::array<double, kNumSites>& level);

}  // namespace pi::sparse
