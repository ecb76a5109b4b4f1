// The reader process: the only place that parses input files. The batch
// process starts it (`<exe> __read-worker SOCKET_FD SHARED_FD SHARED_BYTES`),
// sends it requests and reads its replies (read_protocol.hpp); window data
// lands in the shared input region. A corrupt file that crashes or hangs
// libhdf5 takes down only this process: the batch process sees the socket
// close or its deadline pass, fails that case, and starts another reader.
#pragma once

namespace linattn::pipeline {

constexpr const char* kReadWorkerArgument = "__read-worker";

// The reader's private memory limit (RLIMIT_DATA; the shared window slots are
// not counted): HDF5's own buffers need a few MiB.
constexpr unsigned long kReaderDataLimit = 2ul << 30;

// True when argv asks for the reader process (checked before anything else
// in main, so that the reader never initializes Kokkos or a GPU).
bool is_read_worker(int argc, char** argv);
int read_worker_main(int argc, char** argv);

}  // namespace linattn::pipeline
