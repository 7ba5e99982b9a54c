/*
 * The warm-pool launcher: runs exactly one command in its (single-use) container.
 *
 * Started as the container's main process (under tini), with the same user and
 * restrictions as the command.  It listens on a Unix socket inside the run's own
 * workspace mount, accepts exactly one connection, then removes the socket so nothing
 * else can reach it.  Written in C so that a warm container is ready, and a command
 * starts, in about a millisecond.
 *
 * Request (host -> launcher): u32 count, then count fields of u32 length + bytes, all
 * big-endian: command, cwd, stdin path ("" for none), then "NAME=value" environment
 * entries (merged over the launcher's own environment, as Docker merges a container's
 * environment over the image's).
 *
 * Frames (launcher -> host): 1 byte kind + u32 big-endian length + payload:
 *   'O' stdout bytes, 'E' stderr bytes, 'X' {"exit_code": N} (last).
 *
 * When the command's main process exits, whatever it left behind is killed, so the
 * workspace is final when the exit frame arrives -- as in a container per run, which
 * ends with its main process.  With --container (the runtime passes it; the launcher
 * is then the main process of a container's own PID namespace) that is
 * kill(-1, SIGKILL): every process of the container but PID 1 and this one.  Without
 * it only the command's process group is killed: kill(-1) anywhere else would kill
 * every process its user may signal.  The host still kills and removes the container.
 *
 * The command cannot reach the launcher: the launcher makes itself non-dumpable
 * (PR_SET_DUMPABLE 0: no ptrace attach, no /proc/<pid>/mem or fd access by the same
 * uid; gVisor honours it for ptrace and mem, and its /proc cannot reopen the socket to
 * the host either), and the command runs under a seccomp filter, stacked on the engine's profile,
 * that refuses ptrace, process_vm_readv/writev, io_uring, system calls of any other ABI,
 * and AF_VSOCK sockets (a network namespace does not cover vsock; --allow-vsock lifts
 * that).  io_uring is refused because its IORING_OP_SOCKET makes sockets without the
 * socket() call the filter inspects.  A command that signals the launcher (same uid)
 * only ends its own run: the host then reports no exit status and kills the container.
 *
 * `launcher [--allow-vsock] --exec -- PROGRAM ARGS...` applies the same filter and
 * execs PROGRAM: the per-run (cold) container starts its command that way, so one
 * piece of code guards both paths.
 *
 * The exec policy.  When a command-policy rule with allow/deny applies to the run, the
 * host passes it (the request's fourth field; `--exec --policy FILE` in exec mode, a
 * file the launcher reads and removes before anything of the command exists) and the
 * launcher becomes the command's exec supervisor: it forks the command and traces it
 * and everything it starts (PTRACE_SEIZE with TRACEEXEC, TRACEFORK, TRACEVFORK,
 * TRACECLONE and EXITKILL: the launcher's end kills every tracee).  At each exec stop
 * (the kernel has loaded the new image, its first instruction has not run) the file
 * the kernel executes, /proc/<pid>/exe, is judged by identity: its device and inode
 * against the files the rule's names resolve to in this sandbox (bare names in the
 * system bin folders, paths from the skill's folder), so hard links and symlink
 * aliases are the same program; for denied programs and the dynamic loader also by
 * content (a byte-identical copy, a memfd).  Running the dynamic loader directly is
 * refused.  A refused exec kills every tracee at once and ends the run with exit code
 * 126 and a verdict naming the rule: in the exit frame ("policy_denied_exec"), or in
 * exec mode in the file `<dir of FILE>/.policy-verdict-<nonce>` (the nonce is known only
 * to the host and the launcher).  The command's filter then also refuses clone3
 * (ENOSYS: libc falls back to clone) and clone with CLONE_UNTRACED (which escapes
 * tracing), and ptrace as always: a tracee cannot trace or detach anything.
 *
 * The egress bridge.  `--egress PORT=SOCKET` (exec mode; the runtime passes it only for a
 * run with an egress grant) listens on 127.0.0.1:PORT before anything of the command
 * exists, then forks a bridge that relays each connection accepted there to a new
 * connection to the Unix socket SOCKET (the service's egress gateway, bind-mounted into
 * the sandbox), bytes as they are, both ways, half-closes passed on.  The sandbox keeps
 * only loopback: HTTP(S)_PROXY points at this port.  The bridge holds nothing the command
 * lacks -- the socket is visible to the command too and the gateway knows a run only by
 * the credentials in its proxy URL -- so a command that kills or replaces it only loses
 * its own egress.  It is non-dumpable, under the command's seccomp filter, holds none of
 * the command's descriptors (its stdio is /dev/null) and dies with its parent
 * (PR_SET_PDEATHSIG).  Without the option nothing listens and nothing is forked.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/mman.h>
#include <limits.h>
#include <linux/sched.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FIELDS 4096
#define MAX_FIELD (1u << 20)
#define CHUNK 65536

extern char **environ;

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define X32_BIT 0x40000000u
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#define X32_BIT 0u
#else
#error "the launcher's seccomp filter knows x86_64 and aarch64"
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

#define DENY BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* Refuse what would let the command reach the launcher or leave the network namespace;
 * `traced`: also what would start a process the exec supervisor does not see. */
