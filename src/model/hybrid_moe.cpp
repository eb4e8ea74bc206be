#include "model/hybrid_moe.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/log.h"
#include "model/layout_cache.h"

namespace pi::model {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }
size_t f32_bytes(int64_t n) { return sz(n) * sizeof(float); }

bool cpu_layer_with_device_experts(const MoeSplit& s) {
  for (size_t il = 0; il < s.attn_on_device.size(); ++il)
    if (!s.attn_on_device[il] && !s.device_experts[il].empty()) return true;
  return false;
}

}  // namespace

HybridMoeFfn::HybridMoeFfn(const HParams& hp, std::unique_ptr<MoeFfn> host_moe, std::unique_ptr<MoeFfn> dev_moe,
                           backend::Device& dev, MoeSplit split)
    : hp_(hp), host_(std::move(host_moe)), dev_moe_(std::move(dev_moe)), dev_(dev), split_(std::move(split)) {}

std::vector<uint64_t> HybridMoeFfn::device_allocations(const HParams& hp, const MoeSplit& split, int64_t max_tokens) {
  if (!cpu_layer_with_device_experts(split)) return {};
  return {f32_bytes(max_tokens * hp.n_embd)};
}

Result<std::unique_ptr<HybridMoeFfn>> HybridMoeFfn::create(const HParams& hp, std::unique_ptr<MoeFfn> host_moe,
                                                           std::unique_ptr<MoeFfn> dev_moe, backend::Device& dev,
                                                           MoeSplit split, int64_t max_tokens,
                                                           const ModelWeights* host_w, const ModelWeights* dev_w) {
  const auto n_layer = sz(hp.n_layer);
  if (split.attn_on_device.size() != n_layer || split.route_on_device.size() != n_layer ||
      split.device_experts.size() != n_layer)
    return err("hybrid MoE: the split describes %zu layers, the model has %zu", split.attn_on_device.size(), n_layer);
  bool device_work = false;
  for (size_t il = 0; il < n_layer; ++il) {
    device_work = device_work || split.attn_on_device[il] || !split.device_experts[il].empty();
    if (split.route_on_device[il] && !split.attn_on_device[il])
      return err("hybrid MoE: layer %zu routes on the device but its attention is on the CPU", il);
  }
  if (device_work && dev_moe == nullptr) return err("hybrid MoE: device work without the device's MoE step");
  std::unique_ptr<HybridMoeFfn> f(
      new HybridMoeFfn(hp, std::move(host_moe), std::move(dev_moe), dev, std::move(split)));
  f->split_.cache_experts.resize(n_layer);
  f->on_device_.assign(n_layer, std::vector<uint8_t>(sz(hp.n_expert), 0));
  f->slots_.resize(n_layer);
  bool cache = false;
  size_t staging = 0;
  for (size_t il = 0; il < n_layer; ++il) {
    const std::vector<int32_t>& ids = f->split_.device_experts[il];
    const std::vector<int32_t>& cached = f->split_.cache_experts[il];
    Slots& sl = f->slots_[il];
    sl.slot_of.assign(sz(hp.n_expert), -1);
    sl.n_static = static_cast<int64_t>(ids.size());
    for (size_t s = 0; s < ids.size() + cached.size(); ++s) {
      const bool is_static = s < ids.size();
      const int32_t e = is_static ? ids[s] : cached[s - ids.size()];
      if (e < 0 || e >= hp.n_expert || (is_static && s > 0 && ids[s - 1] >= e) || sl.slot_of[sz(e)] >= 0)
        return err("hybrid MoE: layer %zu: device experts must be distinct ids below %lld, the static ones "
                   "ascending", il, static_cast<long long>(hp.n_expert));
      sl.slot_of[sz(e)] = static_cast<int32_t>(s);
      sl.expert.push_back(e);
      f->on_device_[il][sz(e)] = 1;
    }
    sl.last_use.assign(sl.expert.size(), 0);
    if (!cached.empty()) {
      cache = true;
      if (host_w == nullptr || dev_w == nullptr) return err("hybrid MoE: an expert cache needs both sides' weights");
      size_t one = 0;
      each_expert_stack(dev_w->layers[il].ffn, [&](const Matrix& st) {
        one += static_cast<size_t>(st.nbytes()) / sl.expert.size();
      });
      staging = std::max(staging, one * cached.size());
    }
    if (f->dev_moe_ != nullptr) f->dev_moe_->set_expert_slots(static_cast<int64_t>(il), sl.slot_of);
  }
  f->host_w_ = host_w;
  f->dev_w_ = dev_w;
  if (cache) {
    auto b = dev.alloc_host(staging, "expert cache uploads (host)");
    if (!b.ok()) return b.error();
    f->staging_ = std::move(*b);
  }
  f->counters_.resize(n_layer);
  for (uint64_t bytes : device_allocations(hp, f->split_, max_tokens)) {
    auto b = dev.alloc(sz(static_cast<int64_t>(bytes)), "MoE FFN inputs");
    if (!b.ok()) return b.error();
    f->x_dev_ = std::move(*b);
  }
  if (device_work) {
    const int64_t places = max_tokens * hp.n_expert_used;
    backend::Buffer* bufs[] = {&f->x_h_, &f->ye_h_, &f->out_h_};
    const size_t sizes[] = {f32_bytes(max_tokens * hp.n_embd), f32_bytes(places * hp.n_embd),
                            f32_bytes(max_tokens * hp.n_embd)};
    for (size_t i = 0; i < 3; ++i) {
      auto b = dev.alloc_host(sizes[i], "MoE hand-off (host)");
      if (!b.ok()) return b.error();
      *bufs[i] = std::move(*b);
    }
  }
  return f;
}

