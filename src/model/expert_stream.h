// A mixture of experts larger than memory (--moe-ram): the experts stay in the model file and
// a fixed number of slots in RAM holds the ones used most recently, over all layers (LRU).
// A layer asks for the experts its router chose (acquire); those not in a slot are read from
// the file with direct I/O (O_DIRECT: the page cache does not fill up behind the cache) into
// the least recently used slots, and converted to the layout the context reads (the CPU's
// 16-row groups, as a model read into memory holds them), so the results are those of the
// whole model in memory bit for bit. prefetch() starts reading a layer's experts on a
// background thread: SmallThinker routes before attention, so its experts load while
// attention runs; other models predict the next layer's experts from this layer's input.
//
// The forward pass calls acquire/prefetch from one thread; kReaders reader threads fill the
// slots marked as loading (misses first, then reads ahead), which no one reads or evicts until
// they are ready.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <array>
#include <thread>
#include <vector>

#include "core/direct_file.h"
#include "core/error.h"
#include "core/huge_region.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace pi::model {

// The parts of an expert, in expert_parts' order (weights.h).
enum class ExpertPart { Gate = 0, Up = 1, Down = 2, DownT = 3 };
inline constexpr int kExpertParts = 4;

struct ExpertStreamStats {
  // Each expert a layer asks for is one of: held by a slot since before (a hit), read ahead
  // for this use (prefetch_used), or read while the layer waited (a miss).
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t prefetched = 0;     // experts read ahead
  uint64_t prefetch_used = 0;  // ... that their layer then asked for
  uint64_t predicted = 0, predicted_right = 0;  // next-layer predictions made, and right
  uint64_t bytes_read = 0;     // from the file (aligned ranges)
  double read_s = 0;           // reading and converting, both threads
  double wait_s = 0;           // the forward pass waiting for experts
};

class ExpertStream {
 public:
  // The layer's expert stacks in `file_w` are views of the mapped file at `path` (never read
  // through the mapping); `layout[il][part]` the type the context reads each part in (the
  // file's, or a layout it converts to). `cache_bytes` of slots, each one expert of any
  // layer. Fails with a one-line error when the file cannot be opened, a stack is not in the
  // file's mapping (experts stored one tensor per expert are copied at load), or the cache
  // holds fewer than `min_slots` experts.
  static Result<std::unique_ptr<ExpertStream>> create(const std::string& path, const std::byte* mapping,
                                                      uint64_t mapping_size, const HParams& hp,
                                                      const ModelWeights& file_w,
                                                      const std::vector<std::array<DType, kExpertParts>>& layout,
                                                      uint64_t cache_bytes, int64_t min_slots);
  ~ExpertStream();
  ExpertStream(const ExpertStream&) = delete;
  ExpertStream& operator=(const ExpertStream&) = delete;

  // Reader threads: reads in flight at once (a disk serves a queue of several faster than one).
  static constexpr int kReaders = 4;
  // Bytes of one slot (the largest expert of any layer, each part in a 4 KiB-aligned area with
  // 4 KiB to spare: the file's range is read into it as it lies) and slots.
  static uint64_t slot_bytes(const HParams& hp, const ModelWeights& file_w);
  int64_t slots() const { return n_slots_; }
  uint64_t cache_bytes() const { return static_cast<uint64_t>(n_slots_) * slot_bytes_; }
  bool direct_io() const { return file_.direct(); }

  // Layer il's experts `ids` (any order, repeats allowed) in slots, read now where missing,
  // waiting for those being read ahead. They stay until the next acquire(). Returns the slot
  // of each of the layer's experts (n_expert entries, -1 for one not held).
  const std::vector<int32_t>& acquire(int64_t il, std::span<const int32_t> ids);
  // Starts reading layer il's experts `ids` that no slot holds, in the background; `predicted`:
  // a guess (counted in stats()).
  void prefetch(int64_t il, std::span<const int32_t> ids, bool predicted);
  // Expert part `part` of the expert in `slot` of layer il, as a matrix in its layout.
  Matrix matrix(int64_t il, ExpertPart part, int32_t slot) const;

  ExpertStreamStats stats() const;
  void reset_stats();
  // A read that failed since creation (the file changed or the disk failed; the expert then
  // computed as zeros): its one-line message, empty when none did.
  std::string failure() const;

 private:
  struct Part {
    uint64_t file_off = 0, bytes = 0;  // expert 0's part in the file, one expert's bytes
    uint64_t slot_off = 0;             // its area in a slot: 4 KiB-aligned, its bytes + 4 KiB
    DType file_type = DType::F32, layout = DType::F32;
    int64_t rows = 0, cols = 0;
    bool present = false;
  };
  enum class State : uint8_t { Empty, Loading, Ready };
  struct Slot {
    int32_t layer = -1, expert = -1;
    State state = State::Empty;
    bool prefetched = false;  // read ahead and not yet asked for
    uint64_t used = 0;        // the clock when last asked for (or read ahead)
    uint64_t pin = 0;         // the acquire() that holds it (pinned while == epoch_)
  };
  struct Job {
    int32_t layer, expert, slot;
  };

  ExpertStream() = default;
  // A slot to (re)use for layer il's expert e: an empty one, or the least recently used ready
  // one not pinned; -1 if none. Caller holds mu_.
  int32_t victim();
  // Takes slot s for (il, e), marked loading. Caller holds mu_.
  void claim(int32_t s, int32_t il, int32_t e);
  // Reads (il, e) into slot s (no lock held); `unit_buf`: the reader's buffer for conversions.
  void read(int32_t il, int32_t e, int32_t s, std::vector<std::byte>& unit_buf);
  // Where expert e's part starts in its slot area past the 4 KiB boundary its read begins on.
  static uint64_t shift(const Part& p, int32_t e);
  void reader_loop();

  DirectFile file_;
  std::string path_;
  int64_t n_expert_ = 0;
  std::vector<std::array<Part, kExpertParts>> parts_;  // [n_layer]
  uint64_t slot_bytes_ = 0;
  int64_t n_slots_ = 0;
  HugeRegion pool_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_, job_cv_;
  std::vector<Slot> slot_;                    // [n_slots]
  std::vector<std::vector<int32_t>> where_;   // [n_layer][n_expert] slot or -1
  std::vector<std::vector<uint8_t>> guessed_;  // [n_layer][n_expert] predicted, not yet checked
  std::vector<int32_t> map_;                  // acquire()'s result
  std::deque<Job> jobs_;
  uint64_t clock_ = 0, epoch_ = 0;
  bool stop_ = false;
  ExpertStreamStats stats_;
  std::string failure_;
  std::vector<std::thread> readers_;
};

}  // namespace pi::model
