/* statx without AT_NO_AUTOMOUNT where the kernel refuses it.
 *
 * gVisor's 2022 sentry (Debian's runsc) answers statx(2) with EINVAL when the flags carry
 * AT_NO_AUTOMOUNT, which coreutils' ls and stat always pass: every `ls` in a gVisor session
 * fails with "Invalid argument". Nothing automounts in a session, so the flag changes
 * nothing there; this retries without it, and only after that exact refusal (on runc the
 * first call succeeds and this costs nothing). Loaded through /etc/ld.so.preload.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);
    if (r == -1 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT)) {
        r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
    }
    return (int)r;
}
