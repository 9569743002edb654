/* Atomic local outputs (src/output_file.c, src/io/output_temp.c): temporary
 * names that fit NAME_MAX, removal of stale temporaries of dead processes
 * only, targets that are refused, symbolic links written through, and the
 * signal-safe removal of temporaries being written; outputs and sources
 * over a caller's descriptor. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "output_temp.h"

static char *path_in(const char *name) {
    static char buf[8][4096];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 4096, "%s/%s", check_tmpdir(), name);
    return p;
}

static void touch(const char *path) { CHECK(check_write_file(path, "x", 1) == 0); }

/* Write "hello" through a file output on path; returns the finish code. */
static int write_hello(const char *path) {
    tzr_output *o;
    int rc = tzr_output_open_file(&o, path);
    if (rc) return rc;
    rc = o->pwrite_at(o, "hello", 5, 0);
    if (!rc) rc = o->finish(o);
    o->destroy(o);
    return rc;
}

static int count_temps(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^\\..*\\.tmp$' >/dev/null", dir);
    return system(cmd) == 0;
}

static void temp_prefix_short(void) {
    char p[256];
    int n = tzr_temp_prefix(p, sizeof p, "model.tensors");
    CHECK(n == (int)strlen(p));
    CHECK(strncmp(p, ".model.tensors.", 15) == 0);
    CHECK(strlen(p) == 15 + 9); /* 8 hex digits and a dot */
    CHECK(tzr_temp_prefix(p, 10, "model.tensors") == -1);
}

static void temp_prefix_long_fits_name_max(void) {
    char base[256], other[256], p[256], q[256];
    memset(base, 'm', 250);
    base[250] = 0;
    memcpy(other, base, sizeof base);
    other[249] = 'n'; /* same first 200 bytes */
    int n = tzr_temp_prefix(p, sizeof p, base);
    CHECK(n > 0);
    /* PREFIX + pid (at most 10 digits) + ".XXXXXX.tmp" */
    CHECK(n + 10 + 11 <= NAME_MAX);
    CHECK(tzr_temp_prefix(q, sizeof q, other) == n);
    CHECK(strcmp(p, q) != 0); /* the hash keeps cut names apart */
    /* Never cut inside a UTF-8 character: 199 ASCII bytes then "é"... */
    char u[300];
    memset(u, 'a', 199);
    for (int i = 0; i < 20; i++) memcpy(u + 199 + 2 * i, "\xc3\xa9", 2);
    u[239] = 0;
    n = tzr_temp_prefix(p, sizeof p, u);
    CHECK(n == 1 + 199 + 1 + 8 + 1);
}

static void temp_pid_parse(void) {
    const char *pre = ".m.tensors.0123abcd.";
    CHECK(tzr_temp_pid(".m.tensors.0123abcd.4242.aB3xYz.tmp", pre) == 4242);
    CHECK(tzr_temp_pid(".m.tensors.0123abcd.4242.aB3xY.tmp", pre) == -1);   /* 5 random chars */
    CHECK(tzr_temp_pid(".m.tensors.0123abcd.4242.aB3xYz.tmpx", pre) == -1);
    CHECK(tzr_temp_pid(".m.tensors.0123abcd..aB3xYz.tmp", pre) == -1);      /* no pid */
    CHECK(tzr_temp_pid(".m.tensors.0123abce.4242.aB3xYz.tmp", pre) == -1);  /* other target */
    CHECK(tzr_temp_pid(".m.tensors.0123abcd.0.aB3xYz.tmp", pre) == -1);
    CHECK(tzr_temp_pid(".m.tensors.0123abcd.99999999999.aB3xYz.tmp", pre) == -1);
    CHECK(tzr_temp_pid("m.tensors", pre) == -1);
}

