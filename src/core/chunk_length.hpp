// Tokens in chunk c of a sequence: the chunk length for every chunk but a
// ragged last one. One formula for the host (Problem::chunk_length, the
// references, verify) and the kernels on the device, so that they cannot
// disagree about where a chunk ends.
#pragma once

#include <Kokkos_Macros.hpp>

namespace linattn {

// c: chunk index within the sequence (0 <= c < ceil(length / chunk)).
template <class Int>
KOKKOS_INLINE_FUNCTION constexpr Int chunk_length(Int c, Int length, Int chunk) {
  const Int rest = length - c * chunk;
  return rest < chunk ? rest : chunk;
}

}  // namespace linattn
