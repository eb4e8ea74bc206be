#include "model/expert_stream.h"


#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/direct_file.h"
#include "core/log.h"
#include "model/layout_cache.h"
#include "tensor/quant.h"

namespace pi::model {
namespace {

constexpr uint64_t kAlign = kDirectAlign;  // direct I/O: offsets, lengths and buffers on this boundary

uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

uint64_t ExpertStream::slot_bytes(const HParams& hp, const ModelWeights& file_w) {
  uint64_t most = 0;
  for (const LayerWeights& L : file_w.layers) {
    uint64_t b = 0;
    for (const Matrix* m : expert_parts(L.ffn))
      if (m->present()) b += align_up(m->nbytes() / static_cast<uint64_t>(hp.n_expert)) + kAlign;
    most = std::max(most, b);
  }
  return most;
}

Result<std::unique_ptr<ExpertStream>> ExpertStream::create(const std::string& path, const std::byte* mapping,
                                                           uint64_t mapping_size, const HParams& hp,
                                                           const ModelWeights& file_w,
                                                           const std::vector<std::array<DType, kExpertParts>>& layout,
                                                           uint64_t cache_bytes, int64_t min_slots) {
  std::unique_ptr<ExpertStream> s(new ExpertStream());
  s->path_ = path;
  s->n_expert_ = hp.n_expert;
  s->slot_bytes_ = slot_bytes(hp, file_w);
  if (s->slot_bytes_ == 0) return err("%s: no expert tensors to read on demand", path.c_str());
  s->n_slots_ = static_cast<int64_t>(cache_bytes / s->slot_bytes_);
  if (s->n_slots_ < min_slots) {
    return err("%s: an expert cache of %.2f GiB holds %lld experts of %.1f MiB, fewer than the %lld it needs "
               "(a layer's experts and the next layer's read ahead, or one token's in every layer; raise --moe-ram)",
               path.c_str(), static_cast<double>(cache_bytes) / 1073741824.0, static_cast<long long>(s->n_slots_),
               static_cast<double>(s->slot_bytes_) / 1048576.0, static_cast<long long>(min_slots));
  }
  s->parts_.resize(file_w.layers.size());
  for (size_t il = 0; il < file_w.layers.size(); ++il) {
    const auto stacks = expert_parts(file_w.layers[il].ffn);
    uint64_t at = 0;
    for (int p = 0; p < kExpertParts; ++p) {
      const Matrix& m = *stacks[static_cast<size_t>(p)];
      if (!m.present()) continue;
      const auto addr = reinterpret_cast<uintptr_t>(m.data), base = reinterpret_cast<uintptr_t>(mapping);
      if (addr < base || addr + m.nbytes() > base + mapping_size) {
        return err("%s: tensor '%s' is not read from the file as it is stored (one tensor per expert?): "
                   "--moe-ram needs the experts of a layer stored in one tensor",
                   path.c_str(), m.name.c_str());
      }
      Part& part = s->parts_[il][static_cast<size_t>(p)];
      part.present = true;
      part.file_off = addr - base;
      part.bytes = m.nbytes() / static_cast<uint64_t>(hp.n_expert);
      part.slot_off = at;
      part.file_type = m.type;
      part.layout = layout[il][static_cast<size_t>(p)];
      part.rows = m.rows / hp.n_expert;
      part.cols = m.cols;
      at += align_up(part.bytes) + kAlign;  // room for the part's offset within its first 4 KiB
    }
  }
  s->pool_ = HugeRegion(static_cast<size_t>(s->cache_bytes()));
  if (!s->pool_.ok()) {
    return err("cannot allocate the expert cache (%.2f GiB): %s", static_cast<double>(s->cache_bytes()) / 1073741824.0,
               std::strerror(errno));
  }
  // The slots' pages faulted in now, at load (zeroing them on first use costs more than the
  // reads that fill them on a VM, and belongs to loading, as a model read into memory pays it).
  const auto t_fault = std::chrono::steady_clock::now();
  populate_for_write(s->pool_.data(), s->pool_.size());
  log_debug("expert cache: %.2f GiB faulted in in %.2f s", static_cast<double>(s->pool_.size()) / 1073741824.0,
            seconds_since(t_fault));
  auto file = DirectFile::open(path, /*direct=*/true);
  if (!file.ok()) return file.error();
  s->file_ = std::move(*file);
  if (!s->file_.direct())
    log_info("%s: direct I/O refused by its file system: experts are read through the page cache", path.c_str());
  s->slot_.resize(static_cast<size_t>(s->n_slots_));
  s->where_.assign(file_w.layers.size(), std::vector<int32_t>(static_cast<size_t>(hp.n_expert), -1));
  s->guessed_.assign(file_w.layers.size(), std::vector<uint8_t>(static_cast<size_t>(hp.n_expert), 0));
  s->map_.assign(static_cast<size_t>(hp.n_expert), -1);
  // One aligned buffer per reading thread, for a part's range widened to 4 KiB boundaries.
  std::vector<std::byte> probe(2 * kAlign);
  std::byte* const probe_at = reinterpret_cast<std::byte*>(align_up(reinterpret_cast<uintptr_t>(probe.data())));
  // A first read tells whether this file system takes direct I/O at 4 KiB alignment.
  for (size_t il = 0; il < s->parts_.size() && s->file_.direct(); ++il) {
    const Part& p = s->parts_[il][0];
    if (!p.present) continue;
    const uint64_t a0 = p.file_off / kAlign * kAlign;
    if (!s->file_.read_at(probe_at, kAlign, a0, 1)) {
      PI_TRY(s->file_.reopen_buffered());
      log_info("%s: direct I/O failed here: experts are read through the page cache", path.c_str());
    }
    break;
  }
  for (int i = 0; i < kReaders; ++i) s->readers_.emplace_back([p = s.get()] { p->reader_loop(); });
  return s;
}

ExpertStream::~ExpertStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  job_cv_.notify_all();
  for (std::thread& t : readers_) t.join();
}

Matrix ExpertStream::matrix(int64_t il, ExpertPart part, int32_t slot) const {
  const Part& p = parts_[static_cast<size_t>(il)][static_cast<size_t>(part)];
  Matrix m;
  m.type = p.layout;
  m.rows = p.rows;
  m.cols = p.cols;
  m.data = pool_.data() + static_cast<size_t>(slot) * slot_bytes_ + p.slot_off +
           shift(p, slot_[static_cast<size_t>(slot)].expert);
  return m;
}

int32_t ExpertStream::victim() {
  int32_t best = -1;
  for (size_t s = 0; s < slot_.size(); ++s) {
    const Slot& sl = slot_[s];
    if (sl.state == State::Empty) return static_cast<int32_t>(s);
    if (sl.state != State::Ready || sl.pin == epoch_) continue;
    if (best < 0 || sl.used < slot_[static_cast<size_t>(best)].used) best = static_cast<int32_t>(s);
  }
  return best;
}

void ExpertStream::claim(int32_t s, int32_t il, int32_t e) {
  Slot& sl = slot_[static_cast<size_t>(s)];
  if (sl.layer >= 0) where_[static_cast<size_t>(sl.layer)][static_cast<size_t>(sl.expert)] = -1;
  sl.layer = il;
  sl.expert = e;
  sl.state = State::Loading;
  sl.prefetched = false;
  sl.used = ++clock_;
  where_[static_cast<size_t>(il)][static_cast<size_t>(e)] = s;
}

uint64_t ExpertStream::shift(const Part& p, int32_t e) {
  return (p.file_off + static_cast<uint64_t>(e) * p.bytes) % kAlign;
}

void ExpertStream::read(int32_t il, int32_t e, int32_t s, std::vector<std::byte>& unit_buf) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  for (const Part& p : parts_[static_cast<size_t>(il)]) {
    if (!p.present) continue;
    // The part's 4 KiB-aligned range straight into the slot (no copy): the part then starts
    // where its offset in the file falls in the first 4 KiB, as matrix() finds it.
    const uint64_t off = p.file_off + static_cast<uint64_t>(e) * p.bytes;
    const uint64_t a0 = off / kAlign * kAlign, a1 = align_up(off + p.bytes);
    std::byte* const area = pool_.data() + static_cast<size_t>(s) * slot_bytes_ + p.slot_off;
    std::byte* const at = area + (off - a0);
    if (!file_.read_at(area, a1 - a0, a0, off + p.bytes - a0)) {
      // The file changed or the disk failed under a running model: the expert computes as
      // zeros and the step that asked for it fails (failure()).
      const std::string why = DirectFile::read_error();
      std::memset(at, 0, static_cast<size_t>(p.bytes));
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) {
        char msg[512];
        std::snprintf(msg, sizeof msg, "%s: cannot read expert %d of layer %d (offset %llu, %llu bytes): %s",
                      path_.c_str(), e, il, static_cast<unsigned long long>(off),
                      static_cast<unsigned long long>(p.bytes), why.c_str());
        failure_ = msg;
      }
      continue;
    }
    bytes += a1 - a0;
    if (p.layout != p.file_type) {
      // Into the context's layout in place, a unit of rows at a time through a small buffer
      // (16-row groups, or single rows; place_streamed chose a layout converts() allows).
      const int64_t unit = is_r16(p.layout) || is_r16(p.file_type) ? 16 : 1;
      Matrix m;
      m.type = p.file_type;
      m.rows = unit;
      m.cols = p.cols;
      const size_t unit_bytes = static_cast<size_t>(unit) * m.row_stride();
      unit_buf.resize(unit_bytes);
      for (int64_t r = 0; r < p.rows; r += unit) {
        std::byte* rows = at + static_cast<size_t>(r) * m.row_stride();
        m.data = rows;
        (void)convert_rows(m, p.layout, unit_buf.data());
        std::memcpy(rows, unit_buf.data(), unit_bytes);
      }
    }
  }
  const double secs = seconds_since(t0);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_read += bytes;
  stats_.read_s += secs;
}

