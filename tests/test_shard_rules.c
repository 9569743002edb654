/* Split rules are strict when cutting a checkpoint: a rule naming a
 * dimension a matching tensor lacks is refused before any shard is written
 * (it used to fall back to replicating that tensor, silently). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "tzr_shard.h"

static char src[512], prefix[512];

/* "w": f32 [4, 6]; "s": a 0-d f32 scalar. */
static int write_src(void) {
    static float w[24], s = 1.5f;
    for (int i = 0; i < 24; i++) w[i] = (float)i;
    uint64_t shape[2] = {4, 6};
    tzr_tensor_desc dw = {0}, ds = {0};
    dw.name = "w", dw.name_len = 1, dw.type = TZR_PARAM, dw.dtype = TZR_DTYPE_F32, dw.ndim = 2, dw.shape = shape;
    ds.name = "s", ds.name_len = 1, ds.type = TZR_PARAM, ds.dtype = TZR_DTYPE_F32, ds.ndim = 0, ds.shape = shape;
    tzr_writer *wr;
    int rc = tzr_writer_open(&wr, src, NULL);
    if (!rc) rc = tzr_writer_add(wr, &dw, w);
    if (!rc) rc = tzr_writer_add(wr, &ds, &s);
    if (!rc) rc = tzr_writer_close(wr);
    else tzr_writer_abort(wr);
    return rc;
}

static int exists(const char *suffix) {
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s%s", prefix, suffix);
    return stat(p, &st) == 0;
}

/* Split with rules; returns the code, checking a refusal left no file. */
static int split(const char *rules) {
    tzr_reader *r;
    int rc = tzr_reader_open(&r, src, NULL);
    if (rc) return rc;
    rc = tzr_shard_split(r, prefix, 2, rules, NULL);
    tzr_reader_free(r);
    if (rc) {
        CHECK(!exists(TZR_SHARD_MANIFEST_SUFFIX));
        CHECK(!exists("-rank-00000-of-00002.tensors") && !exists("-rank-00001-of-00002.tensors"));
        CHECK(!exists("-rank-00000-of-00002" TZR_SHARD_PART_SUFFIX));
    }
    return rc;
}

static void split_refuses_missing_dim(void) {
    CHECK_RC(split("w=2"), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "w=2") && strstr(tzr_last_error(), "tensor 'w'") &&
          strstr(tzr_last_error(), "2 dims"));
}

static void split_refuses_dim_of_scalar(void) {
    CHECK_RC(split("s=0,w=1"), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "tensor 's'") != NULL);
}

static void split_first_match_wins(void) {
    /* "s" matches "s=replicate" first, so the later "*=1" never applies to it. */
    CHECK_OK(split("s=replicate,*=1"));
    CHECK(exists(TZR_SHARD_MANIFEST_SUFFIX));
}

static void rule_dim_answers(void) {
    int dim = 99;
    CHECK_RC(tzr_shard_rule_dim("*=1", "w", 1, 2, &dim), 1);
    CHECK(dim == 1);
    CHECK_RC(tzr_shard_rule_dim("w=replicate", "w", 1, 2, &dim), 1);
    CHECK(dim == TZR_SHARD_REPLICATED);
    CHECK_RC(tzr_shard_rule_dim("x=0", "w", 1, 2, &dim), 0);
    CHECK_RC(tzr_shard_rule_dim(NULL, "w", 1, 2, &dim), 0);
    CHECK_RC(tzr_shard_rule_dim("*=2", "w", 1, 2, &dim), TZR_EINVAL);
    CHECK_RC(tzr_shard_rule_dim("*=x", "w", 1, 2, &dim), TZR_EINVAL);
    CHECK_RC(tzr_shard_rule_dim("w", "w", 1, 2, &dim), TZR_EINVAL);
    /* Structured names are matched on the JSON text after the 0x1E marker. */
    CHECK_RC(tzr_shard_rule_dim("*\"w\"]=0", "\x1e[\"w\"]", 6, 1, &dim), 1);
    CHECK(dim == 0);
}

int main(void) {
    snprintf(src, sizeof src, "%s/src.tensors", check_tmpdir());
    snprintf(prefix, sizeof prefix, "%s/out", check_tmpdir());
    if (write_src()) {
        printf("FAIL write_source: %s\n", tzr_last_error());
        return 1;
    }
    RUN(split_refuses_missing_dim);
    RUN(split_refuses_dim_of_scalar);
    RUN(rule_dim_answers);
    RUN(split_first_match_wins);
    return check_done();
}
