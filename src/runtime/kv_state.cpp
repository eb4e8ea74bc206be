#include "runtime/kv_state.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "backend/device.h"

namespace pi::runtime {
namespace {

long long ll(int64_t v) { return static_cast<long long>(v); }
unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

constexpr uint32_t kMaxArchLen = 64;

// One head's rows of one layer's K or V: row r of cell c is at base + h * head + c * cell.
struct HeadRows {
  std::byte* base = nullptr;  // device address of the layer's K or V
  uint64_t head = 0, cell = 0, row = 0;  // strides and row size, bytes
};

HeadRows head_rows(const model::KvLayer& L, bool v, uint64_t row) {
  HeadRows r;
  const DType t = v ? L.v_type : L.k_type;
  r.base = reinterpret_cast<std::byte*>(v ? L.v : L.k);
  r.head = row_bytes(t, L.head_stride);
  r.cell = row_bytes(t, L.cell_stride);
  r.row = row;
  return r;
}

// Calls f(first index, count) for each run of consecutive ascending cells of `cells`, so that
// a sequence in adjacent cells moves with one copy per head.
template <typename F>
void for_runs(std::span<const int32_t> cells, bool rows_adjacent, F&& f) {
  size_t i = 0;
  while (i < cells.size()) {
    size_t j = i + 1;
    if (rows_adjacent)
      while (j < cells.size() && cells[j] == cells[j - 1] + 1) ++j;
    f(i, j - i);
    i = j;
  }
}

// A window layer's cells (KvCache window cells): which of `cells` hold one (`at`, indices
// into cells) and those window cells (`window`).
struct WindowPick {
  std::vector<size_t> at;
  std::vector<int32_t> window;
};
WindowPick pick_window(std::span<const int32_t> cells, std::span<const int32_t> window) {
  WindowPick p;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (window[i] < 0) continue;
    p.at.push_back(i);
    p.window.push_back(window[i]);
  }
  return p;
}

// Rows of the picked entries between staging [n_head_kv][n][row] and compact
// [n_head_kv][picked][row]; rows not picked are zero in the full one.
void expand_rows(const WindowPick& p, int64_t n_head_kv, size_t n, uint64_t row, const std::byte* compact,
                 std::byte* full) {
  std::memset(full, 0, static_cast<size_t>(n_head_kv) * n * row);
  for (int64_t h = 0; h < n_head_kv; ++h)
    for (size_t k = 0; k < p.at.size(); ++k)
      std::memcpy(full + (static_cast<size_t>(h) * n + p.at[k]) * row,
                  compact + (static_cast<size_t>(h) * p.at.size() + k) * row, row);
}
void compact_rows(const WindowPick& p, int64_t n_head_kv, size_t n, uint64_t row, const std::byte* full,
                  std::byte* compact) {
  for (int64_t h = 0; h < n_head_kv; ++h)
    for (size_t k = 0; k < p.at.size(); ++k)
      std::memcpy(compact + (static_cast<size_t>(h) * p.at.size() + k) * row,
                  full + (static_cast<size_t>(h) * n + p.at[k]) * row, row);
}

// Host staging [n_head_kv][cells.size()][row] <-> the cells' rows of one layer's K or V.
void download_rows(backend::Device& dev, const HeadRows& r, int64_t n_head_kv,
                   std::span<const int32_t> cells, std::byte* out) {
  const uint64_t n = cells.size();
  for (int64_t h = 0; h < n_head_kv; ++h) {
    std::byte* dst = out + static_cast<uint64_t>(h) * n * r.row;
    for_runs(cells, r.cell == r.row, [&](size_t i, size_t m) {
      dev.copy_out(backend::kCopy, dst + i * r.row,
                   r.base + static_cast<uint64_t>(h) * r.head +
                       static_cast<uint64_t>(cells[i]) * r.cell,
                   m * r.row);
    });
  }
  dev.sync(backend::kCopy);
}

void upload_rows(backend::Device& dev, const HeadRows& r, int64_t n_head_kv,
                 std::span<const int32_t> cells, const std::byte* in) {
  const uint64_t n = cells.size();
  for (int64_t h = 0; h < n_head_kv; ++h) {
    const std::byte* src = in + static_cast<uint64_t>(h) * n * r.row;
    for_runs(cells, r.cell == r.row, [&](size_t i, size_t m) {
      dev.copy_in(backend::kCopy,
                  r.base + static_cast<uint64_t>(h) * r.head +
                      static_cast<uint64_t>(cells[i]) * r.cell,
                  src + i * r.row, m * r.row);
    });
  }
  dev.sync(backend::kCopy);
}

// Appends v's bytes (little-endian hosts only, as the GGUF reader assumes).
template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

std::vector<std::byte> header_bytes(const KvFingerprint& fp, std::span<const int32_t> tokens) {
  std::vector<std::byte> h;
  const auto* m = reinterpret_cast<const std::byte*>(kStateMagic);
  h.insert(h.end(), m, m + 4);
  put(h, kStateVersion);
  put(h, static_cast<uint32_t>(fp.arch.size()));
  const auto* a = reinterpret_cast<const std::byte*>(fp.arch.data());
  h.insert(h.end(), a, a + fp.arch.size());
  for (int64_t v : {fp.n_layer, fp.n_head_kv, fp.head_dim, fp.n_embd, fp.n_vocab}) put(h, v);
  put(h, static_cast<uint32_t>(fp.kv_type));
  put(h, fp.kv_type_v == fp.kv_type ? uint32_t{0} : static_cast<uint32_t>(fp.kv_type_v));
  put(h, fp.kv_row_bytes);
  put(h, fp.model_hash);
  put(h, static_cast<int64_t>(tokens.size()));
  for (int32_t t : tokens) put(h, t);
  return h;
}

uint64_t kv_bytes(const KvFingerprint& fp, int64_t n_tokens) {
  return static_cast<uint64_t>(fp.n_layer) * static_cast<uint64_t>(n_tokens) *
         (fp.kv_row_bytes + fp.kv_row_bytes_v);
}

// Sequential reads of the header with the offset of every short read in its message.
class HeaderReader {
 public:
  HeaderReader(std::FILE* f, const std::string& path, uint64_t size)
      : f_(f), path_(path), size_(size) {}
  template <typename T>
  Status read(T& v, const char* what) {
    return bytes(&v, sizeof v, what);
  }
  Status bytes(void* p, size_t n, const char* what) {
    if (std::fread(p, 1, n, f_) != n) {
      return err("%s: truncated state file: %s at offset %llu needs %zu bytes, the file has %llu",
                 path_.c_str(), what, ull(off_), n, ull(size_));
    }
    off_ += n;
    return Status::Ok();
  }
  uint64_t offset() const { return off_; }