static int restrict_command(int allow_vsock, int traced) {
    struct sock_filter head[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        DENY, /* another ABI (i386, arm32): none of it is needed, all of it refused */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT ? X32_BIT : 0xffffffffu, 0, 1),
        DENY, /* the x32 ABI */
    };
    struct sock_filter untraced[] = {
        /* clone3's flags are in memory a filter cannot read: ENOSYS, libc falls back to clone */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_UNTRACED, 0, 1),
        DENY, /* a child no tracer may follow */
        ALLOW,
    };
    struct sock_filter tail[] = {
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ptrace, 0, 1),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
        DENY,
        /* io_uring (the engine's profile allows it before Docker 25) makes sockets
         * (IORING_OP_SOCKET) without the socket system call this filter checks. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __NR_io_uring_setup, 0, 2),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, __NR_io_uring_register, 1, 0),
        DENY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allow_vsock ? 0xffffffffu : AF_VSOCK, 0, 1),
        DENY,
        ALLOW,
    };
    struct sock_filter filter[sizeof head / sizeof head[0] + sizeof untraced / sizeof untraced[0] +
                              sizeof tail / sizeof tail[0]];
    size_t n = 0;
    memcpy(filter, head, sizeof head);
    n += sizeof head / sizeof head[0];
    if (traced) {
        memcpy(filter + n, untraced, sizeof untraced);
        n += sizeof untraced / sizeof untraced[0];
    }
    memcpy(filter + n, tail, sizeof tail);
    n += sizeof tail / sizeof tail[0];
    struct sock_fprog program = {.len = (unsigned short)n, .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program);
}

static void die(const char *what) {
    perror(what);
    _exit(111);
}


static int read_exact(int fd, void *buf, size_t size) {
    char *p = buf;
    while (size) {
        ssize_t n = read(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t size) {
    const char *p = buf;
    while (size) {
        ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static uint32_t be32(const unsigned char *b) {
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

static int frame(int conn, char kind, const void *data, uint32_t size) {
    unsigned char head[5] = {(unsigned char)kind, size >> 24, size >> 16, size >> 8, size};
    if (write_all(conn, head, 5)) return -1;
    return size ? write_all(conn, data, size) : 0;
}

/* Read one field of the request into a fresh NUL-terminated buffer (its size in `size`). */
static char *read_field(int conn, uint32_t *size) {
    unsigned char len[4];
    if (read_exact(conn, len, 4)) return NULL;
    *size = be32(len);
    if (*size > MAX_FIELD) return NULL;
    char *field = malloc(*size + 1);
    if (!field || read_exact(conn, field, *size)) return NULL;
    field[*size] = '\0';
    return field;
}

static size_t name_length(const char *entry) {
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* The request's entries, then the launcher's own ones the request does not set. */
static char **merge_environment(char **given, size_t count) {
    size_t own = 0;
    while (environ[own]) own++;
    char **env = calloc(count + own + 1, sizeof(char *));
    if (!env) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) env[n++] = given[i];
    for (size_t i = 0; i < own; i++) {
        size_t len = name_length(environ[i]);
        int overridden = 0;
        for (size_t j = 0; j < count && !overridden; j++)
            overridden = name_length(given[j]) == len && strncmp(given[j], environ[i], len) == 0;
        if (!overridden) env[n++] = environ[i];
    }
    env[n] = NULL;
    return env;
}

/* Forward what one pipe has now; returns 0 at end of file or error, 1 otherwise. */
static int forward(int conn, int fd, char kind) {
    char buf[CHUNK];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) return 0;
    if (frame(conn, kind, buf, (uint32_t)n)) _exit(0); /* the host went away */
    return 1;
}

/* -- the egress bridge ------------------------------------------------------------------ */

#define BRIDGE_LINKS 256
#define BRIDGE_BUF 65536

/* One direction of a link: bytes read from `in`, not yet all written to `out`. */
struct flow {
    int in, out;
    size_t len, off;
    int eof, done;
    char *buf;
};

struct link {
    struct flow f[2];
    int used;
};

static const char BRIDGE_502[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 47\r\n"
                                 "Connection: close\r\n\r\nlauncher: the egress gateway is not reachable.\n";

/* 127.0.0.1:`port`, listening (-1 and errno on failure). */
static int egress_listen(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 128)) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static void link_close(struct link *l) {
    close(l->f[0].in);
    close(l->f[0].out);
    free(l->f[0].buf);
    free(l->f[1].buf);
    l->used = 0;
}

