/* tensorize: convert safetensors (or .tensors) checkpoints into one
 * tensorizer .tensors file, optionally encrypted. */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zstd.h>

#include "cli.h"
#include "cli_output.h"
#include "tzr_load.h"
#include "tzr_http.h"
#include "tzr_shard.h"

static const char usage[] =
    "Usage: tensorize IN [IN ...] -o OUT [OPTIONS]\n"
    "Writes the tensors of every input, in file order, to OUT as tensorizer's\n"
    "write_state_dict does (type state_dict, module index 0). Inputs are\n"
    "safetensors or .tensors files (told apart by their bytes), Hugging Face\n"
    "checkpoints (a directory or its model.safetensors.index.json), as paths\n"
    "or as s3:// / http(s):// URLs (a URL ending in / is a directory); OUT is\n"
    "a path or an s3:// URL.\n"
    "A .tensors input's CRC32/SHA-256 are checked as it is read: a corrupt\n"
    "input fails (exit 1) instead of coming out with fresh hashes.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT        the .tensors file to write (atomically; a symbolic\n"
    "                          link is written through, devices and FIFOs refused)\n"
    "      --force             replace an existing OUT (or shard set); without it an\n"
    "                          existing target is refused (exit 1)\n"
    "      --key-file PATH     encrypt with this 32-byte raw key\n"
    "      --password-file P   encrypt with a key derived from this password\n"
    "                          (Argon2id, tensorizer's defaults)\n"
    "      --ca-bundle PEM     trust these CAs for https:// and s3:// (default:\n"
    "                          $AWS_CA_BUNDLE, else the system's)\n"
    "      --timeout SECONDS   http(s)/s3: fail a connect or a silent server after\n"
    "                          SECONDS, retried (default 60, as the AWS CLI)\n"
    "      --part-size MIB     s3:// output: multipart part size, 5 to 5120 (default 16)\n"
    "      --uploads N         s3:// output: parts uploaded at once, 1 to 64 (default 8)\n"
    "      --direct            write whole blocks with O_DIRECT where the file system\n"
    "                          allows (a checkpoint larger than memory neither fills\n"
    "                          the page cache nor evicts what else runs here)\n"
    "      --index-bytes N     index reservation, 1 to 2^30 (default: what the tensors' entries\n"
    "                          need, at least tensorizer's 262144; with --compress, the frame\n"
    "                          directory too)\n"
    "      --compress zstd[:L] zstd frames, byte planes for 2/4-byte dtypes (level L,\n"
    "                          1 to 22, default 1); libtzr extension: tensorizer refuses such files\n"
    "      --shards N          write N (1 to 99999) rank shards PREFIX-rank-0000k-of-0000N.tensors and\n"
    "                          the manifest PREFIX.tzr-index.json (PREFIX: OUT less .tensors)\n"
    "      --names vllm        with --shards: shard k is OUT with k in its rank field, as vLLM\n"
    "                          names per-rank files (-o model-rank-%03d.tensors), cut as\n"
    "                          vLLM's tensor-parallel layers are unless --split-dim says\n"
    "                          otherwise; the manifest is OUT less the field .tzr-index.json\n"
    "      --split-dim RULES   how --shards cuts tensors: \"glob=DIM,glob=replicate,...\"\n"
    "                          (default: dim 0 when it divides evenly and the tensor is\n"
    "                          >= 1 MiB, else replicate on every shard); a rule naming a\n"
    "                          dimension a matching tensor lacks is refused\n"
    "  -q, --quiet             no progress or summary\n"
    "  -h, --help              this help;  --version  library version\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage, 128+N stopped by signal N\n"
    "(SIGINT 130, SIGHUP 129, SIGTERM 143: the temporary file is removed and the\n"
    "message says what was kept).\n";

/* What a tensor takes in the index reservation: its entry
 * (formats/tensorizer.md 3) and, in a compressed output, its compression
 * block in the frame directory (11.5), one u32 per 4 MiB frame (the
 * writer's default). */
static uint64_t entry_bytes(size_t name_len, size_t dtype_len, uint32_t ndim) {
    return 29 + name_len + dtype_len + 4 * (uint64_t)ndim;
}
static uint64_t dir_bytes(uint64_t nbytes) { return 26 + 4 * ((nbytes + (4u << 20) - 1) / (4u << 20)); }

