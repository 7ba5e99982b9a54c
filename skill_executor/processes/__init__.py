"""A session's interactive processes: start, write to stdin, poll output, signal, kill.

A process runs in its session's sandbox: on Docker a long-lived container of the session
(its *host*, :mod:`skill_executor.runtimes.docker.processes`) made with every cap of a
run's container and the session's ``work/``; runs of the session join its loopback, so a
server a process started answers them.  The host is made with the session's first
process and removed with its last; while it lives, the session's ``work/`` is held
(:meth:`~skill_executor.workspace.sessions.SessionStore.hold`: mounted under the hard
cap, never expired).  A runtime has hosts or not: the optional capability
:class:`~skill_executor.runtimes.base.SupportsProcesses` of the runtime seam; without it a
start is refused (501 ``processes_unsupported``).

Each process's output (stdout and stderr as they arrive, one stream; a TTY's as it is) is
kept in a ring of ``process_output_bytes``: bytes are numbered from 0 as they were
written, ``total`` counts them all, and a poll ``after=<offset>`` answers what the ring
still holds past it, saying how many bytes it lost before (``dropped``).  A process is
killed at its wall-clock limit, and when idle (no input, no output) past its idle limit;
all of a session's processes are killed when the session ends.  An ended process keeps
its output and exit code for :data:`~skill_executor.processes.base.KEEP_ENDED_SECONDS`.

* :mod:`.base` -- the calls as the API and the tools make them (:class:`~.base.Processes`),
  their answers, errors and limits;
* :mod:`.output` -- one process's record and its output ring;
* :mod:`.hosts` -- each session's sandbox for processes, bounded per key and per service;
* :mod:`.manager` -- :class:`~.manager.ProcessManager`, the processes this service process runs;
* :mod:`.cluster` -- an API replica's proxy to the worker running a session's processes.
"""
