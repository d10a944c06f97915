"""``make demo`` on a taken address stops before it starts anything."""

import socket
import subprocess

import pytest
from django.core.management import CommandError, call_command


def test_a_busy_address_is_refused_before_the_worker_and_beat_start(monkeypatch):
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        monkeypatch.setenv("DEMO_ADDRESS", address)

        with pytest.raises(CommandError, match=f"Cannot serve the demo on {address}"):
            call_command("rundemo")

    assert started == []


@pytest.mark.parametrize(
    "address", ["localhost", "127.0.0.1:http", "127.0.0.1:99999", "127.0.0.1:-1"]
)
def test_a_malformed_address_is_refused_readably(address, monkeypatch):
    # A port that is no number or out of range raised ValueError or
    # OverflowError from int() or bind(): a traceback instead of a hint.
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("DEMO_ADDRESS", address)

    with pytest.raises(CommandError, match="DEMO_ADDRESS"):
        call_command("rundemo")
    assert started == []


class _Child:
    def terminate(self):
        pass

    def wait(self, timeout):
        pass


def test_an_address_listening_everywhere_is_printed_as_one_to_browse(
    monkeypatch, capsys, settings, tmp_path
):
    # http://0.0.0.0:8080/ is no address a browser can open.
    from project.shop.management.commands import rundemo

    settings.BASE_DIR, settings.CELERY_BROKER_URL = tmp_path, "memory://"
    ran = []
    monkeypatch.setenv("DEMO_ADDRESS", "0.0.0.0:0")
    monkeypatch.setattr(rundemo, "refuse_a_busy_address", lambda address: None)
    monkeypatch.setattr(rundemo, "call_command", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: _Child())
    monkeypatch.setattr(rundemo.signal, "signal", lambda *a: None)

    call_command("rundemo")

    printed = capsys.readouterr().out
    assert "admin console: http://127.0.0.1:0/admin/" in printed
    assert "0.0.0.0" not in printed
    assert ("runserver", "0.0.0.0:0") in ran  # it still listens everywhere
