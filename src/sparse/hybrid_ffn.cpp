#include "sparse/hybrid_ffn.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "model/layout_cache.h"

namespace pi::sparse {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

backend::FfnKind kind_of(model::FfnKind k) {
  switch (k) {
    case model::FfnKind::Gated:
      return backend::FfnKind::Gated;
    case model::FfnKind::GatedBoth:
      return backend::FfnKind::GatedBoth;
    case model::FfnKind::Plain:
      return backend::FfnKind::Plain;
    case model::FfnKind::SwigluOai:
      return backend::FfnKind::SwigluOai;
  }
  return backend::FfnKind::Gated;
}

// Bytes of one hot layer's device rows: ids first (aligned), then gate, up and down_t rows.
struct RowsLayout {
  size_t gate = 0, up = 0, down = 0, end = 0;
};
RowsLayout rows_layout(const model::FfnWeights& f, int64_t n_hot) {
  RowsLayout r;
  const auto n = sz(n_hot);
  r.gate = align64(n * sizeof(int32_t));
  r.up = r.gate + (f.gate.present() ? n * f.gate.row_stride() : 0);
  r.down = r.up + n * f.up.row_stride();
  r.end = r.down + n * f.down_t.row_stride();
  return r;
}

bool any_of(const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); }
bool any_hot(const HybridLayout& l) {
  return std::any_of(l.hot.begin(), l.hot.end(), [](const auto& h) { return !h.empty(); });
}

// The scratch of each kind of work, in allocation order.
struct ScratchSizes {
  uint64_t z, logits, flags_pack, cold_in;  // attention on the device
  uint64_t lists_pack, hot_out, work;       // hot neurons
};

}  // namespace

HybridFfn::Pack HybridFfn::list_pack(int64_t m, int64_t n_idx) const {
  const int64_t n_embd = model_.hparams().n_embd;
  Pack p;
  p.second = align64(sz(m * n_embd) * sizeof(float));
  p.third = align64(p.second + sz(m + 1) * sizeof(int64_t));
  p.end = p.third + sz(n_idx) * sizeof(int32_t);
  return p;
}

HybridFfn::Pack HybridFfn::flag_pack(int64_t m) const {
  const model::HParams& hp = model_.hparams();
  Pack p;
  p.second = align64(sz(m * hp.n_embd) * sizeof(float));
  p.end = p.second + sz(m * backend::mask_words(hp.n_ff)) * sizeof(uint32_t);
  return p;
}

namespace {

ScratchSizes scratch_sizes(const model::HParams& hp, backend::Device& dev, int64_t t,
                           int64_t max_rank) {
  const auto f32 = [](int64_t n) { return static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4; };
  const uint64_t x = align64(sz(t * hp.n_embd) * sizeof(float));
  ScratchSizes s;
  s.z = f32(t * max_rank);
  s.logits = f32(t * hp.n_ff);
  s.flags_pack = x + sz(t * backend::mask_words(hp.n_ff)) * sizeof(uint32_t);
  s.cold_in = f32(t * hp.n_embd);
  s.lists_pack = align64(x + sz(t + 1) * sizeof(int64_t)) + sz(t * hp.n_ff) * sizeof(int32_t);
  s.hot_out = f32(t * hp.n_embd);
  s.work = dev.ops().ffn_rows_work_bytes(t, hp.n_ff, hp.n_embd);
  return s;
}

int64_t max_rank_of(const std::vector<PredictorWeights>& preds) {
  int64_t r = 0;
  for (const PredictorWeights& p : preds) r = std::max(r, p.rank());
  return r;
}

}  // namespace

ScratchBytes HybridFfn::scratch(const model::Model& model, backend::Device& dev,
                                int64_t max_tokens) {
  auto preds = load_predictors(model);
  const ScratchSizes s =
      scratch_sizes(model.hparams(), dev, max_tokens, preds.ok() ? max_rank_of(*preds) : 0);
  const auto fp = [&dev](uint64_t n) { return dev.alloc_footprint(n); };
  ScratchBytes b;
  b.dense = fp(s.z) + fp(s.logits) + fp(s.flags_pack) + fp(s.cold_in);
  b.neurons = fp(s.lists_pack) + fp(s.hot_out) + fp(s.work);
  return b;
}