/* --split-dim against one tensor: a bad rule, or one naming a dimension
 * the tensor lacks, is a usage error found before anything is written. */
static int rules_ok(const char *rules, const char *name, size_t name_len, uint32_t ndim) {
    int dim;
    if (!rules || tzr_shard_rule_dim(rules, name, name_len, ndim, &dim) >= 0) return 1;
    cli_error("--split-dim '%s': %s", rules, tzr_last_error());
    return 0;
}

/* An input, opened before anything is written: a reader over one file
 * (safetensors or .tensors, told apart by their bytes, from a path or a
 * URL), or a Hugging Face checkpoint (a directory or prefix, or its
 * index) as a set of such readers. Open until the output is closed: the
 * writers read safetensors tensors from their sources on their threads. */
typedef struct input {
    tzr_reader *r;
    tzr_shard_set *set;
} input;

static int input_open(input *in, const char *arg) {
    if (cli_ends_with(arg, ".index.json") || cli_is_directory(arg)) {
        tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
        so.http = cli_http();
        int rc = tzr_shard_open(&in->set, arg, &so);
        /* Every file is read: all opened (and checked) before anything is
         * written, whether or not the set opened them already. */
        for (int k = 0; !rc && k < tzr_shard_nshards(in->set); k++)
            if (!tzr_shard_reader(in->set, k)) rc = tzr_last_error_code();
        return rc;
    }
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.read_headers = 1; /* module indices live in the headers */
    ro.verify = 1;       /* a .tensors input's hashes are checked as it is read */
    ro.http = cli_http();
    return tzr_reader_open(&in->r, arg, &ro);
}
static int input_nfiles(const input *in) { return in->set ? tzr_shard_nshards(in->set) : 1; }
static tzr_reader *input_file(const input *in, int k) { return in->set ? tzr_shard_reader(in->set, k) : in->r; }
static void input_close(input *in) {
    tzr_reader_free(in->r);
    tzr_shard_close(in->set);
}

/* One pass over the opened inputs: returns their tensor bytes (the
 * progress bar's total). Unless --index-bytes gave it, *index_bytes
 * becomes the reservation their entries need (and, compressed, the frame
 * directory, so readers get every frame table at open), at least
 * tensorizer's 256 KiB, so files that fit it keep tensorizer's bytes.
 * Shard files hold at most every tensor, with the same names and ranks.
 * *bad_rules is set when --split-dim does not fit some tensor (printed). */
static uint64_t scan_inputs(const input *in, int n, int compress, uint64_t *index_bytes, const char *rules,
                            int *bad_rules) {
    uint64_t total = 0, entries = 0, dir = 16 + 4096; /* directory prefix, slack */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < input_nfiles(&in[i]); k++) {
            tzr_reader *r = input_file(&in[i], k);
            for (size_t j = 0; j < tzr_reader_count(r) && !*bad_rules; j++) {
                const tzr_tensor_info *t = tzr_reader_tensor(r, j);
                entries += entry_bytes(t->name_len, t->dtype_len, t->ndim); /* safetensors: tensorizer's string */
                dir += dir_bytes(t->nbytes);
                *bad_rules = !rules_ok(rules, t->name, t->name_len, t->ndim);
                total += t->nbytes;
            }
        }
    if (!*index_bytes) {
        uint64_t need = compress ? (entries + dir + 4095) / 4096 * 4096 : entries;
        *index_bytes = need > 262144 ? need : 262144;
    }
    return total;
}

typedef struct progress_state {
    cli_progress bar;
    uint64_t done;
    int quiet;
} progress_state;

/* Where the tensors go: one writer, or (--shards) a splitter that cuts
 * each tensor into the shard files as it comes, with no joined copy. */
typedef struct out_files {
    tzr_writer *w;
    tzr_shard_splitter *sp;
} out_files;

static int out_add(out_files *o, const tzr_tensor_desc *d, const void *data) {
    return o->sp ? tzr_shard_splitter_add(o->sp, d, data) : tzr_writer_add(o->w, d, data);
}

