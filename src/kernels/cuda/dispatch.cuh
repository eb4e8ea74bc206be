// Weight-type dispatch for the kernels' launchers: calls f(TypeTag<T>{}) with the weight
// type as a compile-time constant, for the types a kernel family instantiates. Included
// only by .cu files.
#pragma once

#include "kernels/cuda/hd_blocks.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

template <DType T>
struct TypeTag {
  static constexpr DType value = T;
};

// Every type the GPU decodes (hd_blocks.h: decodable).
template <typename F>
cudaError_t with_type(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f(TypeTag<DType::F32>{});
    case DType::F16:
      return f(TypeTag<DType::F16>{});
    case DType::BF16:
      return f(TypeTag<DType::BF16>{});
    case DType::Q4_0:
      return f(TypeTag<DType::Q4_0>{});
    case DType::Q4_1:
      return f(TypeTag<DType::Q4_1>{});
    case DType::Q5_0:
      return f(TypeTag<DType::Q5_0>{});
    case DType::Q5_1:
      return f(TypeTag<DType::Q5_1>{});
    case DType::Q8_0:
      return f(TypeTag<DType::Q8_0>{});
    case DType::MXFP4:
      return f(TypeTag<DType::MXFP4>{});
    case DType::Q2_K:
      return f(TypeTag<DType::Q2_K>{});
    case DType::Q3_K:
      return f(TypeTag<DType::Q3_K>{});
    case DType::Q4_K:
      return f(TypeTag<DType::Q4_K>{});
    case DType::Q5_K:
      return f(TypeTag<DType::Q5_K>{});
    case DType::Q6_K:
      return f(TypeTag<DType::Q6_K>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pi::gpu
