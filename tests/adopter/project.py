"""An adopter's project: django-once installed from its wheel into a fresh
virtualenv, a ``startproject`` of its own, and the documented code in it.

Every process started here leads its own process group and is stopped on the
way out, and every wait is bounded.
"""

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from tests.servers import ADOPTER_REDIS_URL, DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
# The pages whose marked blocks make the project (the quickstart and the app
# pages), and the README, which shows some of the same blocks again.
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# The adopter tests' own Redis database (tests/servers.py); each run also
# prefixes its keys, so two runs at once never consume each other's tasks.
REDIS_URL = ADOPTER_REDIS_URL

PROJECT = "mysite"
APP = "orders"
# The API's user (HTTP Basic, which DRF enables by default).
USERNAME = "alice"
PASSWORD = "alice-has-a-long-password"

# A marked block: the HTML comment, then the fenced code right below it.
MARKED_BLOCK = re.compile(r"<!-- adopter: ([\w-]+) -->\n```\w*\n(.*?)```", re.S)
INSTALL_BLOCK = "install"
# The proof kit's install, for the project's own tests.
TESTING_INSTALL_BLOCK = "install-testing"
INSTALL_COMMAND = re.compile(r'pip install "django-once\[([\w,]+)\]"')

# Where each marked block goes in the generated project: "write" replaces the
# file startproject/startapp made (or creates it), "append" adds to its end, as
# the block's "# <path>" and "# <path>, continued" say.
BLOCKS = {
    "settings-keys": (f"{PROJECT}/settings.py", "append"),
    "models": (f"{APP}/models.py", "write"),
    "views-keys": (f"{APP}/views.py", "write"),
    "urls-app": (f"{APP}/urls.py", "write"),
    "settings-events": (f"{PROJECT}/settings.py", "append"),
    "celery": (f"{PROJECT}/celery.py", "write"),
    "init": (f"{PROJECT}/__init__.py", "write"),
    "urls-project": (f"{PROJECT}/urls.py", "write"),
    "views-events": (f"{APP}/views.py", "write"),
    "models-events": (f"{APP}/models.py", "append"),
    "tasks": (f"{APP}/tasks.py", "write"),
    "handlers": (f"{APP}/webhooks.py", "write"),
    "pytest-ini": ("pytest.ini", "write"),
    "tests": (f"{APP}/test_guarantees.py", "write"),
}

# The blocks of the project with all four apps, in the quickstart's order.
ALL_APPS_BLOCKS = [
    "settings-keys",
    "models",
    "urls-app",
    "settings-events",
    "celery",
    "init",
    "urls-project",
    "views-events",
    "models-events",
    "tasks",
    "handlers",
]

# The lines of startproject's settings that a project without the admin and
# sessions does not have.
NO_ADMIN = (
    "django.contrib.admin",
    "django.contrib.sessions",
    "django.contrib.messages",
    "AuthenticationMiddleware",
)


def documented_blocks() -> dict[str, str]:
    """The docs pages' marked code blocks, by marker name."""
    blocks: dict[str, str] = {}
    for page in sorted(DOCS.glob("*.md")):
        for name, code in MARKED_BLOCK.findall(page.read_text()):
            assert name not in blocks, f"the docs mark two blocks '{name}'"
            blocks[name] = code
    return blocks


def readme_blocks() -> dict[str, str]:
    """The README's marked code blocks, by marker name: copies of the docs'."""
    blocks: dict[str, str] = {}
    for name, code in MARKED_BLOCK.findall(README.read_text()):
        assert name not in blocks, f"the README marks two blocks '{name}'"
        blocks[name] = code
    return blocks


def documented_extras(block: str = INSTALL_BLOCK) -> str:
    """The extras of a documented install command, e.g. ``postgres,redis``."""
    found = INSTALL_COMMAND.search(documented_blocks()[block])
    assert found, f"the docs' {block} block has no pip install django-once[...]"
    return found.group(1)


# Building and installing.


def run(command, *, cwd=None, env=None, timeout=300, check=True):
    """Run ``command``; on failure, fail with everything it printed."""
    try:
        result = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{' '.join(map(str, command))} took over {timeout} s:\n"
            f"{_text(exc.stdout)}{_text(exc.stderr)}"
        ) from None
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, command))} exited {result.returncode}:\n"
            f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
        )
    return result


