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

}  // namespace linattn::hdf5
