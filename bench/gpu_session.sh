#!/usr/bin/env bash
# One GPU session in one call: the whole test suite, then the benchmarks.
# Runs where the binaries were carried (built elsewhere against a CUDA Kokkos,
# stripped, with their non-system libraries beside them):
#   GPU_DIR=.gpu FLA=.fla bash bench/gpu_session.sh [tests] [bench] [compare]
# GPU_DIR holds linattn, linattn_tests and lib/ (from ../shared/tools/bundle-libs).
# Logs go to $OUT when set (the device tool's folder), else bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_DIR=${GPU_DIR:-.gpu}
LOGS=${OUT:-bench/results}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/$GPU_DIR/lib:${LD_LIBRARY_PATH:-}"
steps=${*:-tests compare portable registers scaling}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$LOGS/gpu-info.txt"
for step in $steps; do
  case $step in
    tests)  # the whole GoogleTest suite on the GPU backend
      { echo "commit $(cat "$GPU_DIR/COMMIT" 2>/dev/null || echo unknown) (the binaries' source; $GPU_DIR/COMMIT)"
        LINATTN_EXE="$PWD/$GPU_DIR/linattn" "$GPU_DIR/linattn_tests" 2>&1; } | tee "$LOGS/gpu-tests.log" |
        grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure' ;;
    compare)  # the five benchmark shapes beside fla, same run
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused,materialized \
        --json "$LOGS/compare-fla.json" 2>&1 | tee "$LOGS/compare-fla.txt" ;;
    compare-head-sizes)  # issue 25's head sizes beside fla (forward, fused), then the five benchmark shapes (regression check)
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused \
        --shape 4,8192,16,256 --shape 2,8192,8,256,512 --shape 8,8192,16,96 --shape 8,8192,16,60 \
        --shape 8,8192,16,32 --shape 8,8192,8,128,64 --shape 8,4096,16,128 --shape 8,16384,16,128 \
        --shape 1,32768,32,128 --shape 8,16384,16,64 --shape 32,2048,16,128 \
        --json "$LOGS/compare-fla-head-sizes.json" 2>&1 | tee "$LOGS/compare-fla-head-sizes.txt" ;;
    compare-head-sizes-backward)  # the backward at issue 25's head sizes beside fla's chunk_simple_gla_bwd(g=None), then the five benchmark shapes
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --backward \
        --shape 4,8192,16,256 --shape 2,8192,8,256,512 --shape 8,8192,16,96 --shape 8,8192,16,60 \
        --shape 8,8192,16,32 --shape 8,8192,8,128,64 --shape 8,16384,16,128 --shape 1,32768,32,128 \
        --shape 8,16384,16,64 --shape 32,2048,16,128 --shape 8,4096,16,128 \
        --json "$LOGS/compare-fla-head-sizes-backward.json" 2>&1 | tee "$LOGS/compare-fla-head-sizes-backward.txt" ;;
    compare-gated)  # the gated forward (g, then g_gamma) beside fla's chunk_simple_gla forward: the five benchmark shapes and RetNet's / GLA's head sizes
      for gate in g gamma; do
        python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --gate $gate \
          --shape 8,4096,16,128 --shape 8,16384,16,128 --shape 1,32768,32,128 --shape 8,16384,16,64 --shape 32,2048,16,128 \
          --shape 2,8192,8,256,512 --json "$LOGS/compare-fla-gated-$gate.json" 2>&1 | tee "$LOGS/compare-fla-gated-$gate.txt"
      done ;;
    compare-gk)  # GLA's per-channel gate gk, forward, beside fla's chunk_gla forward: the five benchmark shapes and GLA's head sizes
      python3 -u bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --gate gk \
        ${GK_SHAPES:---shape 8,4096,16,128 --shape 2,8192,8,256,512 --shape 8,16384,16,128 --shape 1,32768,32,128 \
        --shape 8,16384,16,64 --shape 32,2048,16,128} --json "$LOGS/compare-fla-gk.json" 2>&1 | tee "$LOGS/compare-fla-gk.txt" ;;
    compare-gated-backward)  # the gated backward (g, then g_gamma) beside fla's chunk_simple_gla_bwd: the five benchmark shapes and RetNet's / GLA's head sizes
      for gate in g gamma; do
        python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --backward --gate $gate \
          --shape 8,4096,16,128 --shape 8,16384,16,128 --shape 1,32768,32,128 --shape 8,16384,16,64 --shape 32,2048,16,128 \
          --shape 2,8192,8,256,512 --json "$LOGS/compare-fla-gated-backward-$gate.json" 2>&1 | tee "$LOGS/compare-fla-gated-backward-$gate.txt"
      done ;;
    compare-gk-backward)  # GLA's gk backward beside fla's chunk_gla backward (its autograd function's, after one chunk_gla_fwd): the five benchmark shapes and GLA's head sizes
      # GK_SHAPES (--shape ... options) replaces the list: bench's fp64 check of a whole 8192-token row at 256 x 512 takes minutes
      python3 -u bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --backward --gate gk \
        ${GK_SHAPES:---shape 8,4096,16,128 --shape 2,8192,8,256,512 --shape 8,16384,16,128 --shape 1,32768,32,128 \
        --shape 8,16384,16,64 --shape 32,2048,16,128} ${GK_BACKWARD_ARGS:-} \
        --json "$LOGS/compare-fla-gk-backward.json" 2>&1 | tee "$LOGS/compare-fla-gk-backward.txt" ;;
    compare-fp32)  # fp32 inputs on tensor cores (issue 25's fp32 shape and the head sizes up to DK 128) beside fla's fp32 forward (TF32 dots), h in fp32 for both
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --dtype fp32 \
        --shape 8,4096,16,128 --shape 8,8192,16,64 --shape 8,8192,16,96 --shape 8,8192,16,60 --shape 8,8192,16,32 \
        --shape 8,8192,8,128,64 --shape 8,4096,16,64,256 \
        --json "$LOGS/compare-fla-fp32.json" 2>&1 | tee "$LOGS/compare-fla-fp32.txt" ;;
    compare-fp32-backward)  # the backward with fp32 inputs (fp32 snapshots) beside fla's chunk_simple_gla_bwd(g=None) in fp32
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --backward --dtype fp32 \
        --shape 8,4096,16,128 --shape 8,8192,16,64 --shape 4,8192,16,256 --shape 8,8192,16,96 --shape 8,8192,8,128,64 \
        --json "$LOGS/compare-fla-fp32-backward.json" 2>&1 | tee "$LOGS/compare-fla-fp32-backward.txt" ;;
    compare-fp16)  # the same, fp16 inputs (fla keeps h in fp16, linattn in bf16: 16 bits both)
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --dtype fp16 \
        --json "$LOGS/compare-fla-fp16.json" 2>&1 | tee "$LOGS/compare-fla-fp16.txt" ;;
    compare-packed)  # the three packed batches of issue 14 beside fla with cu_seqlens, same cuts, same run
      : > "$LOGS/compare-fla-packed.txt"
      for batch in "1,65536,16,128 32" "1,131072,8,128 256" "1,32768,32,64 8"; do
        set -- $batch
        python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --shape "$1" \
          --seqlens "$2" --json "$LOGS/compare-fla-packed-$2.json" 2>&1 | tee -a "$LOGS/compare-fla-packed.txt"
      done ;;
    compare-normalize)  # the five shapes normalized, beside fla's chunk_linear_attn(normalize=True)
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --normalize \
        --json "$LOGS/compare-fla-normalize.json" 2>&1 | tee "$LOGS/compare-fla-normalize.txt" ;;
    compare-backward)  # the backward on the five shapes beside fla's chunk_simple_gla_bwd(g=None), same run
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --backward \
        --json "$LOGS/compare-fla-backward.json" 2>&1 | tee "$LOGS/compare-fla-backward.txt" ;;
    portable)  # the KokkosBatched TeamPolicy path, where tensor cores would otherwise run
      "$GPU_DIR/linattn" bench --shape 8,16384,16,128 --variants fused,materialized --gemm kokkoskernels \
        --reps 3 --warmup 1 --json "$LOGS/bench-portable.json" 2>&1 | tee "$LOGS/bench-portable.txt" ;;
    registers)  # the portable register-blocked kernels, and their state pass alone (ncu) beside the naive KokkosBatched state pass (~69 ms, BENCHMARKS.md)
      "$GPU_DIR/linattn" bench --shape 8,16384,16,128 --shape 1,32768,32,128 --variants fused,materialized \
        --gemm registers --reps 5 --warmup 1 --json "$LOGS/bench-registers.json" 2>&1 | tee "$LOGS/bench-registers.txt"
      ncu --clock-control none --kernel-name-base demangled -k regex:RegisterStatePass -c 1 \
        --metrics gpu__time_duration.sum "$GPU_DIR/linattn" bench --shape 8,16384,16,128 --variants materialized \
        --gemm registers --reps 1 --warmup 0 2>&1 | grep -E "gpu__time_duration|StatePass" | cut -c1-160 |
        tee -a "$LOGS/bench-registers.txt" ;;
    scaling)  # recompute grows ~T^2, fused and materialized ~T (B=1, H=32, D=128)
      "$GPU_DIR/linattn" bench --shape 1,4096,32,128 --shape 1,16384,32,128 --shape 1,32768,32,128 \
        --variants fused,materialized,recompute --gemm kokkoskernels --reps 1 --warmup 1 \
        --json "$LOGS/bench-scaling-portable.json" 2>&1 | tee "$LOGS/bench-scaling-portable.txt"
      "$GPU_DIR/linattn" bench --shape 1,4096,32,128 --shape 1,16384,32,128 --shape 1,32768,32,128 \
        --variants fused --gemm tensorcore --reps 20 \
        --json "$LOGS/bench-scaling-tensorcore.json" 2>&1 | tee "$LOGS/bench-scaling-tensorcore.txt" ;;
    e2e)  # whole batch jobs, file to file: linattn run beside h5py + fla (outputs in RAM), then with fsync beside dd
      python3 bench/e2e_compare.py --linattn "$GPU_DIR/linattn" --fla "${FLA:-.fla}" --shape 8,8192,16,128,128 \
        --dtype fp16 --cases 4 --json "$LOGS/e2e.json" 2>&1 | tee "$LOGS/e2e.txt"
      python3 bench/e2e_compare.py --linattn "$GPU_DIR/linattn" --fla "${FLA:-.fla}" --shape 8,8192,16,128,128 \
        --dtype fp16 --cases 4 --sync --warmup "${E2E_SYNC_WARMUP:-1}" --outdir "${E2E_DISK:-/tmp/linattn-e2e-disk}" --json "$LOGS/e2e-sync.json" 2>&1 |
        tee "$LOGS/e2e-sync.txt" ;;
    e2e-backward)  # linattn backward file to file beside the h5py + torch + fla backward script (outputs in RAM)
      python3 bench/e2e_backward.py --linattn "$GPU_DIR/linattn" --fla "${FLA:-.fla}" --shape 8,8192,16,128,128 \
        --cases 4 --json "$LOGS/e2e-backward.json" 2>&1 | tee "$LOGS/e2e-backward.txt" ;;
    e2e-backward-vs-run)  # linattn backward beside linattn run on the same 4 cases (issue 29's 1.5x), no fla script
      python3 bench/e2e_backward.py --linattn "$GPU_DIR/linattn" --fla "${FLA:-.fla}" --shape 8,8192,16,128,128 \
        --cases 4 --no-script --budget 2G --budget 512M --also "--readers 2" --also "--readers 3" --json "$LOGS/e2e-backward-vs-run.json" 2>&1 | tee "$LOGS/e2e-backward-vs-run.txt" ;;
    compare-fp32-key-halves)  # fp32 heads past DK 128 (two halves of the keys) beside fla's fp32 forward, and the registers path they took before
      for gemm in auto registers; do
        python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --variants fused --dtype fp32 --gemm $gemm \
          --shape 4,8192,16,256 --shape 2,8192,8,256,512 --shape 8,4096,16,192 --reps 10 \
          --json "$LOGS/compare-fla-fp32-key-halves-$gemm.json" 2>&1 | tee "$LOGS/compare-fla-fp32-key-halves-$gemm.txt"
      done ;;
    writers)  # issue 29's writes in parallel: linattn run on 4 cases of 8,8192,16,128 fp16 in /dev/shm, --writers 1 (one thread through HDF5, as before) beside 2, 4 and 8 mapped writers, h bf16 and fp32, in turn, twice; the outputs compared; one file written by 1-8 threads with pwrite and mapped; then linattn backward of the same job with 1, 2 and 4 writers
      d=${WRITERS_DIR:-/dev/shm/linattn-writers}; rm -rf "$d"; mkdir -p "$d"
      "$GPU_DIR/linattn" generate -o "$d/in.h5" --shape 8,8192,16,128,128 --dtype fp16 --cases 4 --seed 3 > /dev/null
      cat "$d/in.h5" > /dev/null
      {
        echo "cores: $(nproc)"
        for snap in bf16 fp32; do
          for rep in 1 2; do
            for w in 1 4 2 8; do
              rm -rf "$d/out"; t0=$(date +%s.%N)
              "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/out" --no-fsync --snapshots $snap --writers $w > "$d/log" 2>&1
              t1=$(date +%s.%N)
              echo "== h $snap, --writers $w, run $rep: wall $(python3 -c "print(f'{$t1 - $t0:.3f}')") s"
              grep -E "pipeline|cases:|peak RSS" "$d/log"
            done
          done
        done
        for r in 3; do
          rm -rf "$d/out"; t0=$(date +%s.%N)
          "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/out" --no-fsync --snapshots bf16 --writers 4 --readers $r > "$d/log" 2>&1
          t1=$(date +%s.%N)
          echo "== h bf16, --writers 4 --readers $r: wall $(python3 -c "print(f'{$t1 - $t0:.3f}')") s"
          grep -E "pipeline|cases:" "$d/log"
        done
        echo "== the outputs of --writers 1 and 4 (h bf16), dataset by dataset"
        mv "$d/out" "$d/out4"
        "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/out1" --no-fsync --snapshots bf16 --writers 1 > /dev/null 2>&1
        for c in 0 3; do for x in o h final_state; do
          python3 -c "import sys, h5py; a, b = (h5py.File(f, 'r')[sys.argv[3]][()] for f in sys.argv[1:3]); print(sys.argv[3], 'same bytes' if a.tobytes() == b.tobytes() else 'DIFFER')" \
            "$d/out1/in.case$c.h5" "$d/out4/in.case$c.h5" $x
        done; done
        rm -rf "$d/out1" "$d/out4" "$d/in.h5"
        g++ -O2 -pthread bench/mapped_write_bandwidth.cpp -o "$d/mwb" && for t in 1 2 4 8; do
          "$d/mwb" pwrite $t 3072 "$d/one.bin"; "$d/mwb" mapped $t 3072 "$d/one.bin"
        done
      } 2>&1 | tee "$LOGS/writers.txt"
      rm -rf "$d"
      # The backward of the same job, one writer beside mapped ones (run timed in the same call).
      python3 bench/e2e_backward.py --linattn "$GPU_DIR/linattn" --fla "${FLA:-.fla}" --shape 8,8192,16,128,128 \
        --cases 4 --no-script --also "--writers 2" --also "--writers 4" --json "$LOGS/e2e-backward-writers.json" 2>&1 |
        tee "$LOGS/e2e-backward-writers.txt" ;;
    write-bandwidth)  # what writing BYTES (default 3.25 GB, run's output of 4 cases of 8,8192,16,128) costs where run writes: dd into 1 and into 4 files, pwrite into one file from 1-8 threads
      d=${WRITE_DIR:-/dev/shm/linattn-write-bandwidth}; bytes=${BYTES:-3254810848}; rm -rf "$d"; mkdir -p "$d"
      {
        df -h "$d" | tail -1
        for n in 1 4; do
          count=$(( bytes / n / 67108864 + 1 )); t0=$(date +%s.%N)
          for i in $(seq 1 $n); do dd if=/dev/zero of="$d/dd.$i" bs=64M count=$count status=none & done; wait
          t1=$(date +%s.%N); rm -f "$d"/dd.*
          echo "dd, $n writer(s), one file each, $(( n * count * 64 )) MiB: $(python3 -c "print(f'{$n * $count * 67108864 / ($t1 - $t0) / 1e9:.2f}')") GB/s"
        done
        python3 bench/pwrite_bandwidth.py "$d/one.bin" "$bytes"
      } 2>&1 | tee "$LOGS/write-bandwidth.txt"
      rm -rf "$d" ;;
    budget)  # a case 4x larger than --memory-budget: same bits as an unbudgeted run, peak RSS within the budget
      d=${BUDGET_DIR:-/dev/shm/linattn-budget}; rm -rf "$d"; mkdir -p "$d"
      "$GPU_DIR/linattn" generate -o "$d/in.h5" --shape 8,8192,16,128,128 --dtype fp16 --seed 3 --cases 1 > /dev/null
      {
        echo "== empty batch (the fixed footprint: libraries, CUDA context)"
        "$GPU_DIR/linattn" run "$d/missing.h5" -o "$d/none" --memory-budget 1M 2>&1 | tail -1
        echo "== a small case under a small budget (the footprint once the kernels' modules are loaded)"
        "$GPU_DIR/linattn" generate -o "$d/small.h5" --shape 1,256,16,128,128 --dtype fp16 --seed 3 --cases 1 > /dev/null
        "$GPU_DIR/linattn" run "$d/small.h5" -o "$d/small" --no-fsync --memory-budget 8M 2>&1 | tail -1
        echo "== unbudgeted (default budget)"
        "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/whole" --no-fsync 2>&1 | grep -E "case0|peak RSS"
        echo "== --memory-budget 200M (the case's inputs are 805 MB)"
        LINATTN_MEMORY_MAP="$d/map-200M.txt" "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/budget" --no-fsync --memory-budget 200M 2>&1 | grep -E "case0|peak RSS"
        python3 bench/same_bits.py "$d/whole/in.case0.h5" "$d/budget/in.case0.h5"
        echo "== the largest resident mappings at the end of the 200M run (KiB, address range, file or kind)"
        awk '/^[0-9a-f]+-[0-9a-f]+ /{range=$1; name=($6==""?"[anon]":$6)} /^Rss:/{print $2, range, name}' "$d/map-200M.txt" | sort -rn | head -14
        echo "== --memory-budget 64M"
        "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/budget64" --no-fsync --memory-budget 64M 2>&1 | grep -E "peak RSS"
      } 2>&1 | tee "$LOGS/budget.txt"
      rm -rf "$d" ;;
    mpi-batch|mpi-cp)  # issue 16 on the 2-GPU kind; MPI_DIR holds ../shared/tools/bundle-mpi's runtime (an MPI build of linattn)
      m=$PWD/${MPI_DIR:-.mpi}
      export OPAL_PREFIX=$m PATH=$m/bin:$PATH PMIX_MCA_pcompress_base_silence_warning=1 \
        LD_LIBRARY_PATH=$m/deps:$m/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH
      mpi=(mpirun --allow-run-as-root -np 2)
      d=${MPI_WORK:-/dev/shm/linattn-mpi}; rm -rf "$d"; mkdir -p "$d"
      wall() { local t0; t0=$(date +%s.%N); "$@" > "$d/last.txt" 2>&1; local rc=$?; tail -3 "$d/last.txt";
               grep -hE "pipeline:|ranks bound" "$d/last.txt" | cut -c1-300;
               echo "wall $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s (rc $rc)"; }
      if [[ $step == mpi-batch ]]; then
        {
          "$GPU_DIR/linattn" generate -o "$d/in.h5" --shape "${MPI_SHAPE:-8,8192,16,128,128}" --dtype bf16 --seed 5 --cases 8 > /dev/null
          echo "== 1 rank, outputs in RAM, --no-fsync"; wall "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/one" --no-fsync
          echo "== 2 ranks, outputs in RAM, --no-fsync"; wall "${mpi[@]}" "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/two" --no-fsync
          "$GPU_DIR/linattn" verify "$d/two/in.case7.h5" | tail -1  # bitwise equality to one rank: tests/mpi_runs.py in CI
          rm -rf "$d/one" "$d/two"
          disk=${MPI_DISK:-/tmp/linattn-mpi-disk}; rm -rf "$disk"
          echo "== 1 rank, outputs on disk, fsync"; wall "$GPU_DIR/linattn" run "$d/in.h5" -o "$disk/one"
          echo "== 2 ranks, outputs on disk, fsync"; wall "${mpi[@]}" "$GPU_DIR/linattn" run "$d/in.h5" -o "$disk/two"
          rm -rf "$disk"
        } 2>&1 | tee "$LOGS/mpi-batch.txt"
      else
        {
          "$GPU_DIR/linattn" generate -o "$d/in.h5" --shape "${MPI_CP_SHAPE:-1,1048576,16,128,128}" --dtype bf16 --seed 6 > /dev/null
          echo "== 1 rank (run's pipeline: windows, sequences never split)"; wall "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/one" --no-fsync
          rm -rf "$d/one"
          echo "== 1 rank, --context-parallel (run's pipeline: one segment, the whole case)"
          wall mpirun --allow-run-as-root -np 1 "$GPU_DIR/linattn" run --context-parallel "$d/in.h5" -o "$d/cp1" --no-fsync
          grep -h "rank 0:" "$d/last.txt" | cut -c1-250
          rm -rf "$d/cp1"
          echo "== ${MPI_RANKS:-2} ranks, --context-parallel"
          wall mpirun --allow-run-as-root -np "${MPI_RANKS:-2}" "$GPU_DIR/linattn" run --context-parallel "$d/in.h5" -o "$d/two" --no-fsync
          grep -hE "chunks|  rank [0-9]:" "$d/last.txt" | cut -c1-250
          rm -rf "$d/two" "$d/in.h5"
          # verify reads the case whole in fp64 (too much memory at 1M tokens): a smaller case for it
          "$GPU_DIR/linattn" generate -o "$d/small.h5" --shape "${MPI_CP_VERIFY_SHAPE:-1,131072,16,128,128}" --dtype bf16 --seed 7 > /dev/null
          mpirun --allow-run-as-root -np "${MPI_RANKS:-2}" "$GPU_DIR/linattn" run --context-parallel "$d/small.h5" -o "$d/small" --no-fsync > /dev/null 2>&1
          "$GPU_DIR/linattn" verify "$d/small/"*.h5 | tail -6
        } 2>&1 | tee "$LOGS/mpi-cp.txt"
      fi
      rm -rf "$d" ;;
    packed-run-vs-bench)  # issue 29: a packed case's kernel time in run (device windows and windows alone, never split) beside bench on the same cuts (split: never, and chosen)
      d=${PACKED_DIR:-/dev/shm/linattn-packed}; rm -rf "$d"; mkdir -p "$d"
      lens=$(python3 -c "import random; random.seed(5); c=sorted(random.sample(range(1, 65536), 31)); b=[0]+c+[65536]; print(','.join(str(b[i+1]-b[i]) for i in range(32)))")
      "$GPU_DIR/linattn" generate -o "$d/in.h5" --shape 1,65536,16,128,128 --dtype bf16 --seqlens "$lens" --seed 4 > /dev/null
      {
        echo "== 32 sequences, 65536 tokens, 16 heads of 128, bf16; lengths $lens"
        for budget in default 2G; do
          extra=""; [ "$budget" = default ] || extra="--memory-budget $budget"
          # device windows as chosen (0), and each window alone (1, as before them)
          for dw in 0 1; do
            echo "== linattn run ($budget budget, --device-windows $dw): the case's kernel time and windows"
            for rep in 1 2; do
              "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/out-$budget-$dw-$rep" --no-fsync --device-windows $dw $extra 2>&1 |
                grep -E "kernel|pipeline"
            done
          done
        done
        echo "== the outputs of --device-windows 0 and 1 (default budget), byte for byte"
        for x in o h final_state; do
          python3 -c "import sys, h5py; a, b = (h5py.File(f, 'r')[sys.argv[3]][()] for f in sys.argv[1:3]); print(sys.argv[3], 'same bytes' if a.tobytes() == b.tobytes() else 'DIFFER')" \
            "$d/out-default-0-1/in.case0.h5" "$d/out-default-1-1/in.case0.h5" $x
        done
        echo "== linattn run of three copies of the file in one job (default budget, fp32 snapshots): later cases find the launch warm"
        cp "$d/in.h5" "$d/in2.h5"; cp "$d/in.h5" "$d/in3.h5"
        "$GPU_DIR/linattn" run "$d/in.h5" "$d/in2.h5" "$d/in3.h5" -o "$d/out-three" --no-fsync 2>&1 | grep -E "kernel|pipeline"
        for segments in 1 0; do
          echo "== linattn bench, the same cuts, --segments $segments"
          "$GPU_DIR/linattn" bench --shape 1,65536,16,128,128 --dtype bf16 --seqlens "$lens" --variants fused --segments $segments --reps 20
        done
        echo "== the same work on both sides: run writes fp32 snapshots by default, bench bf16 ones"
        "$GPU_DIR/linattn" bench --shape 1,65536,16,128,128 --dtype bf16 --seqlens "$lens" --variants fused --segments 1 --snapshots fp32 --reps 20
        for rep in 1 2; do
          "$GPU_DIR/linattn" run "$d/in.h5" -o "$d/out-bf16h-$rep" --no-fsync --snapshots bf16 2>&1 | grep -E "kernel"
        done
        echo "== linattn bench, the same cuts, --segments 1, fp32 snapshots, cold: no warm-up, one run (as a case's one launch in run)"
        "$GPU_DIR/linattn" bench --shape 1,65536,16,128,128 --dtype bf16 --seqlens "$lens" --variants fused --segments 1 --snapshots fp32 --warmup 0 --reps 1
      } 2>&1 | tee "$LOGS/packed-run-vs-bench.txt"
      rm -rf "$d" ;;
    state-pass)  # context parallel's state pass beside the fused forward on the same k, v (its cost sets the split)
      "$GPU_DIR/linattn" bench --shape 1,524288,16,128 --shape 1,1048576,16,128 --shape 8,8192,16,128 --dtype bf16 \
        --variants fused --state-pass --reps 10 --json "$LOGS/state-pass.json" 2>&1 | tee "$LOGS/state-pass.txt" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
