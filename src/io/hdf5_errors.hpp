// HDF5's own error reporting, tamed: linattn turns off the automatic stack
// dump (it prints dozens of lines per failure) and quotes only the innermost
// message in its one-line errors.
#pragma once

#include <string>

namespace linattn::hdf5 {

// Turns off HDF5's automatic error printing for the process (idempotent).
void silence_errors();

// The innermost message of the current HDF5 error stack, e.g.
// "truncated file: eof = 2048, sblock->base_addr = 0, stored_eof = 8192";
// empty when the stack is empty. Clears the stack.
std::string last_error_detail();

// The operating system's error number (errno) a failed read or write of
// HDF5's file driver left on the current error stack ("..., errno = 28,
// error message = 'No space left on device', ..."), 0 when there is none.
// Leaves the stack as it is.
int stack_os_error();

// The one line for a write that failed: with an operating system error on the
// stack, "No space left on device while writing dataset 'h' of out/x.h5" (or
// "... while writing out/x.h5" when `dataset` is empty) and nothing of HDF5's
// message, which quotes its buffers and byte counts; else `fallback` with the
// innermost HDF5 message. Clears the stack either way.
std::string write_failure(const std::string& file, const std::string& dataset, const std::string& fallback);

}  // namespace linattn::hdf5