/* Move what can be moved along one flow now; -1 when the link is broken. */
static int flow_step(struct flow *f, int readable, int writable) {
    if (readable && !f->eof && f->len == 0) {
        ssize_t n = read(f->in, f->buf, BRIDGE_BUF);
        if (n > 0) {
            f->len = (size_t)n;
            f->off = 0;
            writable = 1; /* try at once: a request's bytes go on without another poll */
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            f->eof = 1;
        }
    }
    if (writable && f->off < f->len) {
        ssize_t n = send(f->out, f->buf + f->off, f->len - f->off, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
        if (n > 0) f->off += (size_t)n;
        if (f->off == f->len) f->len = f->off = 0;
    }
    if (f->eof && f->len == 0 && !f->done) {
        shutdown(f->out, SHUT_WR);
        f->done = 1;
    }
    return 0;
}

/* A new link for an accepted client: its connection to the gateway's socket. */
static void link_open(struct link *links, int client, const struct sockaddr_un *gateway) {
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (up < 0 || connect(up, (const struct sockaddr *)gateway, sizeof *gateway)) {
        if (up >= 0) close(up);
        fcntl(client, F_SETFL, 0);
        send(client, BRIDGE_502, sizeof BRIDGE_502 - 1, MSG_NOSIGNAL);
        close(client);
        return;
    }
    fcntl(up, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < BRIDGE_LINKS; i++) {
        if (links[i].used) continue;
        struct link *l = &links[i];
        l->f[0] = (struct flow){.in = client, .out = up, .buf = malloc(BRIDGE_BUF)};
        l->f[1] = (struct flow){.in = up, .out = client, .buf = malloc(BRIDGE_BUF)};
        l->used = 1;
        if (!l->f[0].buf || !l->f[1].buf) link_close(l);
        return;
    }
    close(up);
    close(client);
}

/* The bridge's loop: never returns. */
static void egress_bridge(int listener, const char *path) {
    struct sockaddr_un gateway = {.sun_family = AF_UNIX};
    memcpy(gateway.sun_path, path, strlen(path) + 1);
    static struct link links[BRIDGE_LINKS];
    static struct pollfd fds[1 + 2 * BRIDGE_LINKS];
    fcntl(listener, F_SETFL, O_NONBLOCK);
    for (;;) {
        int n = 0, open_links = 0;
        for (int i = 0; i < BRIDGE_LINKS; i++) {
            struct link *l = &links[i];
            fds[1 + 2 * i] = fds[2 + 2 * i] = (struct pollfd){-1, 0, 0};
            if (!l->used) continue;
            open_links++;
            for (int d = 0; d < 2; d++) {
                /* the fd this flow reads, with what either flow wants of it */
                struct flow *f = &l->f[d], *g = &l->f[1 - d];
                short events = 0;
                if (!f->eof && f->len == 0) events |= POLLIN;
                if (g->off < g->len) events |= POLLOUT;
                fds[1 + 2 * i + d] = (struct pollfd){events ? f->in : -1, events, 0};
            }
            n = 1 + 2 * i + 2;
        }
        fds[0] = (struct pollfd){open_links < BRIDGE_LINKS ? listener : -1, POLLIN, 0};
        if (n == 0) n = 1;
        if (poll(fds, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(111);
        }
        if (fds[0].revents & POLLIN) {
            int client;
            while (open_links < BRIDGE_LINKS &&
                   (client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                link_open(links, client, &gateway);
                open_links++;
            }
        }
        for (int i = 0; i < BRIDGE_LINKS && 1 + 2 * i < n; i++) {
            struct link *l = &links[i];
            if (!l->used) continue;
            short r0 = fds[1 + 2 * i].revents, r1 = fds[2 + 2 * i].revents;
            if (fds[1 + 2 * i].fd < 0) r0 = 0;
            if (fds[2 + 2 * i].fd < 0) r1 = 0;
            /* flow 0 reads fd 0 (client) and writes fd 1 (gateway); flow 1 the other way */
            int bad = flow_step(&l->f[0], r0 & (POLLIN | POLLHUP | POLLERR), r1 & (POLLOUT | POLLERR)) ||
                      flow_step(&l->f[1], r1 & (POLLIN | POLLHUP | POLLERR), r0 & (POLLOUT | POLLERR));
            if (bad || (l->f[0].done && l->f[1].done)) link_close(l);
        }
    }
}

/* `--egress PORT=SOCKET`: listen now (before anything of the command exists), then fork the
 * bridge; returns in the parent (the bridge never does). */
static void start_egress(const char *spec, int allow_vsock) {
    char *end = NULL;
    long port = strtol(spec, &end, 10);
    const char *path = end && *end == '=' ? end + 1 : NULL;
    if (port < 1 || port > 65535 || !path || path[0] != '/' || strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        fprintf(stderr, "launcher: --egress wants PORT=/path/of/the/socket, not %s\n", spec);
        _exit(2);
    }
    int listener = egress_listen((int)port);
    if (listener < 0) {
        fprintf(stderr, "launcher: cannot listen on 127.0.0.1:%ld for the egress bridge: %s\n", port, strerror(errno));
        _exit(111);
    }
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child > 0) {
        close(listener);
        return;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent) _exit(0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++)
        if (null < 0 || dup2(null, fd) < 0) close(fd);
    /* nothing of the parent's but the listener (a warm launcher's connection to the host, pipes) */
    for (int fd = 3; fd < 1024; fd++)
        if (fd != listener) close(fd);
    if (restrict_command(allow_vsock, 0)) _exit(111);
    egress_bridge(listener, path);
}

/* -- the exec policy ------------------------------------------------------------------- */

/* A file a rule names, as this sandbox resolves it. */
struct ident {
    dev_t dev;
    ino_t ino;
    off_t size;
    int fd; /* kept open to compare contents (denied files and loaders); -1 otherwise */
    const char *program;
    /* an allowed file the command could change (the run's copy of the skill, work/): `fd` is a
     * copy of its content when the run started, and it is allowed only as long as it is that */
    int frozen;
};

struct idents {
    struct ident *items;
    size_t count, room;
};

struct policy {
    int active;
    const char *rule, *nonce, *root;
    int allow_list; /* the rule has `allow`: nothing else may start */
    int trusted;    /* execs of the main process not judged: the launcher's own shell */
    struct idents allowed, denied, loaders;
    const char **allowed_paths, **denied_paths, **allowed_path_programs, **denied_path_programs;
    int *allowed_path_fds; /* what an allowed path held when the run started (-1: nothing) */
    size_t n_allowed_paths, n_denied_paths;
};

struct verdict {
    const char *program, *reason;
    char path[PATH_MAX];
};

static const char *const SYSTEM_DIRS[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"};
static const char *const LOADERS[] = {
    "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1", "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1", "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-musl-aarch64.so.1",
};

static void add_ident(struct idents *list, int fd, const struct stat *st, const char *program, int keep,
                      int frozen) {
    for (size_t i = 0; i < list->count; i++)
        if (list->items[i].dev == st->st_dev && list->items[i].ino == st->st_ino) {
            close(fd);
            return;
        }
    if (list->count == list->room) {
        list->room = list->room ? 2 * list->room : 16;
        list->items = realloc(list->items, list->room * sizeof *list->items);
        if (!list->items) die("realloc");
    }
    if (!keep) {
        close(fd);
        fd = -1;
    }
    list->items[list->count++] = (struct ident){st->st_dev, st->st_ino, st->st_size, fd, program, frozen};
}

static void add_program(struct policy *p, struct idents *list, const char *name, const char *program, int keep,
                        int depth);

/* A script's interpreter comes with it in an allow list (`#!/usr/bin/env X`: X). */
static void add_interpreter(struct policy *p, int fd, const char *program, int depth) {
    char line[256];
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    if (n < 3 || line[0] != '#' || line[1] != '!') return;
    line[n] = '\0';
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    char *save = NULL, *interp = strtok_r(line + 2, " \t", &save);
    if (!interp) return;
    add_program(p, &p->allowed, interp, program, 0, depth + 1);
    const char *base = strrchr(interp, '/');
    if (strcmp(base ? base + 1 : interp, "env") == 0) {
        char *arg = strtok_r(NULL, " \t", &save);
        while (arg && arg[0] == '-') arg = strtok_r(NULL, " \t", &save); /* env -S x: the parser refuses it */
        if (arg) add_program(p, &p->allowed, arg, program, 0, depth + 1);
    }
}

/* Whether the command (this process's user) could change the file: write it, or make it
 * writable (its owner may chmod it) -- unless its file system is read-only. */
static int changeable(int fd, const struct stat *st, const char *path) {
    struct statvfs fs;
    if (fstatvfs(fd, &fs) == 0 && (fs.f_flag & ST_RDONLY)) return 0;
    return st->st_uid == geteuid() || access(path, W_OK) == 0;
}

/* A private copy of a file's content as it is now (a memfd only this process holds); -1 if
 * it cannot be made. */
static int snapshot(int fd, off_t size) {
    static char buf[CHUNK];
    int copy = memfd_create("allowed", MFD_CLOEXEC);
    if (copy < 0) return -1;
    for (off_t at = 0; at < size;) {
        ssize_t n = pread(fd, buf, sizeof buf, at);
        if (n <= 0 || write(copy, buf, (size_t)n) != n) {
            close(copy);
            return -1;
        }
        at += n;
    }
    return copy;
}

static void add_file(struct policy *p, struct idents *list, const char *path, const char *program, int keep,
                     int depth) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    if (list == &p->allowed && depth < 3) add_interpreter(p, fd, program, depth);
    if (list == &p->allowed && changeable(fd, &st, path)) {
        /* the run could rewrite it in place: allowed is what it holds now (no copy: never) */
        int copy = snapshot(fd, st.st_size);
        close(fd);
        add_ident(list, copy, &st, program, 1, 1);
        return;
    }
    add_ident(list, fd, &st, program, keep, 0);
}

/* A rule's name for a program: bare names are looked up in the system bin folders, other
 * names are paths (relative ones from the skill's folder, the root the host passes). */
static void add_program(struct policy *p, struct idents *list, const char *name, const char *program, int keep,
                        int depth) {
    char path[PATH_MAX];
    if (!strchr(name, '/')) {
        for (size_t i = 0; i < sizeof SYSTEM_DIRS / sizeof SYSTEM_DIRS[0]; i++)
            if (snprintf(path, sizeof path, "%s/%s", SYSTEM_DIRS[i], name) < (int)sizeof path)
                add_file(p, list, path, program, keep, depth);
        return;
    }
    if (name[0] == '/')
        snprintf(path, sizeof path, "%s", name);
    else
        snprintf(path, sizeof path, "%s/%s", p->root, strncmp(name, "./", 2) == 0 ? name + 2 : name);
    add_file(p, list, path, program, keep, depth);
    /* A path is also judged by name: a file made there later is the same program. */
    char real[PATH_MAX];
    const char *named = realpath(path, real) ? real : path;
    const char ***paths = list == &p->denied ? &p->denied_paths : &p->allowed_paths;
    const char ***programs = list == &p->denied ? &p->denied_path_programs : &p->allowed_path_programs;
    size_t *count = list == &p->denied ? &p->n_denied_paths : &p->n_allowed_paths;
    if (list == &p->loaders) return;
    *paths = realloc(*paths, (*count + 1) * sizeof **paths);
    *programs = realloc(*programs, (*count + 1) * sizeof **programs);
    if (!*paths || !*programs) die("realloc");
    if (list == &p->allowed) {
        /* An allowed path that holds a file now allows that content there, not whatever the
         * run puts at the path later (the skill's scripts are the run's to overwrite). */
        p->allowed_path_fds = realloc(p->allowed_path_fds, (*count + 1) * sizeof *p->allowed_path_fds);
        if (!p->allowed_path_fds) die("realloc");
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), ref = -1;
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            ref = changeable(fd, &st, path) ? snapshot(fd, st.st_size) : fd;
            if (ref < 0) ref = -2; /* there, but not copied: nothing matches it by path */
        }
        if (fd >= 0 && ref != fd) close(fd);
        p->allowed_path_fds[*count] = ref;
    }
    (*paths)[*count] = strdup(named);
    (*programs)[*count] = program;
    (*count)++;
}