Result<std::vector<DeviceAlloc>> HybridFfn::device_allocations(const model::Model& model,
                                                               backend::Device& dev,
                                                               const HybridLayout& layout,
                                                               int64_t max_tokens) {
  const model::HParams& hp = model.hparams();
  auto preds = load_predictors(model);
  if (!preds.ok()) return preds.error();
  std::vector<DeviceAlloc> out;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (layout.attn_on_device[sz(il)] && !preds->empty()) {
      out.push_back({"predictors", (*preds)[sz(il)].fc1.nbytes()});
      out.push_back({"predictors", (*preds)[sz(il)].fc2.nbytes()});
    }
    const auto n_hot = static_cast<int64_t>(layout.hot[sz(il)].size());
    if (n_hot > 0) {
      out.push_back({"hot neuron rows", rows_layout(model.weights().layers[sz(il)].ffn, n_hot).end});
    }
  }
  const ScratchSizes s = scratch_sizes(hp, dev, std::max<int64_t>(max_tokens, 1),
                                       max_rank_of(*preds));
  if (any_of(layout.attn_on_device)) {
    for (uint64_t b : {s.z, s.logits, s.flags_pack, s.cold_in}) out.push_back({"FFN hand-off scratch", b});
  }
  if (any_hot(layout)) {
    for (uint64_t b : {s.lists_pack, s.hot_out, s.work}) out.push_back({"FFN hot-row scratch", b});
  }
  return out;
}

HybridFfn::HybridFfn(const model::Model& model, backend::Device& host, backend::Device& dev,
                     int64_t max_tokens)
    : model_(model),
      host_(host),
      dev_(dev),
      dops_(dev.ops()),
      max_tokens_(std::max<int64_t>(max_tokens, 1)),
      pred_store_(dev) {}

Result<std::unique_ptr<HybridFfn>> HybridFfn::create(const model::Model& model,
                                                     backend::Device& host, backend::Device& dev,
                                                     const HybridLayout& layout,
                                                     int64_t max_tokens, SparseConfig cfg) {
  const model::HParams& hp = model.hparams();
  if (!host.host_addressable()) return err("hybrid FFN: device %s is not the host", host.name().c_str());
  if (static_cast<int64_t>(layout.attn_on_device.size()) != hp.n_layer ||
      static_cast<int64_t>(layout.hot.size()) != hp.n_layer)
    return err("hybrid FFN: a layout for %zu layers, the model has %lld", layout.hot.size(),
               static_cast<long long>(hp.n_layer));
  if (cfg.check_predictor)
    return err("--check-predictor runs on the CPU only (it needs every layer's dense FFN there)");
  std::unique_ptr<HybridFfn> f(new HybridFfn(model, host, dev, max_tokens));
  PI_TRY(f->allocate(layout, cfg));
  return f;
}

