// The run's host memory, allocated once and reused from window to window:
// slots of a fixed size carved from two regions. The input region is shared
// with the reader process (a memfd mapping, so that it writes the windows
// straight into memory this process uploads from); the output region is
// private. Under CUDA both are page-locked (cudaHostRegister), so that the
// copies to and from the device are asynchronous DMA at full speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <condition_variable>
#include <vector>

namespace linattn::pipeline {

class HostRegion {
 public:
  // shared: a memfd mapping another process can map through fd(). pin: page-lock it under CUDA (for
  // copies to the device straight from it).
  HostRegion(std::int64_t bytes, bool shared, bool pin = true);
  ~HostRegion();
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;

  unsigned char* data() const { return data_; }
  std::int64_t bytes() const { return bytes_; }
  int fd() const { return fd_; }
  bool pinned() const { return pinned_; }

 private:
  unsigned char* data_ = nullptr;
  std::int64_t bytes_ = 0;
  int fd_ = -1;
  bool pinned_ = false;
};

// A pool of equal slots of one region: acquire() blocks until one is free.
class SlotPool {
 public:
  SlotPool(const HostRegion& region, int slots);
  int size() const { return static_cast<int>(free_.size()); }
  std::int64_t slot_bytes() const { return slot_bytes_; }
  unsigned char* data(int slot) const { return base_ + slot * slot_bytes_; }
  std::int64_t offset(int slot) const { return slot * slot_bytes_; }  // in the region
  int acquire();
  void release(int slot);

 private:
  unsigned char* base_;
  std::int64_t slot_bytes_;
  std::vector<bool> free_;
  std::mutex mutex_;
  std::condition_variable changed_;
};

// A region and its pool of `slots` equal slots of at least `slot_bytes`
// (rounded up to whole pages, as the pool rounds each slot down to them): the
// readers' input slots (shared with them) and the output slots of `run` and
// `backward`.
class SlotRegion {
 public:
  SlotRegion(int slots, std::int64_t slot_bytes, bool shared)
      : region_(slots * ((slot_bytes + 4095) / 4096 * 4096), shared), pool_(region_, slots) {}
  SlotPool& pool() { return pool_; }
  const SlotPool& pool() const { return pool_; }
  const HostRegion& region() const { return region_; }

 private:
  HostRegion region_;
  SlotPool pool_;
};

// A slot acquired from a pool, released when the lease ends (whichever
// thread ends it: the streamed backward hands its output slots to the writer).
class SlotLease {
 public:
  explicit SlotLease(SlotPool& pool) : pool_(pool), slot_(pool.acquire()) {}
  ~SlotLease() { pool_.release(slot_); }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  unsigned char* data() const { return pool_.data(slot_); }

 private:
  SlotPool& pool_;
  int slot_;
};

}  // namespace linattn::pipeline
