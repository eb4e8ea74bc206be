#include "workflows/quantize_model.h"


#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/progress.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/layer_tensors.h"
#include "tensor/quant.h"

namespace pi::workflows {
namespace {

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;  // either missing: not the same
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// Converts rows [r0, r1) of a tensor from `src` type to `dst` type, adding the round-trip
// error to *sq_err and the squared source values to *sq_x.
Status convert_rows(DType src, DType dst, const std::byte* in, std::byte* out, int64_t r0,
                    int64_t r1, int64_t cols, double* sq_err, double* sq_x) {
  std::vector<float> row(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
  const size_t in_row = row_bytes(src, cols), out_row = row_bytes(dst, cols);
  for (int64_t r = r0; r < r1; ++r) {
    std::byte* q = out + static_cast<size_t>(r) * out_row;
    PI_TRY(dequantize_row(src, in + static_cast<size_t>(r) * in_row, row.data(), cols));
    PI_TRY(quantize_row(dst, row.data(), q, cols));
    PI_TRY(dequantize_row(dst, q, back.data(), cols));
    for (int64_t c = 0; c < cols; ++c) {
      const double x = row[static_cast<size_t>(c)], e = x - back[static_cast<size_t>(c)];
      *sq_err += e * e;
      *sq_x += x * x;
    }
  }
  return Status::Ok();
}

TypeError& error_of(QuantizeReport& rep, DType t) {
  for (TypeError& e : rep.errors)
    if (e.type == t) return e;
  rep.errors.push_back(TypeError{t});
  return rep.errors.back();
}

// Blocks in the file: one more than the largest "blk.N." index.
int count_layers(const gguf::File& f) {
  int n = 0;
  for (const auto& t : f.tensors()) n = std::max(n, layer_of(t.name) + 1);
  return n;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

uint32_t file_type_for(DType target) {
  switch (target) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q6_K: return 18;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 12;
    case DType::Q4_K: return 15;
    case DType::Q5_K: return 17;
    case DType::BF16: return 32;
    case DType::MXFP4: return 38;  // llama.cpp has no all-MXFP4 file type; its MXFP4_MOE is nearest
    default: return 0;
  }
}

DType choose_type(const std::string& name, int rank, int64_t cols, DType source, DType target,
                  int64_t n_expert) {
  // Matrices and stacks of them (experts, 3-D), quantized row by row, except the layer
  // table's keep_type rows (the router).
  const bool matrix = (rank == 2 || rank == 3) && name.size() > 7 && name.ends_with(".weight");
  const model::LayerTensor* row = model::layer_tensor_of(name);
  if (!matrix || source == DType::I32 || (row != nullptr && row->keep_type)) return source;
  DType t = target;
  if (name == "output.weight" &&
      (target == DType::Q4_0 || target == DType::Q4_1 || target == DType::Q5_0 ||
       target == DType::Q5_1 || target == DType::MXFP4)) {
    t = cols % 256 == 0 ? DType::Q6_K : DType::Q8_0;
  }
  const bool block_quantized = dtype_info(target).block_size > 1 && target != DType::Q8_0;
  if (n_expert == 8 && block_quantized && (name.ends_with("attn_k.weight") || name.ends_with("attn_v.weight")))
    t = DType::Q8_0;
  if (cols % dtype_info(t).block_size != 0) t = DType::F16;
  return t;
}

Result<QuantizeReport> quantize_model(const QuantizeOptions& o) {
  if (!dtype_info(o.target).computable || o.target == DType::I32) {
    return err("quantize: unsupported target type '%s'", std::string(dtype_name(o.target)).c_str());
  }
  if (o.input == o.output || same_file(o.input, o.output)) {
    return err("quantize: output '%s' is the input file; choose another path", o.output.c_str());
  }
  auto in = gguf::File::open(o.input);
  if (!in.ok()) return in.error();
  const gguf::File& f = *in;

  const uint32_t file_type = o.mix != Mix::None ? mix_file_type(o.mix) : file_type_for(o.target);
  const int n_layer = count_layers(f);
  const auto arch = f.get_string("general.architecture");
  int64_t n_expert = 0;
  if (arch.ok() && f.find(*arch + ".expert_count") != nullptr) {
    auto n = f.get_int(*arch + ".expert_count");
    if (n.ok()) n_expert = *n;
  }
  gguf::Writer w(f.magic());
  if (f.alignment() != gguf::kDefaultAlignment) PI_TRY(w.set_alignment(f.alignment()));
  bool has_file_type = false;
  for (const auto& kv : f.metadata()) {
    if (kv.key == "general.alignment" || kv.key == "general.quantized_by") continue;
    if (kv.key == "general.file_type") {
      has_file_type = true;
      PI_TRY(w.add_kv(kv.key, gguf::Value(file_type)));
      continue;
    }
    PI_TRY(w.add_kv(kv.key, kv.value));
  }
  if (!has_file_type) PI_TRY(w.add_kv("general.file_type", gguf::Value(file_type)));
  PI_TRY(w.add_kv("general.quantized_by", gguf::Value(std::string("powerinfer quantize"))));

  std::vector<DType> types;
  QuantizeReport rep;
  for (const auto& t : f.tensors()) {
    DType dst = choose_type(t.name, t.shape.rank, t.shape.cols(), t.type, o.target, n_expert);
    if (o.mix != Mix::None && dst != t.type) {
      dst = mix_type(t.name, t.shape.cols(), o.mix, n_layer, n_expert);
      if (t.shape.cols() % dtype_info(dst).block_size != 0) dst = DType::F16;
    }
    for (const auto& [pattern, type] : o.overrides) {
      if (glob_match(pattern, t.name)) {
        if (t.shape.cols() % dtype_info(type).block_size != 0) {
          return err("quantize: override %s for tensor '%s': row length %lld is not a multiple of %lld",
                     std::string(dtype_name(type)).c_str(), t.name.c_str(),
                     static_cast<long long>(t.shape.cols()),
                     static_cast<long long>(dtype_info(type).block_size));
        }
        dst = type;
        break;
      }
    }
    if (dst != t.type) {
      if (!dtype_info(t.type).computable) {
        return err("%s: tensor '%s' has type %s, which this engine cannot convert", o.input.c_str(),
                   t.name.c_str(), std::string(dtype_name(t.type)).c_str());
      }
      if (!is_float_type(t.type) && !o.allow_requantize) {
        return err("%s: tensor '%s' is already %s; allow requantizing (--allow-requantize) to convert it to %s "
                   "(quality drops compared with quantizing from F16/F32)",
                   o.input.c_str(), t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                   std::string(dtype_name(dst)).c_str());
      }
    }
    types.push_back(dst);
    PI_TRY(w.add_tensor(t.name, dst, t.shape));
  }
  PI_TRY(w.begin(o.output));

  uint64_t total = 0;
  for (const auto& t : f.tensors()) total += t.nbytes;
  std::optional<ProgressBar> bar;  // on stderr when asked (and a terminal)
  if (o.progress) bar.emplace("quantize", total);
  uint64_t done = 0;
  const int threads = std::max(1, o.threads);
  std::vector<std::byte> out;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    const gguf::TensorView v = f.view(t);
    const DType dst = types[i];
    rep.bytes_in += t.nbytes;
    rep.bytes_out += w.tensors()[i].nbytes;
    if (dst == t.type) {
      PI_TRY(w.write({v.data, t.nbytes}));
      ++rep.n_copied;
    } else {
      const int64_t rows = t.shape.rows(), cols = t.shape.cols();
      // Chunks of ~16 MiB output keep memory flat for any tensor size.
      const int64_t chunk =
          std::max<int64_t>(1, static_cast<int64_t>((16u << 20) / std::max<size_t>(1, row_bytes(dst, cols))));
      const size_t in_row = row_bytes(t.type, cols), out_row = row_bytes(dst, cols);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk);
        out.resize(static_cast<size_t>(r1 - r0) * out_row);
        const std::byte* src = v.data + static_cast<size_t>(r0) * in_row;
        std::vector<Status> st(static_cast<size_t>(threads));
        std::vector<double> sq_err(static_cast<size_t>(threads)), sq_x(static_cast<size_t>(threads));
        std::vector<std::thread> pool;
        const int64_t n = r1 - r0, per = (n + threads - 1) / threads;
        for (int k = 0; k < threads; ++k) {
          const int64_t a = std::min(n, k * per), b = std::min(n, a + per);
          if (a >= b) continue;
          pool.emplace_back([&, k, a, b] {
            const auto kk = static_cast<size_t>(k);
            st[kk] = convert_rows(t.type, dst, src, out.data(), a, b, cols, &sq_err[kk], &sq_x[kk]);
          });
        }
        for (auto& th : pool) th.join();
        for (const Status& s : st) PI_TRY(s);
        TypeError& te = error_of(rep, dst);
        for (int k = 0; k < threads; ++k) {
          te.sq_err += sq_err[static_cast<size_t>(k)];
          te.sq_x += sq_x[static_cast<size_t>(k)];
        }
        te.n_elements += static_cast<uint64_t>((r1 - r0) * cols);
        PI_TRY(w.write(out));
        if (bar) bar->update(done + static_cast<uint64_t>(r1) * in_row);
      }
      ++rep.n_quantized;
      ++error_of(rep, dst).n_tensors;
    }
    done += t.nbytes;
    if (bar) bar->update(done);
  }
  PI_TRY(w.finish());
  if (bar) bar->finish();
  rep.file_in = std::filesystem::file_size(o.input);
  rep.file_out = std::filesystem::file_size(o.output);
  return rep;
}

}  // namespace pi::workflows
