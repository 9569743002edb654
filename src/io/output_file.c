/* Atomic local output: write a temporary file beside the target, fsync it,
 * rename it over the target, fsync the directory. Until finish the target
 * path is untouched; abort and failures remove the temporary file. The
 * target is checked before anything is written: an existing one must be a
 * regular file, reached through any symbolic links (which stay links).
 * TZR_OUTPUT_DIRECT writes the whole blocks (4 KiB, or the page or
 * file-system block when larger) of each write through a second, O_DIRECT
 * descriptor. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "output_temp.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct file_output {
    tzr_output base;
    int fd;
    int slot;   /* registry slot of tmp, -1 when unregistered */
    char *path; /* as given, for messages */
    char *real; /* after symbolic links: what finish replaces */
    char *tmp;
    _Atomic uint64_t unflushed; /* bytes written since writeback was last started */
    int dfd;                    /* O_DIRECT descriptor of tmp; -1: none */
    size_t align;               /* block the two paths never share (see DIRECT_ALIGN_MAX) */
    _Atomic int direct_off;     /* set when the file system refused an O_DIRECT write */
    int noreplace;              /* TZR_OUTPUT_NOREPLACE */
} file_output;

/* Start writeback every this many bytes, so the disk works while the
 * writer hashes and copies, and the final fsync has little left to do
 * (as with dd, whose writes the flusher would otherwise start late). */
#define WRITEBACK_EVERY ((uint64_t)32 << 20)

static int buffered_pwrite(file_output *f, const char *p, size_t len, uint64_t off);

/* O_DIRECT needs offset, length and buffer aligned to the device's block;
 * and a buffered edge must not share a page or file-system block with a
 * direct block (the kernel could not drop that page after the direct write,
 * and its writeback could overwrite the direct bytes). So the unit is the
 * largest of 4 KiB, the page size and st_blksize, at most this (beyond it
 * the output stays buffered). Unaligned sources are copied through a bounce
 * buffer of BOUNCE_BYTES, one per thread. */
#define DIRECT_ALIGN_MAX ((size_t)1 << 20)
#define BOUNCE_BYTES ((size_t)8 << 20)

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
static void bounce_init(void) { pthread_key_create(&bounce_key, free); }
static char *thread_bounce(void) {
    pthread_once(&bounce_once, bounce_init);
    char *b = pthread_getspecific(bounce_key);
    if (!b && posix_memalign((void **)&b, DIRECT_ALIGN_MAX, BOUNCE_BYTES) == 0) pthread_setspecific(bounce_key, b);
    return b;
}

/* The aligned blocks [off, off + len) (both aligned) with O_DIRECT. Sets
 * *refused when the file system refuses (the caller writes them buffered
 * instead); returns 0 or a TZR code. */
static int direct_pwrite(file_output *f, const char *p, size_t len, uint64_t off, int *refused) {
    *refused = 0;
    char *bounce = ((uintptr_t)p % f->align) ? thread_bounce() : NULL;
    if ((uintptr_t)p % f->align && !bounce) return (*refused = 1), 0;
    while (len > 0) {
        size_t n = bounce && len > BOUNCE_BYTES ? BOUNCE_BYTES : len;
        const char *from = p;
        if (bounce) memcpy(bounce, p, n), from = bounce;
        ssize_t w = pwrite(f->dfd, from, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EINVAL || errno == EOPNOTSUPP)) return (*refused = 1), 0;
        if (w < 0)
            return tzr_fail(TZR_EIO, "%s: write of %zu bytes at offset %llu failed: %s", f->path, n,
                            (unsigned long long)off, strerror(errno));
        if ((size_t)w % f->align) /* a short direct write: finish the block through the cache */
            return buffered_pwrite(f, p + w, len - (size_t)w, off + (uint64_t)w);
        p += w, len -= (size_t)w, off += (uint64_t)w;
    }
    return 0;
}

static int fo_pwrite(tzr_output *o, const void *buf, size_t len, uint64_t off) {
    file_output *f = (file_output *)o;
    const char *p = buf;
    if (f->dfd >= 0 && !atomic_load(&f->direct_off) && len >= 2 * f->align) {
        /* Head and tail to the next block edges through the cache (each
         * byte is written once, so no other write shares these blocks'
         * direct part), the whole blocks between them direct. */
        uint64_t a = (off + f->align - 1) / f->align * f->align;
        uint64_t b = (off + len) / f->align * f->align;
        int rc = buffered_pwrite(f, p, (size_t)(a - off), off), refused = 0;
        if (!rc) rc = direct_pwrite(f, p + (a - off), (size_t)(b - a), a, &refused);
        if (!rc && refused) {
            atomic_store(&f->direct_off, 1);
            rc = buffered_pwrite(f, p + (a - off), (size_t)(b - a), a);
        }
        if (!rc) rc = buffered_pwrite(f, p + (b - off), (size_t)(off + len - b), b);
        return rc;
    }
    return buffered_pwrite(f, p, len, off);
}

