/* `tzr-bench --compress`: the zstd extension on the synthetic LLM
 * checkpoint. Writes it plain and compressed, then reports size ratio,
 * compression speed, and load time into host memory from the local file
 * (warm page cache) and through a rate-limited source (a token bucket
 * shared by all pipeline threads around the file source), for both files
 * in the same run. Options: --size-mib N (512), --layers N (16), --dir DIR,
 * --level N (1), --rate-mbps N (200), --threads N, --repeat N (3), --keep. */
#ifndef TZR_BENCH_COMPRESS_H
#define TZR_BENCH_COMPRESS_H
#include <stdint.h>

#include "tzr.h"

/* Writes the benchmark's checkpoint at path with these writer options. */
typedef int (*bench_write_fn)(uint64_t size, int layers, const char *path, const tzr_writer_options *wo);
int bench_compress_main(int argc, char **argv, bench_write_fn write_fn);
#endif
