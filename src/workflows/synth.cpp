// Synthetic models (include/powerinfer/synth.h): the request resolved into a specification
// (synth_spec.h), the file streamed (synth_model.h), a report of what was written.
#include "powerinfer/synth.h"

#include <algorithm>
#include <thread>

#include "synth_model.h"
#include "synth_spec.h"

namespace pi {

Result<SynthReport> synthesize(const SynthParams& p) {
  if (p.threads < 0) return with_code(err("-t must be >= 0 (0: all hardware threads)"), ErrorCode::BadRequest);
  auto spec = workflows::synth::resolve(p);
  if (!spec.ok()) return with_code(spec.error(), ErrorCode::BadRequest);
  const int threads = p.threads > 0 ? p.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto rep = workflows::synth::write_model(*spec, threads, p.progress);
  if (!rep.ok()) return rep.error();
  SynthReport r;
  r.name = spec->name;
  r.powerinfer = spec->pwri;
  r.n_tensors = rep->n_tensors;
  r.file_bytes = rep->file_bytes;
  r.alpha = rep->alpha;
  r.expected_activity = rep->expected_activity;
  if (spec->is_moe()) {
    r.n_expert = spec->n_expert;
    r.n_expert_used = spec->n_expert_used;
    r.n_ff_exp = spec->n_ff_exp;
    r.reglu_experts = spec->act == model::Activation::ReLU;
  }
  r.hot_fraction = spec->hot_fraction;
  r.hot_share = spec->hot_share;
  if (spec->pwri) {
    r.predictor_rank = spec->rank;
    r.threshold = static_cast<double>(spec->threshold());
  }
  r.n_activation_files = rep->n_activation_files;
  r.activation_dir = spec->activation_dir;
  r.stats_file = workflows::synth::kStatsFileName;
  return r;
}

}  // namespace pi
