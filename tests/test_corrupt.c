/* Corrupt input never crashes, hangs or allocates absurdly, and always
 * fails with the right TZR_E* code and a message that says where.
 *
 * Table driven: each case patches a copy of a golden file (written by
 * tensorizer itself) or of a small file written by our writer, then checks
 * the code of open and of read/verify of one tensor, and substrings of
 * tzr_last_error(). Every offset below was worked out by hand from
 * ../shared/reference/tensorizer-format.md (and checked with xxd), never
 * from the code under test; CRC32 is recomputed by an independent bitwise
 * implementation. Each case runs over a memory source and again over a
 * real temporary file. Build with -fsanitize=address,undefined to turn
 * "no crash" into "no memory error". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "check.h"

/* Table rows leave trailing fields zero on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* ASan/TSan/MSan reserve terabytes of address space: no RLIMIT_AS there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CORRUPT_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CORRUPT_UNDER_SANITIZER 1
#endif
#endif
#ifndef CORRUPT_UNDER_SANITIZER
#define CORRUPT_UNDER_SANITIZER 0
#endif

/* ------------------------------------------------------------ base files */
enum { B_PLAIN, B_BF16, B_STRUCT, B_WPLAIN, B_WENC, B_WPW, B_WMULTI, B_COUNT };
static unsigned char *base[B_COUNT];
static size_t base_len[B_COUNT];

