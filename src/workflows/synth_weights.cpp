#include "synth_weights.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "synth_rng.h"

namespace pi::workflows::synth {

namespace {

constexpr double kSqrt3 = 1.7320508075688772;  // uniform [-a, a] has std a / sqrt(3)

// The random stream of a named thing: FNV-1a of the name, mixed with the seed. Naming
// streams (rather than numbering them) keeps a tensor's values independent of which other
// tensors the file has: a dense and a PowerInfer file of one seed share their weights.
uint64_t stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return derive(mix64(seed ^ 0x5eed5eed5eed5eedULL), h);
}

std::string blk(int64_t l, const char* what) { return "blk." + std::to_string(l) + "." + what; }

}  // namespace

std::vector<TensorPlan> plan_tensors(const Spec& s) {
  std::vector<TensorPlan> out;
  const int64_t n = s.n_embd, m = s.n_ff, hd = s.head_dim;
  const bool falcon = s.arch == Arch::Falcon, oss = s.arch == Arch::GptOss;
  auto add = [&](std::string name, Kind kind, Shape shape, int64_t layer, DType type,
                 const std::string& stream) {
    uint64_t key = stream_key(s.seed, stream.empty() ? name : stream);
    out.push_back(TensorPlan{std::move(name), type, shape, kind, layer, key});
  };
  auto mat = [&](std::string name, Kind kind, Shape shape, int64_t layer,
                 const std::string& stream = "") {
    add(std::move(name), kind, shape, layer, s.type, stream);
  };
  auto vec = [&](std::string name, Kind kind, int64_t layer) {
    add(std::move(name), kind, Shape{n}, layer, DType::F32, "");
  };
  // gpt-oss's biases and sinks: zero (the construction's statistics stay those of the
  // bias-free layers; the kernels that add them run all the same).
  auto zeros = [&](std::string name, Shape shape, int64_t layer) {
    add(std::move(name), Kind::NormBias, shape, layer, DType::F32, "");
  };

  mat("token_embd.weight", Kind::TokEmbd, Shape{s.n_vocab, n}, -1);
  vec("output_norm.weight", Kind::NormWeight, -1);
  if (falcon) vec("output_norm.bias", Kind::NormBias, -1);
  mat("output.weight", Kind::Dense, Shape{s.n_vocab, n}, -1);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    vec(blk(l, "attn_norm.weight"), Kind::NormWeight, l);
    if (falcon) {
      vec(blk(l, "attn_norm.bias"), Kind::NormBias, l);
      if (s.n_head_kv > 1) {  // falcon-40B layout: the FFN has its own norm
        vec(blk(l, "attn_norm_2.weight"), Kind::NormWeight, l);
        vec(blk(l, "attn_norm_2.bias"), Kind::NormBias, l);
      }
      mat(blk(l, "attn_qkv.weight"), Kind::Dense, Shape{(s.n_head + 2 * s.n_head_kv) * hd, n}, l);
    } else {
      mat(blk(l, "attn_q.weight"), Kind::Dense, Shape{s.n_head * hd, n}, l);
      mat(blk(l, "attn_k.weight"), Kind::Dense, Shape{s.n_head_kv * hd, n}, l);
      mat(blk(l, "attn_v.weight"), Kind::Dense, Shape{s.n_head_kv * hd, n}, l);
      if (oss) {
        zeros(blk(l, "attn_q.bias"), Shape{s.n_head * hd}, l);
        zeros(blk(l, "attn_k.bias"), Shape{s.n_head_kv * hd}, l);
        zeros(blk(l, "attn_v.bias"), Shape{s.n_head_kv * hd}, l);
      }
      if (s.arch == Arch::Qwen3Moe) {  // qwen3's per-head q/k norms (smallthinker has none)
        add(blk(l, "attn_q_norm.weight"), Kind::HeadNorm, Shape{hd}, l, DType::F32, "");
        add(blk(l, "attn_k_norm.weight"), Kind::HeadNorm, Shape{hd}, l, DType::F32, "");
      }
    }
    mat(blk(l, "attn_output.weight"), Kind::AttnOut, Shape{n, s.n_head * hd}, l);
    if (oss) {
      zeros(blk(l, "attn_output.bias"), Shape{n}, l);
      zeros(blk(l, "attn_sinks.weight"), Shape{s.n_head}, l);
    }
    if (s.is_moe()) {
      // The router stays f32 (llama.cpp never quantizes it) and routes at random. SwiGLU
      // experts are random; ReGLU ones (smallthinker) have gates that fire as the power law says.
      const int64_t e = s.n_expert, f = s.n_ff_exp;
      const bool reglu = s.act == model::Activation::ReLU;
      const DType et = s.expert_type();
      vec(blk(l, oss ? "post_attention_norm.weight" : "ffn_norm.weight"), Kind::NormWeight, l);
      add(blk(l, "ffn_gate_inp.weight"), Kind::Dense, Shape{e, n}, l, DType::F32, "");
      add(blk(l, "ffn_gate_exps.weight"), reglu ? Kind::ExpertKey : Kind::Dense, Shape{e, f, n}, l, et, "");
      add(blk(l, "ffn_up_exps.weight"), Kind::Dense, Shape{e, f, n}, l, et, "");
      if (s.down_t) {
        add(blk(l, "ffn_down_exps_t.weight"), Kind::ExpertDownT, Shape{e, f, n}, l, et, "");
      } else {
        add(blk(l, "ffn_down_exps.weight"), Kind::ExpertDown, Shape{e, n, f}, l, et, "");
      }
      if (oss) {
        zeros(blk(l, "ffn_gate_inp.bias"), Shape{e}, l);
        zeros(blk(l, "ffn_gate_exps.bias"), Shape{e, f}, l);
        zeros(blk(l, "ffn_up_exps.bias"), Shape{e, f}, l);
        zeros(blk(l, "ffn_down_exps.bias"), Shape{e, n}, l);
      }
      continue;
    }
    if (falcon) {
      mat(blk(l, "ffn_up.weight"), Kind::Key, Shape{m, n}, l);
    } else {
      vec(blk(l, "ffn_norm.weight"), Kind::NormWeight, l);
      mat(blk(l, "ffn_gate.weight"), Kind::Key, Shape{m, n}, l);
      mat(blk(l, "ffn_up.weight"), s.arch == Arch::Bamboo ? Kind::BiasedUp : Kind::Dense,
          Shape{m, n}, l);
    }
    const std::string down = blk(l, "ffn_down.weight");
    if (s.pwri) {
      mat(blk(l, "ffn_down_t.weight"), Kind::DownT, Shape{m, n}, l, down);
      mat(blk(l, "fc1.weight"), Kind::Fc1, Shape{s.rank, n}, l);
      mat(blk(l, "fc2.weight"), Kind::Fc2, Shape{m, s.rank}, l);
    } else {
      mat(down, Kind::Down, Shape{n, m}, l);
    }
  }
  return out;
}

