/* Local file source: pread, safe from many threads at once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define DIRECT_ALIGN 4096

typedef struct file_source {
    tzr_source base;
    int fd;
    int direct_fd;     /* O_DIRECT descriptor, -1 until asked for */
    _Atomic int direct;
    char *path;        /* for messages */
    char *direct_path; /* what O_DIRECT reopens */
} file_source;

static int pread_full(file_source *f, int fd, uint8_t *p, size_t len, uint64_t at);

/* O_DIRECT for the aligned middle of a request whose buffer and offset
 * are congruent modulo the alignment; head and tail go through the cache. */
static int file_read_at(tzr_source *s, void *buf, size_t len, uint64_t off) {
    file_source *f = (file_source *)s;
    uint8_t *p = buf;
    if (f->direct && len >= 4 * DIRECT_ALIGN && ((uintptr_t)p - off) % DIRECT_ALIGN == 0 &&
        off + len <= s->size) {
        size_t head = (size_t)((DIRECT_ALIGN - off % DIRECT_ALIGN) % DIRECT_ALIGN);
        size_t mid = (len - head) / DIRECT_ALIGN * DIRECT_ALIGN;
        int rc = head ? pread_full(f, f->fd, p, head, off) : 0;
        if (!rc) rc = pread_full(f, f->direct_fd, p + head, mid, off + head);
        if (!rc && len > head + mid) rc = pread_full(f, f->fd, p + head + mid, len - head - mid, off + head + mid);
        return rc;
    }
    return pread_full(f, f->fd, p, len, off);
}

static int pread_full(file_source *f, int fd, uint8_t *p, size_t len, uint64_t off) {
    uint64_t at = off;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)at);
        if (n < 0) {
            if (errno == EINTR) continue;
            return tzr_fail(TZR_EIO, "%s: read of %zu bytes at offset %llu failed: %s", f->path, len,
                            (unsigned long long)at, strerror(errno));
        }
        if (n == 0)
            return tzr_fail(TZR_ETRUNC, "%s: file ends at offset %llu, %zu more bytes expected",
                            f->path, (unsigned long long)at, len);
        p += n;
        len -= (size_t)n;
        at += (uint64_t)n;
    }
    return 0;
}

/* Page-cache residency by mincore over a mapping; samples at most 256
 * pages so the check stays cheap on large ranges. */
static int file_is_cached(tzr_source *s, uint64_t off, uint64_t len) {
    file_source *f = (file_source *)s;
    long page = sysconf(_SC_PAGESIZE);
    if (len == 0 || off >= s->size) return 1;
    if (len > s->size - off) len = s->size - off;
    uint64_t start = off - off % (uint64_t)page;
    uint64_t span = off + len - start;
    void *map = mmap(NULL, span, PROT_READ, MAP_SHARED, f->fd, (off_t)start);
    if (map == MAP_FAILED) return 0;
    /* Ask about 256 sample pages, not every page: mincore's cost grows
     * with the pages it reports on (milliseconds for a few GiB). They are
     * asked 8 neighbours a call: a call each cost ~0.7 ms at every load
     * (a system call is microseconds on the VMs we measured). */
    enum { RUN = 8, RUNS = 32 };
    uint64_t pages = (span + (uint64_t)page - 1) / (uint64_t)page;
    uint64_t step = pages > RUN * RUNS ? pages / RUNS : RUN, seen = 0, hit = 0;
    int cached = 0, ok = 1;
    for (uint64_t i = 0; i < pages && ok; i += step) {
        unsigned char v[RUN] = {0};
        uint64_t n = pages - i < RUN ? pages - i : RUN;
        ok = mincore((uint8_t *)map + i * (uint64_t)page, (size_t)(n * (uint64_t)page), v) == 0;
        for (uint64_t k = 0; k < n; k++) hit += v[k] & 1;
        seen += n;
    }
    if (ok) cached = hit * 10 >= seen * 9; /* >= 90% resident */
    munmap(map, span);
    return cached;
}

