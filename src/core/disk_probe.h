// How fast this machine reads a file past the page cache (O_DIRECT), in chunks of a given size
// at random aligned offsets, `depth` requests at a time (one thread each): what a model whose
// experts are read from its file on demand (--moe-ram, 4 readers) can expect of the disk. `powerinfer bench` reports it beside
// the memory read probe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace pi {

struct DiskProbe {
  double mbps = 0;       // bytes / seconds / 1e6
  uint64_t bytes = 0;    // read in all
  double seconds = 0;
  size_t chunk = 0;      // bytes per read
  int depth = 1;         // reads in flight
  bool direct = false;   // O_DIRECT (false: the file system refused it; the page cache served)
};

// Reads `total` bytes of `path` (at most its size) as `chunk`-byte reads (rounded up to 4 KiB)
// at offsets drawn from `seed`, `depth` threads each reading its share. Fails naming the file
// when it cannot be opened or read.
Result<DiskProbe> probe_direct_read(const std::string& path, size_t chunk, uint64_t total, int depth = 1,
                                    uint64_t seed = 1);

}  // namespace pi
