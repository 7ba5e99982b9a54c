"""The bwrap runtime's seccomp filter: the system calls a run may not make, compiled by
libseccomp (through ``pyseccomp``) into the BPF program bwrap loads with ``--seccomp``.

A bwrap sandbox has no engine profile under it, so this one filter carries both what
Docker's default profile refuses an unprivileged container and what the warm launcher's
filter adds on top of it (``images/runner/launcher.c``).  Everything else is allowed: a
deny list, like the launcher's, since the run has no capabilities and the namespaces
already bound what the rest can reach.  Refused with ``EPERM``:

* reaching other processes: ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_getfd``;
* io_uring (its ``IORING_OP_SOCKET`` makes sockets the ``socket`` rule cannot see);
* ``AF_VSOCK`` sockets (a network namespace does not cover vsock; ``DOCKER_ALLOW_VSOCK``);
* new namespaces: ``unshare``, ``setns``, ``clone`` with a namespace flag (``clone3``,
  whose flags a filter cannot read, is ``ENOSYS``: libc falls back to ``clone``);
* the kernel keyring, BPF, perf events, ``userfaultfd``, fanotify, handles to files by
  number (``open_by_handle_at``), the NUMA memory policies, ``modify_ldt``;
* what only an administrator does: mounts of every kind, ``chroot``, modules, ``kexec``,
  ``reboot``, swap, accounting, the clocks, I/O ports, the kernel log, quotas, host and
  domain names;
* every system call of another ABI (i386, x32): libseccomp's bad-architecture action.

Not covered (Docker's profile does it by an allow list): ``personality`` flags.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

#: Refused with EPERM (a name the machine's architecture lacks is skipped).
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "setns",
    "add_key",
    "keyctl",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "fanotify_init",
    "name_to_handle_at",
    "open_by_handle_at",
    "mbind",
    "migrate_pages",
    "move_pages",
    "set_mempolicy",
    "modify_ldt",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "iopl",
    "ioperm",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "uselib",
    "vhangup",
    "sethostname",
    "setdomainname",
)
#: clone's namespace flags (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME).
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
AF_VSOCK = 40


@functools.cache
def program(allow_vsock: bool, *, supervised: bool = False) -> bytes:
    """The filter as a BPF program (what ``bwrap --seccomp FD`` reads), made once.
    ``supervised``: the launcher's exec supervisor runs under it and traces the command
    (``ptrace`` is allowed here; the launcher's own filter, stacked on this one for the
    command, refuses it to the command, as in a container)."""
    import pyseccomp as seccomp

    deny = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.set_attr(seccomp.Attr.ACT_BADARCH, deny)
    for name in DENIED:
        if supervised and name == "ptrace":
            continue
        try:
            rules.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):  # not a system call of this architecture
            continue
    # clone(flags, ...): x86_64 and aarch64 alike take the flags first.
    for flag in CLONE_NAMESPACES:
        rules.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    if not allow_vsock:
        for call in ("socket", "socketpair"):
            rules.add_rule(deny, call, seccomp.Arg(0, seccomp.EQ, AF_VSOCK))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


def loadable(data: bytes) -> int:
    """A descriptor to read ``data`` from (a pipe, closed for writing; the filter is a few
    KiB, far below a pipe's buffer), for bwrap's ``--seccomp``."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read
