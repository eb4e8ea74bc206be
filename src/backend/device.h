// A device: memory with a budget, in-order queues, events, and the ops of the forward pass.
//
// Memory. Device memory is named by device addresses (plain pointers whose meaning belongs to
// the device): on the CPU they are host pointers; on the simulated GPU they are handles that
// fault when the host dereferences them. Host code reads or writes device memory only through
// a queue's copies or through map(), never by dereferencing a device address. alloc() fails
// with an error (never throws, never aborts) when the request would pass the device's budget.
//
// Queues. Each device has kNumQueues in-order queues: kCompute runs the ops (ops()), kCopy is
// free for transfers that overlap compute. Work on one queue runs in submission order; two
// queues are ordered only by events (record on one, wait on the other) or by a host sync().
// Devices whose queues run work inline (cpu, ref) satisfy every ordering trivially.
//
// Thread-safety: a Device is driven by one host thread at a time (the session that owns it);
// its queues may run work on threads of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/op_params.h"
#include "core/error.h"
#include "tensor/dtype.h"

namespace pi::backend {

class Device;
class Ops;

// What a device was asked to do since it was created: copies between host and device memory,
// and ops submitted (kernel launches on a GPU).
struct DeviceActivity {
  uint64_t bytes_in = 0, bytes_out = 0;    // host -> device, device -> host
  uint64_t copies_in = 0, copies_out = 0;
  uint64_t ops = 0;
};

struct MemoryInfo {
  uint64_t capacity = 0;  // bytes the device has (host RAM for the CPU)
  uint64_t budget = 0;    // bytes alloc() may hand out in all (<= capacity)
  uint64_t used = 0;      // bytes allocated now
  uint64_t peak = 0;      // most bytes allocated at once since creation
  uint64_t free() const { return budget > used ? budget - used : 0; }
};

// Memory of one allocation, freed when the Buffer is destroyed. Move-only. data() is a device
// address (see the file comment).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* dev, void* data, size_t bytes) : dev_(dev), data_(data), bytes_(bytes) {}
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }
  // The device that owns the memory (whose copies reach it); nullptr for an empty Buffer.
  Device* device() const { return dev_; }

 private:
  Device* dev_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A point in a queue's stream of work: complete when everything submitted to that queue before
// record() has finished. A default Event is always complete.
struct Event {
  int queue = -1;
  uint64_t value = 0;
};

enum QueueId { kCompute = 0, kCopy = 1, kNumQueues = 2 };

// The ops a device may be asked about by supports(): the op set of backend::Ops.
enum class Op {
  Embed,
  Linear,
  LinearT,
  LinearRows,
  LinearTRows,
  Norm,
  Rope,
  StoreKv,
  Attention,
  Elementwise,
  Copy,
  Mask,     // threshold_mask, compact_rows
  FfnRows,  // ffn_rows, with weights of the given type
};

class Device {
 public:
  virtual ~Device() = default;

  // "cpu", "ref", "sim", ...; describe() adds details (ISA, threads, capacity).
  virtual std::string name() const = 0;
  virtual std::string describe() const = 0;
  // True when device addresses are host pointers (the host may read them after a sync).
  virtual bool host_addressable() const = 0;
  virtual MemoryInfo memory() const = 0;
  // Bytes of the budget an alloc() of `bytes` takes (the device's rounding): what an exact
  // ledger counts for it.
  virtual uint64_t alloc_footprint(size_t bytes) const { return bytes; }
  // Device memory the device's runtime may take beyond alloc() (per-launch stacks, graphs,
  // library handles): the margin a ledger keeps free inside the budget. 0 for host devices.
  virtual uint64_t runtime_margin() const { return 0; }
  // Whether the device runs `op` with weights (or data) of type t. For StoreKv and Attention,
  // t is the KV cache's key or value type (F16, Q8_0, Q4_0: op_params.h KvLayer).
  virtual bool supports(Op op, DType t) const = 0;
  // The type a transposed weight of type t (one read only by linear_t, linear_t_rows and
  // ffn_rows' down rows: attn_*_t, ffn_gate_t, ffn_down_t) is kept in on this device: the
  // store repacks it there when placing (WeightStore::place_transposed). Results are the same
  // bits either way. Default: t, as in the file.
  virtual DType transposed_layout(DType t) const { return t; }
  // The type a weight matrix of type t and `rows` rows that only the dense products read
  // (linear, linear_multi: never row lists) is kept in on this device. Results may differ in
  // the last bits from the file layout's (another order of sums), but not between batch
  // sizes or thread counts. Default: t, as in the file.
  virtual DType dense_layout(DType t, int64_t /*rows*/) const { return t; }

