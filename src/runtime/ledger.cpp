#include "runtime/ledger.h"

#include <cstdio>

namespace pi::runtime {

std::string mib_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

Ledger::Ledger(const backend::Device& dev, uint64_t budget)
    : dev_(&dev), budget_(budget), margin_(dev.runtime_margin()) {}

void Ledger::add(const std::string& what, uint64_t bytes) {
  const uint64_t fp = dev_ != nullptr ? dev_->alloc_footprint(bytes) : bytes;
  for (LedgerLine& l : lines_) {
    if (l.what == what) {
      ++l.count;
      l.bytes += fp;
      return;
    }
  }
  lines_.push_back(LedgerLine{what, 1, fp});
}

void Ledger::add_all(const std::string& what, const std::vector<uint64_t>& sizes) {
  for (uint64_t b : sizes) add(what, b);
}

uint64_t Ledger::allocated() const {
  uint64_t n = 0;
  for (const LedgerLine& l : lines_) n += l.bytes;
  return n;
}

Status Ledger::check(const std::string& what) const {
  if (total() <= budget_) return Status::Ok();
  std::string parts;
  for (const LedgerLine& l : lines_)
    parts += (parts.empty() ? "" : ", ") + l.what + " " + mib_text(l.bytes);
  if (margin_ > 0) parts += ", margin " + mib_text(margin_);
  return err("%s: needs %s of device memory (%s), the budget is %s", what.c_str(),
             mib_text(total()).c_str(), parts.c_str(), mib_text(budget_).c_str());
}

std::string Ledger::table() const {
  std::string out;
  char buf[160];
  for (const LedgerLine& l : lines_) {
    std::snprintf(buf, sizeof buf, "  %-24s %6lld %12s\n", l.what.c_str(),
                  static_cast<long long>(l.count), mib_text(l.bytes).c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  %-24s %6s %12s\n", "runtime margin", "", mib_text(margin_).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "  %-24s %6s %12s of %s (%s unused)\n", "total", "",
                mib_text(total()).c_str(), mib_text(budget_).c_str(),
                mib_text(budget_ > total() ? budget_ - total() : 0).c_str());
  out += buf;
  return out;
}

}  // namespace pi::runtime
