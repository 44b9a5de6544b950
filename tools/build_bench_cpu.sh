#!/bin/sh
# build_bench_cpu.sh - builds bench/bench_cpu.c without CMake, for a machine
# that has a compiler and jansson but not the rest of the build (the GPU
# machine, after `. scripts/gpu-env`). Run from the repository root; the
# binary lands in $1 (default /tmp/bench-cpu). Only the layers the bench
# links are compiled: base, checkpoint, the CPU kernels and the forward pass.
set -eu
R=$(pwd)
O=${1:-/tmp/bench-cpu}
rm -rf "$O"
mkdir -p "$O"
CF="-std=c11 -D_GNU_SOURCE -I$R/include -I$R/src"
for f in src/backend/cpu/kernels_*.c; do
	gcc $CF -O3 -ffp-contract=fast -c "$f" -o "$O/$(basename "$f" .c).o" &
done
for f in src/base/*.c src/checkpoint/*.c src/backend/kernels.c \
	src/infer/hparams.c src/infer/tensors.c src/infer/load.c \
	src/infer/forward.c src/infer/sample.c src/infer/generate.c; do
	gcc $CF -O2 -c "$f" -o "$O/$(echo "$f" | tr / _).o" &
done
wait
gcc $CF -O3 bench/bench_cpu.c "$O"/*.o -ljansson -lm -lpthread -o "$O/bench_cpu"
echo "$O/bench_cpu"
