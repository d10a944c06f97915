"""Start and stop real server processes for the fault tests, on loopback only.

Every helper is a context manager that kills what it started on the way out,
even when the test failed, and every wait is bounded.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager, suppress
from pathlib import Path

from django.db import connection

from tests.servers import FAULTS_REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
# The fault tests' own database on the shared Redis.
REDIS_URL = FAULTS_REDIS_URL


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


def wait_until(predicate, message, *, timeout=30.0, worker=None):
    """Poll ``predicate`` until it is true; fail the test after ``timeout``,
    with what ``worker`` logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    log = f"\n{worker.log()[-4000:]}" if worker else ""
    raise AssertionError(f"{message} (after {timeout:.0f} s){log}")


def child_env(settings="tests.faults.settings", **extra) -> dict:
    """The environment of a child process using this test's database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=settings,
        FAULTS_DATABASE_NAME=connection.settings_dict["NAME"],
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def stop(process, timeout=10.0):
    """Terminate ``process``, and kill it when it does not exit in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)


def kill_group(process, timeout=10.0):
    """SIGKILL ``process`` and the children it forked (it leads its group)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout)


@contextmanager
def gunicorn(
    workers=1,
    timeout=30,
    settings="tests.faults.settings",
    stderr=None,
    env=None,
    **more_env,
):
    """Serve ``settings`` (a module based on tests.faults.settings) on a free
    port; yield its base URL. ``stderr``: a file for what the server prints;
    ``env`` (a dict) and ``more_env`` add to the server's environment."""
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
        env=child_env(settings, **(env or {}), **more_env),
        stderr=stderr,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


class Worker:
    """A running ``celery worker``; ``log()`` tells what it said, for failures."""

    def __init__(self, process, log_path):
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ran(self, task_name) -> int:
        """How many executions of ``task_name`` this worker finished."""
        return sum(
            task_name in line and "succeeded in" in line
            for line in self.log().splitlines()
        )

    def wait_exit(self, timeout=30.0) -> int:
        """Wait for the worker to die (a fault killed it); return its status."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the worker did not die in {timeout:.0f} s:\n{self.log()[-4000:]}"
            ) from None


@contextmanager
def celery_worker(
    queue,
    *,
    pool="solo",
    concurrency=1,
    broker_url=REDIS_URL,
    app="tests.faults.worker",
    settings="tests.faults.settings",
    **env,
):
    """Run a celery worker of ``app`` (with Django ``settings``) consuming
    ``queue``.

    ``env`` adds to the child's environment (the fault switches of
    ``tests.faults.worker``). The worker leads its own process group, so the
    pool's children die with it.
    """
    log_dir = Path(tempfile.mkdtemp(prefix="faults-worker-"))
    log_path = log_dir / "worker.log"
    command = [sys.executable, "-m", "celery", "-A", app, "worker"]
    # -l info: the log names each task run, for the tests and their failures.
    options = ["-P", pool, "-c", str(concurrency), "-Q", queue, "-l", "info"]
    # No gossip, mingle or heartbeat: one worker per queue, and a quick start.
    quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    name = ["-n", f"faults-{uuid.uuid4().hex[:8]}@%h"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, *options, *quiet, *name],
            cwd=ROOT,
            env=child_env(settings, CELERY_BROKER_URL=broker_url, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Worker(process, log_path)
    finally:
        # Killed, not stopped: a shutdown takes seconds, every test waits for
        # its messages to be acked, and what a failed test leaves unacked
        # stays in that test's own queue.
        kill_group(process)
        shutil.rmtree(log_dir, ignore_errors=True)


def send_task(name, *, queue, args=(), kwargs=None, broker_url=REDIS_URL, **options):
    """Send task ``name`` to ``queue`` on the fault tests' broker."""
    from tests.celery import app

    with app.connection_for_write(broker_url) as conn:
        producer = app.amqp.Producer(conn)
        app.send_task(name, args, kwargs, queue=queue, producer=producer, **options)


class RedisServer:
    """A private redis-server on its own port; ``stop()`` and ``start()`` it
    again on the same port, as a broker restart does (nothing persists)."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_for_port(self.port)

    def stop(self):
        if self.process is not None:
            stop(self.process)
            self.process = None


@contextmanager
def redis_server():
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