 private:
  std::FILE* f_;
  const std::string& path_;
  uint64_t size_;
  uint64_t off_ = 0;
};

}  // namespace

uint64_t model_file_hash(const gguf::File& f) {
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](const std::byte* p, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      h ^= static_cast<uint64_t>(p[i]);
      h *= 1099511628211ull;
    }
  };
  const uint64_t n = std::min<uint64_t>(f.data_offset(), f.file_size());
  if (f.base() != nullptr) {
    mix(f.base(), n);
    // Weights differ between models of one shape (fine-tunes) where headers may not. F32
    // tensors (the norms) are never converted in place at load, so their bytes are the file's
    // whatever the load mode; their first bytes are enough to tell models apart.
    for (const gguf::TensorInfo& t : f.tensors()) {
      if (t.type != DType::F32) continue;
      const uint64_t at = f.data_offset() + t.offset;
      if (at >= f.file_size()) continue;
      mix(f.base() + at, std::min<uint64_t>({t.nbytes, 64, f.file_size() - at}));
    }
  }
  const uint64_t size = f.file_size();
  mix(reinterpret_cast<const std::byte*>(&size), sizeof size);
  return h;
}

KvFingerprint kv_fingerprint(const model::Model& m, KvTypes types) {
  const model::HParams& hp = m.hparams();
  KvFingerprint fp;
  fp.arch = hp.arch_name;
  fp.n_layer = hp.n_layer;
  fp.n_head_kv = hp.n_head_kv;
  fp.head_dim = hp.head_dim;
  fp.n_embd = hp.n_embd;
  fp.n_vocab = hp.n_vocab;
  fp.kv_type = types.k;
  fp.kv_type_v = types.v;
  fp.kv_row_bytes = static_cast<uint64_t>(hp.n_head_kv) * row_bytes(types.k, hp.head_dim);
  fp.kv_row_bytes_v = static_cast<uint64_t>(hp.n_head_kv) * row_bytes(types.v, hp.head_dim);
  fp.model_hash = model_file_hash(m.file());
  return fp;
}