static int buffered_pwrite(file_output *f, const char *p, size_t len, uint64_t off) {
    while (len > 0) {
        ssize_t n = pwrite(f->fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return tzr_fail(TZR_EIO, "%s: write of %zu bytes at offset %llu failed: %s", f->path,
                            len, (unsigned long long)off, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
        if (atomic_fetch_add(&f->unflushed, (uint64_t)n) + (uint64_t)n >= WRITEBACK_EVERY) {
            atomic_store(&f->unflushed, 0);
            sync_file_range(f->fd, 0, 0, SYNC_FILE_RANGE_WRITE); /* a hint: errors come from fsync */
        }
    }
    return 0;
}

/* Length of path's directory part, trailing slash included (0: none). */
static size_t dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path + 1) : 0;
}

static char *dir_of(const char *path) {
    size_t n = dir_len(path);
    if (n == 0) return strdup(".");
    char *d = strndup(path, n > 1 ? n - 1 : n); /* keep "/" for the root */
    return d;
}

static int fsync_dir_of(const char *path) {
    char *dir = dir_of(path);
    if (!dir) return tzr_fail(TZR_ENOMEM, "out of memory");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (dfd < 0) return 0; /* best effort: the rename already happened */
    fsync(dfd);
    close(dfd);
    return 0;
}

const char *tzr_file_kind(unsigned m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* Follow symbolic links from path (dangling ones too: the file they name
 * gets created) to the name finish renames onto; check that it is absent
 * or a regular file and that its directory exists. */
static int resolve_target(const char *path, char **real) {
    char *cur = strdup(path);
    if (!cur) return tzr_fail(TZR_ENOMEM, "out of memory");
    struct stat st;
    int exists = 0, rc = 0;
    for (int hops = 0;; hops++) {
        if (lstat(cur, &st) != 0) {
            if (errno != ENOENT) rc = tzr_fail(TZR_EIO, "%s: cannot stat '%s': %s", path, cur, strerror(errno));
            break;
        }
        exists = 1;
        if (!S_ISLNK(st.st_mode)) break;
        if (hops == 40) {
            rc = tzr_fail(TZR_EIO, "%s: too many levels of symbolic links", path);
            break;
        }
        char link[4096];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0 || n == (ssize_t)sizeof link - 1) {
            rc = tzr_fail(TZR_EIO, "%s: cannot read symbolic link '%s': %s", path, cur,
                          n < 0 ? strerror(errno) : "target too long");
            break;
        }
        link[n] = 0;
        size_t dl = link[0] == '/' ? 0 : dir_len(cur);
        char *next = malloc(dl + (size_t)n + 1);
        if (!next) {
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
            break;
        }
        memcpy(next, cur, dl);
        memcpy(next + dl, link, (size_t)n + 1);
        free(cur);
        cur = next;
        exists = 0;
    }
    const char *via = strcmp(cur, path) ? cur : NULL;
    if (!rc && exists && !S_ISREG(st.st_mode))
        rc = tzr_fail(TZR_EINVAL, "%s%s%s%s is %s; refusing to replace it with a file", path, via ? " (-> " : "",
                      via ? via : "", via ? ")" : "", tzr_file_kind(st.st_mode));
    if (!rc && !exists) {
        char *dir = dir_of(cur);
        struct stat ds;
        if (!dir) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        else if (stat(dir, &ds) != 0)
            rc = tzr_fail(TZR_EIO, "%s: directory '%s' %s", path, dir,
                          errno == ENOENT ? "does not exist" : strerror(errno));
        else if (!S_ISDIR(ds.st_mode))
            rc = tzr_fail(TZR_EIO, "%s: '%s' is not a directory", path, dir);
        free(dir);
    }
    if (rc) free(cur);
    else *real = cur;
    return rc;
}

static void drop_temp(file_output *f) {
    if (f->dfd >= 0) close(f->dfd);
    f->dfd = -1;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp && tzr_temp_claim(f->slot)) unlink(f->tmp);
    f->slot = -1;
    free(f->tmp);
    f->tmp = NULL;
}

/* The temporary file onto the target: a plain rename, or with noreplace
 * one that fails EEXIST when something is there (two writers to one new
 * target: the later must not silently replace the earlier). Where
 * renameat2 is unsupported, link (fails EEXIST too) then unlink. */
