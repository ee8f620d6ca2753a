/* Fault injection for the checkpoint tests, loaded with LD_PRELOAD.
 *
 * Counts the calls that change files (open for writing, write, rename, mkdir, unlink,
 * fsync, ...) made by any thread once armed with fault_arm(at, how, log_fd, trigger), and
 * at the at-th one either kills the process with SIGKILL (how == 1) or makes it and every
 * later call that needs space fail with ENOSPC (how == 2); how == 0 only counts. With a
 * trigger, counting starts at the first call on a path containing it. Python arms it
 * through ctypes.CDLL(None). Calls that free space (unlink, rmdir) never fail.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long armed_at = 0; /* 0: disarmed */
static int mode = 0;
static long counter = 0;
static int log_fd = -1;
static char trigger[256];
static int triggered = 1;

void fault_arm(long at, int how, int fd, const char *from) {
    counter = 0; mode = how; log_fd = fd;
    trigger[0] = 0;
    if (from) { strncpy(trigger, from, sizeof trigger - 1); trigger[sizeof trigger - 1] = 0; }
    __atomic_store_n(&triggered, trigger[0] == 0, __ATOMIC_SEQ_CST);
    armed_at = at;
}
void fault_disarm(void) { armed_at = 0; }
long fault_count(void) { return counter; }

/* Counts one call; returns 1 when it must fail with ENOSPC. */
static int hit(const char *op, const char *what, int needs_space) {
    if (armed_at == 0) return 0;
    if (!__atomic_load_n(&triggered, __ATOMIC_SEQ_CST)) {
        if (!what || !strstr(what, trigger)) return 0;
        __atomic_store_n(&triggered, 1, __ATOMIC_SEQ_CST);
    }
    long n = __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    if (log_fd >= 0) {
        char line[600];
        int len = snprintf(line, sizeof line, "%ld %s %s\n", n, op, what ? what : "");
        if (len > 0) syscall(SYS_write, log_fd, line, len < (int)sizeof line ? len : (int)sizeof line - 1);
    }
    if (mode == 1 && n >= armed_at) kill(getpid(), SIGKILL);
    return mode == 2 && n >= armed_at && needs_space;
}

static int regular(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

#define REAL(name) static __typeof__(name) *real_##name; \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)
#define NOSPC do { errno = ENOSPC; return -1; } while (0)
#define WRITES(flags) ((flags) & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC))

#define OPEN(fn) \
int fn(const char *path, int flags, ...) { \
    mode_t m = 0; \
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); m = va_arg(ap, int); va_end(ap); } \
    REAL(fn); \
    if (WRITES(flags) && hit(#fn, path, flags & O_CREAT)) NOSPC; \
    return real_##fn(path, flags, m); }
OPEN(open)
OPEN(open64)

#define OPENAT(fn) \
int fn(int dirfd, const char *path, int flags, ...) { \
    mode_t m = 0; \
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); m = va_arg(ap, int); va_end(ap); } \
    REAL(fn); \
    if (WRITES(flags) && hit(#fn, path, flags & O_CREAT)) NOSPC; \
    return real_##fn(dirfd, path, flags, m); }
OPENAT(openat)
OPENAT(openat64)

ssize_t write(int fd, const void *b, size_t n) {
    REAL(write); if (regular(fd) && hit("write", "", 1)) NOSPC; return real_write(fd, b, n); }
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
    REAL(pwrite); if (regular(fd) && hit("pwrite", "", 1)) NOSPC; return real_pwrite(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
    REAL(pwrite64); if (regular(fd) && hit("pwrite64", "", 1)) NOSPC; return real_pwrite64(fd, b, n, o); }
ssize_t writev(int fd, const struct iovec *v, int c) {
    REAL(writev); if (regular(fd) && hit("writev", "", 1)) NOSPC; return real_writev(fd, v, c); }
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t o) {
    REAL(pwritev); if (regular(fd) && hit("pwritev", "", 1)) NOSPC; return real_pwritev(fd, v, c, o); }
int ftruncate(int fd, off_t l) {
    REAL(ftruncate); if (hit("ftruncate", "", 1)) NOSPC; return real_ftruncate(fd, l); }
int ftruncate64(int fd, off_t l) {
    REAL(ftruncate64); if (hit("ftruncate64", "", 1)) NOSPC; return real_ftruncate64(fd, l); }
int fallocate(int fd, int m, off_t o, off_t l) {
    REAL(fallocate); if (hit("fallocate", "", 1)) NOSPC; return real_fallocate(fd, m, o, l); }
int mkdir(const char *p, mode_t m) { REAL(mkdir); if (hit("mkdir", p, 1)) NOSPC; return real_mkdir(p, m); }
int mkdirat(int d, const char *p, mode_t m) {
    REAL(mkdirat); if (hit("mkdirat", p, 1)) NOSPC; return real_mkdirat(d, p, m); }
int fsync(int fd) { REAL(fsync); hit("fsync", "", 0); return real_fsync(fd); }
int fdatasync(int fd) { REAL(fdatasync); hit("fdatasync", "", 0); return real_fdatasync(fd); }
int rename(const char *a, const char *b) { REAL(rename); hit("rename", a, 0); return real_rename(a, b); }
int renameat(int d1, const char *a, int d2, const char *b) {
    REAL(renameat); hit("renameat", a, 0); return real_renameat(d1, a, d2, b); }
int renameat2(int d1, const char *a, int d2, const char *b, unsigned f) {
    REAL(renameat2); hit("renameat2", a, 0); return real_renameat2(d1, a, d2, b, f); }
int link(const char *a, const char *b) { REAL(link); if (hit("link", b, 1)) NOSPC; return real_link(a, b); }
int linkat(int d1, const char *a, int d2, const char *b, int f) {
    REAL(linkat); if (hit("linkat", b, 1)) NOSPC; return real_linkat(d1, a, d2, b, f); }
int unlink(const char *p) { REAL(unlink); hit("unlink", p, 0); return real_unlink(p); }
int unlinkat(int d, const char *p, int f) { REAL(unlinkat); hit("unlinkat", p, 0); return real_unlinkat(d, p, f); }
int rmdir(const char *p) { REAL(rmdir); hit("rmdir", p, 0); return real_rmdir(p); }