Result<uint64_t> write_seq_state(const std::string& path, const KvFingerprint& fp,
                                 const KvCache& cache, SeqId seq, std::span<const int32_t> tokens) {
  const auto entries = cache.seq_entries(seq);
  if (entries.size() != tokens.size()) {
    return with_code(err("%s: sequence %d holds %zu positions but %zu tokens were given", path.c_str(),
                         seq, entries.size(), tokens.size()),
                     ErrorCode::BadRequest);
  }
  if (tokens.empty())
    return with_code(err("%s: sequence %d holds nothing to save", path.c_str(), seq),
                     ErrorCode::BadRequest);
  std::vector<int32_t> cells(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].first != static_cast<int32_t>(i)) {
      return err("%s: sequence %d does not hold positions 0..%zu without gaps (position %d at "
                 "index %zu)",
                 path.c_str(), seq, entries.size() - 1, entries[i].first, i);
    }
    cells[i] = entries[i].second;
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return err("%s: cannot write: %s", tmp.c_str(), std::strerror(errno));
  bool ok = true;
  const std::vector<std::byte> header = header_bytes(fp, tokens);
  ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  std::vector<std::byte> staging(cells.size() * std::max(fp.kv_row_bytes, fp.kv_row_bytes_v));
  const model::KvView& view = cache.view();
  // Window layers hold the positions their window may still read: the others are saved as
  // zeros (a restore gives window cells only to the positions the next token reads).
  std::vector<int32_t> window(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) window[i] = cache.window_cell(cells[i]);
  const WindowPick pick = pick_window(cells, window);
  std::vector<std::byte> compact;
  for (int64_t il = 0; il < fp.n_layer && ok; ++il) {
    backend::Device* dev = cache.layer_device(il);
    if (dev == nullptr) {
      std::fclose(f);
      std::remove(tmp.c_str());
      return err("%s: the KV cache has no storage for layer %lld", path.c_str(), ll(il));
    }
    dev->sync_all();
    for (bool v : {false, true}) {
      const uint64_t cell_bytes = v ? fp.kv_row_bytes_v : fp.kv_row_bytes;
      const uint64_t row = cell_bytes / static_cast<uint64_t>(fp.n_head_kv);
      const HeadRows rows = head_rows(view.layers[static_cast<size_t>(il)], v, row);
      if (cache.window_layer(il)) {
        compact.resize(pick.at.size() * cell_bytes);
        download_rows(*dev, rows, fp.n_head_kv, pick.window, compact.data());
        expand_rows(pick, fp.n_head_kv, cells.size(), row, compact.data(), staging.data());
      } else {
        download_rows(*dev, rows, fp.n_head_kv, cells, staging.data());
      }
      const size_t n_bytes = cells.size() * cell_bytes;
      ok = ok && std::fwrite(staging.data(), 1, n_bytes, f) == n_bytes;
    }
  }
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return err("%s: write failed: %s", tmp.c_str(), std::strerror(saved_errno != 0 ? saved_errno : EIO));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return err("%s: cannot rename %s into place: %s", path.c_str(), tmp.c_str(),
               ec.message().c_str());
  }
  return static_cast<uint64_t>(header.size()) + kv_bytes(fp, static_cast<int64_t>(tokens.size()));
}

