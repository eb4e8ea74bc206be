// The portable kernel table: small ops from ops_generic.inc over an 8-lane array "vector"
// (which compilers auto-vectorise), matrix leaves from scalar_matrix.cpp. Compiled without
// ISA flags; the fallback on any CPU and the template for a new port.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"
#include "kernels/cpu/r16.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {
namespace scalar_isa {
namespace {

constexpr int kLanes = 8;
struct VF {
  float v[kLanes];
};

template <typename F>
inline VF each(F f) {
  VF r;
  for (int l = 0; l < kLanes; ++l) r.v[l] = f(l);
  return r;
}

inline VF vzero() { return each([](int) { return 0.0f; }); }
inline VF vset1(float s) { return each([s](int) { return s; }); }
inline VF vload(const float* p) { return each([p](int l) { return p[l]; }); }
inline VF vload_n(const float* p, int n) { return each([=](int l) { return l < n ? p[l] : 0.0f; }); }
inline void vstore(float* p, VF a) {
  for (int l = 0; l < kLanes; ++l) p[l] = a.v[l];
}
inline void vstore_n(float* p, VF a, int n) {
  for (int l = 0; l < n; ++l) p[l] = a.v[l];
}
inline VF vmask_n(VF a, int n) { return each([&](int l) { return l < n ? a.v[l] : 0.0f; }); }
inline VF vadd(VF a, VF b) { return each([&](int l) { return a.v[l] + b.v[l]; }); }
inline VF vsub(VF a, VF b) { return each([&](int l) { return a.v[l] - b.v[l]; }); }
inline VF vmul(VF a, VF b) { return each([&](int l) { return a.v[l] * b.v[l]; }); }
inline VF vdiv(VF a, VF b) { return each([&](int l) { return a.v[l] / b.v[l]; }); }
inline VF vfma(VF a, VF b, VF c) { return each([&](int l) { return std::fma(a.v[l], b.v[l], c.v[l]); }); }
// max keeping NaN of b (the data operand), as the x86 max instructions do.
inline VF vmax(VF a, VF b) { return each([&](int l) { return a.v[l] > b.v[l] ? a.v[l] : b.v[l]; }); }
// max(x, 0) that propagates NaN.
inline VF vmin(VF a, VF b) { return each([&](int l) { return a.v[l] < b.v[l] ? a.v[l] : b.v[l]; }); }
inline VF vmax0(VF a) { return each([&](int l) { return a.v[l] < 0.0f ? 0.0f : a.v[l]; }); }
inline VF vexp(VF a) { return each([&](int l) { return std::exp(a.v[l]); }); }
// kLanes int8 quants, or the low / high nibbles of kLanes bytes less 8 (Q4_0), as floats.
inline VF vload_i8(const int8_t* p) { return each([p](int l) { return static_cast<float>(p[l]); }); }
inline VF vload_q4lo(const uint8_t* p) {
  return each([p](int l) { return static_cast<float>((p[l] & 0x0F) - 8); });
}
inline VF vload_q4hi(const uint8_t* p) {
  return each([p](int l) { return static_cast<float>((p[l] >> 4) - 8); });
}
inline float vhalf(uint16_t h) { return half_to_float(h); }  // one f16 scale as a float
inline VF vload_f16(const uint16_t* p) { return each([p](int l) { return half_to_float(p[l]); }); }
inline VF vload_f16_n(const uint16_t* p, int n) {
  return each([=](int l) { return l < n ? half_to_float(p[l]) : 0.0f; });
}
inline void vstore_f16(uint16_t* p, VF a) {
  for (int l = 0; l < kLanes; ++l) p[l] = f32_to_f16(a.v[l]);
}
inline void vstore_f16_n(uint16_t* p, VF a, int n) {
  for (int l = 0; l < n; ++l) p[l] = f32_to_f16(a.v[l]);
}
inline float vsum(VF a) {
  return ((a.v[0] + a.v[4]) + (a.v[2] + a.v[6])) + ((a.v[1] + a.v[5]) + (a.v[3] + a.v[7]));
}
inline float vhmax(VF a) {
  float m = a.v[0];
  for (int l = 1; l < kLanes; ++l) m = a.v[l] > m ? a.v[l] : m;
  return m;
}

#include "kernels/cpu/ops_generic.inc"

size_t act_bytes(DType, int64_t) { return 0; }
void prepare_act(DType, const float*, int64_t, uint8_t*) {}

}  // namespace
}  // namespace scalar_isa

const KernelTable& scalar_table() {
  using namespace scalar_isa;
  static const KernelTable table = with_generic_ops({
      .isa = Isa::Scalar,
      .act_bytes = act_bytes,
      .prepare_act = prepare_act,
      .dot = scalar_dot,
      .axpy = scalar_axpy,
      .r16_prepare = scalar_r16_prepare,
      .r16_dot = scalar_r16_dot,
  });
  return table;
}

}  // namespace pi::cpu::detail
