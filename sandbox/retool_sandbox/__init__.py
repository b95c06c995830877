"""Embedded code sandbox: a SandboxFusion-compatible ``/run_code`` server (``retool-sandbox serve``).

What it protects against (bwrap tier, the default where bubblewrap works): reading host files outside the
interpreter and a few /etc files, writing anywhere but the per-run work dir and a private /tmp, network access
(including host loopback services), seeing or signalling host processes, fork bombs (dedicated uid + RLIMIT_NPROC),
runaway memory (RLIMIT_AS), runaway time (wall-clock kill of the whole pid namespace), huge outputs (per-stream cap),
and the server's environment leaking into user code. What it does not: kernel exploits, CPU-cache side channels,
disk filling of the work dir up to the file-size limit times the number of files within one run; the rlimit tier
has no network isolation and only an unprivileged user's view of the filesystem, and none isolates nothing.
In fork mode (the default with root) programs are forked from a per-slot interpreter that has already imported the
runtime packages (``--preimport``). Requests with a ``session_id`` run as cells of a stateful session, one isolated
long-lived interpreter per session (``sessions.py``). See docs/sandbox.md.

The server depends only on aiohttp and the standard library; ``retool_sandbox.spawn.running_sandbox`` starts a
real server for tests.
"""
