// The exact account of one context's device memory, made before anything is allocated: every
// allocation the context will make on the device (weights, KV cache, per-step buffers, the
// hybrid executor's scratch and hot rows), counted at its device footprint
// (Device::alloc_footprint), plus the device runtime's margin (Device::runtime_margin). A
// context whose ledger passes its budget is refused at load with the table; once allocated,
// the device's bytes in use equal allocated() exactly (tests check it), so the budget is
// never exceeded. The original PowerInfer left the scratch, dequantisation pools and cuBLAS
// workspace out of its budget, and its users ran out of memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/error.h"

namespace pi::runtime {

struct LedgerLine {
  std::string what;
  int64_t count = 0;   // allocations
  uint64_t bytes = 0;  // their device footprints, summed
};

class Ledger {
 public:
  Ledger() = default;
  Ledger(const backend::Device& dev, uint64_t budget);

  // One allocation of `bytes` under the line `what` (lines keep their first-seen order).
  void add(const std::string& what, uint64_t bytes);
  void add_all(const std::string& what, const std::vector<uint64_t>& sizes);

  uint64_t budget() const { return budget_; }
  uint64_t margin() const { return margin_; }
  // Device bytes the allocations take (what Device::memory().used grows by).
  uint64_t allocated() const;
  uint64_t total() const { return allocated() + margin_; }
  const std::vector<LedgerLine>& lines() const { return lines_; }

  // Fails when total() passes the budget: "<what>: needs X MiB (lines), the budget is Y MiB".
  Status check(const std::string& what) const;
  // A short table: one line per item, then the margin, total, budget and what is unused.
  std::string table() const;

 private:
  const backend::Device* dev_ = nullptr;
  uint64_t budget_ = 0;
  uint64_t margin_ = 0;
  std::vector<LedgerLine> lines_;
};

// "12.3 MiB"
std::string mib_text(uint64_t bytes);

}  // namespace pi::runtime
