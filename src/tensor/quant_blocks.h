// Internal to pi_tensor: one function pair per block format, one block at a time. The
// public entry points (quant.h) validate the type and length and loop over blocks.
// Quantizers read block_size floats; dequantizers write block_size floats.
#pragma once

#include "tensor/quant.h"

namespace pi::detail {

constexpr int kQK = 32;    // elements per block of the 32-element formats
constexpr int kQK_K = 256; // elements per super-block of the K formats

// The smallest positive half whose value is >= v (v finite, > 0); quant_q6k.cpp.
uint16_t f16_at_least(float v);

void quantize_block(const float* x, BlockQ4_0& b);
void quantize_block(const float* x, BlockQ4_1& b);
void quantize_block(const float* x, BlockQ5_0& b);
void quantize_block(const float* x, BlockQ5_1& b);
void quantize_block(const float* x, BlockQ8_0& b);
void quantize_block(const float* x, BlockMXFP4& b);
void quantize_block(const float* x, BlockQ6_K& b);
void quantize_block(const float* x, BlockQ2_K& b);
void quantize_block(const float* x, BlockQ3_K& b);
void quantize_block(const float* x, BlockQ4_K& b);
void quantize_block(const float* x, BlockQ5_K& b);

void dequantize_block(const BlockQ4_0& b, float* y);
void dequantize_block(const BlockQ4_1& b, float* y);
void dequantize_block(const BlockQ5_0& b, float* y);
void dequantize_block(const BlockQ5_1& b, float* y);
void dequantize_block(const BlockQ8_0& b, float* y);
void dequantize_block(const BlockMXFP4& b, float* y);
void dequantize_block(const BlockQ6_K& b, float* y);
void dequantize_block(const BlockQ2_K& b, float* y);
void dequantize_block(const BlockQ3_K& b, float* y);
void dequantize_block(const BlockQ4_K& b, float* y);
void dequantize_block(const BlockQ5_K& b, float* y);

}  // namespace pi::detail
