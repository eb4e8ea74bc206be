#include "calibrate_file.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/progress.h"
#include "gguf/writer.h"
#include "tensor/quant.h"

namespace pi::workflows {
namespace {

// "blk.3.attn_q.weight" -> "blk.3.attn_q_t.weight"
std::string transposed_name(const std::string& name) {
  return name.substr(0, name.size() - 7) + "_t.weight";
}

gguf::Value f32_array(const std::vector<float>& v) {
  gguf::Array a{gguf::ValueType::F32, {}};
  for (float x : v) a.items.emplace_back(x);
  return gguf::Value(std::move(a));
}

// dst [cols, rows] = transpose of src [rows, cols] (dequantized), in type `t`.
Status transpose_matrix(const gguf::TensorView& v, const gguf::TensorInfo& info, DType t,
                        int threads, std::vector<std::byte>& out) {
  const int64_t rows = info.shape.rows(), cols = info.shape.cols();
  std::vector<float> src(static_cast<size_t>(rows * cols));
  const size_t in_row = row_bytes(info.type, cols), out_row = row_bytes(t, rows);
  out.resize(static_cast<size_t>(cols) * out_row);
  std::vector<Status> st(static_cast<size_t>(threads));
  const auto parallel = [&](int64_t n, auto&& body) {
    std::vector<std::thread> pool;
    const int64_t per = (n + threads - 1) / threads;
    for (int k = 0; k < threads; ++k) {
      const int64_t a = std::min(n, k * per), b = std::min(n, a + per);
      if (a < b) pool.emplace_back([&, k, a, b] { st[static_cast<size_t>(k)] = body(a, b); });
    }
    for (auto& th : pool) th.join();
  };
  parallel(rows, [&](int64_t a, int64_t b) -> Status {
    for (int64_t r = a; r < b; ++r)
      PI_TRY(dequantize_row(info.type, v.data + static_cast<size_t>(r) * in_row,
                            src.data() + static_cast<size_t>(r * cols), cols));
    return Status::Ok();
  });
  for (const Status& s : st) PI_TRY(s);
  parallel(cols, [&](int64_t a, int64_t b) -> Status {
    std::vector<float> col(static_cast<size_t>(rows));
    for (int64_t c = a; c < b; ++c) {
      for (int64_t r = 0; r < rows; ++r)
        col[static_cast<size_t>(r)] = src[static_cast<size_t>(r * cols + c)];
      PI_TRY(quantize_row(t, col.data(), out.data() + static_cast<size_t>(c) * out_row, rows));
    }
    return Status::Ok();
  });
  for (const Status& s : st) PI_TRY(s);
  return Status::Ok();
}

}  // namespace

bool transposed_by(const std::string& tensor, sparse::SiteSet sites) {
  if (!tensor.starts_with("blk.")) return false;
  const size_t dot = tensor.find('.', 4);
  if (dot == std::string::npos) return false;
  const std::string suffix = tensor.substr(dot + 1);
  // A site transposes the projections whose work it skips and which have a transposed layout.
  for (const model::LayerTensor* t : model::kLayerTensors) {
    if (t->transposed || !t->site || !sparse::has_site(sites, *t->site) || model::layout_twin(*t) == nullptr)
      continue;
    if (suffix == t->name()) return true;
  }
  return false;
}

Result<CalibratedFileReport> write_calibrated(const gguf::File& in,
                                              const sparse::ActSparsityCalibration& c,
                                              const std::string& out, int threads, bool progress) {
  threads = std::max(1, threads);
  gguf::Writer w(in.magic());
  if (in.alignment() != gguf::kDefaultAlignment) PI_TRY(w.set_alignment(in.alignment()));
  for (const auto& kv : in.metadata()) {
    if (kv.key == "general.alignment" || kv.key.starts_with(sparse::kKeyPrefix)) continue;
    PI_TRY(w.add_kv(kv.key, kv.value));
  }
  PI_TRY(w.add_kv(sparse::kMethodKey, gguf::Value(std::string(sparse::kMethod))));
  gguf::Array sites{gguf::ValueType::String, {}};
  for (sparse::Site s : sparse::kAllSites)
    if (sparse::has_site(c.sites, s)) sites.items.emplace_back(std::string(sparse::site_name(s)));
  PI_TRY(w.add_kv(sparse::kSitesKey, gguf::Value(std::move(sites))));
  PI_TRY(w.add_kv(sparse::kTargetKey, gguf::Value(static_cast<float>(c.target))));
  std::vector<float> levels(c.levels.begin(), c.levels.end());
  PI_TRY(w.add_kv(sparse::kLevelsKey, f32_array(levels)));
  for (sparse::Site s : sparse::kAllSites) {
    if (sparse::has_site(c.sites, s))
      PI_TRY(w.add_kv(sparse::thresholds_key(s), f32_array(c.thresholds[static_cast<size_t>(s)])));
  }
  if (c.allocated()) {
    PI_TRY(w.add_kv(sparse::kAllocMethodKey, gguf::Value(std::string(sparse::kAllocMethod))));
    std::vector<float> alloc(c.alloc_levels.begin(), c.alloc_levels.end());
    PI_TRY(w.add_kv(sparse::kAllocLevelsKey, f32_array(alloc)));
    for (sparse::Site s : sparse::kAllSites) {
      if (sparse::has_site(c.sites, s))
        PI_TRY(w.add_kv(sparse::allocation_key(s), f32_array(c.alloc[static_cast<size_t>(s)])));
    }
  }
  PI_TRY(w.add_kv(sparse::kTokensKey, gguf::Value(static_cast<uint64_t>(c.tokens))));
  PI_TRY(w.add_kv(sparse::kTextKey, gguf::Value(c.text)));

  CalibratedFileReport rep;
  std::vector<DType> types;
  for (const gguf::TensorInfo& t : in.tensors()) {
    if (!transposed_by(t.name, c.sites) || t.shape.rank != 2) {
      types.push_back(t.type);
      PI_TRY(w.add_tensor(t.name, t.type, t.shape));
      continue;
    }
    if (!dtype_info(t.type).computable) {
      return err("%s: tensor '%s' has type %s, which this engine cannot transpose",
                 in.path().c_str(), t.name.c_str(), std::string(dtype_name(t.type)).c_str());
    }
    DType type = t.type;
    if (t.shape.rows() % dtype_info(type).block_size != 0) {
      type = DType::F16;
      rep.fallbacks.push_back(transposed_name(t.name));
    }
    types.push_back(type);
    PI_TRY(w.add_tensor(transposed_name(t.name), type, Shape{t.shape.cols(), t.shape.rows()}));
  }
  const std::string part = out + ".part";
  PI_TRY(w.begin(part));
  uint64_t total = 0, done = 0;
  for (const auto& t : in.tensors()) total += t.nbytes;
  ProgressBar bar("write", total);
  std::vector<std::byte> buf;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const gguf::TensorInfo& t = in.tensors()[i];
    const gguf::TensorView v = in.view(t);
    if (w.tensors()[i].name == t.name) {
      PI_TRY(w.write({v.data, t.nbytes}));
    } else {
      PI_TRY(transpose_matrix(v, t, types[i], threads, buf));
      PI_TRY(w.write(buf));
      ++rep.n_transposed;
    }
    done += t.nbytes;
    if (progress) bar.update(done);
  }
  PI_TRY(w.finish());
  bar.finish();
  std::error_code ec;
  std::filesystem::rename(part, out, ec);
  if (ec) return err("%s: cannot rename to %s: %s", part.c_str(), out.c_str(), ec.message().c_str());
  rep.file_in = in.file_size();
  rep.file_out = std::filesystem::file_size(out);
  return rep;
}

}  // namespace pi::workflows
