#include "kernels/path_choice.hpp"

#include "kernels/cuda/tile_rules.hpp"

#include <stdexcept>
#include <utility>

namespace linattn {

const char* gemm_path_name(GemmPath g) {
  switch (g) {
    case GemmPath::automatic: return "auto";
    case GemmPath::kokkos_kernels: return "kokkoskernels";
    case GemmPath::tensor_core: return "tensorcore";
    case GemmPath::host_tile: return "hosttile";
    case GemmPath::registers: return "registers";
  }
  return "?";
}

GemmPath parse_gemm_path(const std::string& s) {
  if (s == "auto") return GemmPath::automatic;
  if (s == "kokkoskernels") return GemmPath::kokkos_kernels;
  if (s == "tensorcore") return GemmPath::tensor_core;
  if (s == "hosttile") return GemmPath::host_tile;
  if (s == "registers") return GemmPath::registers;
  throw std::invalid_argument("unknown gemm path '" + s +
                              "' (expected auto, kokkoskernels, tensorcore, hosttile or registers)");
}

namespace {

// The shapes the tensor-core kernel runs (src/kernels/cuda/tile_rules.hpp): any
// head up to DK 256 and DV 512, zero-padded on chip to its tiles.
constexpr const char* kTensorCoreShape = "chunk 64, DK in 1..256 and DV in 1..512";
bool tensor_core_shape(std::int64_t chunk, std::int64_t DK, std::int64_t DV) {
  return chunk == 64 && DK >= 1 && DK <= cuda::kMaxTensorCoreDK && DV >= 1 && DV <= cuda::kMaxTensorCoreDV;
}
bool tensor_core_shape(const PathFacts& f) { return tensor_core_shape(f.chunk, f.DK, f.DV); }

// Its grid has one row per (batch, head): CUDA's limit on grid rows.
constexpr std::int64_t kMaxGridRows = 65535;

// Empty when the tensor-core kernel can run these facts; otherwise why not.
std::string tensor_core_refusal(const PathFacts& f) {
  if (f.backend != Backend::cuda)
    return std::string("the tensor-core kernel needs the CUDA backend, and the kernels run on ") +
           (f.backend == Backend::host ? "the host" : "another device");
  if (f.variant != Variant::fused) return "only the fused variant has a tensor-core kernel";
  if (f.input != DType::f16 && f.input != DType::bf16 && f.input != DType::f32)
    return std::string("the tensor-core kernel takes fp16, bf16 or fp32 inputs, not ") + dtype_name(f.input);
  if (!tensor_core_shape(f))
    return std::string("the tensor-core kernel needs ") + kTensorCoreShape + " (here chunk " + std::to_string(f.chunk) +
           ", DK " + std::to_string(f.DK) + ", DV " + std::to_string(f.DV) + ")";
  const bool fp32 = f.input == DType::f32;
  // fp32 heads past DK 128 run as two halves of their keys (cuda/tile_rules.hpp, fp32_key_parts).
  const int parts = fp32 ? cuda::fp32_key_parts(static_cast<int>(f.DK)) : 1;
  if (parts == 0)
    return "the tensor-core kernel takes fp32 inputs up to DK 128, or an even DK up to 256 (run as two halves of "
           "the keys; a 256-row DK tile's fp32 tiles do not fit in shared memory), here DK " + std::to_string(f.DK);
  if (parts == 2 && f.normalize)
    return "the tensor-core kernel normalizes fp32 inputs up to DK 128 only (above, a head runs as two halves of "
           "its keys, and o is divided by the whole head's q . z), here DK " + std::to_string(f.DK);
  if (f.block_dv != 0 && f.block_dv != 32 && f.block_dv != 64 && f.block_dv != 128)
    return "the tensor-core kernel takes block_dv 32, 64 or 128, not " + std::to_string(f.block_dv);
  const int widest = cuda::max_block_dv(cuda::dk_tile(static_cast<int>(f.DK) / parts), f.one_state_tile, fp32);
  if (f.block_dv > widest)
    return "block_dv " + std::to_string(f.block_dv) + " is wider than DK " + std::to_string(f.DK) +
           (fp32 ? " with fp32 inputs" : "") + " allows (" + std::to_string(widest) + ")";
  if (f.B * f.H * parts > kMaxGridRows)
    return "B * H = " + std::to_string(f.B * f.H) + (parts == 2 ? " (times 2 key halves)" : "") +
           " exceeds the CUDA grid limit of " + std::to_string(kMaxGridRows);
  return {};
}

// Empty when the register-blocked kernels can run these facts; otherwise why not.
std::string register_refusal(const PathFacts& f) {
  if (f.variant != Variant::fused && f.variant != Variant::materialized)
    return "only the fused and materialized variants have register-blocked kernels";
  return f.register_plan_refusal;
}

PathChoice refuse(std::string why) { return {GemmPath::kokkos_kernels, std::move(why)}; }

}  // namespace

PathChoice choose_path(const PathFacts& f) {
  const std::string tensor_cores = tensor_core_refusal(f);
  GemmPath path = f.requested;
  switch (f.requested) {
    case GemmPath::tensor_core:
      if (!tensor_cores.empty()) return refuse("--gemm tensorcore is not available: " + tensor_cores);
      break;
    case GemmPath::registers: {
      const std::string why = register_refusal(f);
      if (!why.empty()) return refuse("--gemm registers is not available: " + why);
      break;
    }
    case GemmPath::host_tile:
      if (f.backend != Backend::host)
        return refuse("--gemm hosttile is not available: the default execution space is not a host space");
      break;
    case GemmPath::kokkos_kernels: break;
    case GemmPath::automatic:
      if (tensor_cores.empty()) path = GemmPath::tensor_core;
      else if (f.backend == Backend::host) path = GemmPath::host_tile;
      // Every gate too: on a GPU the register kernels ran gk in 0.41x (fused) and 0.29x
      // (materialized) the TeamPolicy kernel's time (BENCHMARKS.md, "gk on the register kernels").
      else if (register_refusal(f).empty()) path = GemmPath::registers;
      else path = GemmPath::kokkos_kernels;
      break;
  }
  if (f.segments > 1 && path != GemmPath::tensor_core)
    return refuse("segments > 1 splits sequences on the tensor-core kernel only, which does not run here (" +
                  (tensor_cores.empty() ? std::string("--gemm ") + gemm_path_name(f.requested) + " was asked for"
                                        : tensor_cores) +
                  ")");
  return {path, {}};
}

std::string gemm_option_help() {
  return std::string("Tile products. auto: tensorcore where it can run, else hosttile on host backends, else "
                     "registers (fused and materialized, when their tiles fit the team scratch; not for gk), else "
                     "kokkoskernels. tensorcore: CUDA, fused, fp16/bf16 inputs, ") +
         kTensorCoreShape + " (fp32 inputs: DK up to 128, or even up to 256 as two halves of the keys, not "
         "normalized), block_dv 32, 64 or 128 (32 above DK 128, and above DK 64 with fp32 inputs; or 0), B * H <= " + std::to_string(kMaxGridRows) +
         ", plain or packed batches. registers: portable register-blocked kernels, fused and materialized. "
         "hosttile: host backends, every variant. kokkoskernels: portable KokkosBatched tile GEMMs, every backend "
         "and variant. A choice other than auto that cannot run is refused with the reason";
}

namespace {

// Empty when the tensor-core backward (src/kernels/cuda/tensor_core_backward.hpp) can run; otherwise why not.
std::string backward_tensor_core_refusal(const BackwardPathFacts& f) {
  if (f.backend != Backend::cuda)
    return std::string("the tensor-core backward needs the CUDA backend, and the kernels run on ") +
           (f.backend == Backend::host ? "the host" : "another device");
  // fp32 o of fp32 inputs is the input type; of 16-bit ones it is not.
  if (f.output_fp32 && !(f.known_case && f.input == DType::f32))
    return "the tensor-core backward writes dq, dk, dv in the input type (16-bit), not fp32: --out-dtype fp32 runs "
           "on kokkoskernels";
  if (!f.known_case) return {};
  if (f.input != DType::f16 && f.input != DType::bf16 && f.input != DType::f32)
    return std::string("the tensor-core backward takes fp16, bf16 or fp32 inputs, not ") + dtype_name(f.input);
  if (!tensor_core_shape(f.chunk, f.DK, f.DV))
    return std::string("the tensor-core backward needs ") + kTensorCoreShape + " (here chunk " +
           std::to_string(f.chunk) + ", DK " + std::to_string(f.DK) + ", DV " + std::to_string(f.DV) + ")";
  return {};
}

}  // namespace

PathChoice choose_backward_path(const BackwardPathFacts& f) {
  const std::string tensor_cores = backward_tensor_core_refusal(f);
  switch (f.requested) {
    case GemmPath::tensor_core:
      if (!tensor_cores.empty()) return refuse("--gemm tensorcore is not available for the backward: " + tensor_cores);
      return {GemmPath::tensor_core, {}};
    case GemmPath::host_tile:
      if (f.backend != Backend::host)
        return refuse("--gemm hosttile is not available: the default execution space is not a host space");
      return {GemmPath::host_tile, {}};
    case GemmPath::registers:
      return refuse("--gemm registers is not available for the backward: it runs on tensorcore (CUDA), hosttile (host "
                    "backends) or kokkoskernels");
    case GemmPath::kokkos_kernels: return {GemmPath::kokkos_kernels, {}};
    case GemmPath::automatic:
      // Without a case, auto is decided per case: the answer here only says that it can run.
      if (f.known_case && tensor_cores.empty()) return {GemmPath::tensor_core, {}};
      return {f.backend == Backend::host ? GemmPath::host_tile : GemmPath::kokkos_kernels, {}};
  }
  return refuse("unknown gemm path");
}

}  // namespace linattn
