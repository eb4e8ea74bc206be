// Parameters of the ops a device runs (backend::Ops), as plain values: what the kernels need to
// know about the model, and nothing else. Shapes are outermost first, in elements.
#pragma once

#include <cstdint>

#include "kernels/rope_yarn.h"
#include "tensor/dtype.h"

namespace pi::backend {

enum class NormKind {
  RMS,    // x / rms(x) * w
  Layer,  // (x - mean) / std(x) * w + b
};

enum class RopeKind {
  Normal,  // rotates pairs (2i, 2i+1): llama and GGUF files with permuted q/k
  NeoX,    // rotates pairs (i, i + n_rot/2): falcon
};

enum class Activation { SiLU, ReLU, GELU };

// How the FFN combines its projections (act = the model's activation):
enum class FfnKind {
  Gated,      // down( act(gate·x) * (up·x) )         llama: SwiGLU, ReGLU
  GatedBoth,  // down( act(gate·x) * act(up·x) )      bamboo: ReLU on both
  Plain,      // down( act(up·x) )                    falcon
  // down( g σ(1.702 g) (u + 1) ), g = min(gate·x, 7), u = clamp(up·x, -7, 7): gpt-oss's
  // experts (the activation argument is ignored; dense only: ffn_rows needs ReLU zeros)
  SwigluOai,
};

struct NormParams {
  NormKind kind = NormKind::RMS;
  float eps = 1e-5f;
};

// theta_i = pos * freq_scale * base^(-2i / n_rot) for the first n_rot dims of each head, or
// YaRN's blend of scaled and unscaled angles when yarn.ext_factor != 0 (kernels/rope_yarn.h).
struct RopeParams {
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  float base = 10000.0f;
  float freq_scale = 1.0f;
  RopeKind kind = RopeKind::Normal;
  RopeYarn yarn = {};
};

// Query heads, key/value heads (query head h reads kv head h / (n_head / n_head_kv)), the
// head size and the score scale (usually 1 / sqrt(head_dim)).
struct AttnParams {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  // Learned attention sinks (gpt-oss): one logit per query head (f32 [n_head], the device's
  // memory) that joins each head's softmax without a value, so p = exp(s) / (sum exp(s_c) +
  // exp(sink)); nullptr: none.
  const float* sinks = nullptr;

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Keys and values of one layer in a device's memory: cell c holds the (RoPE-rotated) key and
// the value of one token, as f16 bit patterns (type F16) or as blocks of 32 values (Q8_0, Q4_0:
// llama.cpp's -ctk/-ctv), each of K and V in its own type. kv head h of cell c starts
// head_stride * h + cell_stride * c values in, that is kv_offset(type, ...) bytes; for a block
// type both strides and head_dim are multiples of 32, so a head's row is whole blocks. The KV
// cache stores head-major [n_head_kv, n_ctx, head_dim] (head_stride = n_ctx * head_dim,
// cell_stride = head_dim), so that attention streams each head's keys and values contiguously.
// k and v point at the first byte (typed uint16_t* for the f16 callers).
struct KvLayer {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t head_stride = 0;
  int64_t cell_stride = 0;
  DType k_type = DType::F16;
  DType v_type = DType::F16;

  // Bytes of kv head h of cell c of K (or V) from k (v).
  uint64_t k_offset(int64_t h, int64_t c) const {
    return kv_bytes(k_type, h * head_stride + c * cell_stride);
  }
  uint64_t v_offset(int64_t h, int64_t c) const {
    return kv_bytes(v_type, h * head_stride + c * cell_stride);
  }
  uint8_t* k_at(int64_t h, int64_t c) const {
    return reinterpret_cast<uint8_t*>(k) + k_offset(h, c);
  }
  uint8_t* v_at(int64_t h, int64_t c) const {
    return reinterpret_cast<uint8_t*>(v) + v_offset(h, c);
  }

  // Bytes of n values of a KV type (n a multiple of its block size).
  static uint64_t kv_bytes(DType t, int64_t n) { return row_bytes(t, n); }
};

// Whether t is a type the KV cache may store: F16, Q8_0 or Q4_0.
inline bool kv_type_supported(DType t) {
  return t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0;
}

// Where each token of a batch of m tokens sits, in host memory: token i is at position pos[i],
// its key and value are written to cell cell[i], and it attends the cells
// attn_cells[attn_begin[i] .. attn_begin[i] + attn_len[i]) in that order (its own cell among
// them). attn_cells == nullptr means the list 0, 1, ..., attn_len[i] - 1 (one sequence whose
// cell c holds position c: the same computation, without materialising the list). Lists of
// different tokens may share storage. All arrays are owned by the caller.
struct KvBatch {
  const int32_t* pos = nullptr;         // [m]
  const int32_t* cell = nullptr;        // [m]
  const int32_t* attn_cells = nullptr;  // cells, shared storage; nullptr: 0, 1, 2, ...
  const int64_t* attn_begin = nullptr;  // [m]; unused when attn_cells == nullptr
  const int64_t* attn_len = nullptr;    // [m]
  // The positions of the attn_cells entries (same indexing), ascending within each token's
  // list; only a sliding-window model's pass reads them (to cut each list to the window). The
  // ops do not.
  const int32_t* attn_pos = nullptr;
  // A cache whose sliding-window layers keep a smaller store of window cells (runtime's
  // KvCache): each token's window cell ([m]) and the attn_cells entries as window cells (same
  // indexing), which those layers write and read instead; nullptr: the cells themselves.
  const int32_t* window_cell = nullptr;
  const int32_t* window_attn_cells = nullptr;
};

}  // namespace pi::backend
