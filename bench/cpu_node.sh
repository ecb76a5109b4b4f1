#!/usr/bin/env bash
# Issue 30 on one CPU node: the CPU (Serial + MPI) build of linattn on N ranks
# of the 16-core H200 host, inputs and outputs in /dev/shm, --no-fsync.
#   CPU_DIR=.cpu MPI_DIR=.mpi bash bench/cpu_node.sh [host] [bandwidth] [alone] [batch] [cp]
# CPU_DIR holds linattn and lib/ (../shared/tools/bundle-libs), MPI_DIR the
# runtime of ../shared/tools/bundle-mpi. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
CPU_DIR=${CPU_DIR:-.cpu}
LOGS=${OUT:-bench/results}
mkdir -p "$LOGS"
m=$PWD/${MPI_DIR:-.mpi}
export OPAL_PREFIX=$m PATH=$m/bin:$PATH PMIX_MCA_pcompress_base_silence_warning=1 \
  LD_LIBRARY_PATH=$PWD/$CPU_DIR/lib:$m/deps:$m/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
exe=$PWD/$CPU_DIR/linattn
d=${WORK:-/dev/shm/linattn-cpu}
rm -rf "$d"; mkdir -p "$d"
RANKS=${RANKS:-1 4 8 16}
BATCH_SHAPE=${BATCH_SHAPE:-2,16384,8,64,64}
CP_SHAPE=${CP_SHAPE:-1,524288,8,64,64}
RUN_ARGS=${RUN_ARGS:-}  # more options of linattn run in the batch and cp steps (e.g. --readers 1)

# wall LABEL CMD...: the command's wall time, its last lines and its per-rank lines
wall() {
  local label=$1; shift
  local t0 rc; t0=$(date +%s.%N)
  "$@" > "$d/last.txt" 2>&1; rc=$?
  echo "== $label: wall $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s (rc $rc)"
  grep -hE "pipeline:|ranks bound|runs on CPUs|by rank|rank [0-9]+: warm-up|FAILED|rror|^\\[[0-9]+/" "$d/last.txt" | cut -c1-400 | head -40
}