Generator::Generator(const Spec& s, const PowerLaw& law) : s_(s) {
  // Bamboo's neuron fires when gate and up both do; up fires with a fixed probability, so
  // the gate's probability is divided by it (independent to O(1/sqrt(n_embd))).
  const double up = s.arch == Arch::Bamboo ? kBambooUpProbability : 1.0;
  law_p_ = law.p;
  law_t_.resize(law.p.size());
  for (size_t k = 0; k < law.p.size(); ++k) law_t_[k] = normal_quantile(law.p[k] / up);
  p_.assign(law.p.size(), 0.0f);
  t_.assign(law.p.size(), 0.0f);
}

size_t Generator::scratch_size() const { return static_cast<size_t>(s_.n_embd + s_.n_pairs + 16); }

void Generator::prepare_layer(int64_t l) {
  if (l == layer_) return;
  layer_ = l;
  const int64_t m = s_.n_ff, nf = s_.n_free(), k = s_.n_pairs;
  const uint64_t seed = s_.seed;

  // Neuron permutation: the hot neurons are scattered over the layer, as in real models.
  std::vector<int64_t> perm(static_cast<size_t>(m));
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix rng(stream_key(seed, blk(l, "neurons")));
  for (int64_t i = m - 1; i > 0; --i) {
    std::swap(perm[static_cast<size_t>(i)], perm[rng.below(static_cast<uint64_t>(i + 1))]);
  }
  for (int64_t rank = 0; rank < m; ++rank) {
    size_t i = static_cast<size_t>(perm[static_cast<size_t>(rank)]);
    p_[i] = static_cast<float>(law_p_[static_cast<size_t>(rank)]);
    t_[i] = static_cast<float>(law_t_[static_cast<size_t>(rank)]);
  }

  // Predictor basis B_1..B_k: the free columns are dealt to k groups at random; each row
  // is a centred unit vector on its group. Disjoint supports make B orthonormal and cost
  // O(n_embd) per generated gate row.
  std::vector<int64_t> cols(static_cast<size_t>(nf));
  std::iota(cols.begin(), cols.end(), 0);
  SplitMix crng(stream_key(seed, blk(l, "fc1.basis")));
  for (int64_t i = nf - 1; i > 0; --i) {
    std::swap(cols[static_cast<size_t>(i)], cols[crng.below(static_cast<uint64_t>(i + 1))]);
  }
  group_.assign(static_cast<size_t>(nf), 0);
  bval_.assign(static_cast<size_t>(nf), 0.0f);
  for (int64_t j = 0; j < nf; ++j)
    group_[static_cast<size_t>(cols[static_cast<size_t>(j)])] = static_cast<int32_t>(j % k);
  const uint64_t bkey = stream_key(seed, blk(l, "fc1.values"));
  std::vector<double> sum(static_cast<size_t>(k), 0.0), sq(static_cast<size_t>(k), 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(k), 0);
  for (int64_t c = 0; c < nf; ++c) {
    bval_[static_cast<size_t>(c)] = uniform_at(bkey, c);
    size_t g = static_cast<size_t>(group_[static_cast<size_t>(c)]);
    sum[g] += bval_[static_cast<size_t>(c)];
    cnt[g] += 1;
  }
  for (int64_t c = 0; c < nf; ++c) {
    size_t g = static_cast<size_t>(group_[static_cast<size_t>(c)]);
    float& b = bval_[static_cast<size_t>(c)];
    b = static_cast<float>(b - sum[g] / static_cast<double>(cnt[g]));
    sq[g] += static_cast<double>(b) * b;
  }
  for (int64_t c = 0; c < nf; ++c) {
    size_t g = static_cast<size_t>(group_[static_cast<size_t>(c)]);
    bval_[static_cast<size_t>(c)] =
        static_cast<float>(bval_[static_cast<size_t>(c)] / std::sqrt(std::max(sq[g], 1e-30)));
  }

  const std::string key_name =
      blk(l, s_.arch == Arch::Falcon ? "ffn_up.weight" : "ffn_gate.weight");
  u_key_ = derive(stream_key(seed, key_name), 1);
  noise_key_ = derive(stream_key(seed, key_name), 2);
  const uint64_t down_key = stream_key(seed, blk(l, "ffn_down.weight"));
  down_keys_.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) down_keys_[static_cast<size_t>(i)] = derive(down_key, i);
}

