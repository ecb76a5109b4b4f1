#include "pipeline/host_buffers.hpp"

#include "pipeline/pinned_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace linattn::pipeline {

HostRegion::HostRegion(std::int64_t bytes, bool shared, bool pin) : bytes_(bytes) {
  if (bytes <= 0) return;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (shared) {
    fd_ = ::memfd_create("linattn-input-windows", MFD_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, bytes) != 0)
      throw std::runtime_error(std::string("cannot create the shared input buffers: ") + std::strerror(errno));
    flags = MAP_SHARED;
  }
  // Pages are touched only when a window is written into them: nothing is zero-filled up front.
  void* p = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE, flags, fd_, 0);
  if (p == MAP_FAILED) {
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("cannot map " + std::to_string(bytes >> 20) + " MiB of host buffers: " + std::strerror(errno));
  }
  data_ = static_cast<unsigned char*>(p);
  pinned_ = pin && pin_host_memory(data_, static_cast<std::size_t>(bytes_));
}

HostRegion::~HostRegion() {
  if (!data_) return;
  if (pinned_) unpin_host_memory(data_);
  ::munmap(data_, static_cast<std::size_t>(bytes_));
  if (fd_ >= 0) ::close(fd_);
}

SlotPool::SlotPool(const HostRegion& region, int slots)
    : base_(region.data()), slot_bytes_(slots > 0 ? region.bytes() / slots : 0), free_(static_cast<std::size_t>(slots), true) {
  slot_bytes_ -= slot_bytes_ % 4096;  // page-aligned slots
}

int SlotPool::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]) {
        free_[i] = false;
        return static_cast<int>(i);
      }
    changed_.wait(lock);
  }
}

void SlotPool::release(int slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[static_cast<std::size_t>(slot)] = true;
  }
  changed_.notify_all();
}

}  // namespace linattn::pipeline
