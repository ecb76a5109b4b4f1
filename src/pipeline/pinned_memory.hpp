// Page-locking host memory for the device's copy engines. Under CUDA:
// cudaHostRegister; on host backends there is nothing to do.
#pragma once

#include <cstddef>

namespace linattn::pipeline {

// True when the memory is now page-locked (unpin it before unmapping).
bool pin_host_memory(void* data, std::size_t bytes);
void unpin_host_memory(void* data);

// Free and total memory of the device the kernels run on; on host backends,
// the host's available and total memory.
void device_memory(std::size_t& free_bytes, std::size_t& total_bytes);

// Multiprocessors of the device the kernels run on; 0 on host backends.
int device_multiprocessors();

}  // namespace linattn::pipeline