  // Device memory for `bytes`, 64-byte aligned at least; contents undefined (poisoned on the
  // simulated device). Fails, naming `what`, the request and the budget, past the budget.
  virtual Result<Buffer> alloc(size_t bytes, const char* what) = 0;
  // Host memory the device copies from and to at full speed (pinned, page-locked on a GPU):
  // data() is a host pointer. Counted apart from device memory.
  virtual Result<Buffer> alloc_host(size_t bytes, const char* what) = 0;
  // The device address of host memory [p, p + bytes) that outlives every use (the model file's
  // mapping): the host pointer itself on host-addressable devices; an error elsewhere (the
  // memory must be copied in).
  virtual Result<const void*> wrap_host(const void* p, size_t bytes) = 0;

  // ---- Queues: submission returns at once; the work runs in order on the queue. ----
  // dst (device) <- src (host, must stay valid until the work completes).
  virtual void copy_in(QueueId q, void* dst, const void* src, size_t bytes) = 0;
  // dst (host, valid until the work completes) <- src (device).
  virtual void copy_out(QueueId q, void* dst, const void* src, size_t bytes) = 0;
  virtual Event record(QueueId q) = 0;
  // Work submitted to q after this call waits until e is complete.
  virtual void wait(QueueId q, const Event& e) = 0;
  // Blocks the host until everything submitted to q has completed.
  virtual void sync(QueueId q) = 0;
  void sync_all() {
    for (int q = 0; q < kNumQueues; ++q) sync(static_cast<QueueId>(q));
  }

  // The host's view of device memory [p, p + bytes) after everything submitted so far has
  // completed (it syncs every queue), for reading: on a GPU it is a copy, so host writes
  // through it are not seen by the device (the host devices and the sim happen to show the
  // memory itself). For host-addressable devices it is p itself. Valid until the next
  // submission.
  virtual void* map(const void* p, size_t bytes) = 0;

  // The ops of the forward pass, run on queue kCompute.
  virtual Ops& ops() = 0;
  // Copies and ops counted so far (zero on devices whose memory is the host's).
  virtual DeviceActivity activity() const { return {}; }

  // dst (host) <- src (device) after everything submitted to q so far: a copy out on q and the
  // host's wait for it (how the host reads what the ops computed).
  void read_back(QueueId q, void* dst, const void* src, size_t bytes) {
    copy_out(q, dst, src, bytes);
    sync(q);
  }
  // Blocking helpers over kCopy: a whole transfer and a sync.
  void upload(void* dst, const void* src, size_t bytes) {
    copy_in(kCopy, dst, src, bytes);
    sync(kCopy);
  }
  void download(void* dst, const void* src, size_t bytes) {
    copy_out(kCopy, dst, src, bytes);
    sync(kCopy);
  }

 protected:
  friend class Buffer;
  virtual void release(void* data, size_t bytes) = 0;
};

inline Buffer::~Buffer() {
  if (dev_ != nullptr && data_ != nullptr) dev_->release(data_, bytes_);
}

inline Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (dev_ != nullptr && data_ != nullptr) dev_->release(data_, bytes_);
    dev_ = o.dev_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.dev_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

}  // namespace pi::backend