const float* HybridMoeFfn::fetch(int64_t il, const float* x, int64_t m, bool then_route) {
  dev_.copy_out(backend::kCompute, x_h_.data(), x, f32_bytes(m * hp_.n_embd));
  ++counters_[sz(il)].copies_out;
  if (then_route) {
    dev_moe_->route(il, x, m);  // its logits' sync covers the copy
  } else {
    dev_.sync(backend::kCompute);
  }
  copy_pending_ = false;
  return x_h_.as<float>();
}

void HybridMoeFfn::before_attention(int64_t il, const float* x, int64_t m) {
  if (!split_.attn_on_device[sz(il)]) {
    host_->before_attention(il, x, m);
  } else if (split_.route_on_device[sz(il)]) {
    dev_moe_->before_attention(il, x, m);
  } else {
    host_->before_attention(il, fetch(il, x, m, false), m);
  }
}

void HybridMoeFfn::run(int64_t il, const FfnInput& in, float* out) {
  counters_[sz(il)].tokens += in.m;
  if (split_.attn_on_device[sz(il)]) {
    run_device_layer(il, in, out);
  } else {
    run_host_layer(il, in, out);
  }
}

void HybridMoeFfn::run_host_layer(int64_t il, const FfnInput& in, float* out) {
  MoeSplitCounters& c = counters_[sz(il)];
  if (slots_[sz(il)].expert.empty()) {
    host_->run(il, in, out);
    c.host_places += in.m * hp_.n_expert_used;
    return;
  }
  const int64_t m = in.m, n_embd = hp_.n_embd;
  const std::vector<uint8_t>& front = on_device_[sz(il)];
  if (!hp_.router_before_attn) host_->route(il, in.x, m);
  const MoeFfn::Groups& g = host_->group(il, m, &front);
  const int64_t places = m * hp_.n_expert_used;
  float* ye = ye_h_.as<float>();
  if (copy_pending_) {
    // A device layer's copy in from the staging may still be reading it.
    dev_.sync(backend::kCompute);
    copy_pending_ = false;
  }
  if (g.n_front > 0) {
    await_uploads(il);
    std::memcpy(x_h_.data(), in.x, f32_bytes(m * n_embd));
    dev_.copy_in(backend::kCompute, x_dev_.data(), x_h_.data(), f32_bytes(m * n_embd));
    dev_moe_->compute(il, g, x_dev_.as<float>(), &front, true, dev_moe_->outputs());
    dev_.copy_out(backend::kCompute, ye, dev_moe_->outputs(), f32_bytes(g.n_front * n_embd));
    ++c.copies_in;
    ++c.copies_out;
  }
  // The CPU's experts while the device computes its own.
  host_->compute(il, g, in.x, &front, false, ye);
  if (g.n_front > 0) dev_.sync(backend::kCompute);
  host_->combine(g, ye, out);
  c.device_places += g.n_front;
  c.host_places += places - g.n_front;
  refresh_cache(il, g);
}

void HybridMoeFfn::run_device_layer(int64_t il, const FfnInput& in, float* out) {
  MoeSplitCounters& c = counters_[sz(il)];
  const int64_t m = in.m, n_embd = hp_.n_embd, places = m * hp_.n_expert_used;
  const bool route_dev = split_.route_on_device[sz(il)];
  if (route_dev && static_cast<int64_t>(slots_[sz(il)].expert.size()) == hp_.n_expert) {
    await_uploads(il);
    dev_moe_->run(il, in, out);  // the whole layer on the device
    c.device_places += places;
    return;
  }
  const std::vector<uint8_t>& front = on_device_[sz(il)];
  const float* x_h = fetch(il, in.x, m, route_dev && !hp_.router_before_attn);
  MoeFfn& router = route_dev ? *dev_moe_ : *host_;
  if (!route_dev && !hp_.router_before_attn) host_->route(il, x_h, m);
  const MoeFfn::Groups& g = router.group(il, m, &front);
  float* ye_dev = dev_moe_->outputs();
  float* ye = ye_h_.as<float>();
  if (g.n_front > 0) {
    await_uploads(il);
    dev_moe_->compute(il, g, in.x, &front, true, ye_dev);
  }
  host_->compute(il, g, x_h, &front, false, ye);
  if (g.n_front == 0) {
    // Every chosen expert is the CPU's: the sum is made there and one row per token goes in.
    host_->combine(g, ye, out_h_.as<float>());
    dev_.copy_in(backend::kCompute, out, out_h_.data(), f32_bytes(m * n_embd));
    ++c.copies_in;
  } else {
    if (g.n_front < places) {
      dev_.copy_in(backend::kCompute, ye_dev + g.n_front * n_embd, ye + g.n_front * n_embd,
                   f32_bytes((places - g.n_front) * n_embd));
      ++c.copies_in;
    }
    dev_moe_->combine(g, ye_dev, out);
  }
  copy_pending_ = true;
  c.device_places += g.n_front;
  c.host_places += places - g.n_front;
  refresh_cache(il, g);
}