/* The policy from its serialised form: NUL-separated key, value pairs
 * (rule NAME, nonce HEX, root DIR, trusted N, allow-list 1, allow PROGRAM, deny PROGRAM). */
static int parse_policy(struct policy *p, const char *data, size_t size) {
    memset(p, 0, sizeof *p);
    p->root = "/";
    const char *at = data, *end = data + size;
    const char *keys[MAX_FIELDS], *values[MAX_FIELDS];
    size_t n = 0;
    while (at < end) {
        const char *key = at;
        at += strnlen(at, (size_t)(end - at)) + 1;
        if (at >= end || n == MAX_FIELDS) return -1;
        const char *value = at;
        at += strnlen(at, (size_t)(end - at)) + 1;
        if (at > end) return -1;
        keys[n] = key;
        values[n++] = value;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i], "rule") == 0) p->rule = values[i];
        else if (strcmp(keys[i], "nonce") == 0) p->nonce = values[i];
        else if (strcmp(keys[i], "root") == 0) p->root = values[i];
        else if (strcmp(keys[i], "trusted") == 0) p->trusted = atoi(values[i]);
        else if (strcmp(keys[i], "allow-list") == 0) p->allow_list = 1;
        else if (strcmp(keys[i], "allow") != 0 && strcmp(keys[i], "deny") != 0) return -1;
    }
    if (!p->rule) return -1;
    for (size_t i = 0; i < sizeof LOADERS / sizeof LOADERS[0]; i++) add_file(p, &p->loaders, LOADERS[i], "ld.so", 1, 9);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i], "deny") == 0) add_program(p, &p->denied, values[i], values[i], 1, 0);
        else if (strcmp(keys[i], "allow") == 0) add_program(p, &p->allowed, values[i], values[i], 0, 0);
    }
    p->active = 1;
    return 0;
}