// beta such that P(beta * a·h + v·z > 0) = Phi(t) for h = [c0 1_D, z], z_j iid with std
// sigma_e, v ⊥ 1, a = [1_D, -(D/n') 1_n']: beta = t sigma_e |v| / (D sqrt(c0^2 - t^2 sigma_e^2 /
// n')).
float Generator::bias_for(double t, double v_norm) const {
  const double D = static_cast<double>(kBiasDims), nf = static_cast<double>(s_.n_free());
  const double se = s_.sigma_e, c0 = s_.bias_c;
  return static_cast<float>(t * se * v_norm / (D * std::sqrt(c0 * c0 - t * t * se * se / nf)));
}

// Row i of the key matrix without its bias block: v = su * (U_i · B) + se * e_i (n' floats),
// with |su U_i| = S / sqrt(1 + rho^2) and |se e_i| = rho S / sqrt(1 + rho^2). Fills u with
// the raw coefficients U_i (n_pairs floats).
Generator::KeyRow Generator::key_row(int64_t i, float* v, float* u, int64_t neuron) const {
  const int64_t nf = s_.n_free(), k = s_.n_pairs;
  const double S = s_.row_norm(), rho = s_.noise;
  fill_uniform(derive(u_key_, static_cast<uint64_t>(i)), 1.0f, u, k);
  double uu = 0;
  for (int64_t j = 0; j < k; ++j) uu += static_cast<double>(u[j]) * u[j];
  fill_uniform(derive(noise_key_, static_cast<uint64_t>(i)), 1.0f, v, nf);
  double mean = 0;
  for (int64_t c = 0; c < nf; ++c) mean += v[c];
  mean /= static_cast<double>(nf);
  double ee = 0;
  for (int64_t c = 0; c < nf; ++c) {
    v[c] = static_cast<float>(v[c] - mean);
    ee += static_cast<double>(v[c]) * v[c];
  }
  const double norm = std::sqrt(1 + rho * rho);
  const float su = static_cast<float>(S / (std::sqrt(std::max(uu, 1e-30)) * norm));
  const float se = static_cast<float>(rho * S / (std::sqrt(std::max(ee, 1e-30)) * norm));
  double vv = 0;
  for (int64_t c = 0; c < nf; ++c) {
    float x = su * u[group_[static_cast<size_t>(c)]] * bval_[static_cast<size_t>(c)] + se * v[c];
    v[c] = x;
    vv += static_cast<double>(x) * x;
  }
  return KeyRow{bias_for(t_[static_cast<size_t>(neuron)], std::sqrt(vv)), su};
}

