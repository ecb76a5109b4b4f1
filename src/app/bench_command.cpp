// linattn bench --shape B,T,H,D[,DV] --dtype bf16 --variants fused,materialized,recompute:
// device-resident timings of the variants beside the device's copy bandwidth
// and the ledger, with the accuracy of o on a slice; JSON for scripts.
#include "app/command.hpp"
#include "app/integer_list.hpp"
#include "app/report.hpp"
#include "app/snapshots_option.hpp"
#include "app/text_table.hpp"
#include "benchmark/benchmark.hpp"
#include "kernels/execution.hpp"
#include "kernels/path_choice.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

namespace linattn {
namespace {

// "B,T,H,D" or "B,T,H,DK,DV" -> Problem (chunk and scale set by the caller).
Problem parse_bench_shape(const std::string& text) {
  const std::vector<std::int64_t> d = parse_integer_list(text, "B,T,H,D[,DV]");
  if (d.size() != 4 && d.size() != 5) throw std::invalid_argument("'" + text + "' is not B,T,H,D[,DV]");
  Problem p;
  p.B = d[0]; p.T = d[1]; p.H = d[2]; p.DK = d[3]; p.DV = d.size() == 5 ? d[4] : d[3];
  return p;
}

// --seqlens: "N" cuts the T tokens of the one row at N - 1 uniform random
// points (distinct, from the seed), as fla's varlen benchmarks draw them;
// "L1,L2,..." gives the lengths, which must add up to T.
std::vector<std::int64_t> bench_cu_seqlens(const std::string& text, std::int64_t T, std::uint64_t seed) {
  const std::vector<std::int64_t> d = parse_integer_list(text, "N or L1,L2,...");
  std::vector<std::int64_t> cu{0};
  if (text.find(',') != std::string::npos) {
    for (std::int64_t len : d) cu.push_back(cu.back() + len);
    if (cu.back() != T)
      throw std::invalid_argument("--seqlens lengths add up to " + std::to_string(cu.back()) + ", not T = " + std::to_string(T));
    return cu;
  }
  const std::int64_t N = d.at(0);
  if (N < 1 || N > T) throw std::invalid_argument("--seqlens N needs 1 <= N <= T (" + std::to_string(T) + ")");
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int64_t> point(1, T - 1);
  std::vector<std::int64_t> cuts;
  while (static_cast<std::int64_t>(cuts.size()) < N - 1) {
    cuts.push_back(point(gen));
    if (static_cast<std::int64_t>(cuts.size()) == N - 1) {
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    }
  }
  cu.insert(cu.end(), cuts.begin(), cuts.end());
  cu.push_back(T);
  return cu;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  struct Options {
    std::vector<std::string> shapes;
    std::string dtype = "bf16", gemm = "auto", snapshots = "bf16", out_dtype = "input", json, seqlens, gate;
    bool normalize = false, backward = false, state_pass = false;
    std::vector<std::string> variants = {"fused", "materialized", "recompute"};
    std::int64_t chunk = 64, block_dv = 0, accuracy_tokens = 1024;
    int segments = 0;
    int reps = 20, warmup = 3, team_size = 0;
    std::uint64_t seed = 1;
    double scale = 0;  // read only when --scale is given
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "bench",
      "Time the forward variants on random inputs made on the device: median of --reps fenced runs after "
      "--warmup, effective GB/s over the minimum bytes (q, k, v read once; o and h written once), percent of "
      "the copy bandwidth measured in the same run, TFLOP/s from the ledger, and the relative L2 of o against "
      "the fp64 reference on the (b=0, h=0) slice.");
  cmd->add_option("--shape", o->shapes, "B,T,H,D or B,T,H,DK,DV (repeat for several shapes)")->required();
  cmd->add_option("--dtype", o->dtype, "Input dtype: fp16, bf16, fp32, fp64")->capture_default_str();
  cmd->add_option("--variants", o->variants, "Variants to time, comma-separated (recurrent: token by token)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fused", "materialized", "recompute", "recurrent"}))
      ->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk length: 16, 32, 64 or 128")->capture_default_str();
  cmd->add_option("--seqlens", o->seqlens,
                  "A packed batch (B = 1, like fla's cu_seqlens): N sequences cut at uniform random points from "
                  "--seed, or the lengths L1,L2,... (adding up to T)");
  cmd->add_flag("--state-pass", o->state_pass,
                "After the fused variant's row, time the state pass context parallel runs (the final state from k "
                "and v alone, docs/PARALLEL.md) on the same inputs; its column final_state rel L2 compares the two "
                "final states");
  cmd->add_flag("--backward", o->backward,
                "Time the backward (dq, dk, dv, dh0 from the stored snapshots) instead of the forward variants; "
                "its columns dq, dk and dv rel L2 compare them on the whole (b=0, h=0) row");
  cmd->add_flag("--normalize", o->normalize,
                "fla's normalize=True: o divided by scale q . cumsum(k) (q and k drawn in (0, 1) then, as feature maps give them)");
  cmd->add_option("--gate", o->gate,
                  "Time the gated forward (README.md, \"Gated levels\"; with --state-pass its state pass, with "
                  "--backward the gated backward): 'g' draws g [B, T, H] uniform in [-1, 0), 'gamma' takes RetNet's "
                  "g_gamma [H] = log(1 - 2^(-5-h)), 'gk' draws GLA's gk [B, T, H, DK] uniform in [-1, 0) (registers "
                  "does not take gk); o (the backward: dq, dk, dv and dg, or dgk) is checked against the gated "
                  "fp64 reference")
      ->check(CLI::IsMember({"g", "gamma", "gk"}));
  cmd->add_option("--gemm", o->gemm, gemm_option_help())
      ->check(CLI::IsMember({"auto", "kokkoskernels", "tensorcore", "hosttile", "registers"}))
      ->capture_default_str();
  add_snapshots_option(cmd, o->snapshots,
                       "the snapshots flash-linear-attention stores, so that the timings compare with fla's; run "
                       "defaults to fp32, for gradients accurate to the fp32 level");
  CLI::Option* scale = cmd->add_option("--scale", o->scale,
                                       "Output scale: o = scale * S^T q. Default DK^-0.5, as run's and "
                                       "flash-linear-attention's");
  cmd->add_option("--out-dtype", o->out_dtype, "o dtype: input or fp32")
      ->check(CLI::IsMember({"input", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Timed repetitions (the median is reported)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed runs first")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--block-dv", o->block_dv, "DV block width (0: chosen)")->capture_default_str();
  cmd->add_option("--segments", o->segments,
                  "Tensor-core kernel: split each sequence into this many segments (1: never, 0: chosen; "
                  "more than 1 is refused where another path runs)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--team-size", o->team_size, "Team size of the portable kernels (0: Kokkos::AUTO; the register-blocked state pass sizes its own)")->capture_default_str();
  cmd->add_option("--accuracy-tokens", o->accuracy_tokens,
                  "Tokens of the slice checked against fp64 (the backward checks its whole (0, 0) row); 0: no check")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file");

  return {cmd, [o, scale] {
            nlohmann::json doc;
            doc["linattn_version"] = LINATTN_VERSION;
            doc["rows"] = nlohmann::json::array();
            // Each accuracy column holds what its name says: the backward's rows dq, dk and dv, the forward's o,
            // the state pass's final state (against the fused forward's).
            std::vector<std::string> headers = {"shape (B,T,H,DK,DV)", "variant", "gemm", "bdv", "seg", "ms",
                                                "floor ms", "GB/s", "% copy BW", "TFLOP/s"};
            if (o->backward) {
              headers.insert(headers.end(), {"dq rel L2", "dk rel L2", "dv rel L2"});
              if (!o->gate.empty()) headers.push_back(o->gate == "gk" ? "dgk rel L2" : "dg rel L2");
            } else {
              headers.push_back("o rel L2");
              if (o->state_pass) headers.push_back("final_state rel L2");
            }
            std::vector<bool> right(headers.size(), true);
            right[0] = right[1] = right[2] = false;
            TextTable table{headers, right, {}};
            for (const std::string& s : o->shapes) {
              BenchConfig bc;
              bc.problem = parse_bench_shape(s);
              bc.problem.chunk = o->chunk;
              bc.problem.scale = scale->count() > 0 ? o->scale : default_scale(bc.problem.DK);
              if (!o->seqlens.empty()) {
                if (bc.problem.B != 1) throw std::invalid_argument("--seqlens packs sequences into one row: B must be 1");
                bc.problem.cu_seqlens = bench_cu_seqlens(o->seqlens, bc.problem.T, o->seed);
              }
              bc.normalize = o->normalize;
              bc.backward = o->backward;
              bc.gate = o->gate == "g"       ? GateKind::per_token
                        : o->gate == "gamma" ? GateKind::per_head
                        : o->gate == "gk"    ? GateKind::per_channel
                                             : GateKind::none;
              bc.state_pass = o->state_pass;
              bc.dtype = parse_dtype(o->dtype);
              bc.variants.clear();
              for (const std::string& v : o->variants) bc.variants.push_back(parse_variant(v));
              bc.gemm = parse_gemm_path(o->gemm);
              bc.snapshots = parse_snapshot_mode(o->snapshots);
              bc.output_fp32 = o->out_dtype == "fp32";
              bc.block_dv = o->block_dv;
              bc.segments = o->segments;
              bc.team_size = o->team_size;
              bc.reps = o->reps;
              bc.warmup = o->warmup;
              bc.accuracy_tokens = o->accuracy_tokens;
              bc.seed = o->seed;
              const BenchReport r = run_benchmark(bc);
              const Problem& p = bc.problem;
              const std::string shape = std::to_string(p.B) + "," + std::to_string(p.T) + "," + std::to_string(p.H) +
                                        "," + std::to_string(p.DK) + "," + std::to_string(p.DV) +
                                        (p.varlen() ? " N=" + std::to_string(p.num_sequences()) : "") +
                                        (o->normalize ? " norm" : "") + (o->gate.empty() ? "" : " gate " + o->gate);
              doc["backend"] = r.backend;
              doc["kokkos_version"] = r.kokkos_version;
              doc["device"] = r.device;
              std::cout << "# " << shape << " " << o->dtype << ", scale " << scale_text(p.scale) << ": " << r.device << " (" << r.backend << ", Kokkos "
                        << r.kokkos_version << "), copy bandwidth " << fixed(r.copy_gbps, 1) << " GB/s" << std::endl;
              for (const VariantTiming& t : r.rows) {
                std::vector<std::string> row = {
                    shape, (t.backward ? "backward" : t.state_pass ? "state pass" : variant_name(t.variant)),
                    gemm_path_name(t.gemm), std::to_string(t.block_dv), std::to_string(t.segments),
                    fixed(t.median_ms, 3), fixed(t.floor_ms, 3), fixed(t.gbps, 1), fixed(100 * t.copy_fraction, 1),
                    fixed(t.tflops, 2)};
                if (t.backward) {
                  row.insert(row.end(), {scientific(t.o_rel_l2, 2), scientific(t.dk_rel_l2, 2), scientific(t.dv_rel_l2, 2)});
                  if (!o->gate.empty()) row.push_back(scientific(t.dg_rel_l2, 2));
                } else {
                  row.push_back(t.state_pass ? "-" : scientific(t.o_rel_l2, 2));
                  if (o->state_pass) row.push_back(t.state_pass ? scientific(t.o_rel_l2, 2) : "-");
                }
                table.rows.push_back(row);
                doc["rows"].push_back({{"shape", {p.B, p.T, p.H, p.DK, p.DV}},
                                       {"chunk", p.chunk},
                                       {"scale", p.scale},
                                       {"num_sequences", p.num_sequences()},
                                       {"packed", p.varlen()},
                                       {"normalize", o->normalize},
                                       {"gate", o->gate.empty() ? "none" : o->gate},
                                       {"dtype", o->dtype},
                                       {"out_dtype", o->out_dtype},
                                       {"snapshots", o->snapshots},
                                       {"variant", (t.backward ? "backward" : t.state_pass ? "state pass" : variant_name(t.variant))},
                                       {"gemm", gemm_path_name(t.gemm)},
                                       {"block_dv", t.block_dv},
                                       {"segments", t.segments},
                                       {"median_ms", t.median_ms},
                                       {"min_ms", t.min_ms},
                                       {"max_ms", t.max_ms},
                                       {"floor_ms", t.floor_ms},
                                       {"gbps", t.gbps},
                                       {"copy_gbps", r.copy_gbps},
                                       {"copy_fraction", t.copy_fraction},
                                       {"tflops", t.tflops},
                                       {"flops", t.flops},
                                       {"min_bytes", t.min_bytes},
                                       {"o_rel_l2", t.o_rel_l2},
                                       {"dk_rel_l2", t.dk_rel_l2},
                                       {"dv_rel_l2", t.dv_rel_l2},
                                       {"dg_rel_l2", t.dg_rel_l2},
                                       {"reps", o->reps}});
              }
            }
            std::cout << table.str();
            if (!o->json.empty()) {
              std::ofstream f(o->json);
              if (!f) throw std::runtime_error("cannot write " + o->json);
              f << doc.dump(2) << "\n";
            }
            return 0;
          }};
}

}  // namespace linattn
