// backend::Ops on the host: the SIMD kernels of one ISA over a thread pool, the scalar
// reference for the weight types the SIMD kernels lack. Work runs on the calling thread (and
// the pool) before each call returns. Used by the CPU device, and by the simulated GPU on its
// queue's thread with its own pool.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kernels.h"

namespace pi::backend {

class CpuOps final : public Ops {
 public:
  // `pool` must outlive the CpuOps.
  CpuOps(ThreadPool& pool, cpu::Isa isa) : pool_(pool), k_(isa) {}

  cpu::Isa isa() const { return k_.isa(); }
  ThreadPool& pool() { return pool_; }

  void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) override;
  void linear(const Matrix& W, const float* X, int64_t m, float* Y) override;
  void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
               float* YA, float* YB, float* YC) override;
  void linear_each(std::span<const LinearPart> parts) override;
  void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                float* Y) override;
  void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                   const int64_t* offsets, float* Y) override;
  void linear_rows_union(const Matrix& W, const float* X, int64_t m, std::span<const int32_t> rows,
                         float* Y) override;
  void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                     const int64_t* offsets, float* Y) override;
  void norm(const NormParams& p, const float* X, const Vector& w, const Vector& b, int64_t m,
            int64_t n, float* Y) override;
  void rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads, const int32_t* pos) override;
  void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m, const KvLayer& kv,
                const int32_t* cells) override;
  void attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                 const KvBatch& b, float* out) override;
  void activate(Activation act, float* x, int64_t n) override;
  void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                   int64_t n_ff) override;
  void add(float* Y, const float* X, int64_t n) override;
  void add_bias(float* Y, const Vector& b, int64_t m, int64_t n) override;
  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t n) override;
  void combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                    int64_t k, float* Y) override;
  void threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) override;
  void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids, int64_t n_ids,
                    int32_t* idx, int64_t* offsets) override;
  void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m, const int32_t* idx,
                const int64_t* offsets, void* work, float* Y) override;
  uint64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd) const override;

 private:
  void activate_all(Activation act, float* x, int64_t n);

  ThreadPool& pool_;
  cpu::Kernels k_;
};

}  // namespace pi::backend
