/* A confined program that tries the kernel interfaces an outside attack pass reached from
 * inside the IPAM confinement (issue 36), by raw system call numbers (x86_64), and says for
 * each "NAME ok" or "NAME refused ERRNO". Built and run by src/confine/tests.rs
 * (`a_confined_program_reaches_no_kernel_interface_outside_its_grants`). Its stdin is one line:
 *   FILE DIR WDIR SHMID SHMKEY SEMKEY MSGKEY KEYSERIAL KEYDESC
 * FILE: root's 0600 file outside the grants; DIR: a directory Landlock denies; WDIR: the
 * write grant; the others: System V objects and a key root made on the host. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void say(const char *name, long r) {
    if (r < 0)
        printf("%s refused %d\n", name, errno);
    else
        printf("%s ok\n", name);
    fflush(stdout);
}

struct xattr_args {
    uint64_t value;
    uint32_t size;
    uint32_t flags;
};

int main(void) {
    char file[4096], dir[4096], wdir[4096], desc[256];
    long shmid, shmkey, semkey, msgkey, key;
    if (scanf("%4095s %4095s %4095s %ld %ld %ld %ld %ld %255s", file, dir, wdir, &shmid,
              &shmkey, &semkey, &msgkey, &key, desc) != 9) {
        printf("bad input\n");
        return 2;
    }
    char mine[4200];
    snprintf(mine, sizeof mine, "%s/probe-file", wdir);
    int fd = open(mine, O_CREAT | O_WRONLY, 0644);
    say("control-write", fd);

    /* Extended attributes: the old calls, the *at calls of 6.13 (463-466), reads. */
    say("setxattr", syscall(188, file, "user.rhd-probe", "x", 1, 0));
    say("lsetxattr", syscall(189, file, "user.rhd-probe", "x", 1, 0));
    say("fsetxattr", syscall(190, fd, "user.rhd-probe", "x", 1, 0));
    struct xattr_args a = {.value = (uint64_t)(uintptr_t) "x", .size = 1, .flags = 0};
    say("setxattrat", syscall(463, AT_FDCWD, file, 0, "user.rhd-probe", &a, sizeof a));
    char buf[4096];
    struct xattr_args g = {.value = (uint64_t)(uintptr_t)buf, .size = sizeof buf, .flags = 0};
    say("getxattrat", syscall(464, AT_FDCWD, file, 0, "user.rhd-root", &g, sizeof g));
    say("listxattrat", syscall(465, AT_FDCWD, file, 0, buf, sizeof buf));
    say("removexattrat", syscall(466, AT_FDCWD, file, 0, "user.rhd-root"));
    say("getxattr", syscall(191, file, "user.rhd-root", buf, sizeof buf));
    say("listxattr", syscall(194, file, buf, sizeof buf));

    /* System V IPC of the host's. */
    say("shmget", syscall(29, shmkey, 0, 0));
    say("shmat", syscall(30, shmid, 0, 010000 /* SHM_RDONLY */));
    say("shmctl-rmid", syscall(31, shmid, 0 /* IPC_RMID */, 0));
    say("semget", syscall(64, semkey, 0, 0));
    say("msgget", syscall(68, msgkey, 0, 0));

    /* Keys. */
    say("keyctl-read", syscall(250, 11 /* KEYCTL_READ */, key, buf, sizeof buf));
    say("add_key", syscall(248, "user", "rhd-probe-planted", "x", 1, -3 /* session */));
    say("request_key", syscall(249, "user", desc, 0, 0));
    say("keyctl-join", syscall(250, 1 /* KEYCTL_JOIN_SESSION_KEYRING */, 0));

    /* Names in a directory Landlock denies: listing it, watching it. */
    int d = open(dir, O_RDONLY | O_DIRECTORY);
    say("open-denied-dir", d);
    say("getdents64", d < 0 ? (errno = EBADF, -1) : syscall(217, d, buf, sizeof buf));
    int in = syscall(294, 0); /* inotify_init1 */
    say("inotify_init1", in);
    say("inotify_add_watch", in < 0 ? (errno = EBADF, -1) : syscall(254, in, dir, 0xfff));
    say("fanotify_init", syscall(300, 0x200 /* FAN_REPORT_FID */, 0));

    /* Other ways out: a user namespace, netlink, io_uring, chmod. */
    say("unshare-user", syscall(272, 0x10000000));
    say("socket-netlink", syscall(41, 16, 3, 0));
    memset(buf, 0, sizeof buf);
    say("io_uring_setup", syscall(425, 1, buf));
    say("fchmodat2", syscall(452, AT_FDCWD, file, 0666, 0));
    printf("done\n");
    return 0;
}