Status HybridFfn::allocate(const HybridLayout& layout, SparseConfig cfg) {
  const model::HParams& hp = model_.hparams();
  auto cpu = SparseFfn::create(model_, model_.weights(), host_, max_tokens_, cfg);
  if (!cpu.ok()) return cpu.error();
  cpu_ = std::move(*cpu);
  threshold_ = cfg.threshold;
  layers_.resize(sz(hp.n_layer));
  counters_.assign(sz(hp.n_layer), HybridCounters{});
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    DeviceLayer& L = layers_[sz(il)];
    L.attn = layout.attn_on_device[sz(il)];
    L.hot_bits.assign(sz(backend::mask_words(hp.n_ff)), 0);
    if (L.attn) {
      const PredictorWeights& p = cpu_->predictors()[sz(il)];
      auto fc1 = pred_store_.place(p.fc1);
      if (!fc1.ok()) return fc1.error();
      auto fc2 = pred_store_.place(p.fc2);
      if (!fc2.ok()) return fc2.error();
      L.pred = PredictorWeights{std::move(*fc1), std::move(*fc2)};
    }
    if (!layout.hot[sz(il)].empty()) PI_TRY(gather_hot(il, layout.hot[sz(il)]));
  }
  const ScratchSizes s =
      scratch_sizes(hp, dev_, max_tokens_, max_rank_of(cpu_->predictors()));
  const auto dalloc = [&](backend::Buffer& b, uint64_t bytes, const char* what) -> Status {
    auto r = dev_.alloc(bytes, what);
    if (!r.ok()) return r.error();
    b = std::move(*r);
    return Status::Ok();
  };
  const auto halloc = [&](backend::Buffer& b, uint64_t bytes, const char* what) -> Status {
    auto r = dev_.alloc_host(bytes, what);
    if (!r.ok()) return r.error();
    b = std::move(*r);
    return Status::Ok();
  };
  if (any_of(layout.attn_on_device)) {
    PI_TRY(dalloc(z_, s.z, "FFN hand-off scratch"));
    PI_TRY(dalloc(logits_, s.logits, "FFN hand-off scratch"));
    PI_TRY(dalloc(flags_pack_, s.flags_pack, "FFN hand-off scratch"));
    PI_TRY(dalloc(cold_in_, s.cold_in, "FFN hand-off scratch"));
    PI_TRY(halloc(flags_pack_h_, s.flags_pack, "FFN hand-off staging"));
    PI_TRY(halloc(cold_h_, s.cold_in, "FFN hand-off staging"));
  }
  if (any_hot(layout)) {
    PI_TRY(dalloc(lists_pack_, s.lists_pack, "FFN hot-row scratch"));
    PI_TRY(dalloc(hot_out_, s.hot_out, "FFN hot-row scratch"));
    PI_TRY(dalloc(work_, s.work, "FFN hot-row scratch"));
    PI_TRY(halloc(lists_pack_h_, s.lists_pack, "FFN hand-off staging"));
    PI_TRY(halloc(hot_h_, s.hot_out, "FFN hand-off staging"));
  }
  cold_.idx.resize(sz(max_tokens_ * hp.n_ff));
  cold_.offsets.assign(sz(max_tokens_ + 1), 0);
  return Status::Ok();
}

Status HybridFfn::gather_hot(int64_t il, const std::vector<int32_t>& hot) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& f = model_.weights().layers[sz(il)].ffn;
  const auto n = static_cast<int64_t>(hot.size());
  for (int64_t k = 0; k < n; ++k) {
    if (hot[sz(k)] < 0 || hot[sz(k)] >= hp.n_ff || (k > 0 && hot[sz(k)] <= hot[sz(k - 1)]))
      return err("hybrid FFN: layer %lld: hot neuron ids must be ascending in [0, %lld)",
                 static_cast<long long>(il), static_cast<long long>(hp.n_ff));
  }
  if (f.up_b.present() || f.down_b.present())
    return err("hybrid FFN: layer %lld has FFN biases: its neurons stay on the CPU",
               static_cast<long long>(il));
  const RowsLayout r = rows_layout(f, n);
  std::vector<std::byte> host(r.end);
  std::memcpy(host.data(), hot.data(), sz(n) * sizeof(int32_t));
  // The down rows go in the device's layout for transposed weights: the model may hold them
  // in the CPU's (Model::load), rows convert exactly either way.
  const DType down_type =
      f.down_t.present() ? dev_.transposed_layout(model::file_layout(f.down_t.type)) : f.down_t.type;
  const auto gather = [&](const model::Matrix& w, size_t at, DType type) {
    if (!w.present()) return;
    for (int64_t k = 0; k < n; ++k)
      model::convert_row(w, hot[sz(k)], type, host.data() + at + sz(k) * w.row_stride());
  };
  gather(f.gate, r.gate, f.gate.type);
  gather(f.up, r.up, f.up.type);
  gather(f.down_t, r.down, down_type);
  DeviceLayer& L = layers_[sz(il)];
  auto buf = dev_.alloc(r.end, "hot neuron rows");
  if (!buf.ok()) return buf.error();
  dev_.upload(buf->data(), host.data(), r.end);
  L.rows = std::move(*buf);
  const auto* base = L.rows.as<std::byte>();
  const auto view = [&](const model::Matrix& w, size_t at, DType type) {
    if (!w.present()) return model::Matrix{};
    return model::Matrix{type, base + at, n, w.cols, w.name + " (hot rows)"};
  };
  L.w = backend::FfnRows{view(f.gate, r.gate, f.gate.type), view(f.up, r.up, f.up.type),
                         view(f.down_t, r.down, down_type)};
  L.ids = reinterpret_cast<const int32_t*>(base);
  L.n_hot = n;
  L.local.assign(sz(hp.n_ff), -1);
  for (int64_t k = 0; k < n; ++k) {
    const int32_t id = hot[sz(k)];
    L.local[sz(id)] = static_cast<int32_t>(k);
    L.hot_bits[sz(id / 32)] |= 1u << (id % 32);
  }
  return Status::Ok();
}