static const uint8_t KEY[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static const uint8_t BADKEY[32] = {1};

/* golden plain_v1.tensors (spec §3.2 worked example; index from 73):
 *   entry 0 'layer.weight' at 73: name_len 73, name 75..86, type 87,
 *     dtype_len 88, dtype 89..91, ndim 92, dims 93/97, header_off 101,
 *     data_off 109, data_len 117 (52 bytes)
 *   entry 1 'layer.bias_0d' at 125: header_off 146; entry 3 'empty' at 208
 *   (name 210); entry 5 'flags' at 290 (name 292)
 *   record 0 at H=262217: size 89, type H+10, name H+13, dtype H+26..28,
 *     ndim H+29, dims H+30, hash len H+38, CRC entry H+41 (value H+43),
 *     SHA entry H+47 (value H+49), data_length H+81; data 262306 (24 bytes)
 *   last record 'flags': data 262736..262738, end marker 262739..262746 */
#define H0 262217
#define D0 262306
/* our writer with metadata_size 512, key 00..1f (enc) or password "test"
 * ops 1 mem 8192 zero salt (pw); first tensor 'w' f32 (2,3):
 *   entry 0 at 73: name 75, type 76, dtype 78..80, header_off 90,
 *     data_off 98, data_len 106. Record 0 at 585.
 *   enc header (148 bytes = 120+16+1+3+8): hash len 612, crypt len C 649,
 *     chunks 657, chunk_len 659, chunk type 667, chunk_size 669, nonce 677,
 *     num_macs 701, MAC 709, data_length 725; data 733 (24 bytes)
 *   pw header (198 bytes, +50 KDF chunk): C 649, chunks 657, KDF chunk_len
 *     659, type 667, method 669, opslimit 671, memlimit 679, alg 687,
 *     salt_len 691, salt 693; data 783 */
#define WH 585

static void wadd(tzr_writer *w, const char *name, tzr_dtype d, uint32_t ndim, const uint64_t *shape, int meta,
                 const void *data) {
    tzr_tensor_desc t = {name, strlen(name), TZR_STATE_DICT, 0, NULL, 0, d, ndim, shape, meta, sizeof(tzr_tensor_desc)};
    int rc = tzr_writer_add(w, &t, data);
    if (rc) check_fail("writer add %s: %s", name, tzr_last_error());
}

static unsigned char *write_small(int kind, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/base%d.tensors", check_tmpdir(), kind);
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.metadata_size = 512;
    uint8_t salt[16] = {0};
    if (kind == B_WENC) o.crypt.key = KEY;
    if (kind == B_WPW) {
        o.crypt.password = "test";
        o.crypt.password_len = 4;
        o.crypt.opslimit = 1;
        o.crypt.memlimit = 8192;
        o.crypt.salt = salt;
    }
    tzr_writer *w;
    if (tzr_writer_open(&w, path, &o)) return NULL;
    float f[6] = {0, 1, 2, 3, 4, 5};
    int32_t i32[4] = {1, -2, 3, -4};
    uint64_t s23[2] = {2, 3}, s4[1] = {4};
    if (kind == B_WPLAIN) {
        /* same entries 0-4 as golden plain_v1, so the same index offsets */
        int64_t i64 = 42;
        uint8_t u8[3] = {1, 2, 250};
        uint16_t h[2] = {0x3800, 0xc000};
        uint64_t s3[1] = {3}, s0[1] = {0}, s2[1] = {2};
        wadd(w, "layer.weight", TZR_DTYPE_F32, 2, s23, 0, f);
        wadd(w, "layer.bias_0d", TZR_DTYPE_I64, 0, NULL, 0, &i64);
        wadd(w, "u8", TZR_DTYPE_U8, 1, s3, 0, u8);
        wadd(w, "empty", TZR_DTYPE_F32, 1, s0, 0, NULL);
        wadd(w, "h\xc3\xa9lf", TZR_DTYPE_F16, 1, s2, 0, h);
    } else {
        wadd(w, "w", TZR_DTYPE_F32, 2, s23, 0, f);
        wadd(w, "i", TZR_DTYPE_I32, 1, s4, 0, i32);
        wadd(w, "m", TZR_DTYPE_F32, 2, s23, 1, NULL);
    }
    if (tzr_writer_close(w)) return NULL;
    return check_read_file(path, len);
}

/* ------------------------------------------------------- independent CRC */

static uint32_t crc32_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

static void st(unsigned char *p, int w, uint64_t v) {
    for (int i = 0; i < w; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A tensor whose data spans three crypto chunks. Our writer always uses
 * 2 MiB chunks, so this re-encrypts a small writer file by hand (spec §5.3,
 * §5.4) with chunk_size 1024: 'big' i32 (600) = 2400 bytes = 3 chunks.
 * Writer layout (N=3, D=3, K=1, P = 15+N+D+4K = 25), record at 585:
 *   hash len H+25, SHA value H+30, crypt C H+62, chunks H+70, chunk_len
 *   H+72, type H+80, chunk_size H+82, nonce H+90, num_macs H+114, MAC H+122,
 *   data_length H+138, data H+146 (header 146 bytes). Index entry 0 at 73:
 *   data_off at 96.
 * Result: header 178 bytes at 585, MACs at 707/723/739, data at 763. */
#define M_DATA 763
static int32_t multi_plain[600];

static unsigned char *build_multimac(size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/multi_src.tensors", check_tmpdir());
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.metadata_size = 512;
    o.crypt.key = KEY;
    tzr_writer *w;
    if (tzr_writer_open(&w, path, &o)) return NULL;
    for (int i = 0; i < 600; i++) multi_plain[i] = i * 7 - 1000;
    uint64_t shape[1] = {600};
    wadd(w, "big", TZR_DTYPE_I32, 1, shape, 0, multi_plain);
    if (tzr_writer_close(w)) return NULL;
    size_t n;
    unsigned char *src = check_read_file(path, &n);
    if (!src || n != 585 + 146 + 2400 + 8 || sodium_init() < 0) {
        free(src);
        return NULL;
    }
    const unsigned char *h = src + 585;
    unsigned char plain[2400];
    if (crypto_secretbox_open_detached(plain, h + 146, h + 122, 2400, h + 90, KEY) != 0 ||
        memcmp(plain, multi_plain, 2400) != 0) {
        free(src);
        return NULL;
    }
    size_t out_len = 585 + 178 + 2400 + 8;
    unsigned char *out = calloc(1, out_len);
    memcpy(out, src, 585);
    st(out + 96, 8, 585 + 178);
    unsigned char *nh = out + 585;
    memcpy(nh, h, 122);
    st(nh, 8, 178);
    st(nh + 62, 8, h[62] + 32u);   /* C */
    st(nh + 72, 8, h[72] + 32u);   /* chunk_len */
    st(nh + 82, 8, 1024);          /* chunk_size */
    st(nh + 114, 8, 3);            /* num_macs */
    st(nh + 170, 8, 2400);         /* data_length */
    unsigned char nonce[24];
    memcpy(nonce, h + 90, 24);
    for (int c = 0; c < 3; c++) {
        size_t m = c < 2 ? 1024 : 2400 - 2048;
        crypto_secretbox_detached(nh + 178 + 1024 * c, nh + 122 + 16 * c, plain + 1024 * c, m, nonce, KEY);
        sodium_increment(nonce, sizeof nonce);
    }
    /* SHA-256 over the header without its crypt block, hash value zeroed,
     * then the plaintext. */
    unsigned char hashable[62 + 8];
    memcpy(hashable, nh, 62);
    memset(hashable + 30, 0, 32);
    memcpy(hashable + 62, nh + 170, 8);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int dl = 32;
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    EVP_DigestUpdate(ctx, hashable, sizeof hashable);
    EVP_DigestUpdate(ctx, plain, 2400);
    EVP_DigestFinal_ex(ctx, nh + 30, &dl);
    EVP_MD_CTX_free(ctx);
    free(src);
    *len = out_len;
    return out;
}

/* Flip a data byte of 'layer.weight', then store the CRC32 of the
 * corrupted tensor (header with hash values zeroed + data) so only the
 * SHA-256 catches it. */
static void mut_sha_only(unsigned char *b, size_t *len) {
    b[D0 + 3] ^= 0x10;
    unsigned char hdr[89];
    memcpy(hdr, b + H0, 89);
    memset(hdr + 43, 0, 4);
    memset(hdr + 49, 0, 32);
    uint32_t crc = crc32_bitwise(0, hdr, 89);
    crc = crc32_bitwise(crc, b + D0, 24);
    st(b + H0 + 43, 4, crc);
}

/* Three zero bytes after the end marker (make_input leaves room). */
static void mut_append_zeros(unsigned char *b, size_t *len) {
    memset(b + *len, 0, 3);
    *len += 3;
}
/* Entries 3..5 (index bytes 208..330) become padding. */
static void mut_wipe_entries_3_5(unsigned char *b, size_t *len) { memset(b + 208, 0, 331 - 208); }

/* Make entry 5 ('flags') carry entry 3's name 'empty' (same length). */
static void mut_dup(unsigned char *b, size_t *len) { memcpy(b + 292, "empty", 5); }

/* --------------------------------------------------------------- table */
typedef struct patch {
    long off;          /* absolute offset; 0 with w == 0 ends the list */
    int w;             /* 1/2/4/8: store val little-endian; -1: xor val; >8: memcpy str of w bytes */
    uint64_t val;
    const char *str;
} patch;

enum { K_NONE, K_KEY, K_BADKEY, K_PW, K_PWBAD };

typedef struct kase {
    const char *name;
    int base;
    patch p[4];
    long trunc;        /* >= 0: cut the file to this length */
    void (*fn)(unsigned char *b, size_t *len);
    int keymode;
    int want_open;
    int tensor;        /* checked tensor when open succeeds */
    int want_read;     /* tzr_reader_read with verify off */
    int want_verify;   /* tzr_reader_verify */
    const char *msg[4];/* substrings of the first failure's message */
    int header_level;  /* also: open with read_headers=0 succeeds, reading tensor fails with want_open */
    int no_offset;     /* file-level failure: the message need not name an offset */
} kase;

#define P(o, w, v) {(o), (w), (uint64_t)(v), NULL}
#define S(o, s) {(o), (int)sizeof(s) - 1, 0, (s)}
#define NOTRUNC -1

static const kase cases[] = {
    /* ---- prologue */
    {"empty_file", B_PLAIN, {{0}}, 0, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"empty file", "offset 0"}},
    {"three_bytes", B_PLAIN, {{0}}, 3, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"bad magic"}},
    {"bad_magic", B_PLAIN, {P(0, 1, 'X')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"bad magic", "offset 0"}},
    {"trunc_prologue_40", B_PLAIN, {{0}}, 40, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"offset 40", "73-byte"}},
    {"trunc_prologue_72", B_PLAIN, {{0}}, 72, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"offset 72"}},
    {"version_0", B_PLAIN, {P(5, 4, 0)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"version 0", "offset 5"}},
    {"version_5", B_PLAIN, {P(5, 4, 5)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"version 5"}},
    {"version_99", B_PLAIN, {P(5, 4, 99)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"version 99"}},
    {"version_2pow32m1", B_PLAIN, {P(5, 4, 0xFFFFFFFFu)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"version 4294967295"}},
    {"flag_bit1", B_PLAIN, {P(9, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"offset 9", "flags"}},
    {"flag_bit255", B_PLAIN, {P(40, 1, 0x80)}, NOTRUNC, NULL, K_NONE, TZR_EVERSION, 0, 0, 0, {"offset 9"}},
    /* spec §1.2: a v1/v2 file with flag bit 0 set has the flag ignored */
    {"v1_encrypted_flag_ignored", B_PLAIN, {P(9, 1, 1)}, NOTRUNC, NULL, K_NONE, 0, 0, 0, 0, {NULL}},
    {"metadata_len_past_eof", B_PLAIN, {P(65, 8, 262748 - 73 + 1)}, NOTRUNC, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"offset 65", "262676"}},
    {"metadata_len_2pow63", B_PLAIN, {P(65, 8, (uint64_t)1 << 63)}, NOTRUNC, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"offset 65", "9223372036854775808"}},
    {"metadata_len_0", B_PLAIN, {P(65, 8, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"offset 57", "tensor count 6"}},
    {"tensor_count_2pow62", B_PLAIN, {P(57, 8, (uint64_t)1 << 62)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 57", "4611686018427387904"}},
    {"tensor_count_2pow64m1", B_PLAIN, {P(57, 8, UINT64_MAX)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"offset 57"}},
    /* 512-byte index holds at most 17 minimal entries */
    {"tensor_count_18_in_512", B_WPLAIN, {P(57, 8, 18)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor count 18", "512-byte index"}},
    /* 5 entries present, the 6th is zero padding: an empty name */
    {"tensor_count_past_entries", B_WPLAIN, {P(57, 8, 6)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 5 at offset 290", "empty tensor name"}},
    /* ---- index */
    {"trunc_in_index", B_PLAIN, {{0}}, 1000, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0, {"offset 65", "262144"}},
    {"name_len_past_index", B_WPLAIN, {P(73, 2, 65535)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 0 at offset 73", "512-byte index"}},
    /* index cut to 200 bytes: entry 4 (at 249, 41 bytes) ends at 290 > 273 */
    {"entry_past_short_index", B_PLAIN, {P(65, 8, 200)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 4 at offset 249", "200-byte index"}},
    {"empty_name", B_PLAIN, {P(73, 2, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 0 at offset 73", "empty tensor name"}},
    {"invalid_utf8_name", B_PLAIN, {P(80, 1, 0xFF)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 73", "UTF-8"}},
    {"overlong_utf8_name", B_PLAIN, {P(75, 1, 0xC0), P(76, 1, 0x80)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"UTF-8"}},
    {"structured_float", B_PLAIN, {S(75, "\x1e[1.5000000]"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 73", "non-negative integers"}},
    {"structured_negative", B_PLAIN, {S(75, "\x1e[-12345678]"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"non-negative"}},
    {"structured_object", B_PLAIN, {S(75, "\x1e{\"a\":\"bcd\"}"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0,
     0, {"offset 73", "not a JSON array"}},
    {"structured_empty_array", B_PLAIN, {S(75, "\x1e[         ]"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0,
     0, {"non-empty array"}},
    {"structured_unterminated", B_PLAIN, {S(75, "\x1e[\"abcdefgh]"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0,
     0, 0, {"offset 73", "JSON"}},
    {"structured_newline", B_PLAIN, {S(75, "\x1e[\"abc\ndefg]"), P(87, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0,
     0, {"not a JSON array"}},
    /* golden structured_v1: entry 0 name \x1e["model","layers",0,"w"]
     * (25 bytes at 75..99, the 0 at 94), type byte at 100 */
    {"golden_structured_ok", B_STRUCT, {{0}}, NOTRUNC, NULL, K_NONE, 0, 0, 0, 0, {NULL}},
    {"golden_structured_on_param", B_STRUCT, {P(100, 1, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 0 at offset 73", "state_dict"}},
    {"golden_structured_bad_json", B_STRUCT, {P(94, 1, 'x')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 0 at offset 73", "JSON"}},
    {"structured_on_param", B_PLAIN, {S(75, "\x1e[\"abcdefg\"]")}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"index entry 0", "state_dict"}},
    {"tensor_type_3", B_PLAIN, {P(87, 1, 3)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 73", "unknown tensor type 3"}},
    {"dtype_short", B_PLAIN, {P(88, 1, 2)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "dtype", "malformed"}},
    {"dtype_xx", B_PLAIN, {S(89, "xx4")}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"layer.weight", "malformed"}},
    {"dtype_size_0", B_PLAIN, {S(89, "<f0")}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"malformed"}},
    {"dtype_empty", B_PLAIN, {P(88, 1, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"layer.weight", "empty dtype"}},
    {"opaque_two_nuls", B_BF16, {P(89, 1, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'bf'", "more than one NUL"}},
    {"opaque_itemsize_mismatch", B_BF16, {P(81, 1, '4')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'bf'", "item size 4"}},
    {"opaque_not_void", B_BF16, {P(80, 1, 'i')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"void"}},
    {"opaque_not_torch", B_BF16, {P(83, 1, 'T')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"torch"}},
    /* (2^32-1)^2 * 4 overflows 64 bits */
    {"dims_overflow", B_PLAIN, {P(93, 4, 0xFFFFFFFFu), P(97, 4, 0xFFFFFFFFu)}, NOTRUNC, NULL, K_NONE, TZR_ELIMIT, 0, 0,
     0, {"tensor 'layer.weight'", "offset 73", "overflow"}},
    {"data_offset_past_eof", B_PLAIN, {P(109, 8, 262747 + 10)}, NOTRUNC, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 73", "262757"}},
    {"data_length_past_eof", B_PLAIN, {P(117, 8, (uint64_t)1 << 40)}, NOTRUNC, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"tensor 'layer.weight'", "1099511627776"}},
    {"data_length_wraps", B_PLAIN, {P(117, 8, UINT64_MAX - 100)}, NOTRUNC, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"tensor 'layer.weight'"}},
    {"data_length_vs_shape", B_PLAIN, {P(117, 8, 20)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "data length 20", "24 bytes"}},
    {"header_offset_in_index", B_PLAIN, {P(101, 8, 1000)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "header offset 1000"}},
    {"header_offset_0", B_PLAIN, {P(101, 8, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0, {"header offset 0"}},
    {"overlapping_records", B_PLAIN, {P(146, 8, H0 + 10)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.bias_0d'", "index entry 1 at offset 125", "overlaps"}},
    {"data_offset_tiny", B_PLAIN, {P(109, 8, H0 + 10)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "inconsistent"}},
    {"data_offset_before_header", B_PLAIN, {P(109, 8, H0 - 1)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"inconsistent"}},
    {"duplicate_names", B_PLAIN, {{0}}, NOTRUNC, mut_dup, K_NONE, TZR_EDUP, 0, 0, 0,
     {"tensor 'empty'", "index entry 5 at offset 290", "also entry 3"}},
    /* ---- tensor header vs index (checked at open with read_headers) */
    {"trunc_in_header", B_PLAIN, {{0}}, H0 + 50, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0, {"tensor 'layer.weight'"}},
    {"trunc_in_data", B_PLAIN, {{0}}, 262747 - 10, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0, {"tensor 'flags'", "262736"}},
    {"header_size_field", B_PLAIN, {P(H0, 8, 90)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "says 90", "implies 89"}, 1},
    {"header_size_zero", B_PLAIN, {P(H0, 8, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217", "says 0"}, 1},
    {"header_name_differs", B_PLAIN, {P(H0 + 13, 1, 'L')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "on the name"}, 1},
    {"header_type_differs", B_PLAIN, {P(H0 + 10, 1, 1)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217", "tensor type"}, 1},
    {"header_dtype_differs", B_PLAIN, {P(H0 + 28, 1, '8')}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "dtype"}, 1},
    {"header_shape_differs", B_PLAIN, {P(H0 + 30, 4, 3)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217", "shape"}, 1},
    {"header_ndim_differs", B_PLAIN, {P(H0 + 29, 1, 1)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217"}, 1},
    {"header_data_length_differs", B_PLAIN, {P(H0 + 81, 8, 25)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "data length"}, 1},
    {"header_negative_data_length", B_PLAIN, {P(H0 + 81, 8, UINT64_MAX)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "negative"}, 1},
    {"unknown_hash_type", B_PLAIN, {P(H0 + 41, 1, 5)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "hash type 5"}, 1},
    {"hash_entry_len_past_section", B_PLAIN, {P(H0 + 48, 1, 200)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217", "hash entry 1"}, 1},
    {"hash_section_past_header", B_PLAIN, {P(H0 + 38, 2, 200)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'layer.weight'", "offset 262217", "200 bytes"}, 1},
    /* hash section ends 6 bytes early: no room left for data_length? no:
     * 2 + 41 - 6 leaves it parseable; count 2 entries no longer fit */
    {"hash_section_short", B_PLAIN, {P(H0 + 38, 2, 35)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262217", "hash entry 1"}, 1},
    /* hash count 0: the 40 bytes after it are skipped; nothing to verify */
    {"hash_count_0", B_PLAIN, {P(H0 + 40, 1, 0)}, NOTRUNC, NULL, K_NONE, 0, 0, 0, TZR_EHASH,
     {"tensor 'layer.weight'", "offset 262217", "no hashes"}},
    /* ---- data and hashes */
    {"crc32_mismatch", B_PLAIN, {P(D0 + 3, -1, 0x10)}, NOTRUNC, NULL, K_NONE, 0, 0, 0, TZR_EHASH,
     {"tensor 'layer.weight'", "offset 262306", "crc32"}},
    {"crc32_value_flipped", B_PLAIN, {P(H0 + 43, -1, 1)}, NOTRUNC, NULL, K_NONE, 0, 0, 0, TZR_EHASH,
     {"tensor 'layer.weight'", "offset 262306", "crc32"}},
    {"sha256_mismatch_crc_patched", B_PLAIN, {{0}}, NOTRUNC, mut_sha_only, K_NONE, 0, 0, 0, TZR_EHASH,
     {"tensor 'layer.weight'", "offset 262306", "sha256"}},
    {"last_tensor_data_flip", B_PLAIN, {P(262737, -1, 1)}, NOTRUNC, NULL, K_NONE, 0, 5, 0, TZR_EHASH,
     {"tensor 'flags'", "offset 262736"}},
    /* ---- the records account for the file (last record 'flags' ends at
     * 262739; the end marker is 262739..262746; data lengths 24+8+3+0+4+3 =
     * 42 at offset 41; entry 3 'empty' at 208, its record at 262498) */
    {"end_marker_missing", B_PLAIN, {{0}}, 262739, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0,
     {"offset 262739", "end-of-tensors marker", "truncated"}},
    {"end_marker_half", B_PLAIN, {{0}}, 262743, NULL, K_NONE, TZR_ETRUNC, 0, 0, 0, {"offset 262739", "4 bytes"}},
    {"end_marker_not_zero", B_PLAIN, {P(262740, 1, 1)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262739", "not zero"}},
    {"bytes_after_end_marker", B_PLAIN, {{0}}, NOTRUNC, mut_append_zeros, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 262747", "3 bytes follow"}},
    {"total_data_size_wrong", B_PLAIN, {P(41, 8, 43)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 41", "says 43", "hold 42"}},
    /* count 0 in a file with 6 records: not an empty checkpoint */
    {"tensor_count_0", B_PLAIN, {P(57, 8, 0), P(41, 8, 0)}, NOTRUNC, NULL, K_NONE, TZR_EFORMAT, 0, 0, 0,
     {"offset 73", "more entries than the 0"}},
    /* count lowered to 3 (total 35) and the file cut after record 2 plus a
     * forged end marker: entry 3 still stands in the index */
    {"tensor_count_lowered_and_cut", B_PLAIN, {P(57, 8, 3), P(41, 8, 35), P(262498, 8, 0)}, 262506, NULL, K_NONE,
     TZR_EFORMAT, 0, 0, 0, {"offset 208", "more entries than the 3"}},
    /* the same with entries 3-5 wiped from the index: what an interrupted
     * write leaves once only its count and total are trusted; the next
     * record's header size stands where the end marker should */
    {"unfinished_write", B_PLAIN, {P(57, 8, 3), P(41, 8, 35)}, 262506, mut_wipe_entries_3_5, K_NONE,
     TZR_EFORMAT, 0, 0, 0, {"offset 262498", "not zero"}},
    {"unfinished_write_cut", B_PLAIN, {P(57, 8, 3), P(41, 8, 35)}, 262498 + 40, mut_wipe_entries_3_5, K_NONE,
     TZR_EFORMAT, 0, 0, 0, {"offset 262506", "32 bytes follow"}},
    /* ---- encryption (our writer, key 00..1f) */
    {"enc_ok", B_WENC, {{0}}, NOTRUNC, NULL, K_KEY, 0, 0, 0, 0, {NULL}},
    {"enc_missing_key", B_WENC, {{0}}, NOTRUNC, NULL, K_NONE, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'", "offset 733", "key"}},
    {"enc_wrong_key", B_WENC, {{0}}, NOTRUNC, NULL, K_BADKEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'", "offset 733"}},
    {"key_on_plain_file", B_PLAIN, {{0}}, NOTRUNC, NULL, K_KEY, TZR_ECRYPT, 0, 0, 0, {"not encrypted"}, 0, 1},
    {"enc_ciphertext_flip", B_WENC, {P(733 + 5, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'w'", "offset 733", "decryption failed"}},
    {"enc_mac_flip", B_WENC, {P(709, -1, 0x80)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'w'", "offset 733"}},
    {"enc_nonce_flip", B_WENC, {P(677, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'"}},
    /* the SHA-256 of an encrypted tensor covers the plaintext */
    {"enc_sha_flip", B_WENC, {P(WH + 40, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, 0, TZR_EHASH,
     {"tensor 'w'", "offset 733", "sha256"}},
    {"enc_crypt_len_past_header", B_WENC, {P(649, 8, 1000)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "crypt block of 1000 bytes"}, 1},
    {"enc_chunk_len_past_block", B_WENC, {P(659, 8, 59)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "crypt chunk 0"}, 1},
    {"enc_num_macs_0", B_WENC, {P(701, 8, 0)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "0 MACs for 24 bytes"}, 1},
    {"enc_num_macs_2", B_WENC, {P(701, 8, 2)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "2 MACs"}, 1},
    {"enc_num_macs_huge", B_WENC, {P(701, 8, (uint64_t)1 << 60)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "1152921504606846976 MACs"}, 1},
    {"enc_unknown_chunk_type", B_WENC, {P(667, 2, 7)}, NOTRUNC, NULL, K_KEY, TZR_ECRYPT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "chunk type 7"}, 1},
    {"enc_chunk_size_bad", B_WENC, {P(669, 8, 1000)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "chunk size 1000"}, 1},
    /* crypt block with zero chunks: data stored in the clear in an encrypted file */
    {"enc_no_chunks", B_WENC, {P(657, 2, 0)}, NOTRUNC, NULL, K_KEY, TZR_ECRYPT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "not encrypted"}, 1},
    /* chunk type 3 (sequential): the parallel body reads as nonce+MAC garbage */
    {"enc_sequential_garbage", B_WENC, {P(667, 2, 3)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'w'", "offset 733"}},
    /* meta tensor 'm' (index 2) in an encrypted file: empty crypt block, zeros */
    {"enc_meta_tensor_ok", B_WENC, {{0}}, NOTRUNC, NULL, K_KEY, 0, 2, 0, 0, {NULL}},
    {"password_on_plain_file", B_PLAIN, {{0}}, NOTRUNC, NULL, K_PW, TZR_ECRYPT, 0, 0, 0, {"not encrypted"}, 0, 1},
    /* ---- three crypto chunks (hand re-encrypted with 1024-byte chunks) */
    {"multi_ok", B_WMULTI, {{0}}, NOTRUNC, NULL, K_KEY, 0, 0, 0, 0, {NULL}},
    {"multi_chunk1_flip", B_WMULTI, {P(M_DATA + 1024 + 5, -1, 0x04)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT,
     TZR_ECRYPT, {"tensor 'big'", "offset 763", "at byte 1024"}},
    {"multi_mac2_flip", B_WMULTI, {P(739, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'big'", "at byte 2048"}},
    {"multi_last_byte_flip", B_WMULTI, {P(M_DATA + 2399, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT,
     TZR_ECRYPT, {"tensor 'big'", "at byte 2048"}},
    {"multi_num_macs_2", B_WMULTI, {P(585 + 114, 8, 2)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'big'", "offset 585", "2 MACs for 2400 bytes"}, 1},
    {"multi_chunk_size_2048", B_WMULTI, {P(585 + 82, 8, 2048)}, NOTRUNC, NULL, K_KEY, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'big'", "3 MACs for 2400 bytes"}, 1},
    /* one MAC: the whole buffer is one secretbox, which these bytes are not */
    {"multi_num_macs_1", B_WMULTI, {P(585 + 114, 8, 1)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'big'", "decryption failed"}},
    {"multi_nonce_flip", B_WMULTI, {P(585 + 90, -1, 0x01)}, NOTRUNC, NULL, K_KEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'big'", "at byte 0"}},
    {"multi_trunc_data", B_WMULTI, {{0}}, M_DATA + 2000, NULL, K_KEY, TZR_ETRUNC, 0, 0, 0, {"tensor 'big'"}},
    /* ---- password (Argon2id) */
    {"pw_ok", B_WPW, {{0}}, NOTRUNC, NULL, K_PW, 0, 0, 0, 0, {NULL}},
    {"pw_wrong", B_WPW, {{0}}, NOTRUNC, NULL, K_PWBAD, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'", "offset 783"}},
    {"pw_memlimit_absurd", B_WPW, {P(679, 8, (uint64_t)1 << 50)}, NOTRUNC, NULL, K_PW, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'w'", "offset 585", "1125899906842624"}},
    {"pw_opslimit_absurd", B_WPW, {P(671, 8, (uint64_t)1 << 40)}, NOTRUNC, NULL, K_PW, 0, 0, TZR_ECRYPT, TZR_ECRYPT,
     {"tensor 'w'", "offset 585", "out of range"}},
    {"pw_alg_unknown", B_WPW, {P(687, 4, 1)}, NOTRUNC, NULL, K_PW, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'", "offset 585", "Argon2id"}},
    {"pw_kdf_method_unknown", B_WPW, {P(669, 2, 9)}, NOTRUNC, NULL, K_PW, TZR_ECRYPT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "method 9"}, 1},
    {"pw_salt_len_17", B_WPW, {P(691, 2, 17)}, NOTRUNC, NULL, K_PW, TZR_EFORMAT, 0, 0, 0,
     {"tensor 'w'", "offset 585", "type 1"}, 1},
    {"pw_salt_len_8", B_WPW, {P(691, 2, 8)}, NOTRUNC, NULL, K_PW, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'", "offset 585", "salt of 8"}},
    {"pw_raw_key_on_kdf_file", B_WPW, {{0}}, NOTRUNC, NULL, K_BADKEY, 0, 0, TZR_ECRYPT, TZR_ECRYPT, {"tensor 'w'"}},
};
#define NCASES (sizeof cases / sizeof cases[0])

static unsigned char *make_input(const kase *k, size_t *len) {
    size_t n = base_len[k->base];
    unsigned char *b = calloc(1, n + 16); /* mutators may append up to 16 bytes */
    memcpy(b, base[k->base], n);
    for (int i = 0; i < 4 && k->p[i].w; i++) {
        const patch *p = &k->p[i];
        if (p->str) memcpy(b + p->off, p->str, (size_t)p->w);
        else if (p->w < 0) b[p->off] ^= (unsigned char)p->val;
        else st(b + p->off, p->w, p->val);
    }
    if (k->fn) k->fn(b, &n);
    if (k->trunc >= 0 && (size_t)k->trunc < n) n = (size_t)k->trunc;
    *len = n;
    return b;
}

static int msg_has_all(const kase *k, const char *msg) {
    int ok = 1;
    /* Every failure says where (tzr.h: tensor name and byte offset). */
    if (!k->no_offset && !strstr(msg, "offset")) {
        fprintf(stderr, "  message names no offset: %s\n", msg);
        ok = 0;
    }
    for (int i = 0; i < 4 && k->msg[i]; i++)
        if (!strstr(msg, k->msg[i])) {
            fprintf(stderr, "  message lacks \"%s\": %s\n", k->msg[i], msg);
            ok = 0;
        }
    return ok;
}

static int open_input(const unsigned char *b, size_t n, int via_file, const kase *k, int read_headers,
                      tzr_reader **r) {
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.read_headers = read_headers;
    o.verify = 0;
    if (k->keymode == K_KEY) o.crypt.key = KEY;
    if (k->keymode == K_BADKEY) o.crypt.key = BADKEY;
    if (k->keymode == K_PW || k->keymode == K_PWBAD) {
        o.crypt.password = k->keymode == K_PW ? "test" : "tesT";
        o.crypt.password_len = 4;
    }
    if (!via_file) {
        tzr_source *src;
        int rc = tzr_source_open_memory(&src, b, n, k->name);
        if (rc) return rc;
        return tzr_reader_open_source(r, src, &o);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/%s.tensors", check_tmpdir(), k->name);
    if (check_write_file(path, b, n)) return -1000;
    return tzr_reader_open(r, path, &o);
}

static void run_case(const kase *k, int via_file) {
    size_t n;
    unsigned char *b = make_input(k, &n);
    tzr_reader *r = NULL;
    int rc = open_input(b, n, via_file, k, 1, &r);
    CHECK_RC(rc, k->want_open);
    if (rc) {
        CHECK(r == NULL);
        CHECK(tzr_last_error_code() == rc);
        CHECK(msg_has_all(k, tzr_last_error()));
        /* The source name is in every open failure. */
        CHECK(strstr(tzr_last_error(), via_file ? ".tensors" : k->name) != NULL);
    }
    if (!rc && r) {
        CHECK((size_t)k->tensor < tzr_reader_count(r));
        const tzr_tensor_info *t = tzr_reader_tensor(r, (size_t)k->tensor);
        if (t) {
            unsigned char *buf = malloc(t->nbytes + 1);
            int rr = tzr_reader_read(r, (size_t)k->tensor, buf, t->nbytes);
            CHECK_RC(rr, k->want_read);
            if (rr) CHECK(msg_has_all(k, tzr_last_error()));
            int vr = tzr_reader_verify(r, (size_t)k->tensor);
            CHECK_RC(vr, k->want_verify);
            if (vr && !rr) CHECK(msg_has_all(k, tzr_last_error()));
            free(buf);
        }
        /* Everything else must at least not crash. */
        for (size_t i = 0; i < tzr_reader_count(r); i++) {
            const tzr_tensor_info *u = tzr_reader_tensor(r, i);
            unsigned char *buf = malloc(u->nbytes + 1);
            (void)tzr_reader_read(r, i, buf, u->nbytes);
            (void)tzr_reader_verify(r, i);
            free(buf);
        }
        tzr_reader_free(r);
    }
    /* Header corruption is found lazily too: open without reading headers
     * succeeds, reading the tensor fails the same way. */
    if (k->header_level) {
        r = NULL;
        rc = open_input(b, n, via_file, k, 0, &r);
        CHECK_RC(rc, 0);
        if (!rc) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, (size_t)k->tensor);
            unsigned char *buf = malloc(t->nbytes + 1);
            int rr = tzr_reader_read(r, (size_t)k->tensor, buf, t->nbytes);
            CHECK_RC(rr, k->want_open);
            if (rr) CHECK(msg_has_all(k, tzr_last_error()));
            free(buf);
            tzr_reader_free(r);
        }
    }
    free(b);
}

static const kase *current;
static void case_memory(void) { run_case(current, 0); }
static void case_file(void) { run_case(current, 1); }

/* The patched bytes are where the comments say: sanity of the hand-made
 * offsets, against the bytes themselves. */
static void offsets_sane(void) {
    const unsigned char *g = base[B_PLAIN];
    CHECK(base_len[B_PLAIN] == 262747);
    CHECK(memcmp(g + 75, "layer.weight", 12) == 0 && memcmp(g + 89, "<f4", 3) == 0);
    CHECK(g[101] == (H0 & 0xff) && g[H0] == 89 && g[H0 + 38] == 41 && g[H0 + 81] == 24);
    CHECK(memcmp(g + 127, "layer.bias_0d", 13) == 0 && memcmp(g + 210, "empty", 5) == 0);
    CHECK(memcmp(g + 292, "flags", 5) == 0);
    CHECK(g[262736] == 1 && g[262737] == 0 && g[262738] == 1);
    const unsigned char *sv = base[B_STRUCT];
    CHECK(sv && sv[73] == 25 && memcmp(sv + 75, "\x1e[\"model\",\"layers\",0,\"w\"]", 25) == 0 && sv[100] == 2);
    const unsigned char *b = base[B_BF16];
    CHECK(b && memcmp(b + 79, "<V2\0torch.bfloat16", 18) == 0);
    const unsigned char *e = base[B_WENC];
    CHECK(e && e[75] == 'w' && e[90] == (WH & 0xff) && e[WH] == 148 && e[649] == 68 && e[659] == 58 && e[667] == 2);
    CHECK(e && e[701] == 1 && e[725] == 24 && e[98] == (733 & 0xff) && e[99] == (733 >> 8));
    const unsigned char *p = base[B_WPW];
    CHECK(p && p[WH] == 198 && p[667] == 1 && p[671] == 1 && p[679] == 0 && p[680] == 0x20 && p[687] == 2);
    CHECK(p && p[98] == (783 & 0xff) && p[99] == (783 >> 8));
    const unsigned char *w = base[B_WPLAIN];
    CHECK(w && w[65] == 0 && w[66] == 2 && w[57] == 5 && memcmp(w + 210, "empty", 5) == 0);
}

/* The hand-made three-chunk file decrypts to the original ints. */
static void multi_roundtrip(void) {
    tzr_source *src;
    CHECK_OK(tzr_source_open_memory(&src, base[B_WMULTI], base_len[B_WMULTI], "multi"));
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.crypt.key = KEY;
    o.verify = 1;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_reader_open_source(&r, src, &o));
    if (!r) return;
    int32_t got[600];
    CHECK_OK(tzr_reader_read(r, 0, got, sizeof got));
    CHECK(memcmp(got, multi_plain, sizeof got) == 0);
    CHECK(tzr_reader_tensor(r, 0)->encrypted == 1);
    tzr_reader_free(r);
}

/* A checkpoint with genuinely no tensors stays readable: built by hand
 * (spec §8: prologue with count 0, a zeroed 256 KiB index, the end marker)
 * and by our writer. */
static void genuinely_empty_files(void) {
    size_t n = 73 + 262144 + 8;
    unsigned char *b = calloc(1, n);
    memcpy(b, "|TZR|", 5);
    st(b + 5, 4, 1);
    st(b + 65, 8, 262144);
    tzr_source *src;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, n, "empty-by-hand"));
    CHECK_OK(tzr_reader_open_source(&r, src, NULL));
    CHECK(r && tzr_reader_count(r) == 0);
    tzr_reader_free(r);
    /* the same bytes one short: the end marker is cut */
    r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, n - 1, "empty-cut"));
    CHECK_RC(tzr_reader_open_source(&r, src, NULL), TZR_ETRUNC);
    CHECK(strstr(tzr_last_error(), "offset 262217") != NULL);
    free(b);
    char path[512];
    snprintf(path, sizeof path, "%s/empty-written.tensors", check_tmpdir());
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, path, NULL));
    CHECK_OK(tzr_writer_close(w));
    r = NULL;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    CHECK(r && tzr_reader_count(r) == 0);
    tzr_reader_free(r);
}

/* The index's two product checks, each worded as its own: a 3-D tensor
 * (only 3 dims of 2^32-1 overflow the element count; 2 overflow only the
 * byte size) written by our writer, its dims patched. Entry 0 at 73 for
 * the 2-byte name 't3': type 77, dtype_len 78, dtype 79..81, ndim 82,
 * dims 83/87/91, header offset 95. */
static void index_products_overflow(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/three_d.tensors", check_tmpdir());
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.metadata_size = 512;
    tzr_writer *w;
    CHECK_OK(tzr_writer_open(&w, path, &o));
    float f[1] = {1};
    uint64_t s111[3] = {1, 1, 1};
    wadd(w, "t3", TZR_DTYPE_F32, 3, s111, 0, f);
    CHECK_OK(tzr_writer_close(w));
    size_t len;
    unsigned char *b = check_read_file(path, &len);
    CHECK(b && len > 100 && b[73] == 2 && memcmp(b + 75, "t3", 2) == 0 && b[82] == 3 && b[83] == 1);
    if (!b) return;
    static const struct {
        int dims;          /* dims patched to 2^32-1, from the first */
        const char *what;
    } rows[] = {{3, "shape overflows"}, {2, "byte size overflows"}};
    for (int k = 0; k < 2; k++) {
        unsigned char *c = malloc(len);
        memcpy(c, b, len);
        for (int d = 0; d < rows[k].dims; d++) st(c + 83 + 4 * d, 4, 0xFFFFFFFFu);
        tzr_source *src;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_source_open_memory(&src, c, len, "three_d"));
        CHECK_RC(tzr_reader_open_source(&r, src, NULL), TZR_ELIMIT);
        const char *m = tzr_last_error();
        CHECKF(strstr(m, "tensor 't3'") && strstr(m, "index entry 0 at offset 73") && strstr(m, rows[k].what), "%s", m);
        tzr_reader_free(r);
        free(c);
    }
    /* Unpatched: the row as written (1x1x1 f32, 4 bytes). */
    tzr_source *src;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, len, "three_d_ok"));
    CHECK_OK(tzr_reader_open_source(&r, src, NULL));
    const tzr_tensor_info *t = r ? tzr_reader_tensor(r, 0) : NULL;
    CHECK(t && t->ndim == 3 && t->numel == 1 && t->nbytes == 4 && t->data_length == 4 && t->stored_length == 4 &&
          t->uncompressed_length == 4 && !t->meta && t->module_idx == -1 && t->itemsize == 4 &&
          strcmp(t->dtype_str, "<f4") == 0 && t->compression == TZR_COMPRESSION_NONE && t->byte_planes == 1);
    tzr_reader_free(r);
    free(b);
}

int main(void) {
    /* Outside sanitizers, cap the address space so an absurd allocation
     * fails the test instead of quietly succeeding. */
#if !CORRUPT_UNDER_SANITIZER
    struct rlimit rl = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    setrlimit(RLIMIT_AS, &rl);
#endif
    char path[512];
    snprintf(path, sizeof path, "%s/plain_v1.tensors", check_golden_dir());
    base[B_PLAIN] = check_read_file(path, &base_len[B_PLAIN]);
    snprintf(path, sizeof path, "%s/bf16_v2.tensors", check_golden_dir());
    base[B_BF16] = check_read_file(path, &base_len[B_BF16]);
    snprintf(path, sizeof path, "%s/structured_v1.tensors", check_golden_dir());
    base[B_STRUCT] = check_read_file(path, &base_len[B_STRUCT]);
    base[B_WPLAIN] = write_small(B_WPLAIN, &base_len[B_WPLAIN]);
    base[B_WENC] = write_small(B_WENC, &base_len[B_WENC]);
    base[B_WPW] = write_small(B_WPW, &base_len[B_WPW]);
    base[B_WMULTI] = build_multimac(&base_len[B_WMULTI]);
    /* Optional: leave the small bases for the fuzz corpus. */
    const char *seed_dir = getenv("TZR_CORRUPT_SEED_DIR");
    for (int i = B_WPLAIN; seed_dir && i < B_COUNT; i++) {
        snprintf(path, sizeof path, "%s/w_base%d.tensors", seed_dir, i);
        if (base[i]) check_write_file(path, base[i], base_len[i]);
    }
    for (int i = 0; i < B_COUNT; i++)
        if (!base[i]) {
            fprintf(stderr, "cannot load base file %d: %s\n", i, tzr_last_error());
            printf("FAIL setup: base file %d\n", i);
            return 1;
        }
    RUN(offsets_sane);
    RUN(genuinely_empty_files);
    RUN(multi_roundtrip);
    RUN(index_products_overflow);
    char name[128];
    for (size_t i = 0; i < NCASES; i++) {
        current = &cases[i];
        snprintf(name, sizeof name, "corrupt_%s", cases[i].name);
        check_run(name, case_memory);
        snprintf(name, sizeof name, "corrupt_file_%s", cases[i].name);
        check_run(name, case_file);
    }
    for (int i = 0; i < B_COUNT; i++) free(base[i]);
    return check_done();
}
