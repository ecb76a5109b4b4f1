// Opening HDF5 files with one-line errors, and creating files so that a
// failed write leaves nothing that looks complete.
#pragma once

#include "io/hdf5_handles.hpp"

#include <string>

namespace linattn::hdf5 {

// Opens an existing file read-only (inputs are never opened for writing).
// Throws FileError for a missing file, a file that is not HDF5, or one HDF5
// cannot open (truncated, corrupt), quoting HDF5's reason.
File open_read_only(const std::string& path);

// A new file written as PATH.partial and renamed to PATH by commit(). If the
// object is destroyed before commit() (an exception on the way), the partial
// file is removed.
class NewFile {
 public:
  // Creates PATH.partial, replacing a stale one.
  explicit NewFile(std::string path);
  ~NewFile();
  NewFile(const NewFile&) = delete;
  NewFile& operator=(const NewFile&) = delete;

  hid_t id() const { return file_.get(); }
  const std::string& path() const { return path_; }  // the final name, for messages

  // Closes the file (every object in it) and renames PATH.partial to PATH,
  // replacing PATH if it exists. With durable, the file's data reach the disk
  // (fsync) before the rename, and the rename before commit returns (fsync of
  // the directory): a power loss never leaves a complete-looking file that is
  // not. Throws FileError on failure.
  void commit(bool durable = false);
  // commit() in two steps, so that the slow part can run on another thread:
  // close_file() makes the HDF5 calls; publish() then only flushes and renames.
  void close_file();
  void publish(bool durable);
  const std::string& partial_path() const { return partial_; }

 private:
  std::string path_, partial_;
  File file_;
  bool committed_ = false;
};

}  // namespace linattn::hdf5
