"""optuna-dashboard opens a study folder's journal file (the command docs/tuning.md gives) and serves its trials."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna

from dmlkit.tune.storage import open_storage


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, deadline: float) -> dict:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_dashboard_serves_the_study_of_a_journal_file(tmp_path):
    study = optuna.create_study(study_name="ms", storage=open_storage(tmp_path), direction="maximize")
    for value in (0.31, 0.42):
        trial = study.ask()
        trial.suggest_float("loss.params.alpha", 0.01, 100, log=True)
        study.tell(trial, value)
    port = _free_port()
    command = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent)) or "optuna-dashboard"
    server = subprocess.Popen(
        [command, str(tmp_path / "journal.log"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        summaries = _get(f"http://127.0.0.1:{port}/api/studies", time.monotonic() + 60)["study_summaries"]
        assert [s["study_name"] for s in summaries] == ["ms"]
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{summaries[0]['study_id']}", time.monotonic() + 30)
        assert sorted(t["values"][0] for t in detail["trials"]) == [0.31, 0.42]
    finally:
        server.terminate()
        server.wait(timeout=10)
