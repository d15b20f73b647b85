"""`python -m loopdeck.workdir.guardian COMMAND…`: runs a command (an MCP server, an ACP agent,
a command an agent asked for) so that nothing it starts outlives its run, not even a daemon
in a session of its own (`setsid`, a double fork), nor when the runner is killed with SIGKILL.

The guardian is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process the command starts
whose parent goes (a daemon's double fork, a `setsid` child left behind) is re-parented to the
guardian, never to init, so every process the command started stays below the guardian,
whatever session or group it made for itself. Where cgroup v2 is writable (root, or a
delegated subtree), the command also runs in a cgroup of its own, `loopdeck-guardian-PID`
beside the guardian's, which nothing inside can leave and `cgroup.kill` ends at once.

The command runs in a session of its own, with the guardian's stdin, stdout and stderr
(nothing passes through here: the protocol is the command's); its stdin closing is the
command's business, not a stop. The guardian reaps the orphans it adopts, and ends everything
below it (SIGTERM to the command's group and to every descendant, found in /proc and in the
cgroup; SIGKILL after `GRACE_S`) when told to stop (SIGTERM, SIGINT, SIGHUP), when its runner
dies (`PR_SET_PDEATHSIG`), and when the command exits (what it left behind). It exits once
nothing is left, with the command's status (128 + the signal, when stopped or signalled).

Run as a file (`python -S -P guardian.py`, for the ACP terminals) it imports only the stdlib.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable

GRACE_S = 1.5  # inside the MCP SDK's 2 s between its SIGTERM and its SIGKILL to the guardian
KILL_WAIT_S = 5.0  # after SIGKILL: for the kernel to end what was signalled
POLL_S = 0.02
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOPS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
WATCHED = STOPS | {signal.SIGCHLD}
CGROUP_PREFIX = "loopdeck-guardian-"


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux: the runner's own stop still ends it
        return False


# -- the cgroup, where one can be made ---------------------------------------------------------
def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _own_cgroup() -> str | None:
    """This process's cgroup v2 folder, where the unified hierarchy is mounted; else None.
    (Paths are strings here: `pathlib` would cost every terminal's start its import.)"""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
        mounts = _read("/proc/self/mountinfo").splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    for mount in mounts:
        fields = mount.split()
        dash = fields.index("-") if "-" in fields else -1
        if dash < 0 or fields[dash + 1] != "cgroup2":
            continue
        root, point = fields[3], fields[4]
        if root != "/" and not path.startswith(root):
            continue
        inside = path if root == "/" else path[len(root) :]
        return os.path.join(point, inside.lstrip("/"))
    return None


def cgroup_of(guardian: int) -> str | None:
    """Where the guardian `guardian`, started by this process, keeps its command (the runner
    and the guardian share a cgroup); None where there is no cgroup v2."""
    own = _own_cgroup()
    return None if own is None else os.path.join(own, f"{CGROUP_PREFIX}{guardian}")


def made_cgroup() -> str | None:
    """The guardian's cgroup, made; None where the machine does not allow it."""
    path = cgroup_of(os.getpid())
    if path is None:
        return None
    _swept(os.path.dirname(path))
    try:
        os.mkdir(path)
    except FileExistsError:  # left by a guardian of that pid killed before it finished
        pass
    except OSError:
        return None
    if os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
        return path
    _removed(path)
    return None


def _swept(parent: str) -> None:
    """The empty cgroups of guardians that are gone (killed before they finished) removed;
    one still populated is left as it is."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            pid = entry.name.removeprefix(CGROUP_PREFIX)
            if pid == entry.name or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                _removed(entry.path)
            except OSError:  # alive, another user's: not ours to judge
                continue


def _cgroup_members(path: str | None) -> set[int]:
    if path is None:
        return set()
    try:
        return {int(pid) for pid in _read(os.path.join(path, "cgroup.procs")).split()}
    except (OSError, ValueError):
        return set()


def _cgroup_kill(path: str | None) -> None:
    """SIGKILL to every process in the cgroup at once (`cgroup.kill`, Linux 5.14)."""
    if path is not None:
        with contextlib.suppress(OSError):
            _write(os.path.join(path, "cgroup.kill"), "1")


def _removed(path: str | None) -> None:
    """The cgroup removed, with the empty ones a nested guardian left in it."""
    if path is None:
        return
    with contextlib.suppress(OSError):  # still populated, or already gone
        for inner in os.scandir(path):
            if inner.is_dir(follow_symlinks=False):
                _removed(inner.path)
        os.rmdir(path)


def end_cgroup(guardian: int, wait_s: float = KILL_WAIT_S) -> list[int]:
    """For the runner, once a guardian it started is gone without finishing (killed with
    SIGKILL): whatever is left in that guardian's cgroup is killed, waited for (up to
    `wait_s`) and the cgroup removed. Returns the pids it found; none without cgroups."""
    path = cgroup_of(guardian)
    if path is None or not os.path.isdir(path):
        return []
    found = sorted(_cgroup_members(path))
    _kill_each(found, signal.SIGKILL)
    _cgroup_kill(path)
    end = time.monotonic() + wait_s
    while _cgroup_members(path) and time.monotonic() < end:
        time.sleep(POLL_S)
    _removed(path)
    return found


# -- the processes below the guardian ----------------------------------------------------------
def descendants(root: int) -> set[int]:
    """The live processes below `root`, read off /proc (none where there is no /proc)."""
    parents: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as file:
                    stat = file.read()
            except OSError:  # it ended while being read
                continue
            # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1 and fields[0] != b"Z":
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    frontier = [root]
    while frontier:
        below = [child for pid in frontier for child in parents.get(pid, ())]
        found.update(below)
        frontier = below
    return found


def _kill_each(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


class Guardian:
    def __init__(self, command: int, cgroup: str | None) -> None:
        self.command = command
        self.cgroup = cgroup
        self.status: int | None = None  # the command's exit code, once reaped

    def reap(self) -> None:
        """Collect every child that ended: the command (its status kept) or an adopted one."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command:
                code = os.waitstatus_to_exitcode(status)
                self.status = code if code >= 0 else 128 - code

    def wait(self) -> int | None:
        """Until the command exits (None) or a stop comes (its signal)."""
        while True:
            self.reap()
            if self.status is not None:
                return None
            got = signal.sigtimedwait(WATCHED, 1.0)
            if got is not None and got.si_signo in STOPS:
                return got.si_signo

    def below(self) -> set[int]:
        return descendants(os.getpid()) | _cgroup_members(self.cgroup)

    def signal_group(self, sig: int) -> None:
        """`sig` to the command's group at once, while the command is not reaped (its pid,
        the group's id, cannot be another's)."""
        if self.status is None:
            with contextlib.suppress(OSError):
                os.killpg(self.command, sig)

    def end_all(self) -> None:
        """SIGTERM to the command's group and to every process below, new ones as they come,
        each then SIGCONT (one stopped, by a freeze or a job-control stop, runs its handler);
        SIGKILL after the grace to whatever is left; back once nothing is (bounded)."""
        self.signal_group(signal.SIGTERM)
        self.signal_group(signal.SIGCONT)
        told: set[int] = set()
        end = time.monotonic() + GRACE_S
        while (left := self.below()) and time.monotonic() < end:
            _kill_each(left - told, signal.SIGTERM)
            _kill_each(left - told, signal.SIGCONT)
            told |= left
            time.sleep(POLL_S)
            self.reap()
        end = time.monotonic() + KILL_WAIT_S
        while left and time.monotonic() < end:
            _cgroup_kill(self.cgroup)
            self.signal_group(signal.SIGKILL)
            _kill_each(left, signal.SIGKILL)
            time.sleep(POLL_S)
            self.reap()
            left = self.below()
        self.reap()
        _removed(self.cgroup)


def _spawn(argv: list[str], cgroup: str | None) -> int:
    """The command, forked and run in a session of its own (in the cgroup, where there is
    one) with the default signal dispositions and mask; 127 when it cannot be run."""
    pid = os.fork()
    if pid:
        return pid
    try:
        if cgroup is not None:
            with contextlib.suppress(OSError):  # not allowed after all: the subreaper remains
                _write(os.path.join(cgroup, "cgroup.procs"), "0")
        os.setsid()
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.execvp(argv[0], argv)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"guardian: cannot start {argv[0]}: {exc}\n".encode())
    finally:
        os._exit(127)


def main(argv: list[str]) -> int:
    if not argv:
        print("guardian: no command", file=sys.stderr)
        return 2
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the runner died before the request took hold
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # taken by `sigtimedwait`, never lost
    cgroup = made_cgroup()
    try:
        guardian = Guardian(_spawn(argv, cgroup), cgroup)
    except OSError as exc:  # no fork
        _removed(cgroup)
        print(f"guardian: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    stop = guardian.wait()
    guardian.end_all()
    if stop is not None:
        return 128 + stop
    assert guardian.status is not None
    return guardian.status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