for step in ${*:-host floor bandwidth alone read batch cp}; do
  case $step in
    host)  # what the node is: sockets, cores, threads per core, the CPUs this job may use
      { lscpu | grep -E "Model name|Socket|Core|Thread|NUMA|^CPU\(s\)|L3|MHz"
        echo "affinity: $(taskset -pc $$ 2>/dev/null)"
        echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none)"
        grep -E "^(flags)" /proc/cpuinfo | head -1 | tr ' ' '\n' | grep -cE "avx512f|avx2" | sed 's/^/avx2|avx512f flags: /'
        free -g | head -2
        mpirun --version | head -1; } 2>&1 | tee "$LOGS/cpu-node-host.txt" ;;
    floor)  # what a run costs before any case: the launcher alone, and linattn on one tiny case
      { for n in $RANKS; do
          wall "$n ranks: mpirun of /bin/true" mpirun --allow-run-as-root -np "$n" /bin/true
          "$exe" generate -o "$d/tiny.h5" --shape 1,64,1,16,16 --dtype fp32 --seed 1 > /dev/null
          rm -rf "$d/out"
          wall "$n ranks: linattn run of one tiny case" mpirun --allow-run-as-root -np "$n" "$exe" run "$d/tiny.h5" -o "$d/out" --no-fsync
        done
        rm -rf "$d/out" "$d/tiny.h5"; } 2>&1 | grep -v "dlopen error" | tee "$LOGS/cpu-node-floor.txt" ;;
    mca)  # Open MPI's settings that cost start-up or write time: the launch floor, and a 16-rank context-parallel case
      { cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null | sed 's/^/transparent huge pages: /'
        "$exe" generate -o "$d/tiny.h5" --shape 1,64,1,16,16 --dtype fp32 --seed 1 > /dev/null
        "$exe" generate -o "$d/cp.h5" --shape "$CP_SHAPE" --dtype fp32 --seed 6 > /dev/null
        for setting in "X=default" "OMPI_MCA_pml=ob1" "OMPI_MCA_io=romio321" "OMPI_MCA_pml=ob1 OMPI_MCA_io=romio321"; do
          for n in 1 16; do
            rm -rf "$d/out"
            wall "$n ranks, $setting: one tiny case" env $setting mpirun --allow-run-as-root -np "$n" "$exe" run "$d/tiny.h5" -o "$d/out" --no-fsync
          done
          rm -rf "$d/out"
          wall "16 ranks, $setting: --context-parallel" env $setting mpirun --allow-run-as-root -np 16 "$exe" run --context-parallel "$d/cp.h5" -o "$d/out" --no-fsync
        done
        rm -rf "$d/out" "$d/tiny.h5" "$d/cp.h5"; } 2>&1 | grep -v "dlopen error" | tee "$LOGS/cpu-node-mca.txt" ;;
    read)  # reading the context-parallel case: h5py (numpy) beside linattn's read phase (step cp)
      { "$exe" generate -o "$d/cp.h5" --shape "$CP_SHAPE" --dtype fp32 --seed 6 > /dev/null
        python3 - "$d/cp.h5" <<'PY'
import sys, time
import h5py
f = h5py.File(sys.argv[1], "r")
for name in ("q", "k", "v"):
    ds = f["case0/" + name]
    t0 = time.perf_counter(); a = ds[...]; t = time.perf_counter() - t0
    print(f"h5py read of {name} {list(ds.shape)} chunks {ds.chunks}: {t:.3f} s, {a.nbytes / t / 1e9:.2f} GB/s")
PY
        rm -f "$d/cp.h5"; } 2>&1 | tee "$LOGS/cpu-node-read.txt" ;;
    bandwidth)  # the copy bandwidth the ranks share
      python3 bench/memory_bandwidth.py --processes 1,2,4,8,16 --mib 512 --passes 8 2>&1 | tee "$LOGS/cpu-node-bandwidth.txt" ;;
    alone)  # N independent kernel benchmarks at once, no MPI: what the cores give one case each
      { for n in $RANKS; do
          for i in $(seq 1 "$n"); do
            "$exe" bench --shape "$BATCH_SHAPE" --dtype fp32 --variants fused --reps 3 --warmup 1 > "$d/alone.$i.txt" 2>&1 &
          done
          wait
          echo "== $n processes at once, fused ms each: $(grep -h " fused " "$d"/alone.*.txt | awk '{print $6}' | sort -n | tr '\n' ' ')"
          rm -f "$d"/alone.*.txt
        done; } 2>&1 | tee "$LOGS/cpu-node-alone.txt" ;;
    batch)  # 16 cases shared by the ranks
      { "$exe" generate -o "$d/batch.h5" --shape "$BATCH_SHAPE" --dtype fp32 --seed 5 --cases 16 > /dev/null
        for n in $RANKS; do
          rm -rf "$d/out"
          wall "$n ranks, default binding $RUN_ARGS" mpirun --allow-run-as-root -np "$n" "$exe" run "$d/batch.h5" -o "$d/out" --no-fsync $RUN_ARGS
        done
        for bind in ${BINDINGS:-}; do
          for n in ${BIND_RANKS:-8 16}; do
            rm -rf "$d/out"
            wall "$n ranks, --bind-to $bind" mpirun --allow-run-as-root -np "$n" --bind-to "$bind" "$exe" run "$d/batch.h5" -o "$d/out" --no-fsync
          done
        done
        rm -rf "$d/out" "$d/batch.h5"; } 2>&1 | tee "$LOGS/cpu-node-batch${BATCH_TAG:-}.txt" ;;
    cp-bits)  # 2 ranks write the same bits as one (tests/mpi_runs.py checks it in CI at small shapes)
      { "$exe" generate -o "$d/cpb.h5" --shape "$CP_SHAPE" --dtype fp32 --seed 7 > /dev/null
        mpirun --allow-run-as-root -np 1 "$exe" run --context-parallel "$d/cpb.h5" -o "$d/one" --no-fsync > /dev/null 2>&1
        mpirun --allow-run-as-root -np 2 "$exe" run --context-parallel "$d/cpb.h5" -o "$d/two" --no-fsync > /dev/null 2>&1
        echo "== 1 rank against 2 ranks, $CP_SHAPE:"; python3 bench/same_bits.py "$d/one/cpb.case0.h5" "$d/two/cpb.case0.h5"
        rm -rf "$d/one" "$d/two" "$d/cpb.h5"; } 2>&1 | tee "$LOGS/cpu-node-cp-bits.txt" ;;
    cp)  # one long case cut along T
      { "$exe" generate -o "$d/cp.h5" --shape "$CP_SHAPE" --dtype fp32 --seed 6 > /dev/null
        for n in $(echo 1 2 $RANKS | tr " " "\n" | sort -nu); do
          rm -rf "$d/out"
          wall "$n ranks, --context-parallel $RUN_ARGS" mpirun --allow-run-as-root -np "$n" "$exe" run --context-parallel "$d/cp.h5" -o "$d/out" --no-fsync $RUN_ARGS
        done
        rm -rf "$d/out" "$d/cp.h5"; } 2>&1 | tee "$LOGS/cpu-node-cp${CP_TAG:-}.txt" ;;
    *) echo "unknown step $step" ;;
  esac
done
rm -rf "$d"
