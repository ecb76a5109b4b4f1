// Host-side CUDA helpers of the tensor-core launchers: launch error checks and
// device memory from the stream-ordered allocator.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace linattn::cuda {

namespace detail {

inline void check_launch(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace detail

// The segment states come from the stream-ordered allocator; keeping the freed
// memory in its pool makes the next call's allocation cheap.
inline void keep_pool_memory() {
  static const bool done = [] {
    int device = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      std::uint64_t keep = ~std::uint64_t(0);
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    return true;
  }();
  (void)done;
}
// Device memory from the stream-ordered allocator, given back on the stream
// after the kernels that use it (also when a launch throws).
struct StreamBuffer {
  struct Free {
    cudaStream_t stream;
    void operator()(void* p) const { cudaFreeAsync(p, stream); }
  };
  std::unique_ptr<void, Free> ptr;
  StreamBuffer(std::size_t bytes, cudaStream_t stream, const char* what) : ptr(nullptr, Free{stream}) {
    keep_pool_memory();
    void* raw = nullptr;
    if (bytes > 0) detail::check_launch(cudaMallocAsync(&raw, bytes, stream), what);
    ptr.reset(raw);
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr.get()); }
};

}  // namespace linattn::cuda
