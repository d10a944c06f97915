"""Start and stop real server processes for the fault tests, on loopback only."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def child_env(**extra) -> dict:
    """The environment of a child process using this test's database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.faults.settings",
        FAULTS_DATABASE_NAME=connection.settings_dict["NAME"],
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


@contextmanager
def gunicorn(workers=1, timeout=30):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "tests.faults.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--timeout",
            str(timeout),
            "--graceful-timeout",
            "2",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=child_env(),
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