static int publish(file_output *f) {
    if (!f->noreplace) return rename(f->tmp, f->real);
    if (renameat2(AT_FDCWD, f->tmp, AT_FDCWD, f->real, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
    if (link(f->tmp, f->real) != 0) return -1;
    unlink(f->tmp);
    return 0;
}

static int fo_finish(tzr_output *o) {
    file_output *f = (file_output *)o;
    if (!f->tmp) return tzr_fail(TZR_EINVAL, "%s: output already finished or aborted", f->path);
    if (fsync(f->fd) != 0) {
        int e = errno;
        drop_temp(f);
        return tzr_fail(TZR_EIO, "%s: fsync failed: %s", f->path, strerror(e));
    }
    close(f->fd);
    f->fd = -1;
    if (f->dfd >= 0) close(f->dfd);
    f->dfd = -1;
    /* The target may have changed since open: still never replace a
     * device, FIFO or directory. */
    struct stat st;
    if (lstat(f->real, &st) == 0 && !S_ISREG(st.st_mode)) {
        drop_temp(f);
        return tzr_fail(TZR_EINVAL, "%s became %s while it was written; not replaced", f->path,
                        S_ISLNK(st.st_mode) ? "a symbolic link" : tzr_file_kind(st.st_mode));
    }
    if (!tzr_temp_claim(f->slot)) { /* a signal handler removed the file */
        f->slot = -1;
        free(f->tmp);
        f->tmp = NULL;
        return tzr_fail(TZR_ECANCELED, "%s: interrupted; not written", f->path);
    }
    f->slot = -1;
    if (publish(f) != 0) {
        int e = errno;
        unlink(f->tmp);
        free(f->tmp);
        f->tmp = NULL;
        if (e == EEXIST)
            return tzr_fail(TZR_EIO, "%s exists (created while this was written, by another writer?); not replaced, "
                            "nothing written", f->path);
        return tzr_fail(TZR_EIO, "%s: rename from temporary file failed: %s", f->path, strerror(e));
    }
    free(f->tmp);
    f->tmp = NULL;
    return fsync_dir_of(f->real);
}

static void fo_abort(tzr_output *o) { drop_temp((file_output *)o); }

static void fo_destroy(tzr_output *o) {
    file_output *f = (file_output *)o;
    if (!f) return;
    drop_temp(f);
    free(f->path);
    free(f->real);
    free(f);
}

/* tmp = DIR/.NAME.HASH.PID.XXXXXX.tmp beside real (same directory, so the
 * rename is atomic); stale ones of dead processes are removed first. */
static int make_temp(file_output *f) {
    size_t dl = dir_len(f->real);
    char prefix[TZR_TEMP_NAME_KEEP + 16];
    if (tzr_temp_prefix(prefix, sizeof prefix, f->real + dl) < 0)
        return tzr_fail(TZR_EINVAL, "%s: bad output name", f->path);
    char *dir = dir_of(f->real);
    if (!dir) return tzr_fail(TZR_ENOMEM, "out of memory");
    tzr_temp_remove_stale(dir, prefix);
    free(dir);
    size_t n = dl + strlen(prefix) + 32;
    if (!(f->tmp = malloc(n))) return tzr_fail(TZR_ENOMEM, "out of memory");
    snprintf(f->tmp, n, "%.*s%s%ld.XXXXXX.tmp", (int)dl, f->real, prefix, (long)getpid());
    f->fd = mkostemps(f->tmp, 4, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        return tzr_fail(TZR_EIO, "%s: cannot create temporary file: %s", f->path, strerror(e));
    }
    f->slot = tzr_temp_register(f->tmp);
    /* Held until close: stale removal skips files a live writer holds,
     * whatever pid namespace it runs in. */
    flock(f->fd, LOCK_EX | LOCK_NB);
    /* mkstemp makes 0600; give the usual umask-derived mode. */
    mode_t um = umask(0);
    umask(um);
    fchmod(f->fd, 0666 & ~um);
    return 0;
}

int tzr_output_open_file(tzr_output **out, const char *path) { return tzr_output_open_file_flags(out, path, 0); }

int tzr_output_open_file_flags(tzr_output **out, const char *path, unsigned flags) {
    *out = NULL;
    if (!path || !*path) return tzr_fail(TZR_EINVAL, "empty output path");
    if (flags & ~(unsigned)(TZR_OUTPUT_DIRECT | TZR_OUTPUT_NOREPLACE))
        return tzr_fail(TZR_EINVAL, "%s: unknown output flags %#x", path, flags);
    file_output *f = calloc(1, sizeof *f);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    f->fd = f->dfd = -1;
    f->slot = -1;
    f->noreplace = !!(flags & TZR_OUTPUT_NOREPLACE);
    int rc = (f->path = strdup(path)) ? 0 : tzr_fail(TZR_ENOMEM, "out of memory");
    if (!rc) rc = resolve_target(path, &f->real);
    if (!rc) rc = make_temp(f);
    /* A second descriptor on the same file for the aligned blocks; where
     * the file system has no O_DIRECT (tmpfs, some FUSE) it stays -1. */
    if (!rc && (flags & TZR_OUTPUT_DIRECT)) {
        struct stat st;
        long page = sysconf(_SC_PAGESIZE);
        f->align = 4096;
        if (page > 0 && (size_t)page > f->align) f->align = (size_t)page;
        if (fstat(f->fd, &st) == 0 && st.st_blksize > 0 && (size_t)st.st_blksize > f->align)
            f->align = (size_t)st.st_blksize;
        if (f->align <= DIRECT_ALIGN_MAX && (f->align & (f->align - 1)) == 0)
            f->dfd = open(f->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
    }
    if (rc) {
        fo_destroy(&f->base);
        return rc;
    }
    f->base.pwrite_at = fo_pwrite;
    f->base.struct_size = sizeof f->base;
    f->base.finish = fo_finish;
    f->base.abort = fo_abort;
    f->base.destroy = fo_destroy;
    f->base.name = f->path;
    f->base.ctx = f;
    *out = &f->base;
    return 0;
}
