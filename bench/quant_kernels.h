/* quant_kernels.h - bench_quant --kernels (quant_kernels.c): the stored-type
 * products alone against the memory read rate (bench). */
#ifndef STRATA_BENCH_QUANT_KERNELS_H
#define STRATA_BENCH_QUANT_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

/* Prints the table and one json line per type; 0 on success. threads 0:
 * every processor; mem_rate in bytes per second; in, out: the matrices'
 * shape (quick: 512 x 256 and a small ring, for CTest); types: a comma
 * list of type names to bench (NULL: all). */
int strata_bench_kernels(uint32_t threads, bool quick, double mem_rate,
			 uint32_t in, uint32_t out, const char *types);

#endif
