#include "io/hdf5_file.hpp"

#include "io/file_error.hpp"
#include "io/hdf5_errors.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace linattn::hdf5 {

namespace fs = std::filesystem;

namespace {

std::string with_detail(const std::string& what) {
  const std::string detail = last_error_detail();
  return detail.empty() ? what : what + " (HDF5: " + detail + ")";
}

}  // namespace

File open_read_only(const std::string& path) {
  silence_errors();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw FileError(path, "no such file");
  if (fs::is_directory(st)) throw FileError(path, "is a directory, not an HDF5 file");
  if (!std::ifstream(path, std::ios::binary)) throw FileError(path, std::string("cannot read: ") + std::strerror(errno));
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 == 0) throw FileError(path, "not an HDF5 file (no HDF5 signature)");
  if (is_hdf5 < 0) throw FileError(path, with_detail("cannot be checked for an HDF5 signature"));
  File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw FileError(path, with_detail("cannot be opened: truncated or corrupt HDF5 file"));
  return file;
}

NewFile::NewFile(std::string path) : path_(std::move(path)), partial_(path_ + ".partial") {
  silence_errors();
  PropertyList fapl(H5Pcreate(H5P_FILE_ACCESS));
  // Strong close: H5Fclose closes every object still open, so that the file
  // is complete on disk before it is renamed.
  if (!fapl.valid() || H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0)
    throw FileError(partial_, with_detail("cannot set up file access"));
  file_ = File(H5Fcreate(partial_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file_.valid()) throw FileError(partial_, with_detail("cannot create file"));
}

NewFile::~NewFile() {
  if (committed_) return;
  file_.close();
  std::error_code ec;
  fs::remove(partial_, ec);  // best effort: never leave a half-written file behind
}

namespace {

// fsync of a file or a directory by path; errno's text on failure, "" on success.
std::string sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? "" : std::strerror(err);
}

}  // namespace

void NewFile::commit(bool durable) {
  close_file();
  publish(durable);
}

void NewFile::close_file() {
  if (file_.close()) return;
  // Closing writes what HDF5 still holds: a full disk shows here too, named as the output the user asked for.
  if (stack_os_error() != 0) throw FileError::preformatted(write_failure(path_, "", ""));
  throw FileError(partial_, with_detail("cannot be completed (closing failed)"));
}

void NewFile::publish(bool durable) {
  if (durable) {
    const std::string err = sync_path(partial_, false);
    if (!err.empty()) throw FileError(partial_, "cannot be flushed to disk (fsync): " + err);
  }
  std::error_code ec;
  fs::rename(partial_, path_, ec);
  if (ec) throw FileError(path_, "cannot rename " + partial_ + " into place: " + ec.message());
  committed_ = true;
  if (durable) {
    const fs::path parent = fs::path(path_).parent_path();
    const std::string err = sync_path(parent.empty() ? "." : parent.string(), true);
    if (!err.empty()) throw FileError(path_, "renamed, but its directory cannot be flushed to disk (fsync): " + err);
  }
}

}  // namespace linattn::hdf5