Result<SeqStateFile> SeqStateFile::open(const std::string& path, const KvFingerprint& fp) {
  SeqStateFile s;
  s.path_ = path;
  s.fp_ = fp;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return err("%s: cannot read a state file: it is a directory", path.c_str());
  s.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!s.file_) return err("%s: cannot open state file: %s", path.c_str(), std::strerror(errno));
  std::FILE* f = s.file_.get();
  const auto size = static_cast<uint64_t>(std::filesystem::file_size(path, ec));
  if (ec) return err("%s: cannot read the size: %s", path.c_str(), ec.message().c_str());
  s.file_bytes_ = size;
  HeaderReader r(f, path, size);

  char magic[4];
  PI_TRY(r.bytes(magic, 4, "the magic"));
  if (std::memcmp(magic, kStateMagic, 4) != 0)
    return err("%s: not a PowerInfer state file (bad magic; expected \"PISQ\")", path.c_str());
  uint32_t version = 0;
  PI_TRY(r.read(version, "the version"));
  if (version != kStateVersion) {
    return err("%s: state file version %u; this build reads version %u", path.c_str(), version,
               kStateVersion);
  }
  uint32_t arch_len = 0;
  PI_TRY(r.read(arch_len, "the architecture's length"));
  if (arch_len > kMaxArchLen)
    return err("%s: corrupt state file: architecture name of %u bytes", path.c_str(), arch_len);
  std::string arch(arch_len, '\0');
  PI_TRY(r.bytes(arch.data(), arch_len, "the architecture"));
  if (arch != fp.arch) {
    return err("%s: a cache of another model: architecture %s, this model's is %s", path.c_str(),
               arch.c_str(), fp.arch.c_str());
  }
  const struct {
    const char* name;
    int64_t want;
  } dims[] = {{"n_layer", fp.n_layer},
              {"n_head_kv", fp.n_head_kv},
              {"head_dim", fp.head_dim},
              {"n_embd", fp.n_embd},
              {"n_vocab", fp.n_vocab}};
  for (const auto& d : dims) {
    int64_t v = 0;
    PI_TRY(r.read(v, d.name));
    if (v != d.want) {
      return err("%s: a cache of another model: %s %lld, this model's is %lld", path.c_str(),
                 d.name, ll(v), ll(d.want));
    }
  }
  uint32_t type = 0, reserved = 0;
  PI_TRY(r.read(type, "the KV type"));
  PI_TRY(r.read(reserved, "the reserved word"));
  // The second word is the value type's id when it differs from the key type's, else 0.
  const uint32_t type_v = reserved != 0 ? reserved : type;
  if (type != static_cast<uint32_t>(fp.kv_type) || type_v != static_cast<uint32_t>(fp.kv_type_v)) {
    const auto name = [](uint32_t id) {
      const auto info = dtype_info(id);
      return info ? std::string(info->name) : "id " + std::to_string(id);
    };
    return err("%s: a KV cache of keys %s and values %s; this session's are %s and %s "
               "(-ctk/-ctv must match the saving session's)",
               path.c_str(), name(type).c_str(), name(type_v).c_str(),
               std::string(dtype_name(fp.kv_type)).c_str(),
               std::string(dtype_name(fp.kv_type_v)).c_str());
  }
  uint64_t row = 0, hash = 0;
  PI_TRY(r.read(row, "the KV row size"));
  if (row != fp.kv_row_bytes) {
    return err("%s: KV rows of %llu bytes per cell and layer, this session's are %llu",
               path.c_str(), ull(row), ull(fp.kv_row_bytes));
  }
  PI_TRY(r.read(hash, "the model hash"));
  if (hash != fp.model_hash) {
    return err("%s: a cache of another model file: model hash %016llx, this model's is %016llx",
               path.c_str(), ull(hash), ull(fp.model_hash));
  }
  int64_t n = 0;
  PI_TRY(r.read(n, "the token count"));
  // n is bounded by the file's size before any product with it, so nothing below overflows.
  const uint64_t n_fit = n < 1 || static_cast<uint64_t>(n) > size / 4 ? 0 : static_cast<uint64_t>(n);
  const uint64_t header_end = r.offset() + n_fit * 4;
  if (n_fit == 0 || header_end > size) {
    return err("%s: truncated or corrupt state file: %lld tokens need %llu header bytes, the file "
               "has %llu",
               path.c_str(), ll(n), ull(header_end), ull(size));
  }
  const uint64_t expected = header_end + kv_bytes(fp, n);
  if (size != expected) {
    return err("%s: %s state file: %llu bytes, %lld tokens need %llu", path.c_str(),
               size < expected ? "truncated" : "oversized", ull(size), ll(n), ull(expected));
  }
  s.tokens_.resize(static_cast<size_t>(n));
  PI_TRY(r.bytes(s.tokens_.data(), s.tokens_.size() * 4, "the tokens"));
  for (size_t i = 0; i < s.tokens_.size(); ++i) {
    if (s.tokens_[i] < 0 || s.tokens_[i] >= fp.n_vocab) {
      return err("%s: corrupt state file: token %zu is %d, outside the vocabulary [0, %lld)",
                 path.c_str(), i, s.tokens_[i], ll(fp.n_vocab));
    }
  }
  s.data_offset_ = r.offset();
  return s;
}