static void close_inputs(input *in, int n) {
    for (int i = 0; i < n; i++) input_close(&in[i]);
    free(in);
}

static int stopped(void) { return cli_stop_signal ? tzr_set_error(TZR_ECANCELED, "interrupted") : 0; }

/* The writer (or each shard writer) reads safetensors tensors itself,
 * piece by piece on its workers (tzr_writer_add_from) from the input's
 * source, local or remote: nothing is mapped or held whole, so memory
 * stays flat whatever the model size. */
static int add_safetensors(out_files *w, tzr_reader *r, progress_state *ps) {
    tzr_source *src = tzr_reader_source(r);
    int rc = 0;
    for (size_t i = 0; i < tzr_reader_count(r) && !rc && !(rc = stopped()); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        tzr_tensor_desc d = {0};
        d.name = t->name;
        d.name_len = t->name_len;
        d.type = TZR_STATE_DICT;
        d.dtype = t->dtype; /* tensorizer's own string for it, as write_state_dict writes */
        d.ndim = t->ndim;
        d.shape = t->shape;
        rc = w->sp ? tzr_shard_splitter_add_from(w->sp, &d, src, t->data_offset)
                   : tzr_writer_add_from(w->w, &d, src, t->data_offset);
        if (rc) break;
        ps->done += t->nbytes;
        if (!ps->quiet) cli_progress_update(&ps->bar, ps->done);
    }
    return rc;
}

/* Re-write a (plain) .tensors input tensor by tensor, keeping its names,
 * types, module indices and dtype strings. Each tensor's stored hashes are
 * checked in the read that feeds the writer: fresh hashes over corrupt
 * bytes would make the corruption pass every later check. */
static int add_tensors(out_files *w, tzr_reader *r, progress_state *ps) {
    int rc = 0;
    for (size_t i = 0; i < tzr_reader_count(r) && !rc && !(rc = stopped()); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        void *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!buf) {
            rc = tzr_set_error(TZR_ENOMEM, "%s: cannot allocate %llu bytes", tzr_reader_source(r)->name,
                               (unsigned long long)t->nbytes);
            break;
        }
        rc = t->meta ? 0 : tzr_reader_read(r, i, buf, t->nbytes);
        tzr_tensor_desc d = {t->name, t->name_len, t->type, (uint16_t)(t->module_idx < 0 ? 0 : t->module_idx),
                             t->dtype_str, t->dtype_len, t->dtype, t->ndim, t->shape, t->meta, sizeof(tzr_tensor_desc)};
        if (!rc) rc = out_add(w, &d, buf);
        free(buf);
        ps->done += t->nbytes;
        if (!ps->quiet) cli_progress_update(&ps->bar, ps->done);
    }
    return rc;
}

/* Every file of an input in order (a Hugging Face set's files were
 * checked against its index at open: nothing is written for a bad one). */
static int add_input(out_files *w, const input *in, progress_state *ps) {
    int rc = 0;
    for (int k = 0; k < input_nfiles(in) && !rc; k++) {
        tzr_reader *r = input_file(in, k);
        rc = tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS ? add_safetensors(w, r, ps) : add_tensors(w, r, ps);
    }
    return rc;
}

/* The set's prefix: OUT less .tensors, or with --names vllm OUT less its
 * rank field (and the - or _ before it): model-rank-%03d.tensors ->
 * model-rank, whose manifest is model-rank.tzr-index.json. */
static void set_prefix(const char *output, int vllm, char *prefix, size_t cap) {
    snprintf(prefix, cap, "%s", output);
    char *f = vllm ? strchr(prefix, '%') : NULL;
    if (f) {
        *f = 0;
        while (f > prefix && (f[-1] == '-' || f[-1] == '_' || f[-1] == '.')) *--f = 0;
    }
    size_t pl = strlen(prefix);
    if (pl > 8 && strcmp(prefix + pl - 8, ".tensors") == 0) prefix[pl - 8] = 0;
}