static int same_content(int a, int b, off_t size) {
    static char x[CHUNK], y[CHUNK];
    for (off_t at = 0; at < size;) {
        size_t want = size - at < (off_t)CHUNK ? (size_t)(size - at) : CHUNK;
        if (pread(a, x, want, at) != (ssize_t)want || pread(b, y, want, at) != (ssize_t)want) return 0;
        if (memcmp(x, y, want)) return 0;
        at += (off_t)want;
    }
    return 1;
}

/* The entry of `list` that is the file `fd` (`content`: or a byte-identical copy of it). */
static const struct ident *find(const struct idents *list, int fd, const struct stat *st, int content) {
    for (size_t i = 0; i < list->count; i++) {
        const struct ident *item = &list->items[i];
        if (item->dev != st->st_dev || item->ino != st->st_ino) continue;
        if (!item->frozen) return item;
        /* a file the run could change: only while it holds what it held at the start */
        if (item->fd >= 0 && item->size == st->st_size && same_content(item->fd, fd, st->st_size)) return item;
        return NULL;
    }
    if (content)
        for (size_t i = 0; i < list->count; i++)
            if (list->items[i].fd >= 0 && list->items[i].size == st->st_size &&
                same_content(list->items[i].fd, fd, st->st_size))
                return &list->items[i];
    return NULL;
}

static const char *find_path(const char **paths, const char **programs, size_t count, const char *path) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(paths[i], path) == 0) return programs[i];
    return NULL;
}

/* The allowed path entry the file `fd` (at `path`) matches: the path, and, when the path held
 * a file when the run started, that file's content. */
static const char *find_allowed_path(const struct policy *p, int fd, const struct stat *st, const char *path) {
    for (size_t i = 0; i < p->n_allowed_paths; i++) {
        if (strcmp(p->allowed_paths[i], path) != 0) continue;
        int ref = p->allowed_path_fds[i];
        struct stat was;
        if (ref == -1) return p->allowed_path_programs[i];
        if (ref >= 0 && fstat(ref, &was) == 0 && was.st_size == st->st_size && same_content(ref, fd, st->st_size))
            return p->allowed_path_programs[i];
    }
    return NULL;
}

/* How a file is named in a verdict: its basename in a system bin folder, else its path. */
static const char *program_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return path;
    for (size_t i = 0; i < sizeof SYSTEM_DIRS / sizeof SYSTEM_DIRS[0]; i++) {
        size_t len = strlen(SYSTEM_DIRS[i]);
        if ((size_t)(slash - path) == len && strncmp(path, SYSTEM_DIRS[i], len) == 0) return slash + 1;
    }
    return path;
}

static int is_loader_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return (strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld-musl", 7) == 0 || strncmp(base, "ld.so", 5) == 0) &&
           strstr(base, ".so") != NULL;
}

/* Judge the program process `pid` has just been made to run; 0: it may, else the verdict. */
static int judge(const struct policy *p, pid_t pid, struct verdict *v) {
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, v->path, 1024);
    if (n < 0) n = 0;
    v->path[n] = '\0';
    v->program = program_of(v->path);
    int fd = open(link, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        v->reason = "its file cannot be read by the exec supervisor (fail closed)";
        if (fd >= 0) close(fd);
        return 1;
    }
    const struct ident *hit;
    const char *named;
    int refused = 1;
    if (is_loader_name(v->path) || find(&p->loaders, fd, &st, 1)) {
        v->program = "ld.so";
        v->reason = "the dynamic loader may not be run directly";
    } else if ((hit = find(&p->denied, fd, &st, 1))) {
        v->program = hit->program;
        v->reason = "denied";
    } else if ((named = find_path(p->denied_paths, p->denied_path_programs, p->n_denied_paths, v->path))) {
        v->program = named;
        v->reason = "denied";
    } else if (p->allow_list && !find(&p->allowed, fd, &st, 0) &&
               !find_allowed_path(p, fd, &st, v->path)) {
        v->reason = "not allowed";
    } else {
        refused = 0;
    }
    close(fd);
    return refused;
}