void ExpertStream::reader_loop() {
  std::vector<std::byte> unit_buf;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    job_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const Job j = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    read(j.layer, j.expert, j.slot, unit_buf);
    lock.lock();
    Slot& sl = slot_[static_cast<size_t>(j.slot)];
    sl.state = State::Ready;
    ready_cv_.notify_all();
  }
}

void ExpertStream::prefetch(int64_t il, std::span<const int32_t> ids, bool predicted) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t>& where = where_[static_cast<size_t>(il)];
  for (int32_t e : ids) {
    if (predicted && !guessed_[static_cast<size_t>(il)][static_cast<size_t>(e)]) {
      guessed_[static_cast<size_t>(il)][static_cast<size_t>(e)] = 1;
      ++stats_.predicted;
    }
    if (const int32_t s = where[static_cast<size_t>(e)]; s >= 0) {
      slot_[static_cast<size_t>(s)].used = ++clock_;  // keep it: it is about to be asked for
      continue;
    }
    const int32_t s = victim();
    if (s < 0) break;  // every slot pinned or loading: the layer reads the rest itself
    claim(s, static_cast<int32_t>(il), e);
    slot_[static_cast<size_t>(s)].prefetched = true;
    ++stats_.prefetched;
    jobs_.push_back(Job{static_cast<int32_t>(il), e, s});
  }
  job_cv_.notify_all();
}

