#include "pipeline/mapped_output.hpp"

#include "io/file_error.hpp"
#include "pipeline/guarded_copy.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace linattn::pipeline {

MappedOutput::MappedOutput(const std::string& path, std::int64_t bytes, const std::string& file)
    : file_(file), bytes_(bytes) {
  auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw FileError(path, what + ": " + reason);
  };
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open for writing");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat");
  // Grown, never shrunk: HDF5 may already have written past the datasets.
  if (st.st_size < bytes && ::ftruncate(fd_, bytes) != 0) fail("cannot extend to its datasets' end");
  if (bytes > 0) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) fail("cannot map");
    data_ = static_cast<unsigned char*>(p);
  }
}

MappedOutput::~MappedOutput() {
  if (data_) ::munmap(data_, static_cast<std::size_t>(bytes_));
  if (fd_ >= 0) ::close(fd_);
}

void MappedOutput::copy(const RawRun& run, const unsigned char* slot) const {
  if (run.file_offset < 0 || run.bytes < 0 || run.file_offset > bytes_ || run.bytes > bytes_ - run.file_offset)
    throw FileError(file_, run.dataset, "a window's bytes fall outside the mapped datasets");
  if (!guarded_copy(data_ + run.file_offset, slot + run.slot_offset, static_cast<std::size_t>(run.bytes)))
    throw FileError::preformatted(std::string(std::strerror(ENOSPC)) + " while writing dataset '" + run.dataset +
                                  "' of " + file_);
  // The pages stay in the file (the page cache); leaving the mapping keeps
  // them out of this process's resident memory, which the budget counts.
  static const std::int64_t page = ::sysconf(_SC_PAGESIZE);
  const std::int64_t first = run.file_offset / page * page, end = run.file_offset + run.bytes;
  ::madvise(data_ + first, static_cast<std::size_t>(end - first), MADV_DONTNEED);
}

std::string mapped_writers_note(int writers, int mapped_files) {
  if (writers <= 1) return "";
  return " (" + std::to_string(writers) + " threads, " + std::to_string(mapped_files) +
         (mapped_files == 1 ? " file" : " files") + " mapped)";
}

void copy_runs(const MappedOutput& out, CopyPool& pool, const std::vector<RawRun>& runs, const unsigned char* base) {
  std::vector<std::function<void()>> pieces;
  for (const RawRun& piece : split_runs(runs, std::int64_t(4) << 20))
    pieces.push_back([&out, piece, base] { out.copy(piece, base); });
  pool.run(pieces);
}

}  // namespace linattn::pipeline