void HybridFfn::reset_counters() {
  std::fill(counters_.begin(), counters_.end(), HybridCounters{});
}

void HybridFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  counters_[sz(il)].tokens += in.m;
  if (layers_[sz(il)].attn) {
    run_device_layer(il, in, out);
  } else {
    run_host_layer(il, in, out);
  }
}

void HybridFfn::run_host_layer(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const DeviceLayer& L = layers_[sz(il)];
  HybridCounters& c = counters_[sz(il)];
  const int64_t m = in.m, n_embd = hp.n_embd;
  if (L.n_hot == 0) {
    const int64_t before = cpu_->stats()[sz(il)].computed;
    cpu_->run(il, in, out);
    c.cold_rows += cpu_->stats()[sz(il)].computed - before;
    return;
  }
  // Split the predicted lists: hot ones (as positions among the hot rows) straight into the
  // package for the device, cold ones (neuron ids) for the CPU.
  const RowLists& pred = cpu_->predict(il, in.pred_in, m);
  const Pack shape = list_pack(m, 0);
  auto* pack = lists_pack_h_.as<std::byte>();
  auto* hoff = reinterpret_cast<int64_t*>(pack + shape.second);
  auto* hidx = reinterpret_cast<int32_t*>(pack + shape.third);
  int64_t nh = 0, nc = 0;
  hoff[0] = 0;
  cold_.m = m;
  cold_.offsets[0] = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t k = pred.offsets[sz(i)]; k < pred.offsets[sz(i + 1)]; ++k) {
      const int32_t r = pred.idx[sz(k)];
      const int32_t j = L.local[sz(r)];
      if (j >= 0) {
        hidx[nh++] = j;
      } else {
        cold_.idx[sz(nc++)] = r;
      }
    }
    hoff[i + 1] = nh;
    cold_.offsets[sz(i + 1)] = nc;
  }
  c.hot_rows += nh;
  c.cold_rows += nc;
  const size_t bytes_x = sz(m * n_embd) * sizeof(float);
  if (nh > 0) {
    // Hand-off in: the FFN input and the hot lists in one copy; the device computes while the
    // CPU does the cold rows; hand-off out: the hot partial sum.
    std::memcpy(pack, in.x, bytes_x);
    const Pack p = list_pack(m, nh);
    auto* dpack = lists_pack_.as<std::byte>();
    dev_.copy_in(backend::kCopy, dpack, pack, p.end);
    dev_.wait(backend::kCompute, dev_.record(backend::kCopy));
    dops_.ffn_rows(kind_of(hp.ffn), L.w, reinterpret_cast<const float*>(dpack), m,
                   reinterpret_cast<const int32_t*>(dpack + p.third),
                   reinterpret_cast<const int64_t*>(dpack + p.second), work_.data(),
                   hot_out_.as<float>());
    dev_.wait(backend::kCopy, dev_.record(backend::kCompute));
    dev_.copy_out(backend::kCopy, hot_h_.data(), hot_out_.data(), bytes_x);
    ++c.copies_in;
    ++c.copies_out;
  }
  cpu_->run_masked(il, in, cold_, out);
  if (nh > 0) {
    dev_.sync(backend::kCopy);
    host_.ops().add(out, hot_h_.as<float>(), m * n_embd);  // cold + hot
  }
}

