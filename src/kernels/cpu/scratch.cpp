#include "kernels/cpu/scratch.h"

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "core/os.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMinChunk = size_t{1} << 20;

struct FreeDeleter {
  void operator()(void* p) const { os::aligned_free(p); }
};

// A stack of chunks. Scratch objects nest like a stack: each restores the position it found.
struct Arena {
  struct Chunk {
    std::unique_ptr<std::byte, FreeDeleter> mem;
    size_t size = 0;
  };
  std::vector<Chunk> chunks;
  size_t chunk = 0;   // current chunk index (== chunks.size() when none yet)
  size_t offset = 0;  // bytes used in the current chunk
};

thread_local Arena t_arena;

size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Scratch::Scratch() : chunk_(t_arena.chunk), offset_(t_arena.offset) {}

Scratch::~Scratch() {
  t_arena.chunk = chunk_;
  t_arena.offset = offset_;
}

void* Scratch::alloc_bytes(size_t bytes) {
  Arena& a = t_arena;
  bytes = round_up(bytes == 0 ? 1 : bytes);
  while (a.chunk < a.chunks.size()) {
    Arena::Chunk& c = a.chunks[a.chunk];
    if (a.offset + bytes <= c.size) {
      void* p = c.mem.get() + a.offset;
      a.offset += bytes;
      return p;
    }
    ++a.chunk;
    a.offset = 0;
  }
  // No chunk fits: add one at least as large as the request and twice the last one.
  size_t size = kMinChunk;
  if (!a.chunks.empty()) size = a.chunks.back().size * 2;
  while (size < bytes) size *= 2;
  void* mem = os::aligned_alloc(kAlign, size);
  if (mem == nullptr) throw std::bad_alloc();
  a.chunks.push_back({std::unique_ptr<std::byte, FreeDeleter>(static_cast<std::byte*>(mem)),
                      size});
  a.chunk = a.chunks.size() - 1;
  a.offset = bytes;
  return mem;
}

}  // namespace pi::cpu::detail
