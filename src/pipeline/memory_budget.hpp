// How much host memory a run may use, and how it is split: input slots (the
// reader fills them), output slots (the writer drains them), and on host
// backends a share for the kernels' own buffers (states, key sums).
#pragma once

#include <cstdint>
#include <string>

namespace linattn::pipeline {

// "512M", "8G", "1.5G", "65536" (bytes), K/M/G/T binary, optional trailing
// "B" or "iB". Throws std::invalid_argument for anything else, or below 1 MiB.
std::int64_t parse_memory_size(const std::string& text);

// A quarter of the physical memory: room for the rest of the machine.
std::int64_t default_memory_budget();

struct BudgetSplit {
  int input_slots = 3, output_slots = 3;
  std::int64_t slot_bytes = 0;        // each slot
  std::int64_t device_extra = 0;      // per window, beside the slots' data (host backends: from the budget)
  std::int64_t reserve_bytes = 0;     // left to what the libraries allocate beside the slots
};
// Windows are capped at `window_cap` bytes per slot, so that even a large
// budget keeps several windows in flight. One share of the budget is left
// out of the slots: the CUDA driver and HDF5 allocate memory of their own
// once windows are large (about 27 MiB beside 33-64 MiB slots on the H200
// host, BENCHMARKS.md "Memory budget"), and the budget bounds the whole run.
// host_backend reserves one more share for the kernels' buffers, which there
// live in host memory.
BudgetSplit split_budget(std::int64_t budget, bool host_backend, std::int64_t window_cap = std::int64_t(64) << 20);

// This process's resident memory now, by kind (/proc/self/status): private
// ("anon": heap, output slots, the CUDA runtime's host side), files (the
// binary and its libraries) and shared (the input slots, shared with the
// readers), e.g. "anon 210 MiB, files 60 MiB, shared 100 MiB"; "" where
// /proc does not say.
std::string resident_memory();

// With LINATTN_MEMORY_MAP=FILE set, copies /proc/self/smaps (every mapping
// and its resident size) to FILE: where memory beside the budget's slots
// lives, for docs/ARCHITECTURE.md's memory accounting.
void save_memory_map_if_asked();

}  // namespace linattn::pipeline