def _text(output) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def index_unreachable(workdir: Path) -> str | None:
    """Why pip cannot fetch packages here, or None when it can.

    Asked only after a build or an install failed, to tell a machine without
    a package index (skip) from a packaging bug (fail).
    """
    pip = [sys.executable, "-m", "pip", "download", "--no-cache-dir", "--no-deps"]
    result = run(
        [*pip, "--dest", str(workdir), "Django"],
        timeout=180,
        check=False,
    )
    if result.returncode == 0:
        return None
    return result.stderr.strip().splitlines()[-1] if result.stderr else "pip failed"


def build_distributions(outdir: Path) -> tuple[Path, Path]:
    """Build the sdist, then the wheel from it, as a release would."""
    run([sys.executable, "-m", "build", "--outdir", outdir, ROOT])
    (sdist,) = outdir.glob("*.tar.gz")
    (wheel,) = outdir.glob("*.whl")
    return sdist, wheel


@dataclass
class Virtualenv:
    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def environ(self, **extra) -> dict:
        """An environment that knows nothing of this repository or its tests."""
        env = {
            name: value
            for name, value in os.environ.items()
            # pytest-django sets DJANGO_SETTINGS_MODULE to the suite's settings.
            if not name.startswith(("DJANGO_", "CELERY_", "PYTHON", "VIRTUAL_ENV"))
        }
        env.update(
            PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.path),
            PYTHONUNBUFFERED="1",
            **extra,
        )
        return env


def create_virtualenv(path: Path, requirement: str) -> Virtualenv:
    """A fresh virtualenv with ``requirement`` installed (pip's cache helps)."""
    run([sys.executable, "-m", "venv", path], timeout=120)
    venv = Virtualenv(path)
    run(
        [venv.python, "-m", "pip", "install", "--quiet", requirement],
        env=venv.environ(),
        timeout=600,
    )
    return venv


# Services: a database of its own, and this run's Redis keys.


class Database:
    """A PostgreSQL database created for one project and dropped after it."""

    def __init__(self):
        self.name = f"adopter_{uuid.uuid4().hex[:12]}"
        url = urlsplit(DATABASE_URL)
        self.params = {
            "host": url.hostname or "127.0.0.1",
            "port": url.port or 5432,
            "user": url.username or "postgres",
            "password": url.password or "",
        }

    def _server(self):
        return psycopg.connect(dbname="postgres", autocommit=True, **self.params)

    def create(self):
        with self._server() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self):
        with self._server() as conn:
            # FORCE: a worker that died holding a connection must not keep it.
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def drop_test_database(self):
        """Drop the database pytest-django makes for the project's own tests."""
        with self._server() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "test_{self.name}" WITH (FORCE)')

    def settings(self) -> str:
        """The DATABASES setting of the project, pointing here."""
        config = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name,
            "HOST": self.params["host"],
            "PORT": self.params["port"],
            "USER": self.params["user"],
            "PASSWORD": self.params["password"],
        }
        return (
            "# The test's: the database it created for this project.\n"
            f"DATABASES = {{'default': {config!r}}}\n"
        )

    def value(self, sql, *params):
        """The first column of the first row of ``sql`` (None without a row)."""
        with psycopg.connect(dbname=self.name, autocommit=True, **self.params) as c:
            row = c.execute(sql, params).fetchone()
        return row[0] if row else None

    def execute(self, sql, *params):
        with psycopg.connect(dbname=self.name, autocommit=True, **self.params) as c:
            c.execute(sql, params)