/* A pid that is gone: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

static void stale_removed_live_kept(void) {
    char dir[2048], pre[256], name[4400];
    snprintf(dir, sizeof dir, "%s", path_in("stale"));
    CHECK(mkdir(dir, 0755) == 0);
    tzr_temp_prefix(pre, sizeof pre, "out.tensors");
    pid_t dead = dead_pid(), live = getppid();
    snprintf(name, sizeof name, "%s/%s%d.AAAAAA.tmp", dir, pre, (int)dead);
    touch(name);
    char live_name[4400], locked[4400], foreign[4400], own[4400];
    snprintf(live_name, sizeof live_name, "%s/%s%d.BBBBBB.tmp", dir, pre, (int)live);
    touch(live_name);
    /* Dead pid but held locked (a writer in another pid namespace). */
    snprintf(locked, sizeof locked, "%s/%s%d.CCCCCC.tmp", dir, pre, (int)dead);
    touch(locked);
    int lfd = open(locked, O_RDONLY);
    CHECK(lfd >= 0 && flock(lfd, LOCK_EX) == 0);
    /* Another target's temporary, dead pid. */
    char opre[256];
    tzr_temp_prefix(opre, sizeof opre, "other.tensors");
    snprintf(foreign, sizeof foreign, "%s/%s%d.DDDDDD.tmp", dir, opre, (int)dead);
    touch(foreign);
    snprintf(own, sizeof own, "%s/%s%d.EEEEEE.tmp", dir, pre, (int)getpid());
    touch(own);
    CHECK(tzr_temp_remove_stale(dir, pre) == 1);
    CHECK(access(name, F_OK) != 0);
    CHECK(access(live_name, F_OK) == 0);
    CHECK(access(locked, F_OK) == 0);
    CHECK(access(foreign, F_OK) == 0);
    CHECK(access(own, F_OK) == 0);
    close(lfd);
    /* The next output on the target does the same. */
    unlink(own);
    char target[4200];
    snprintf(target, sizeof target, "%s/out.tensors", dir);
    CHECK_OK(write_hello(target));
    CHECK(access(locked, F_OK) != 0); /* unlocked now, pid gone */
    CHECK(access(live_name, F_OK) == 0);
    CHECK(access(foreign, F_OK) == 0);
}

static void refused_targets(void) {
    char *fifo = path_in("fifo");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_RC(write_hello(fifo), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "FIFO") != NULL);
    struct stat st;
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK_RC(write_hello("/dev/null"), TZR_EINVAL);
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    char *dir = path_in("adir");
    CHECK(mkdir(dir, 0755) == 0);
    CHECK_RC(write_hello(dir), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "directory") != NULL);
    CHECK(!count_temps(dir));
    CHECK_RC(write_hello(path_in("missing/x.tensors")), TZR_EIO);
    CHECK(strstr(tzr_last_error(), "does not exist") != NULL);
    /* A symbolic link to a FIFO is refused as well. */
    char *link = path_in("fifo-link");
    CHECK(symlink("fifo", link) == 0);
    CHECK_RC(write_hello(link), TZR_EINVAL);
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(!count_temps(check_tmpdir()));
}

