"""Start and stop the benchmarks' server processes, on loopback only."""

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
