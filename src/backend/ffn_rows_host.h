// The host algorithm of the list-driven ops (Ops::threshold_mask, compact_rows, ffn_rows) for
// devices whose memory is the host's (cpu, ref, and the simulated GPU's arena), written once
// over the two row kernels a device supplies:
//   dot(W, rows, n, x, y):   y[r] = W[r, :] · x for the n listed rows (other y untouched)
//   axpy(D, rows, n, a, y):  y += a[r] * D[r, :] over the listed rows, in list order
// ffn_rows runs each token alone with the one-token kernels, exactly as the CPU's sparse FFN
// runs a token (gate rows, the rows with gate > 0 for up, the rows with a != 0 for down), so a
// device that holds every neuron gives the CPU's numbers bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/ops.h"

namespace pi::backend::host {

// Bytes of ffn_rows' work area: f32 gate and up values and one i32 row list, [n_rows] each
// (tokens run one at a time).
inline uint64_t ffn_rows_work_bytes(int64_t n_rows) {
  return static_cast<uint64_t>(std::max<int64_t>(n_rows, 1)) * (2 * sizeof(float) + sizeof(int32_t));
}

inline void threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) {
  const int64_t words = mask_words(n);
  for (int64_t i = 0; i < m; ++i) {
    const float* x = X + i * n;
    uint32_t* b = bits + i * words;
    for (int64_t w = 0; w < words; ++w) {
      uint32_t v = 0;
      const int64_t end = std::min<int64_t>(32, n - w * 32);
      for (int64_t k = 0; k < end; ++k) v |= static_cast<uint32_t>(x[w * 32 + k] >= thr) << k;
      b[w] = v;
    }
  }
}

inline void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids,
                         int64_t n_ids, int32_t* idx, int64_t* offsets) {
  const int64_t words = mask_words(n);
  int64_t at = 0;
  offsets[0] = 0;
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t* b = bits + i * words;
    for (int64_t k = 0; k < n_ids; ++k) {
      const int32_t j = ids[k];
      idx[at] = static_cast<int32_t>(k);
      at += (b[j >> 5] >> (j & 31)) & 1u;  // branch-free compaction
    }
    offsets[i + 1] = at;
  }
}

template <typename Dot, typename Axpy>
void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m, const int32_t* idx,
              const int64_t* offsets, void* work, float* Y, Dot&& dot, Axpy&& axpy) {
  const int64_t n_rows = w.up.rows, n_embd = w.up.cols;
  auto* g = static_cast<float*>(work);   // f32 [n_rows] gate, then a
  float* u = g + n_rows;                 // f32 [n_rows] up
  auto* keep = reinterpret_cast<int32_t*>(u + n_rows);  // i32 [n_rows] filtered list
  for (int64_t i = 0; i < m; ++i) {
    const float* x = X + i * n_embd;
    float* y = Y + i * n_embd;
    const int32_t* list = idx + offsets[i];
    const int64_t n = offsets[i + 1] - offsets[i];
    std::fill(y, y + n_embd, 0.0f);
    int64_t k = 0;
    if (kind == FfnKind::Plain) {
      dot(w.up, list, n, x, u);
      for (int64_t j = 0; j < n; ++j) {
        const int32_t r = list[j];
        g[r] = u[r];
        keep[k] = r;
        k += u[r] > 0.0f ? 1 : 0;
      }
    } else {
      // ReLU(gate) == 0 zeroes the neuron whatever up is: up only where gate > 0.
      dot(w.gate, list, n, x, g);
      for (int64_t j = 0; j < n; ++j) {
        keep[k] = list[j];
        k += g[list[j]] > 0.0f ? 1 : 0;
      }
      dot(w.up, keep, k, x, u);
      const int64_t n_pos = k;
      k = 0;
      for (int64_t j = 0; j < n_pos; ++j) {
        const int32_t r = keep[j];
        g[r] *= kind == FfnKind::GatedBoth ? std::max(u[r], 0.0f) : u[r];
        keep[k] = r;
        k += g[r] != 0.0f ? 1 : 0;
      }
    }
    axpy(w.down_t, keep, k, g, y);
  }
}

}  // namespace pi::backend::host