static void symlink_written_through(void) {
    char *blobs = path_in("blobs"), *snap = path_in("snap");
    CHECK(mkdir(blobs, 0755) == 0 && mkdir(snap, 0755) == 0);
    touch(path_in("blobs/h1"));
    char *link = path_in("snap/m.tensors");
    CHECK(symlink("../blobs/h1", link) == 0);
    CHECK_OK(write_hello(link));
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    size_t len = 0;
    unsigned char *b = check_read_file(path_in("blobs/h1"), &len);
    CHECK(b && len == 5 && memcmp(b, "hello", 5) == 0);
    free(b);
    CHECK(!count_temps(blobs) && !count_temps(snap));
    /* Two hops, the second absolute, the last dangling: created. */
    char abs_target[4200];
    snprintf(abs_target, sizeof abs_target, "%s/blobs/h2", check_tmpdir());
    CHECK(symlink(abs_target, path_in("blobs/to-h2")) == 0);
    CHECK(symlink("../blobs/to-h2", path_in("snap/n.tensors")) == 0);
    CHECK_OK(write_hello(path_in("snap/n.tensors")));
    CHECK(lstat(path_in("blobs/to-h2"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(abs_target, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5);
}

static void long_name(void) {
    char name[251];
    memset(name, 'q', 250);
    name[250] = 0;
    CHECK_OK(write_hello(path_in(name)));
    CHECK(access(path_in(name), F_OK) == 0);
}

/* What a signal handler does: the temporary goes, finish refuses, the
 * existing target stays. */
static void remove_temporaries_cancels(void) {
    char *target = path_in("sig.tensors");
    touch(target);
    tzr_output *o;
    CHECK_OK(tzr_output_open_file(&o, target));
    CHECK_OK(o->pwrite_at(o, "hello", 5, 0));
    CHECK(count_temps(check_tmpdir()));
    CHECK(tzr_output_remove_temporaries() == 1);
    CHECK(!count_temps(check_tmpdir()));
    CHECK_RC(o->finish(o), TZR_ECANCELED);
    o->destroy(o);
    size_t len = 0;
    unsigned char *b = check_read_file(target, &len);
    CHECK(b && len == 1);
    free(b);
    CHECK(tzr_output_remove_temporaries() == 0);
    /* Once committed, nothing is left to remove and the file stays. */
    CHECK_OK(tzr_output_open_file(&o, target));
    CHECK_OK(o->pwrite_at(o, "hello", 5, 0));
    CHECK_OK(o->finish(o));
    CHECK(tzr_output_remove_temporaries() == 0);
    o->destroy(o);
    CHECK(access(target, F_OK) == 0);
}

/* TZR_OUTPUT_DIRECT: the bytes are exactly what was written, whatever the
 * pieces' alignment, order and buffer addresses; and the file's whole
 * blocks did not go through the page cache (mincore after finish). */
static void direct_bytes_and_cache(void) {
    const size_t total = (size_t)24 << 20;
    uint8_t *want = malloc(total), *shifted = malloc(total + 1);
    CHECK(want && shifted);
    if (!want || !shifted) goto out;
    for (size_t i = 0; i < total; i++) want[i] = (uint8_t)(i * 2654435761u >> 13);
    memcpy(shifted + 1, want, total); /* unaligned copies: the bounce path */
    /* Pieces with edges off the 4 KiB grid, written out of order. */
    static const size_t cuts[] = {0, 1, 4095, 8192, 8192 + 4097, (size_t)3 << 20, ((size_t)11 << 20) + 3,
                                  ((size_t)20 << 20) - 5, (size_t)24 << 20};
    const int npieces = (int)(sizeof cuts / sizeof cuts[0]) - 1;
    static const int order[] = {5, 0, 7, 2, 6, 1, 4, 3};
    const char *path = path_in("direct.bin");
    tzr_output *o = NULL;
    CHECK_OK(tzr_output_open_file_flags(&o, path, TZR_OUTPUT_DIRECT));
    for (int k = 0; o && k < npieces; k++) {
        int i = order[k];
        const uint8_t *src = (i & 1 ? shifted + 1 : want) + cuts[i];
        CHECK_OK(o->pwrite_at(o, src, cuts[i + 1] - cuts[i], cuts[i]));
    }
    if (o) {
        CHECK_OK(o->finish(o));
        o->destroy(o);
    }
    /* Where the file system takes O_DIRECT, almost nothing is cached
     * (looked at before the file is read back, which caches it). */
    int probe = open(path, O_RDONLY | O_DIRECT), direct_fs = probe >= 0;
    if (probe >= 0) close(probe);
    if (direct_fs) {
        int fd = open(path, O_RDONLY);
        void *map = fd >= 0 ? mmap(NULL, total, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        size_t pages = total / 4096, resident = 0;
        unsigned char *vec = malloc(pages);
        CHECK(map != MAP_FAILED && vec && mincore(map, total, vec) == 0);
        for (size_t i = 0; vec && map != MAP_FAILED && i < pages; i++) resident += vec[i] & 1;
        CHECKF(resident < pages / 10, "%zu of %zu pages of a direct write are in the page cache", resident, pages);
        if (map != MAP_FAILED) munmap(map, total);
        if (fd >= 0) close(fd);
        free(vec);
    }
    size_t n = 0;
    unsigned char *back = check_read_file(path, &n);
    CHECKF(back && n == total && memcmp(back, want, total) == 0, "the direct write's bytes differ (%zu bytes read)", n);
    free(back);
    if (!direct_fs) check_skip("this file system refuses O_DIRECT: the bytes were checked, the cache could not be");
out:
    free(want);
    free(shifted);
}

/* A caller's descriptor (the Python bindings' file objects): written in
 * place from byte 0 whatever the descriptor's own offset, readable back
 * through a descriptor source after the caller closed theirs; abort cuts the
 * file back to its length at open; read-only, append-only and non-regular
 * descriptors are refused. */
static void descriptor_output_and_source(void) {
    const char *path = path_in("fd.bin");
    CHECK(check_write_file(path, "", 0) == 0);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0 && lseek(fd, 3, SEEK_SET) == 3);
    tzr_output *o = NULL;
    CHECK_OK(tzr_output_open_fd(&o, fd, "fd.bin"));
    if (o) {
        CHECK_OK(o->pwrite_at(o, "world", 5, 5));
        CHECK_OK(o->pwrite_at(o, "hello", 5, 0));
        CHECK_OK(o->finish(o));
        o->destroy(o);
    }
    CHECK(lseek(fd, 0, SEEK_CUR) == 3); /* the caller's offset is theirs */
    tzr_source *src = NULL;
    CHECK_OK(tzr_source_open_fd(&src, fd, "fd.bin", 0));
    close(fd);
    char buf[10] = {0};
    if (src) {
        CHECK(src->size == 10);
        CHECK_OK(src->read_at(src, buf, 10, 0));
        CHECK(memcmp(buf, "helloworld", 10) == 0);
        CHECK_RC(src->read_at(src, buf, 4, 8), TZR_ETRUNC);
        tzr_source_free(src);
    }
    /* abort: back to the 10 bytes it held when the output opened */
    fd = open(path, O_RDWR);
    CHECK_OK(tzr_output_open_fd(&o, fd, "fd.bin"));
    if (o) {
        CHECK_OK(o->pwrite_at(o, "0123456789abcdef", 16, 0));
        o->abort(o);
        o->destroy(o);
    }
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 10);
    close(fd);
    int ro = open(path, O_RDONLY), ap = open(path, O_WRONLY | O_APPEND), wo = open(path, O_WRONLY);
    int fifo_fds[2];
    CHECK(pipe(fifo_fds) == 0);
    CHECK_RC(tzr_output_open_fd(&o, ro, "ro"), TZR_EINVAL);
    CHECK_RC(tzr_output_open_fd(&o, ap, "append"), TZR_EINVAL);
    CHECK_RC(tzr_output_open_fd(&o, fifo_fds[1], "pipe"), TZR_EINVAL);
    CHECK_RC(tzr_source_open_fd(&src, wo, "write-only", 0), TZR_EINVAL);
    CHECK_RC(tzr_source_open_fd(&src, fifo_fds[0], "pipe", 0), TZR_EIO);
    CHECK_RC(tzr_source_open_fd(&src, -1, "bad", 0), TZR_EINVAL);
    close(ro), close(ap), close(wo), close(fifo_fds[0]), close(fifo_fds[1]);
}

int main(void) {
    RUN(temp_prefix_short);
    RUN(temp_prefix_long_fits_name_max);
    RUN(temp_pid_parse);
    RUN(stale_removed_live_kept);
    RUN(refused_targets);
    RUN(symlink_written_through);
    RUN(long_name);
    RUN(remove_temporaries_cancels);
    RUN(direct_bytes_and_cache);
    RUN(descriptor_output_and_source);
    return check_done();
}