/* The exit frame's (or verdict file's) JSON string: bytes outside printable ASCII escaped. */
static size_t json_string(char *out, size_t room, const char *s) {
    size_t n = 0;
    if (room < 8) return 0;
    out[n++] = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c && n + 8 < room; c++) {
        if (*c == '"' || *c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*c;
        } else if (*c < 0x20 || *c >= 0x7f) {
            n += (size_t)snprintf(out + n, room - n, "\\u%04x", *c);
        } else {
            out[n++] = (char)*c;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
    return n;
}

/* {"rule": ..., "program": ..., "path": ..., "reason": ...}, cut to fit `room`. */
static size_t verdict_json(char *out, size_t room, const struct policy *p, const struct verdict *v) {
    const char *names[] = {"rule", "program", "path", "reason"};
    const char *values[] = {p->rule, v->program, v->path, v->reason};
    size_t n = 0;
    out[n++] = '{';
    for (int i = 0; i < 4; i++) {
        int w = snprintf(out + n, room - n, "%s\"%s\": ", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= room - n) break;
        n += (size_t)w;
        n += json_string(out + n, room - n - 2, values[i]);
    }
    out[n++] = '}';
    out[n] = '\0';
    return n;
}

/* -- the exec supervisor ---------------------------------------------------------------- */

#define TRACE_OPTIONS                                                                                         \
    (PTRACE_O_TRACEEXEC | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL)

struct supervisor {
    const struct policy *policy;
    pid_t main;
    int main_exited, main_status, trusted_left, refused, in_container;
    struct verdict verdict;
    pid_t *tracees;
    size_t count, room;
};

static void track(struct supervisor *s, pid_t pid) {
    for (size_t i = 0; i < s->count; i++)
        if (s->tracees[i] == pid) return;
    if (s->count == s->room) {
        s->room = s->room ? 2 * s->room : 64;
        s->tracees = realloc(s->tracees, s->room * sizeof *s->tracees);
        if (!s->tracees) die("realloc");
    }
    s->tracees[s->count++] = pid;
}

static void untrack(struct supervisor *s, pid_t pid) {
    for (size_t i = 0; i < s->count; i++)
        if (s->tracees[i] == pid) {
            s->tracees[i] = s->tracees[--s->count];
            return;
        }
}

/* Every process of the run, at once: what is stopped at an exec stop never runs again. */
static void kill_tracees(struct supervisor *s) {
    if (s->in_container) kill(-1, SIGKILL);
    for (size_t i = 0; i < s->count; i++) kill(s->tracees[i], SIGKILL);
}

/* Fork the command traced.  The child waits until it is seized (and makes itself
 * dumpable first: the launcher is not, and a non-dumpable child cannot be seized). */
static pid_t fork_traced(struct supervisor *s, void (*child_setup)(void *), void *arg) {
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) || pipe2(go, O_CLOEXEC)) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        char c = 'r';
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(126);
        close(ready[1]);
        close(go[0]);
        child_setup(arg); /* does not return */
        _exit(127);
    }
    close(ready[1]);
    close(go[0]);
    char c;
    int ok = read(ready[0], &c, 1) == 1 && ptrace(PTRACE_SEIZE, child, 0, (void *)(long)TRACE_OPTIONS) == 0;
    if (!ok) {
        int saved = errno;
        kill(child, SIGKILL);
        waitpid(child, NULL, __WALL);
        errno = saved;
        close(ready[0]);
        close(go[1]);
        return -1;
    }
    if (write(go[1], "g", 1) != 1) die("write");
    close(ready[0]);
    close(go[1]);
    s->main = child;
    s->trusted_left = s->policy->trusted;
    track(s, child);
    return child;
}

/* Handle what the tracees report (`block`: wait for one event first); returns at once
 * when nothing more is pending (or nothing is left to wait for). */
static void supervise(struct supervisor *s, int block) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, __WALL | (block ? 0 : WNOHANG));
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        block = 0;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            untrack(s, pid);
            if (pid == s->main) {
                s->main_exited = 1;
                s->main_status = status;
            }
            continue;
        }
        if (!WIFSTOPPED(status)) continue;
        track(s, pid);
        int event = (unsigned)status >> 16, sig = WSTOPSIG(status);
        unsigned long message = 0;
        if (s->refused) {
            kill(pid, SIGKILL);
            ptrace(PTRACE_CONT, pid, 0, 0);
            continue;
        }
        switch (event) {
        case PTRACE_EVENT_FORK:
        case PTRACE_EVENT_VFORK:
        case PTRACE_EVENT_CLONE:
            if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &message) == 0) track(s, (pid_t)message);
            ptrace(PTRACE_CONT, pid, 0, 0);
            break;
        case PTRACE_EVENT_EXEC:
            if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &message) == 0 && (pid_t)message != pid)
                untrack(s, (pid_t)message);
            if (pid == s->main && s->trusted_left > 0) {
                s->trusted_left--;
            } else if (judge(s->policy, pid, &s->verdict)) {
                s->refused = 1;
                kill(pid, SIGKILL);
                kill_tracees(s);
                break;
            }
            ptrace(PTRACE_CONT, pid, 0, 0);
            break;
        case PTRACE_EVENT_STOP:
            /* a group stop (job control) stays a stop; a new tracee's first stop goes on */
            if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
                ptrace(PTRACE_LISTEN, pid, 0, 0);
            else
                ptrace(PTRACE_CONT, pid, 0, 0);
            break;
        case 0: /* a signal on its way: deliver it */
            ptrace(PTRACE_CONT, pid, 0, (void *)(long)sig);
            break;
        default:
            ptrace(PTRACE_CONT, pid, 0, 0);
        }
    }
}