void HybridMoeFfn::await_uploads(int64_t il) {
  const Slots& sl = slots_[sz(il)];
  if (sl.uploaded.queue >= 0) dev_.wait(backend::kCompute, sl.uploaded);
}

void HybridMoeFfn::refresh_cache(int64_t il, const MoeFfn::Groups& g) {
  Slots& sl = slots_[sz(il)];
  const auto n_slots = static_cast<int64_t>(sl.expert.size());
  if (n_slots == sl.n_static) return;
  MoeSplitCounters& c = counters_[sz(il)];
  const int64_t now = c.tokens;  // this step's clock: the layer's tokens so far
  for (int64_t s = sl.n_static; s < n_slots; ++s)
    if (g.count[sz(sl.expert[sz(s)])] > 0) sl.last_use[sz(s)] = now;
  // The experts the CPU ran, the most chosen first.
  missed_.clear();
  for (int64_t e = 0; e < hp_.n_expert; ++e)
    if (g.count[sz(e)] > 0 && sl.slot_of[sz(e)] < 0) missed_.emplace_back(-g.count[sz(e)], static_cast<int32_t>(e));
  std::sort(missed_.begin(), missed_.end());
  const FfnWeights& hw = host_w_->layers[sz(il)].ffn;
  const FfnWeights& dw = dev_w_->layers[sz(il)].ffn;
  auto* staging = static_cast<std::byte*>(staging_.data());
  size_t used = 0;
  int64_t uploads = 0;
  for (const auto& [neg_count, e] : missed_) {
    // The least recent slot not used by this step.
    int64_t victim = -1;
    for (int64_t s = sl.n_static; s < n_slots; ++s)
      if (sl.last_use[sz(s)] < now && (victim < 0 || sl.last_use[sz(s)] < sl.last_use[sz(victim)])) victim = s;
    if (victim < 0) break;
    if (uploads == 0) {
      // The staging is free once the uploads before it have landed, and the victim's slot once
      // the work submitted so far (which may read it) is done.
      dev_.sync(backend::kCopy);
      dev_.wait(backend::kCopy, dev_.record(backend::kCompute));
    }
    Status st = Status::Ok();
    for (Matrix FfnWeights::*stack : {&FfnWeights::gate_exps, &FfnWeights::up_exps, &FfnWeights::down_exps,
                                      &FfnWeights::down_exps_t}) {
      const Matrix& d = dw.*stack;
      if (!d.present() || !st.ok()) continue;
      const size_t one = static_cast<size_t>(d.nbytes()) / static_cast<size_t>(n_slots);
      const Matrix src = expert_rows(hw.*stack, e, hp_.n_expert);
      if (src.type == d.type) {
        std::memcpy(staging + used, src.data, one);
      } else {
        st = convert_rows(src, d.type, staging + used);
      }
      if (!st.ok()) break;
      dev_.copy_in(backend::kCopy, const_cast<std::byte*>(d.data) + static_cast<size_t>(victim) * one, staging + used,
                   one);
      used += one;
      c.upload_bytes += one;
    }
    if (!st.ok()) {
      log_warn("expert cache: layer %lld: %s; the cache stops here", static_cast<long long>(il), st.error().message.c_str());
      break;
    }
    const int32_t old = sl.expert[sz(victim)];
    sl.slot_of[sz(old)] = -1;
    on_device_[sz(il)][sz(old)] = 0;
    sl.expert[sz(victim)] = e;
    sl.slot_of[sz(e)] = static_cast<int32_t>(victim);
    on_device_[sz(il)][sz(e)] = 1;
    sl.last_use[sz(victim)] = now;
    ++uploads;
  }
  if (uploads == 0) return;
  c.uploads += uploads;
  sl.uploaded = dev_.record(backend::kCopy);
  dev_moe_->set_expert_slots(il, sl.slot_of);
}

}  // namespace pi::model