def delete_redis_keys(prefix: str):
    """Delete what this run left in its Redis database (its prefixed keys)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# The project.


class Project:
    """``django-admin startproject mysite`` with ``startapp orders``, in ``path``."""

    def __init__(self, path: Path, venv: Virtualenv, **env):
        self.path = path
        self.venv = venv
        self.env = venv.environ(**env)
        self.blocks = documented_blocks()
        path.mkdir(parents=True)
        self.run(["django-admin", "startproject", PROJECT, "."])
        self.manage("startapp", APP)
        self.append(f"{PROJECT}/settings.py", f"INSTALLED_APPS += [{APP!r}]\n")

    def file(self, relative) -> Path:
        return self.path / relative

    def write(self, relative, text):
        self.file(relative).write_text(text)

    def append(self, relative, text):
        with self.file(relative).open("a") as file:
            file.write(f"\n{text}")

    def set_up(self):
        """Migrate as the quickstart says, and add the API's user."""
        self.manage("makemigrations", APP)
        self.manage("migrate")
        self.manage(
            "createsuperuser",
            "--noinput",
            f"--username={USERNAME}",
            "--email=alice@example.com",
            env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        )

    def isolate_redis_keys(self) -> str:
        """Prefix every Redis key the project's Celery makes (queues, unacked
        messages) with a prefix of this run's, which it returns: two runs at
        once never consume each other's tasks."""
        prefix = f"adopter-{uuid.uuid4().hex[:12]}:"
        self.append(
            f"{PROJECT}/settings.py",
            "# The test's: this run's keys in the shared Redis database.\n"
            f"CELERY_BROKER_TRANSPORT_OPTIONS = {{'global_keyprefix': {prefix!r}}}\n",
        )
        return prefix

    def drop_admin_and_sessions(self):
        """Take the admin, sessions and messages out of startproject's settings
        (the auth middleware goes too: it needs sessions)."""
        settings = self.file(f"{PROJECT}/settings.py")
        lines = settings.read_text().splitlines(keepends=True)
        settings.write_text(
            "".join(line for line in lines if not any(n in line for n in NO_ADMIN))
        )

    def use(self, *names):
        """Put the documented blocks ``names`` where their first lines say."""
        for name in names:
            relative, how = BLOCKS[name]
            if how == "append":
                self.append(relative, self.blocks[name])
            else:
                self.write(relative, self.blocks[name])

    def run(self, command, *, env=None, **options):
        """Run ``command`` in the project's folder; ``env`` adds variables."""
        return run(command, cwd=self.path, env={**self.env, **(env or {})}, **options)

    def manage(self, *args, **options):
        return self.run([self.venv.python, "manage.py", *args], **options)

    @contextmanager
    def server(self):
        """``manage.py runserver`` on a free port; yields its base URL."""
        port = free_port()
        command = [self.venv.python, "manage.py", "runserver", "--noreload"]
        with self.process("runserver", [*command, f"127.0.0.1:{port}"]) as server:
            wait_for_port(port, server)
            server.url = f"http://127.0.0.1:{port}"
            yield server

    @contextmanager
    def worker(self):
        """``celery -A mysite worker``, one process, ready to consume."""
        command = [self.venv.bin / "celery", "-A", PROJECT, "worker", "-l", "info"]
        # Solo pool: one process to stop. No gossip, mingle or heartbeat: a
        # single worker, and a quick start.
        options = ["-P", "solo", "--without-gossip", "--without-mingle"]
        options += ["--without-heartbeat", "-n", f"adopter-{uuid.uuid4().hex[:8]}@%h"]
        with self.process("worker", [*command, *options]) as worker:
            wait_until(lambda: " ready." in worker.log(), "the worker started", worker)
            yield worker

    @contextmanager
    def process(self, name, command):
        log_path = self.path / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                command,
                cwd=self.path,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = Process(name, popen, log_path)
        try:
            yield process
        finally:
            process.stop()


class Process:
    """A running server or worker; ``log()`` is what it printed so far."""

    def __init__(self, name, popen, log_path):
        self.name = name
        self.popen = popen
        self.log_path = log_path
        self.url = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self) -> str:
        return f"\n--- {self.name} log ---\n{self.log()[-6000:]}"

    def stop(self, timeout=10.0):
        """SIGTERM the process group, SIGKILL it if it lingers."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                continue


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port, process, timeout=60.0):
    def listening():
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        return False

    wait_until(listening, f"{process.name} listens on {port}", process, timeout)


def wait_until(predicate, what, process=None, timeout=60.0):
    """Poll ``predicate``; fail after ``timeout`` with the process's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.popen.poll() is not None:
            raise AssertionError(f"{process.name} exited before {what}{process.tail()}")
        time.sleep(0.1)
    log = process.tail() if process else ""
    raise AssertionError(f"timed out ({timeout:.0f} s) waiting until {what}{log}")


# HTTP.


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes


def api_headers(key: str) -> dict:
    """The headers of a JSON request to the API, as the user, with ``key``."""
    token = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    return {
        "Authorization": f"Basic {token}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }


# Loopback only: never through a proxy the environment may name.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url, body: bytes, headers: dict, timeout=30.0) -> Response:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            return Response(answer.status, dict(answer.headers), answer.read())
    except urllib.error.HTTPError as error:
        return Response(error.code, dict(error.headers), error.read())


def remove(path: Path):
    shutil.rmtree(path, ignore_errors=True)