/* Shard k's file name: PREFIX-rank-0000k-of-0000N.tensors, or the pattern. */
static int shard_name(char *buf, size_t cap, const char *prefix, const char *pattern, int k, int n) {
    return pattern ? tzr_shard_rank_path(buf, cap, pattern, k) : tzr_shard_file_name(buf, cap, prefix, k, n, ".tensors");
}

/* Without --force, an existing manifest, hashes file or shard file of the set
 * is refused. */
static int refuse_existing_shards(const char *prefix, const char *pattern, int n, int force) {
    char name[4200];
    snprintf(name, sizeof name, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    if (cli_output_check(name, force)) return -1;
    snprintf(name, sizeof name, "%s%s", prefix, TZR_SHARD_HASHES_SUFFIX);
    if (cli_output_check(name, force)) return -1;
    for (int k = 0; k < n; k++)
        if (!shard_name(name, sizeof name, prefix, pattern, k, n) && cli_output_check(name, force)) return -1;
    return 0;
}

/* Key material, wiped and freed on every exit path. */
static cli_crypt key_material;
static void clear_crypt(void) { cli_crypt_clear(&key_material); }

int main(int argc, char **argv) {
    cli_prog = "tensorize";
    cli_index_option = "--index-bytes";
    atexit(clear_crypt);
    const char *output = NULL;
    uint64_t index_bytes = 0;
    int quiet = 0;
    int shards = 0, force = 0, part_mib = 0, uploads = 0, vllm_names = 0, direct = 0;
    const char *rules = NULL;
    int zlevel = -1; /* --compress: zstd level (0 = default) */
    enum { O_KEY = 256, O_PW, O_INDEX, O_VERSION, O_SHARDS, O_RULES, O_COMPRESS, O_CA, O_TIMEOUT, O_FORCE, O_PART, O_UPLOADS, O_NAMES, O_DIRECT };
    static const struct option longs[] = {{"output", required_argument, 0, 'o'},
                                          {"key-file", required_argument, 0, O_KEY},
                                          {"password-file", required_argument, 0, O_PW},
                                          {"index-bytes", required_argument, 0, O_INDEX},
                                          {"shards", required_argument, 0, O_SHARDS},
                                          {"split-dim", required_argument, 0, O_RULES},
                                          {"compress", required_argument, 0, O_COMPRESS},
                                          {"ca-bundle", required_argument, 0, O_CA},
                                          {"timeout", required_argument, 0, O_TIMEOUT},
                                          {"force", no_argument, 0, O_FORCE},
                                          {"part-size", required_argument, 0, O_PART},
                                          {"uploads", required_argument, 0, O_UPLOADS},
                                          {"names", required_argument, 0, O_NAMES},
                                          {"direct", no_argument, 0, O_DIRECT},
                                          {"quiet", no_argument, 0, 'q'},
                                          {"help", no_argument, 0, 'h'},
                                          {"version", no_argument, 0, O_VERSION},
                                          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case O_KEY: if (cli_load_key_file(&key_material, optarg)) return EXIT_USAGE; break;
        case O_PW: if (cli_load_password_file(&key_material, optarg)) return EXIT_USAGE; break;
        case O_CA: if (cli_set_ca_bundle(optarg)) return EXIT_USAGE; break;
        case O_TIMEOUT: if (cli_set_timeout(optarg)) return EXIT_USAGE; break;
        case O_INDEX: if (cli_uint("--index-bytes", optarg, 1, (uint64_t)1 << 30, &index_bytes)) return EXIT_USAGE; break;
        case O_SHARDS: if (cli_int("--shards", optarg, 1, TZR_SHARD_MAX, &shards)) return EXIT_USAGE; break;
        case O_RULES: rules = optarg; break;
        case O_COMPRESS:
            if (strncmp(optarg, "zstd", 4) != 0 || (optarg[4] && optarg[4] != ':')) {
                cli_error("--compress: expected zstd or zstd:LEVEL, got '%s'", optarg);
                return EXIT_USAGE;
            }
            zlevel = 0;
            if (optarg[4]) {
                char what[300];
                snprintf(what, sizeof what, "--compress '%.200s': level", optarg);
                if (cli_int(what, optarg + 5, 1, ZSTD_maxCLevel(), &zlevel)) return EXIT_USAGE;
            }
            break;
        case O_FORCE: force = 1; break;
        case O_DIRECT: direct = 1; break;
        case O_PART: if (cli_int("--part-size", optarg, 5, 5120, &part_mib)) return EXIT_USAGE; break;
        case O_NAMES:
            if (strcmp(optarg, "vllm") != 0) {
                cli_error("--names: only 'vllm' (per-rank files named by OUT's %%03d field), got '%s'", optarg);
                return EXIT_USAGE;
            }
            vllm_names = 1;
            break;
        case O_UPLOADS: if (cli_int("--uploads", optarg, 1, 64, &uploads)) return EXIT_USAGE; break;
        case 'q': quiet = 1; break;
        case 'h': fputs(usage, stdout); return EXIT_OK;
        case O_VERSION: printf("tensorize (libtzr %s)\n", tzr_version_string()); return EXIT_OK;
        default: fputs(usage, stderr); return EXIT_USAGE;
        }
    }
    if (!output) {
        cli_error("no output: give -o OUT.tensors (see --help)");
        return EXIT_USAGE;
    }
    if (optind >= argc) {
        cli_error("no input files (see --help)");
        return EXIT_USAGE;
    }
    if (key_material.have_key && key_material.password) {
        cli_error("give --key-file or --password-file, not both");
        return EXIT_USAGE;
    }
    if (direct && cli_is_url(output)) {
        cli_error("--direct goes with a local OUT");
        return EXIT_USAGE;
    }
    if ((part_mib || uploads) && !cli_is_s3(output)) {
        cli_error("--part-size and --uploads go with an s3:// output");
        return EXIT_USAGE;
    }
    if (shards < 0 || shards > TZR_SHARD_MAX || (rules && !shards)) {
        cli_error(rules ? "--split-dim goes with --shards" : "--shards takes 1 to %d", TZR_SHARD_MAX);
        return EXIT_USAGE;
    }
    /* A shard set is files and a manifest that names them by path; its
     * writer cannot put them in a bucket. Said before anything is read or
     * uploaded. */
    if (shards && cli_is_url(output)) {
        cli_error("--shards writes local files only (%s): write the set to a directory, then upload it "
                  "(aws s3 cp --recursive DIR s3://BUCKET/PREFIX/)", output);
        return EXIT_USAGE;
    }
    /* With --shards, each tensor is cut into the shard files as it is
     * read: no joined copy of the model on disk. */
    char prefix[4096], manifest[4200];
    const char *target = output; /* what the user named, for messages */
    const char *pattern = vllm_names ? output : NULL;
    if (vllm_names && (!shards || !strchr(output, '%'))) {
        cli_error("--names vllm goes with --shards N and an OUT with a rank field, as model-rank-%%03d.tensors");
        return EXIT_USAGE;
    }
    int prc = vllm_names ? tzr_shard_rank_path(manifest, sizeof manifest, output, shards - 1) : 0;
    if (prc) {
        cli_lib_error(prc); /* no rank field, a field too wide, a path too long */
        return EXIT_USAGE;
    }
    /* How vLLM cuts tensor-parallel layers; everything else replicated, as
     * a set opened from its pattern alone reads what no rule names (the
     * splitter's own default would cut large tensors that the opener then
     * takes for whole ones). */
    if (vllm_names && !rules) rules = TZR_SHARD_RULES_VLLM ",*=replicate";
    set_prefix(output, vllm_names, prefix, sizeof prefix);
    snprintf(manifest, sizeof manifest, "%s%s", prefix, TZR_SHARD_MANIFEST_SUFFIX);
    if (shards ? refuse_existing_shards(prefix, pattern, shards, force) : cli_output_check(output, force))
        return EXIT_FAIL;
    cli_output_guard(shards ? manifest : output, NULL);

    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    cli_crypt_apply(&key_material, &wo.crypt);
    wo.metadata_size = index_bytes;
    wo.direct = direct;
    wo.no_replace = !force; /* a file another run created meanwhile is not replaced either */
    wo.http = cli_http();
    int ninputs = argc - optind, bad_rules = 0, rc;
    input *inputs = calloc((size_t)ninputs, sizeof *inputs);
    if (!inputs) return cli_lib_error(tzr_set_error(TZR_ENOMEM, "out of memory"));
    for (int i = 0; i < ninputs; i++)
        if ((rc = input_open(&inputs[i], argv[optind + i]))) {
            cli_lib_error(rc);
            cli_error("nothing was written to %s", shards ? manifest : target);
            close_inputs(inputs, ninputs);
            return EXIT_FAIL;
        }
    uint64_t total = scan_inputs(inputs, ninputs, zlevel >= 0, &wo.metadata_size, rules, &bad_rules);
    if (bad_rules) {
        close_inputs(inputs, ninputs);
        return EXIT_USAGE;
    }
    if (zlevel >= 0) {
        wo.compression = TZR_COMPRESSION_ZSTD;
        wo.compression_level = zlevel;
    }
    progress_state ps = {{0}, 0, quiet};
    double t0 = cli_now();
    out_files w = {0};
    rc = TZR_ECANCELED;
    if (!cli_stop_signal && shards) {
        tzr_shard_split_options so = TZR_SHARD_SPLIT_OPTIONS_INIT;
        so.metadata_size = wo.metadata_size;
        so.file = &wo;
        so.file_pattern = pattern;
        rc = tzr_shard_splitter_open(&w.sp, prefix, shards, rules, &so);
    } else if (!cli_stop_signal && cli_is_s3(output)) {
        tzr_http_options ho = *cli_http();
        ho.max_inflight = uploads;
        tzr_output *o = NULL;
        rc = tzr_output_open_s3(&o, output, &ho, (size_t)part_mib << 20);
        if (!rc) rc = tzr_writer_open_output(&w.w, o, &wo);
    } else if (!cli_stop_signal) {
        rc = tzr_writer_open(&w.w, output, &wo);
    }
    if (rc) {
        int status = cli_stop_signal ? cli_output_stopped(0) : cli_lib_error(rc);
        close_inputs(inputs, ninputs);
        return status;
    }
    cli_progress_begin(&ps.bar, "tensorize", total);
    for (int i = 0; i < ninputs && !rc; i++) rc = add_input(&w, &inputs[i], &ps);
    cli_progress_end(&ps.bar);
    if (rc) {
        /* Keep the message: aborting may call into the library again. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tzr_last_error());
        if (w.sp) tzr_shard_splitter_abort(w.sp);
        else tzr_writer_abort(w.w);
        close_inputs(inputs, ninputs);
        if (cli_stop_signal) return cli_output_stopped(0);
        /* An abort that failed adds what it left behind (an S3 upload). */
        const char *after = tzr_last_error();
        cli_lib_message(strncmp(after, msg, strlen(msg)) == 0 ? after : msg);
        cli_error("nothing was written to %s", shards ? manifest : target);
        return EXIT_FAIL;
    }
    if (shards) {
        char note[4400];
        snprintf(note, sizeof note, "shards finished before the signal may be left; %s not rewritten", manifest);
        cli_output_note(note);
    }
    rc = w.sp ? tzr_shard_splitter_close(w.sp) : tzr_writer_close(w.w);
    close_inputs(inputs, ninputs);
    if (rc && cli_stop_signal) return cli_output_stopped(0);
    if (rc) {
        cli_lib_error(rc);
        cli_error("nothing was written to %s", shards ? manifest : target);
        return EXIT_FAIL;
    }
    if (shards) {
        if (cli_stop_signal) return cli_output_stopped(1);
        if (!quiet) {
            char first[4200];
            shard_name(first, sizeof first, prefix, pattern, 0, shards);
            fprintf(stderr, "tensorize: wrote %d shards (%s ...) and %s%s in %.2f s\n", shards, first, prefix,
                    TZR_SHARD_MANIFEST_SUFFIX, cli_now() - t0);
        }
        return EXIT_OK;
    }

    if (cli_stop_signal) return cli_output_stopped(1);
    if (!quiet) {
        char sz[32];
        double secs = cli_now() - t0;
        fprintf(stderr, "tensorize: wrote %s (%s of tensor data) in %.2f s\n", output, cli_size(ps.done, sz, sizeof sz),
                secs);
    }
    return EXIT_OK;
}
