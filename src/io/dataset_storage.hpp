// Where a dataset's data are, and whether they were ever written: checked by
// open_dataset (hdf5_dataset.hpp), through which every dataset linattn reads
// is opened, before any of its data is read (docs/HDF5.md, "Data outside the
// file" and "Unwritten data").
#pragma once

#include "io/hdf5_handles.hpp"

#include <hdf5.h>

#include <string>

namespace linattn::hdf5 {

// --allow-external-data: whether a dataset may keep its data in other files
// (external raw storage, a virtual dataset), which are then looked up in the
// folder of the file that names them, and nowhere else. One setting for the
// process, made before it opens files; the default refuses.
void set_external_data_allowed(bool allowed);
bool external_data_allowed();

// Sets the setting for its lifetime and restores the one before, so that a
// batch that allowed external data leaves the next one (in the tests) as it was.
class ExternalDataScope {
 public:
  explicit ExternalDataScope(bool allowed) : before_(external_data_allowed()) { set_external_data_allowed(allowed); }
  ~ExternalDataScope() { set_external_data_allowed(before_); }
  ExternalDataScope(const ExternalDataScope&) = delete;
  ExternalDataScope& operator=(const ExternalDataScope&) = delete;

 private:
  bool before_;
};

// The dataset access property list to open a dataset of `file` with: when
// external data is allowed, HDF5 looks up external files and virtual sources
// in the file's folder.
PropertyList dataset_access(hid_t file);

// Throws FileError naming the dataset when
//  - its data are in other files (external raw storage, virtual) and that is
//    not allowed; allowed, when a target is an absolute path, holds a '..',
//    resolves outside the folder, is missing, is shorter than the data it
//    must hold, or (a virtual source) does not hold its own data in turn;
//  - its storage holds no data for part of its extent: never allocated, or
//    chunks missing (they would read as fill values, i.e. zeros).
void check_storage(hid_t file, hid_t dataset, const std::string& file_name, const std::string& path);

// True when the dataset's data are read from other files (external raw
// storage or a virtual dataset).
bool reads_other_files(hid_t dataset);

}  // namespace linattn::hdf5