void HybridFfn::run_device_layer(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const DeviceLayer& L = layers_[sz(il)];
  HybridCounters& c = counters_[sz(il)];
  const int64_t m = in.m, n_embd = hp.n_embd, n_ff = hp.n_ff;
  const size_t bytes_x = sz(m * n_embd) * sizeof(float);
  // The predictor and its flags, on the device.
  float* z = z_.as<float>();
  float* logits = logits_.as<float>();
  dops_.linear(L.pred.fc1, in.pred_in, m, z);
  dops_.activate(model::Activation::ReLU, z, m * L.pred.rank());
  dops_.linear(L.pred.fc2, z, m, logits);
  const Pack fp = flag_pack(m);
  auto* dflags = flags_pack_.as<std::byte>();
  auto* bits = reinterpret_cast<uint32_t*>(dflags + fp.second);
  dops_.threshold_mask(logits, m, n_ff, threshold_, bits);
  const bool has_cold = L.n_hot < n_ff;
  if (has_cold) {
    // Hand-off out: the FFN input and the flags, for the CPU's cold rows.
    dops_.copy_rows(in.x, n_embd, reinterpret_cast<float*>(dflags), n_embd, m, n_embd);
    dev_.wait(backend::kCopy, dev_.record(backend::kCompute));
    dev_.copy_out(backend::kCopy, flags_pack_h_.data(), dflags, fp.end);
    ++c.copies_out;
  }
  if (L.n_hot > 0) {
    const Pack lp = list_pack(m, m * L.n_hot);
    auto* dl = lists_pack_.as<std::byte>();
    auto* idx = reinterpret_cast<int32_t*>(dl + lp.third);
    auto* off = reinterpret_cast<int64_t*>(dl + lp.second);
    dops_.compact_rows(bits, m, n_ff, L.ids, L.n_hot, idx, off);
    dops_.ffn_rows(kind_of(hp.ffn), L.w, in.x, m, idx, off, work_.data(), out);
  }
  if (!has_cold) return;
  dev_.sync(backend::kCopy);
  // The cold lists: flagged and not hot, ascending.
  const auto* hpack = flags_pack_h_.as<std::byte>();
  const auto* hbits = reinterpret_cast<const uint32_t*>(hpack + fp.second);
  const int64_t words = backend::mask_words(n_ff);
  int64_t nc = 0;
  cold_.m = m;
  cold_.offsets[0] = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t w = 0; w < words; ++w) {
      uint32_t v = hbits[i * words + w] & ~L.hot_bits[sz(w)];
      while (v != 0) {
        cold_.idx[sz(nc++)] = static_cast<int32_t>(w * 32 + std::countr_zero(v));
        v &= v - 1;
      }
    }
    cold_.offsets[sz(i + 1)] = nc;
  }
  c.cold_rows += nc;
  const model::FfnInput host_in{reinterpret_cast<const float*>(hpack), nullptr, m};
  cpu_->run_masked(il, host_in, cold_, cold_h_.as<float>());
  // Hand-off in: the cold partial sum (the whole output when no neuron is hot).
  if (L.n_hot == 0) {
    dev_.copy_in(backend::kCopy, out, cold_h_.data(), bytes_x);
  } else if (nc > 0) {
    dev_.copy_in(backend::kCopy, cold_in_.data(), cold_h_.data(), bytes_x);
  } else {
    return;
  }
  ++c.copies_in;
  dev_.wait(backend::kCompute, dev_.record(backend::kCopy));
  if (L.n_hot > 0) dops_.add(out, cold_in_.as<float>(), m * n_embd);  // hot + cold
}

}  // namespace pi::sparse
