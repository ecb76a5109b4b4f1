// Following a path inside one file, link by link. HDF5 itself follows an
// external link into another file wherever a path crosses one; linattn reads
// only what its input files hold (docs/HDF5.md, "Data outside the file"), so
// every dataset is opened through the path this walk returns, which crosses
// hard links only.
#pragma once

#include <hdf5.h>

#include <string>

namespace linattn::hdf5 {

struct LinkPath {
  bool found = false;   // every link on the path exists (an external one counts: it exists here)
  std::string hard;     // when found and inside the file: the same object by hard links only
  std::string leaves;   // when found: how the path leaves the file, e.g. "'case0' is an external
                        // link to 'other.h5' (object '/g')"; empty when it stays inside
};

// Soft links are resolved (at most 16 of them, as HDF5 allows); an external
// or user-defined link ends the walk with `leaves` set. A missing link, or a
// link below a dataset, gives found = false.
LinkPath follow_links(hid_t file, const std::string& path);

}  // namespace linattn::hdf5
