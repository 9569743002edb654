/* `tzr-bench --ranks`: multi-rank load benchmark, run under mpirun. On a
 * generated checkpoint (rank 0 writes it and its N-shard split), times
 * every mode of tzr_comm_load for the current rank count (broadcast also
 * as one chunk: read everything, then send) against rank 0 loading the
 * file alone, and prints
 *   | ranks | mode | seconds | GB/s per rank | GB/s total | time vs single file |
 * (or JSON with --json). Options: --size BYTES[K|M|G] (default 512M),
 * --file PATH, --tensors N (64), --chunk BYTES (8M), --reps N (best of, 1),
 * --modes a,b,... , --no-verify, --device N (also every mode into GPU N,
 * with the pinned cudaMemcpy bandwidth as the floor), --json, --keep
 * (leave the generated files). */
#ifndef TZR_BENCH_RANKS_H
#define TZR_BENCH_RANKS_H
int bench_ranks_main(int argc, char **argv);
#endif