void Generator::row(const TensorPlan& t, int64_t r, float* out, float* scratch) const {
  const int64_t D = kBiasDims, nf = s_.n_free(), cols = t.shape.cols();
  const uint64_t rk = derive(t.key, static_cast<uint64_t>(r));
  const float shift = static_cast<float>(D) / static_cast<float>(nf);  // a = [1_D, -shift 1_n']
  const float s0 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D * nf)));
  auto zero_bias_block = [&] { std::fill(out, out + D, 0.0f); };
  switch (t.kind) {
    case Kind::NormWeight:
      std::fill(out, out + cols, 1.0f);
      return;
    case Kind::NormBias:
      std::fill(out, out + cols, 0.0f);
      return;
    case Kind::HeadNorm:
      std::fill(out, out + cols, 1.0f);
      return;
    case Kind::ExpertDown:  // row r of the stack is row r % n_embd of its expert
      if (r % s_.n_embd < D)
        std::fill(out, out + cols, 0.0f);
      else
        fill_uniform(rk, static_cast<float>(s_.sigma_o * kSqrt3), out, cols);
      return;
    case Kind::ExpertDownT:
      zero_bias_block();
      fill_uniform(rk, static_cast<float>(s_.sigma_o * kSqrt3), out + D, nf);
      return;
    case Kind::Dense:
      fill_uniform(rk, static_cast<float>(s_.sigma_w * kSqrt3), out, cols);
      return;
    case Kind::TokEmbd:
      std::fill(out, out + D, static_cast<float>(s_.bias_c));
      if (s_.act == model::Activation::SiLU) {
        // Heavy-tailed hidden states (SiLU models): Laplace entries of std sigma_e, from
        // uniform u in [-1/2, 1/2]: x = -b sign(u) ln(1 - 2|u|), b = sigma_e / sqrt(2).
        fill_uniform(rk, 0.5f, out + D, nf);
        const double b = s_.sigma_e / std::sqrt(2.0);
        for (int64_t c = D; c < D + nf; ++c) {
          const double u = out[c];
          const double x = -b * std::log(std::max(1.0 - 2.0 * std::fabs(u), 1e-7));
          out[c] = static_cast<float>(u < 0 ? -x : x);
        }
      } else {
        fill_uniform(rk, static_cast<float>(s_.sigma_e * kSqrt3), out + D, nf);
      }
      return;
    case Kind::AttnOut:
      if (r < D)
        std::fill(out, out + cols, 0.0f);
      else
        fill_uniform(rk, static_cast<float>(s_.sigma_o * kSqrt3), out, cols);
      return;
    case Kind::DownT:
      zero_bias_block();
      fill_uniform(down_keys_[static_cast<size_t>(r)], static_cast<float>(s_.sigma_d * kSqrt3),
                   out + D, nf);
      return;
    case Kind::Down: {
      if (r < D) {
        std::fill(out, out + cols, 0.0f);
        return;
      }
      const float a = static_cast<float>(s_.sigma_d * kSqrt3);
      for (int64_t i = 0; i < cols; ++i)
        out[i] = a * uniform_at(down_keys_[static_cast<size_t>(i)], r - D);
      return;
    }
    case Kind::Key:
    case Kind::ExpertKey: {
      KeyRow kr = key_row(r, out + D, scratch, t.kind == Kind::Key ? r : r % s_.n_ff);
      std::fill(out, out + D, kr.beta);
      for (int64_t c = 0; c < nf; ++c) out[D + c] -= kr.beta * shift;
      return;
    }
    case Kind::BiasedUp: {
      fill_uniform(rk, 1.0f, out + D, nf);
      double mean = 0, ee = 0;
      for (int64_t c = 0; c < nf; ++c) mean += out[D + c];
      mean /= static_cast<double>(nf);
      for (int64_t c = 0; c < nf; ++c) {
        out[D + c] = static_cast<float>(out[D + c] - mean);
        ee += static_cast<double>(out[D + c]) * out[D + c];
      }
      const float scale = static_cast<float>(s_.row_norm() / std::sqrt(std::max(ee, 1e-30)));
      const double t_up = normal_quantile(kBambooUpProbability);
      const float beta = bias_for(t_up, s_.row_norm());
      std::fill(out, out + D, beta);
      for (int64_t c = 0; c < nf; ++c) out[D + c] = out[D + c] * scale - beta * shift;
      return;
    }
    case Kind::Fc1: {
      if (r < s_.n_bias_rows) {  // s0 * a: the bias direction, always positive
        std::fill(out, out + D, s0);
        std::fill(out + D, out + cols, -s0 * shift);
        return;
      }
      const int64_t j = (r - s_.n_bias_rows) / 2;
      const float sign = (r - s_.n_bias_rows) % 2 == 0 ? 1.0f : -1.0f;
      zero_bias_block();
      for (int64_t c = 0; c < nf; ++c) {
        out[D + c] =
            group_[static_cast<size_t>(c)] == j ? sign * bval_[static_cast<size_t>(c)] : 0.0f;
      }
      return;
    }
    case Kind::Fc2: {
      float* u = scratch;
      float* v = scratch + s_.n_pairs;
      KeyRow kr = key_row(r, v, u, r);
      const float bias = kr.beta / (s0 * static_cast<float>(s_.n_bias_rows));
      std::fill(out, out + s_.n_bias_rows, bias);
      for (int64_t j = 0; j < s_.n_pairs; ++j) {
        out[s_.n_bias_rows + 2 * j] = kr.su * u[j];
        out[s_.n_bias_rows + 2 * j + 1] = -kr.su * u[j];
      }
      return;
    }
  }
}

}  // namespace pi::workflows::synth
