"""scripts/slim_font_debs.sh: a repacked package keeps its name, version and face files byte for byte, and nothing else."""

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian)")

ROOT = Path(__file__).resolve().parents[1]


def _build_package(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: fonts-test\nVersion: 1.2-3\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n"
    )
    (tree / "DEBIAN" / "conffiles").write_text("/etc/fonts/conf.d/60-test.conf\n")
    faces = tree / "usr" / "share" / "fonts" / "truetype" / "test"
    faces.mkdir(parents=True)
    (faces / "Test-Regular.ttf").write_bytes(bytes(range(256)) * 40)
    (faces / "Test-Bold.otf").write_bytes(b"\x01\x02" * 3000)
    (tree / "usr" / "share" / "doc" / "fonts-test").mkdir(parents=True)
    (tree / "usr" / "share" / "doc" / "fonts-test" / "README").write_text("x" * 5000)
    (tree / "usr" / "share" / "fonts" / "type1").mkdir(parents=True)
    (tree / "usr" / "share" / "fonts" / "type1" / "Test.pfb").write_bytes(b"\x03" * 9000)
    (tree / "etc" / "fonts" / "conf.d").mkdir(parents=True)
    (tree / "etc" / "fonts" / "conf.d" / "60-test.conf").write_text("<fontconfig/>")
    src = tmp_path / "debs"
    src.mkdir()
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(tree), str(src / "fonts-test_1.2-3_all.deb")],
        check=True,
        capture_output=True,
    )
    return src


def _contents(deb: Path, where: Path) -> dict[str, bytes]:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(where)], check=True)
    return {str(p.relative_to(where)): p.read_bytes() for p in where.rglob("*") if p.is_file()}


def test_a_slim_package_keeps_exactly_its_faces(tmp_path):
    src = _build_package(tmp_path)
    dest = tmp_path / "slim"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "slim_font_debs.sh"), str(src), str(dest)], check=True, capture_output=True
    )
    slim, full = dest / "fonts-test_1.2-3_all.deb", src / "fonts-test_1.2-3_all.deb"
    fields = ["dpkg-deb", "--show", "--showformat=${Package} ${Version}"]
    assert subprocess.run([*fields, str(slim)], capture_output=True, text=True).stdout == "fonts-test 1.2-3"
    original, kept = _contents(full, tmp_path / "x_full"), _contents(slim, tmp_path / "x_slim")
    faces = {name: data for name, data in original.items() if name.endswith((".ttf", ".otf"))}
    assert len(faces) == 2 and len(original) == 5
    assert kept == faces
