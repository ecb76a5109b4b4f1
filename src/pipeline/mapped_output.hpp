// An output file's bytes mapped into memory, so that several threads write a
// window's runs into it at once (write_stage.hpp). Writes into one file
// through write(2) take the file's lock one at a time, whatever the number of
// threads (BENCHMARKS.md, "Several writer threads"); page faults on a shared
// mapping do not. The file's contiguous datasets were allocated when it was
// created (OutputStream::raw_offsets); the file is grown to their end if it
// is shorter, and HDF5 keeps writing only the metadata.
#pragma once

#include "pipeline/copy_pool.hpp"
#include "pipeline/raw_window_writes.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn::pipeline {

class MappedOutput {
 public:
  // path: the file to map (a .partial output); bytes: the end of its last
  // dataset; file: its name in messages.
  MappedOutput(const std::string& path, std::int64_t bytes, const std::string& file);
  ~MappedOutput();
  MappedOutput(const MappedOutput&) = delete;
  MappedOutput& operator=(const MappedOutput&) = delete;

  // Copies run's bytes from the slot into the file. Throws FileError
  // "No space left on device while writing dataset 'h' of FILE" (the message
  // of write_run) when the file system refuses a page of it.
  void copy(const RawRun& run, const unsigned char* slot) const;
  int fd() const { return fd_; }

 private:
  std::string file_;
  int fd_ = -1;
  unsigned char* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

// The pipeline line's note on the writers: " (4 threads, 3 files mapped)",
// or "" with one writer.
std::string mapped_writers_note(int writers, int mapped_files);

// Copies the runs (their slot offsets from base) into out, cut into pieces of
// at most 4 MiB that the pool's threads share; throws the first failing
// piece's error (in the runs' order) once every piece is done.
void copy_runs(const MappedOutput& out, CopyPool& pool, const std::vector<RawRun>& runs, const unsigned char* base);

}  // namespace linattn::pipeline