/* preadv in batches of IOV_MAX, resuming after short reads. */
static int file_readv_at(tzr_source *s, const tzr_iovec *iov, int iovcnt, uint64_t off) {
    file_source *f = (file_source *)s;
    struct iovec v[IOV_MAX];
    int i = 0;
    size_t skip = 0; /* bytes of iov[i] already read */
    while (i < iovcnt) {
        int n = 0;
        size_t want = 0;
        for (int k = i; k < iovcnt && n < IOV_MAX; k++, n++) {
            size_t sk = k == i ? skip : 0;
            v[n].iov_base = (uint8_t *)iov[k].base + sk;
            v[n].iov_len = iov[k].len - sk;
            want += v[n].iov_len;
        }
        ssize_t got = preadv(f->fd, v, n, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return tzr_fail(TZR_EIO, "%s: read of %zu bytes at offset %llu failed: %s", f->path, want,
                            (unsigned long long)off, strerror(errno));
        }
        if (got == 0)
            return tzr_fail(TZR_ETRUNC, "%s: file ends at offset %llu, %zu more bytes expected", f->path,
                            (unsigned long long)off, want);
        off += (uint64_t)got;
        size_t left = (size_t)got;
        while (left > 0 && i < iovcnt) {
            size_t in = iov[i].len - skip;
            if (left >= in) {
                left -= in;
                i++;
                skip = 0;
            } else {
                skip += left;
                left = 0;
            }
        }
        while (i < iovcnt && iov[i].len == 0) i++;
    }
    return 0;
}

static int file_set_direct(tzr_source *s, int on) {
    file_source *f = (file_source *)s;
    if (on && f->direct_fd < 0) {
        f->direct_fd = open(f->direct_path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (f->direct_fd < 0)
            return tzr_fail(TZR_ENOTSUP, "%s: O_DIRECT refused: %s", f->path, strerror(errno));
    }
    f->direct = on && f->direct_fd >= 0;
    return 0;
}

static void file_destroy(tzr_source *s) {
    file_source *f = (file_source *)s;
    if (f->fd >= 0) close(f->fd);
    if (f->direct_fd >= 0) close(f->direct_fd);
    free(f->path);
    free(f->direct_path);
    free(f);
}

/* A source over fd (owned from now on; closed on failure too), named path
 * in messages; direct_path is what set_direct reopens with O_DIRECT. */
static int wrap_fd(tzr_source **out, int fd, const char *path, const char *direct_path, unsigned flags) {
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tzr_fail(TZR_EIO, "%s: not a regular file (%s): checkpoints are read at offsets", path,
                        tzr_file_kind(st.st_mode));
    }
    file_source *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path)) || !(f->direct_path = strdup(direct_path))) {
        if (f) free(f->path);
        free(f);
        close(fd);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    f->fd = fd;
    f->direct_fd = -1;
    f->base.read_at = file_read_at;
    f->base.struct_size = sizeof f->base;
    f->base.set_direct = file_set_direct;
    f->base.readv_at = file_readv_at;
    f->base.direct_align = DIRECT_ALIGN;
    f->base.destroy = file_destroy;
    f->base.is_cached = file_is_cached;
    f->base.size = (uint64_t)st.st_size;
    f->base.name = f->path;
    f->base.ctx = f;
    if ((flags & TZR_SOURCE_DIRECT) && file_set_direct(&f->base, 1)) {
        file_destroy(&f->base);
        return TZR_ENOTSUP;
    }
    *out = &f->base;
    return 0;
}

int tzr_source_open_file(tzr_source **out, const char *path, unsigned flags) {
    *out = NULL;
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer
     * forever; wrap_fd then refuses it. A regular file reads as before
     * once the flag is off again. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return tzr_fail(e == ENOENT ? TZR_ENOTFOUND : TZR_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return wrap_fd(out, fd, path, path, flags);
}

int tzr_source_open_fd(tzr_source **out, int fd, const char *name, unsigned flags) {
    *out = NULL;
    if (!name) name = "(file descriptor)";
    /* A duplicate: the source reads with pread, so the caller's offset and
     * descriptor stay the caller's, and closing theirs does not end ours. */
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return tzr_fail(TZR_EINVAL, "%s: descriptor %d: %s", name, fd, strerror(errno));
    int acc = fcntl(dup, F_GETFL);
    if (acc >= 0 && (acc & O_ACCMODE) == O_WRONLY) {
        close(dup);
        return tzr_fail(TZR_EINVAL, "%s: descriptor %d is open for writing only", name, fd);
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", dup);
    return wrap_fd(out, dup, name, proc, flags);
}
