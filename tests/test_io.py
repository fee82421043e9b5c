"""dmlkit.io: atomic writes replace the file whole, and a failed write leaves the old file and no temporary file."""

from __future__ import annotations

import json

import pytest

import dmlkit.io as dio
from dmlkit.io import atomic_write, write_json_atomic, write_text_atomic


def test_writes_replace_the_file(tmp_path):
    path = tmp_path / "a.bin"
    with atomic_write(path) as fh:
        fh.write(b"old")
    with atomic_write(path) as fh:
        fh.write(b"new!")
    assert path.read_bytes() == b"new!"
    write_text_atomic(tmp_path / "a.txt", "x\ny")
    assert (tmp_path / "a.txt").read_text() == "x\ny"
    write_json_atomic(tmp_path / "a.json", {"b": 1, "a": [2]})
    assert (tmp_path / "a.json").read_text() == '{\n  "b": 1,\n  "a": [\n    2\n  ]\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.json", "a.txt"]


def test_the_new_content_is_invisible_until_the_block_ends(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with atomic_write(path, "w") as fh:
        fh.write("new")
        fh.flush()
        assert path.read_text() == "old"
        assert fh.name != str(path) and fh.name.startswith(str(tmp_path / ".a.txt."))
    assert path.read_text() == "new"


def _fail(*args, **kwargs):
    raise OSError("disk full")


@pytest.mark.parametrize("where", ["block", "fsync", "replace"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path, monkeypatch, where):
    path = tmp_path / "a.txt"
    write_text_atomic(path, "old")
    if where == "fsync":
        monkeypatch.setattr(dio.os, "fsync", _fail)
    elif where == "replace":
        monkeypatch.setattr(dio.os, "replace", _fail)
    with pytest.raises(OSError, match="disk full"):
        with atomic_write(path, "w") as fh:
            fh.write("half of the new")
            if where == "block":
                _fail()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_an_interrupt_also_cleans_up(tmp_path):
    path = tmp_path / "a.bin"
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(path) as fh:
            fh.write(b"x")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_unserialisable_json_writes_nothing(tmp_path):
    path = tmp_path / "a.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_bad_mode_and_missing_folder_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'wb' or 'w'"):
        with atomic_write(tmp_path / "a", "ab"):
            pass
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "missing" / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


def _dead_pid():
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_stale_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    import os

    dead, alive = _dead_pid(), os.getppid()
    stale = tmp_path / f".last.pt.{dead}-0a1b2c3d.tmp"
    live = tmp_path / f".best.pt.{alive}-0a1b2c3d.tmp"
    other = tmp_path / f".embeddings.npy.{dead}-0a1b2c3d.tmp"
    kept = [tmp_path / "last.pt", tmp_path / ".lock", tmp_path / f"notes.{dead}-0a1b2c3d.tmp"]
    for path in [stale, live, other, *kept]:
        path.write_bytes(b"x")
    assert dio.remove_stale_temporaries(tmp_path, targets=["last.pt"]) == [stale]
    assert dio.remove_stale_temporaries(tmp_path) == [other]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in [live, *kept])
    assert dio.remove_stale_temporaries(tmp_path / "absent") == []


def test_the_temporary_name_of_an_atomic_write_is_recognised_as_one(tmp_path):
    with atomic_write(tmp_path / "a.txt", "w") as fh:
        match = dio.TEMPORARY_NAME.match(fh.name.rpartition("/")[2])
    assert match is not None and match["target"] == "a.txt"