Status SeqStateFile::read_cells(const KvCache& cache, const KvSlot& slot) {
  const std::span<const int32_t> cells = slot.cells;
  const auto n_file = static_cast<uint64_t>(tokens_.size());
  const uint64_t n = cells.size();
  const bool windowed = slot.window.size() == cells.size();
  const WindowPick pick = windowed ? pick_window(cells, slot.window) : WindowPick{};
  std::vector<std::byte> compact;
  if (n > n_file)
    return err("%s: %llu cells asked of a file of %llu tokens", path_.c_str(), ull(n), ull(n_file));
  std::vector<std::byte> staging(n * std::max(fp_.kv_row_bytes, fp_.kv_row_bytes_v));
  const model::KvView& view = cache.view();
  // Per layer, K then V, each n_file cells' rows head by head.
  uint64_t at = data_offset_;
  for (int64_t il = 0; il < fp_.n_layer; ++il) {
    backend::Device* dev = cache.layer_device(il);
    if (dev == nullptr)
      return err("%s: the KV cache has no storage for layer %lld", path_.c_str(), ll(il));
    dev->sync_all();
    for (int v = 0; v < 2; ++v) {
      const uint64_t cell_bytes = v != 0 ? fp_.kv_row_bytes_v : fp_.kv_row_bytes;
      const uint64_t row = cell_bytes / static_cast<uint64_t>(fp_.n_head_kv);
      // Each head's first n rows of this block: the file keeps n_file rows per head.
      for (int64_t h = 0; h < fp_.n_head_kv; ++h) {
        const uint64_t off = at + static_cast<uint64_t>(h) * n_file * row;
        if (std::fseek(file_.get(), static_cast<long>(off), SEEK_SET) != 0 ||
            std::fread(staging.data() + static_cast<uint64_t>(h) * n * row, 1, n * row,
                       file_.get()) != n * row) {
          return err("%s: read failed at offset %llu (layer %lld)", path_.c_str(), ull(off), ll(il));
        }
      }
      const HeadRows rows = head_rows(view.layers[static_cast<size_t>(il)], v != 0, row);
      if (windowed && cache.window_layer(il)) {
        compact.resize(pick.at.size() * cell_bytes);
        compact_rows(pick, fp_.n_head_kv, n, row, staging.data(), compact.data());
        upload_rows(*dev, rows, fp_.n_head_kv, pick.window, compact.data());
      } else {
        upload_rows(*dev, rows, fp_.n_head_kv, cells, staging.data());
      }
      at += n_file * cell_bytes;
    }
  }
  return Status::Ok();
}

}  // namespace pi::runtime
