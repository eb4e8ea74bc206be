// The public quantization call (include/powerinfer/quantize.h) over workflows::quantize_model.
#include "powerinfer/quantize.h"

#include "tensor/dtype.h"
#include "workflows/quant_mix.h"
#include "workflows/quantize_ftype.h"
#include "workflows/quantize_model.h"

namespace pi {

Result<std::pair<std::string, std::string>> parse_quantize_override(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return with_code(err("quantize: bad override '%s' (expected PATTERN=TYPE)", text.c_str()),
                     ErrorCode::BadRequest);
  return std::make_pair(text.substr(0, eq), text.substr(eq + 1));
}

Result<QuantizeReport> quantize_model(const QuantizeParams& p) {
  if (p.threads < 1) return with_code(err("quantize: threads must be at least 1 (got %d)", p.threads), ErrorCode::BadRequest);
  auto name = workflows::quantize_type_name(p.type);
  if (!name.ok()) return with_code(name.error(), ErrorCode::BadRequest);
  auto target = workflows::parse_quant_target(*name);
  if (!target) {
    return with_code(err("quantize: unknown or unsupported type '%s' (use f32, f16, bf16, q8_0, "
                         "q6_k, q5_k_m, q5_1, q5_0, q4_k_m, q4_1, q4_0, mxfp4, mxfp4_moe, q3_k_m, q2_k)",
                         name->c_str()),
                     ErrorCode::BadRequest);
  }
  workflows::QuantizeOptions o;
  o.input = p.input;
  o.output = p.output;
  o.target = target->base;
  o.mix = target->mix;
  o.allow_requantize = p.allow_requantize;
  o.threads = p.threads;
  o.progress = p.progress;
  for (const auto& [pattern, type] : p.overrides) {
    const auto t = dtype_from_name(type);
    if (pattern.empty() || !t || !dtype_info(*t).computable)
      return with_code(err("quantize: bad override '%s=%s' (expected PATTERN=TYPE)", pattern.c_str(),
                           type.c_str()),
                       ErrorCode::BadRequest);
    o.overrides.emplace_back(pattern, *t);
  }
  auto r = workflows::quantize_model(o);
  if (!r.ok()) return r.error();
  QuantizeReport out;
  out.bytes_in = r->bytes_in;
  out.bytes_out = r->bytes_out;
  out.file_in = r->file_in;
  out.file_out = r->file_out;
  out.n_quantized = r->n_quantized;
  out.n_copied = r->n_copied;
  for (const workflows::TypeError& e : r->errors)
    out.types.push_back({std::string(dtype_name(e.type)), e.n_tensors, e.n_elements, e.rmse(), e.relative()});
  return out;
}

}  // namespace pi