/* The refusal as the command's stderr says it. */
static void say_refused(int fd, const struct supervisor *s) {
    dprintf(fd, "launcher: policy rule '%s' refused the program %s (%s): %s\n", s->policy->rule,
            s->verdict.program, s->verdict.path, s->verdict.reason);
}

static int usage(void) {
    fprintf(stderr, "usage: launcher [--allow-vsock] [--container] SOCKET\n"
                    "       launcher [--allow-vsock] --exec [--policy FILE] [--egress PORT=SOCKET] -- PROGRAM ARGS...\n");
    return 2;
}

struct exec_child {
    char **program;
    int allow_vsock;
    sigset_t mask;
};

static void exec_child(void *arg) {
    struct exec_child *c = arg;
    sigprocmask(SIG_SETMASK, &c->mask, NULL);
    if (restrict_command(c->allow_vsock, 1)) die("seccomp");
    execvp(c->program[0], c->program);
    fprintf(stderr, "launcher: cannot run %s: %s\n", c->program[0], strerror(errno));
    _exit(127);
}

static pid_t exec_main = -1;

static void pass_signal(int sig) {
    if (exec_main > 0) kill(exec_main, sig);
}

/* The policy file of exec mode: read, then removed before anything of the command exists. */
static char *read_policy_file(const char *path, size_t *size, int *dir) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    char *data = malloc(MAX_FIELD + 1);
    size_t n = 0;
    ssize_t got;
    while (data && n < MAX_FIELD && (got = read(fd, data + n, MAX_FIELD - n)) > 0) n += (size_t)got;
    close(fd);
    if (!data || unlink(path)) return NULL;
    char folder[PATH_MAX];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (slash) *slash = '\0';
    *dir = open(slash ? (folder[0] ? folder : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    *size = n;
    return data;
}

/* launcher [--allow-vsock] --exec [--policy FILE] -- PROGRAM ARGS...: the filter, then
 * PROGRAM in place; under a policy, PROGRAM in a traced child this process supervises. */
static int exec_mode(char **program, int allow_vsock, const char *policy_file) {
    if (!policy_file) {
        if (restrict_command(allow_vsock, 0)) die("seccomp");
        execvp(program[0], program);
        fprintf(stderr, "launcher: cannot run %s: %s\n", program[0], strerror(errno));
        return 127;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) die("prctl");
    size_t size = 0;
    int dir = -1;
    char *data = read_policy_file(policy_file, &size, &dir);
    struct policy policy;
    if (!data || dir < 0 || parse_policy(&policy, data, size) || !policy.nonce) {
        fprintf(stderr, "launcher: cannot read the exec policy %s: %s\n", policy_file, data ? "invalid" : strerror(errno));
        return 126;
    }
    struct supervisor s = {.policy = &policy};
    struct exec_child child = {program, allow_vsock, {{0}}};
    sigprocmask(SIG_SETMASK, NULL, &child.mask);
    if (fork_traced(&s, exec_child, &child) < 0) {
        fprintf(stderr, "launcher: cannot trace the command: %s\n", strerror(errno));
        return 126;
    }
    exec_main = s.main;
    struct sigaction pass = {.sa_handler = pass_signal};
    int passed[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++) sigaction(passed[i], &pass, NULL);
    while (!s.main_exited && !s.refused) supervise(&s, 1);
    if (s.refused) {
        char body[16384], name[128];
        size_t n = verdict_json(body, sizeof body, &policy, &s.verdict);
        snprintf(name, sizeof name, ".policy-verdict-%s", policy.nonce);
        /* The folder is the command's user's: it may have made it read-only to hide this. */
        struct stat folder;
        if (fstat(dir, &folder) == 0 && (folder.st_mode & (S_IWUSR | S_IXUSR)) != (S_IWUSR | S_IXUSR))
            fchmod(dir, (folder.st_mode & 07777) | S_IWUSR | S_IXUSR);
        int out = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0 || write(out, body, n) != (ssize_t)n)
            fprintf(stderr, "launcher: cannot record the verdict: %s\n", strerror(errno));
        if (out >= 0) close(out);
        say_refused(2, &s);
        kill_tracees(&s);
        return 126; /* and the tracees left die with this process (EXITKILL) */
    }
    int status = s.main_status;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct shell_child {
    char **fields, **env;
    int out, err, allow_vsock, traced;
    sigset_t mask;
};

static void shell_child(void *arg) {
    struct shell_child *c = arg;
    char **fields = c->fields;
    setsid();
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &c->mask, NULL);
    int in = open(fields[2][0] ? fields[2] : "/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0) _exit(126);
    if (chdir(fields[1])) {
        dprintf(2, "launcher: cannot enter %s: %s\n", fields[1], strerror(errno));
        _exit(126);
    }
    if (restrict_command(c->allow_vsock, c->traced)) {
        dprintf(2, "launcher: cannot restrict the command: %s\n", strerror(errno));
        _exit(126);
    }
    char *args[] = {"bash", "-c", fields[0], NULL};
    execve("/bin/bash", args, c->env);
    dprintf(2, "launcher: cannot run bash: %s\n", strerror(errno));
    _exit(127);
}

int main(int argc, char **argv) {
    int allow_vsock = 0, in_container = 0, exec = 0, arg = 1;
    const char *policy_file = NULL, *egress = NULL;
    for (; arg < argc; arg++) { /* the options, in any order */
        if (strcmp(argv[arg], "--allow-vsock") == 0) allow_vsock = 1;
        else if (strcmp(argv[arg], "--container") == 0) in_container = 1;
        else if (strcmp(argv[arg], "--exec") == 0) exec = 1;
        else if (strcmp(argv[arg], "--policy") == 0 && arg + 1 < argc) policy_file = argv[++arg];
        else if (strcmp(argv[arg], "--egress") == 0 && arg + 1 < argc) egress = argv[++arg];
        else break;
    }
    if (exec) {
        if (in_container || arg + 1 >= argc || strcmp(argv[arg], "--") != 0) return usage();
        if (egress) start_egress(egress, allow_vsock);
        return exec_mode(argv + arg + 1, allow_vsock, policy_file);
    }
    if (policy_file || egress) return usage();
    if (arg != argc - 1) return usage();
    /* Not ptrace-able, its memory and descriptors not readable, by the command (same uid). */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) die("prctl");
    const char *path = argv[arg];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char tmp[sizeof addr.sun_path];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) die("socket path");
    memcpy(addr.sun_path, tmp, strlen(tmp) + 1);

    int server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server < 0) die("socket");
    if (bind(server, (struct sockaddr *)&addr, sizeof addr)) die("bind");
    if (listen(server, 1)) die("listen");
    /* The socket appears under its name only once it accepts.  gVisor can neither rename
       nor unlink a socket it made on the host: there a link publishes it, and the host
       removes both once connected. */
    if (rename(tmp, path)) {
        if (errno != EPERM) die("rename");
        const char *base = strrchr(tmp, '/');
        if (symlink(base ? base + 1 : tmp, path)) die("symlink");
    }
    int conn = accept4(server, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) die("accept");
    close(server);
    unlink(path);

    unsigned char countb[4];
    if (read_exact(conn, countb, 4)) return 0;
    uint32_t count = be32(countb);
    if (count < 4 || count > MAX_FIELDS) return 1;
    char **fields = calloc(count, sizeof(char *));
    uint32_t *sizes = calloc(count, sizeof(uint32_t));
    if (!fields || !sizes) die("calloc");
    for (uint32_t i = 0; i < count; i++)
        if (!(fields[i] = read_field(conn, &sizes[i]))) return 1;
    char **env = merge_environment(fields + 4, count - 4);
    if (!env) die("environment");
    struct policy policy = {0};
    if (sizes[3] && parse_policy(&policy, fields[3], sizes[3])) return 1;
    if (policy.active && strcmp(policy.root, "/") == 0) policy.root = fields[1];
    struct supervisor s = {.policy = &policy, .in_container = in_container};

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe");
    struct shell_child spec = {fields, env, out[1], err[1], allow_vsock, policy.active, {{0}}};
    sigprocmask(SIG_SETMASK, NULL, &spec.mask);
    int sigfd = -1;
    pid_t child;
    if (policy.active) {
        /* Tracees' stops arrive as SIGCHLD: read through a signalfd in the poll below. */
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sigfd < 0) die("signalfd");
        child = fork_traced(&s, shell_child, &spec);
        if (child < 0) {
            char text[256];
            int size = snprintf(text, sizeof text, "launcher: cannot trace the command: %s\n", strerror(errno));
            frame(conn, 'E', text, (uint32_t)size);
            frame(conn, 'X', "{\"exit_code\": 126}", 18);
            return 0;
        }
    } else {
        child = fork();
        if (child < 0) die("fork");
        if (child == 0) shell_child(&spec);
    }
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);

    /* The main process's exit wakes poll too (a pidfd), even while leftovers keep the pipes open. */
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    struct pollfd fds[4] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {pidfd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    int open_pipes = 2, exited = 0, status = 0;
    while (open_pipes) {
        int ready = poll(fds, 4, exited ? 0 : (pidfd >= 0 ? -1 : 5));
        if (ready < 0 && errno == EINTR) continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                if (!forward(conn, fds[i].fd, i == 0 ? 'O' : 'E')) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    open_pipes--;
                }
            }
        }
        if (fds[2].fd >= 0 && (fds[2].revents & POLLIN)) fds[2].fd = -1;
        if (policy.active) {
            struct signalfd_siginfo info;
            while (read(sigfd, &info, sizeof info) > 0) {
            }
            supervise(&s, 0);
            if (!exited && s.main_exited) {
                exited = 1;
                status = s.main_status;
                continue;
            }
        } else if (!exited && waitpid(child, &status, WNOHANG) == child) {
            exited = 1;
            continue; /* one more pass to drain what is already in the pipes */
        }
        if (exited && ready <= 0) break; /* leftovers holding the pipes die below */
    }
    if (policy.active) {
        while (!s.main_exited) supervise(&s, 1);
        status = s.main_status;
    } else if (!exited) {
        waitpid(child, &status, 0);
    }
    if (in_container)
        kill(-1, SIGKILL);
    else
        kill(-child, SIGKILL); /* the command's session and process group */
    if (policy.active) kill_tracees(&s);

    if (s.refused) {
        char text[PATH_MAX + 512];
        int size = snprintf(text, sizeof text, "launcher: policy rule '%s' refused the program %s (%s): %s\n",
                            policy.rule, s.verdict.program, s.verdict.path, s.verdict.reason);
        frame(conn, 'E', text, (uint32_t)(size < (int)sizeof text ? size : (int)sizeof text - 1));
        char body[16384];
        size_t n = (size_t)snprintf(body, sizeof body, "{\"exit_code\": 126, \"policy_denied_exec\": ");
        n += verdict_json(body + n, sizeof body - n - 2, &policy, &s.verdict);
        body[n++] = '}';
        frame(conn, 'X', body, (uint32_t)n);
        close(conn);
        return 0;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char body[64];
    int size = snprintf(body, sizeof body, "{\"exit_code\": %d}", code);
    frame(conn, 'X', body, (uint32_t)size);
    close(conn);
    return 0;
}
