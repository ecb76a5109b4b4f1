// A memcpy into a file's shared memory mapping that survives the file system
// refusing a page. Writing through a mapping (mapped_output.hpp) has no
// return code: a page the file system cannot back (a full disk or tmpfs, a
// quota, an I/O error, a file cut short by someone else) raises SIGBUS in the
// thread that touched it, which would end the process. While a guarded copy
// runs, SIGBUS in its thread jumps back here instead and the copy reports
// failure; SIGBUS anywhere else keeps its default action.
#pragma once

#include <cstddef>

namespace linattn::pipeline {

// Copies n bytes; false when a page of dst raised SIGBUS (the bytes before
// it may or may not have been copied).
bool guarded_copy(void* dst, const void* src, std::size_t n);

}  // namespace linattn::pipeline