const std::vector<int32_t>& ExpertStream::acquire(int64_t il, std::span<const int32_t> ids) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  ++epoch_;  // the previous layer's experts may go now
  std::vector<int32_t>& where = where_[static_cast<size_t>(il)];
  std::vector<uint8_t>& guessed = guessed_[static_cast<size_t>(il)];
  for (int32_t e : ids) {
    const int32_t s = where[static_cast<size_t>(e)];
    if (s >= 0) {
      Slot& sl = slot_[static_cast<size_t>(s)];
      if (sl.pin == epoch_) continue;  // a repeat
      sl.pin = epoch_;
      sl.used = ++clock_;
      ++(sl.prefetched ? stats_.prefetch_used : stats_.hits);
      sl.prefetched = false;
      if (guessed[static_cast<size_t>(e)]) ++stats_.predicted_right;
      continue;
    }
    if (guessed[static_cast<size_t>(e)]) ++stats_.predicted_right;  // guessed, but evicted since
    // create() keeps more slots than a layer has experts, so one frees up once the reads
    // ahead finish.
    int32_t v;
    while ((v = victim()) < 0) ready_cv_.wait(lock);
    claim(v, static_cast<int32_t>(il), e);
    slot_[static_cast<size_t>(v)].pin = epoch_;
    ++stats_.misses;
    jobs_.push_front(Job{static_cast<int32_t>(il), e, v});  // before any read ahead of later layers
  }
  std::fill(guessed.begin(), guessed.end(), 0);
  job_cv_.notify_all();
  // The readers read the misses (several at a time) and what was read ahead.
  ready_cv_.wait(lock, [&] {
    for (int32_t e : ids)
      if (slot_[static_cast<size_t>(where[static_cast<size_t>(e)])].state != State::Ready) return false;
    return true;
  });
  std::fill(map_.begin(), map_.end(), -1);
  for (int32_t e : ids) map_[static_cast<size_t>(e)] = where[static_cast<size_t>(e)];
  stats_.wait_s += seconds_since(t0);
  return map_;
}

ExpertStreamStats ExpertStream::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string ExpertStream::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void ExpertStream::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = ExpertStreamStats{};
}

}  // namespace pi::model
