/* `tzr-bench --write FILE.safetensors [--out DIR] [--repeat N]
 * [--key-file K]`: write benchmark on one input, in one run, each case in
 * a child process of its own (its peak RSS is its own), best of N:
 *   floor         8 MiB read+write of the same bytes, then fsync (what
 *                 `dd bs=8M conv=fsync` does)
 *   add_from      tzr_writer_add_from the input (what tensorize does)
 *   direct        the same with O_DIRECT block writes (tensorize --direct)
 *   add (memory)  the input read into memory first (not timed), then
 *                 tzr_writer_add, as a training job saving its tensors
 *   borrowed      the same memory through tzr_writer_add_borrowed (what
 *                 the Python TensorSerializer does): the workers hash and
 *                 write it with no copy
 *   encrypted     add_from with a random key (or --key-file)
 *   compressed    add_from with zstd level 1
 *   2 shards      tzr_shard_splitter_add_from into 2 shard files and a
 *                 manifest (what tensorize --shards 2 does)
 * Prints | case | seconds | GB/s | time vs floor | peak RSS MiB |. */
#ifndef TZR_BENCH_WRITE_H
#define TZR_BENCH_WRITE_H
int bench_write_main(int argc, char **argv);
#endif
