// The GPU of a rank (docs/PARALLEL.md): ranks on one node take the node's
// devices in turn, device = node-local rank modulo the device count.
#pragma once

namespace linattn::parallel {

// The device id to hand to Kokkos' initialization, or -1 to leave Kokkos'
// default (one rank, or a backend without devices).
int local_device_id();

}  // namespace linattn::parallel
