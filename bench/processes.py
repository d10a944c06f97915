"""Start and stop the benchmarks' server processes, on loopback only, and
read the CPU that processes used."""

import dataclasses
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from tests.faults.processes import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@contextmanager
def gunicorn(env, *, workers, app="project.wsgi:application"):
    """Serve ``app`` (the demo's) under ``env``; yield the port it listens on."""
    port = free_port()
    server = start(
        "gunicorn",
        app,
        f"--bind=127.0.0.1:{port}",
        f"--workers={workers}",
        "--log-level=warning",
        env=env,
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        stop(server)


def start(program, *args, env):
    """Start one of the venv's programs from the repository root."""
    return subprocess.Popen([str(BIN / program), *args], cwd=ROOT, env=env)


def stop(process, timeout=10):
    """SIGTERM, then SIGKILL what did not exit in time; always reap it."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclasses.dataclass(frozen=True)
class Usage:
    """A process's CPU seconds so far (/proc/<pid>/stat): its own (utime and
    stime), and its children's that exited and were reaped (cutime, cstime)."""

    pid: int
    parent: int
    name: str
    own: float
    reaped: float


def cpu_usage() -> list[Usage]:
    """Every process's CPU seconds so far."""
    tick = os.sysconf("SC_CLK_TCK")
    usage = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                head, tail = stat.read().rsplit(")", 1)
        except (OSError, ValueError):
            continue  # gone meanwhile
        fields = tail.split()
        utime, stime, cutime, cstime = (int(n) / tick for n in fields[11:15])
        name = head.split("(", 1)[1]
        usage.append(
            Usage(int(entry), int(fields[1]), name, utime + stime, cutime + cstime)
        )
    return usage


def cpu_seconds(groups, *, reaped=False) -> dict[str, float]:
    """CPU seconds used so far by each group of processes: ``groups`` maps a
    group's name to a test of a ``Usage``. ``reaped``: add the CPU of the
    processes' exited children (a PostgreSQL backend's moves to the
    postmaster's when it exits)."""
    used = dict.fromkeys(groups, 0.0)
    for process in cpu_usage():
        for group, test in groups.items():
            if test(process):
                used[group] += process.own + (process.reaped if reaped else 0.0)
    return used
