// RAII owners for HDF5 identifiers (hid_t): each closes its identifier with
// the matching H5?close call exactly once. Move-only.
#pragma once

#include <hdf5.h>

#include <utility>

namespace linattn::hdf5 {

template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, kInvalid)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, kInvalid);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns false when HDF5 reports a failure (e.g. a file whose
  // last write could not be flushed).
  bool close() {
    const herr_t status = id_ >= 0 ? Close(id_) : 0;
    id_ = kInvalid;
    return status >= 0;
  }
  void reset() { close(); }

 private:
  static constexpr hid_t kInvalid = -1;
  hid_t id_ = kInvalid;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;  // never wrap a predefined type (H5T_NATIVE_*): wrap an H5Tcopy
using Attribute = Handle<H5Aclose>;
using PropertyList = Handle<H5Pclose>;

}  // namespace linattn::hdf5
