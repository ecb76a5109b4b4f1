// linattn run INPUT.h5... -o OUTDIR: the batch forward.
#include "app/batch_run.hpp"
#include "app/command.hpp"
#include "app/memory_size_option.hpp"
#include "app/report.hpp"
#include "app/snapshots_option.hpp"
#include "kernels/path_choice.hpp"
#include "parallel/communicator.hpp"
#include "pipeline/memory_budget.hpp"

#include <sys/resource.h>

#include <cmath>
#include <iostream>
#include <memory>

namespace linattn {

Command add_run_command(CLI::App& parent) {
  struct Options {
    std::vector<std::string> inputs;
    std::string outdir, variant = "fused", gemm = "auto", out_dtype = "input", snapshots = "fp32";
    std::int64_t chunk = 64;
    double scale = 0;  // read only when --scale is given
    bool compress = false, force = false, allow_nonfinite = false, allow_external_data = false, normalize = false;
    bool skip_existing = false, no_fsync = false;
    std::string memory_budget;
    double case_timeout = 1800;
    int readers = 2;
    int writers = 1;
    std::int64_t device_windows = 0;
    bool context_parallel = false;
    double carry_cost = -1;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "run",
      "Run the forward on every q/k/v case of every input; each case writes OUTDIR/<input stem>.<group>.h5 "
      "(o, h = state before each chunk, final_state; z_state with --normalize). A case with cu_seqlens runs its "
      "packed sequences independently. Exit code 1 if any case failed; the others still run.");
  cmd->add_option("inputs", o->inputs, "Input HDF5 files (q, k, v at the root or in groups)")->required();
  cmd->add_option("-o,--outdir", o->outdir, "Output directory (created if missing)")->required();
  cmd->add_option("--variant", o->variant, "Forward variant")
      ->check(CLI::IsMember({"fused", "materialized", "recompute", "recurrent"}))
      ->capture_default_str();
  cmd->add_flag("--normalize", o->normalize,
                "Divide o by scale * q . (z0 + cumsum(k)) + 1e-10 (fla's normalize=True); writes z_state [N, H, DK] "
                "and reads a case's z_state dataset as z0");
  cmd->add_option("--gemm", o->gemm, gemm_option_help())
      ->check(CLI::IsMember({"auto", "kokkoskernels", "tensorcore", "hosttile", "registers"}))
      ->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk length C")->check(CLI::IsMember({16, 32, 64, 128}))->capture_default_str();
  CLI::Option* scale = cmd->add_option("--scale", o->scale,
                                       "Output scale: o = scale * S^T q. Default DK^-0.5, flash-linear-attention's "
                                       "default (--scale 1 for none); the scale used is written into each output "
                                       "(attribute scale) and shown in its result line");
  scale->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              std::size_t used = 0;
              const double x = std::stod(s, &used);
              if (used == s.size() && std::isfinite(x)) return "";
            } catch (const std::exception&) {
            }
            return "scale must be a finite number, got '" + s + "'";
          },
          "FINITE"));
  cmd->add_option("--out-dtype", o->out_dtype, "o in the input dtype or in fp32")
      ->check(CLI::IsMember({"input", "fp32"}))
      ->capture_default_str();
  add_snapshots_option(cmd, o->snapshots,
                       "the backward's dq is then accurate to the fp32 level (bf16 snapshots add one bf16 rounding "
                       "of the state to it); bench defaults to bf16, the snapshots fla stores, to time what fla does");
  CLI::Option* compress = cmd->add_flag("--compress", o->compress, "gzip the output datasets (level 4, chunked layout)");
  cmd->add_flag("--force", o->force, "Replace existing output files");
  cmd->add_flag("--allow-nonfinite", o->allow_nonfinite, "Accept NaN and Inf in the inputs");
  cmd->add_flag("--allow-external-data", o->allow_external_data,
                "Read inputs whose data are in other files (external raw storage, virtual datasets), looking those "
                "files up in the input's folder only (docs/HDF5.md, \"Data outside the file\"); refused by default");
  cmd->add_flag("--skip-existing", o->skip_existing,
                "Keep outputs that are complete (an interrupted batch resumes) and run the other cases")
      ->excludes("--force");
  cmd->add_flag("--no-fsync", o->no_fsync,
                "Do not flush each output to disk before renaming it into place (scratch runs)");
  cmd->add_option("--memory-budget", o->memory_budget,
                  "Host memory for the run's buffers, e.g. 512M or 8G (default: a quarter of physical memory); "
                  "a case larger than it streams through in windows, with the same results")
      ->check(memory_size_validator());
  cmd->add_option("--case-timeout", o->case_timeout,
                  "Seconds the reader may spend on one case (or on listing one file) before it is killed and the "
                  "case fails; a hang inside a corrupt file costs only its own case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--readers", o->readers, "Reader processes reading windows side by side")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  cmd->add_option("--writers", o->writers,
                  "Threads writing each output file: above 1, the file is mapped into memory and its windows copied "
                  "in by that many threads at once (a file takes one write(2) at a time); 1: one thread through "
                  "HDF5 (as with --compress, whose chunks HDF5 writes). Each thread needs a core of its own: on a "
                  "small machine the copies slow the kernels down")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--device-windows", o->device_windows,
                  "Most windows of a packed case gathered on the device into one launch, so that it walks many "
                  "sequences at once (0: as device memory allows; 1: each window alone); the results are the same")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--context-parallel", o->context_parallel,
                "Under mpirun: split every case along T, one segment per rank, each rank starting from the state "
                "the segments before it carry, all writing one output file; without it the ranks "
                "share out the cases")
      ->excludes(compress);  // docs/PARALLEL.md, "Limits"
  cmd->add_option("--carry-cost", o->carry_cost,
                  "With --context-parallel: the state pass's time per token as a fraction of the forward's, which "
                  "sets how the tokens are split among the ranks (each rank but the first also runs the state pass "
                  "over the segment before its own). Default: the measured cost of the kernel that runs it; 0 splits "
                  "evenly")
      ->check(CLI::Range(0.0, 1.0))
      ->needs("--context-parallel");

  return {cmd, [o, scale] {
            RunOptions opt;
            opt.inputs = o->inputs;
            opt.outdir = o->outdir;
            opt.forward.variant = parse_variant(o->variant);
            opt.forward.gemm = parse_gemm_path(o->gemm);
            opt.forward.output_fp32 = o->out_dtype == "fp32";
            opt.forward.snapshots = parse_snapshot_mode(o->snapshots);
            opt.forward.normalize = o->normalize;
            opt.chunk = o->chunk;
            if (scale->count() > 0) opt.scale = o->scale;
            opt.compress = o->compress;
            opt.force = o->force;
            opt.allow_nonfinite = o->allow_nonfinite;
            opt.allow_external_data = o->allow_external_data;
            opt.skip_existing = o->skip_existing;
            opt.durable = !o->no_fsync;
            if (!o->memory_budget.empty()) opt.memory_budget = pipeline::parse_memory_size(o->memory_budget);
            opt.case_timeout = o->case_timeout;
            opt.readers = o->readers;
            opt.writers = o->writers;
            opt.device_window_parts = o->device_windows;
            opt.context_parallel = o->context_parallel;
            opt.carry_cost = o->carry_cost;
            BatchStats stats;
            const std::vector<CaseResult> results = run_batch(opt, std::cout, std::cerr, &stats);
            bool failed = false;
            for (const CaseResult& r : results) failed = failed || !r.ok;
            // Under MPI, rank 0 holds every case's result and prints the one summary;
            // every rank exits with 1 when any case failed anywhere.
            failed = parallel::any(failed);
            if (parallel::rank() != 0) return failed ? 1 : 0;
            std::cout << '\n';
            print_summary(std::cout, results, opt.forward.variant);
            // Peak resident memory, ours and the readers', beside the budget.
            rusage self{};
            getrusage(RUSAGE_SELF, &self);
            std::cout << "peak RSS: " << self.ru_maxrss / 1024 << " MiB (batch process), " << (stats.reader_peak_rss >> 20)
                      << " MiB (largest reader process; its input slots are shared with the batch process); memory budget "
                      << stats.memory_budget / (1 << 20)
                      << " MiB" << (stats.resident.empty() ? "" : "; resident at the end of the batch: " + stats.resident)
                      << std::endl;
            return failed ? 1 : 0;
          }};
}

}  // namespace linattn
