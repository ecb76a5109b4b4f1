// Which tile-product path runs a forward, or why none can: the one place that
// decides it (docs/ARCHITECTURE.md, "Kernel path"). choose_path is plain C++
// over facts, no Kokkos, so that the rule of every backend is testable on any
// build; path_choice_here.hpp gathers the facts of this build.
#pragma once

#include "core/dtype.hpp"
#include "core/variant.hpp"

#include <cstdint>
#include <string>

namespace linattn {

// How tile products are computed: the portable KokkosBatched team GEMMs, the
// CUDA tensor-core fused kernel, the register-blocked host tile GEMM (host
// backends), or the portable register-blocked kernels (fused and
// materialized: register_tiles.hpp). automatic lets choose_path pick.
// recurrent has no tile products: it records the path the other TeamPolicy
// kernels would take (hosttile on host backends, kokkoskernels elsewhere), so
// that outputs keep one set of names.
enum class GemmPath { automatic, kokkos_kernels, tensor_core, host_tile, registers };
const char* gemm_path_name(GemmPath g);
GemmPath parse_gemm_path(const std::string& s);  // auto, kokkoskernels, tensorcore, hosttile, registers

// Where the kernels run: Kokkos' default execution space.
enum class Backend { cuda, host, other_device };

// Everything the choice depends on. o's type and the snapshot type are not
// here: every path takes each of them.
struct PathFacts {
  Backend backend = Backend::host;
  Variant variant = Variant::fused;
  GemmPath requested = GemmPath::automatic;
  DType input = DType::f32;
  std::int64_t chunk = 64, DK = 64, DV = 64, B = 1, H = 1;
  bool packed = false;         // cu_seqlens: variable-length sequences packed along T
  std::int64_t block_dv = 0;   // 0: the kernel chooses
  int segments = 0;            // > 1 splits sequences, which only the tensor-core kernel does
  // The tensor-core block keeps one 16-bit copy of the state (16-bit o, and
  // snapshots not staged in a second tile: not bf16 h of fp16 inputs); a
  // 256-row DK tile then allows blocks of 64 columns (cuda/tile_rules.hpp).
  bool one_state_tile = true;
  // A decay gate (levels 2 and 3, core/gate.hpp): the TeamPolicy kernels'
  // chunk steps take it, the tensor-core kernel on whole sequences (segments
  // 0 or 1); the register-blocked kernels do not yet.
  bool gated = false;
  // GLA's per-key-channel decay gk (issue 28): the TeamPolicy kernels' chunk
  // steps (kokkoskernels, hosttile), the recurrent variant and the tensor-core
  // kernel (whole or split sequences) take it; the register-blocked kernels do not yet.
  bool channel_gated = false;
  // fla's normalize=True: every path takes it, but fp32 heads past DK 128
  // on tensor cores (run as two halves of their keys) do not.
  bool normalize = false;
  // "" when register_tiles::make_plan finds a plan in this backend's team
  // scratch for these types, this shape and the gate (its decay rows);
  // otherwise its reason.
  std::string register_plan_refusal;
};

struct PathChoice {
  GemmPath path = GemmPath::kokkos_kernels;  // never automatic; meaningless when refused
  std::string refusal;                       // the whole message; empty when the path can run
  bool ok() const { return refusal.empty(); }
};

// An explicit request runs as asked or is refused, never replaced. automatic
// takes the tensor-core kernel where it can run; else hosttile on host
// backends; else the register-blocked kernels (fused, materialized) where
// their plan fits; else kokkoskernels.
PathChoice choose_path(const PathFacts& facts);

// The rule above in words, for the CLI's --gemm help.
std::string gemm_option_help();

// The backward's facts (it has one kernel per path, no variants). Without a
// case (known_case false: a batch's check before it reads any file) only what
// holds for every case is decided.
struct BackwardPathFacts {
  Backend backend = Backend::host;
  GemmPath requested = GemmPath::automatic;
  bool output_fp32 = false;  // dq, dk, dv in fp32 instead of the input type
  bool known_case = true;
  DType input = DType::f32;
  std::int64_t chunk = 64, DK = 64, DV = 64;
  bool gated = false;  // a decay gate (levels 2 and 3): every backward path takes it
  bool channel_gated = false;  // GLA's gk: every backward path takes it too
};

// The backward's path, or why the request cannot run. automatic takes the
// tensor-core backward where it can run (CUDA, fp16/bf16 inputs and outputs,
// chunk 64, DK in 1..256 and DV in 1..512); else hosttile on host backends; else
// kokkoskernels. An explicit request runs as asked or is refused.
PathChoice choose_backward_path(const BackwardPathFacts& facts);

}  // namespace linattn
