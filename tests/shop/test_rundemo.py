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
