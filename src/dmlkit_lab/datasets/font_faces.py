"""The font faces of the ``font_glyphs`` dataset: which Debian packages, where their faces lie, their fingerprint.

``FONT_PACKAGES`` are Debian font packages that ``scripts/install_system_packages.sh`` installs. Chosen
(2026-11-27) by coverage of the DML-side characters of ``glyphs_testbed`` (1,416 classes), render time
and install size; every face renders a character in about 0.1 ms at 32 px (Noto's 0.7 ms). DejaVu
(``fonts-dejavu-core`` / ``-extra``) is left out on purpose: the pretrained glyph backbones were trained on
DejaVu and STIX faces (matplotlib's), and the faces here are meant to be ones they never saw. So are
faces that cover next to no DML character (``fonts-bwht``, ``fonts-humor-sans``: 30 and 4 renders).

A package's faces are its ``.ttf`` / ``.otf`` files as ``dpkg-query -L`` lists them, in package order,
then path order (the order the near-duplicate rule visits them). A package not installed is a
``ValueError`` that names the install command, ``INSTALL_COMMAND``.

``faces_fingerprint`` hashes each face's path and contents and the Pillow version that renders them:
part of the cache key, so another set of faces (or another version of one) is rendered again.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

__all__ = ["FACE_SUFFIXES", "FONT_PACKAGES", "INSTALL_COMMAND", "face_name", "faces_fingerprint", "package_faces"]

FONT_PACKAGES: tuple[str, ...] = (
    "fonts-noto-core",
    "fonts-urw-base35",
    "fonts-freefont-ttf",
    "fonts-liberation2",
    "fonts-croscore",
    "fonts-texgyre",
    "fonts-linuxlibertine",
    "fonts-ebgaramond",
    "fonts-junicode",
    "fonts-sil-gentium",
    "fonts-sil-charis",
    "fonts-sil-andika",
    "fonts-open-sans",
    "fonts-roboto-unhinted",
    "fonts-crosextra-carlito",
    "fonts-cantarell",
    "fonts-gfs-didot",
)
INSTALL_COMMAND = "bash scripts/install_system_packages.sh"
FACE_SUFFIXES = (".ttf", ".otf")


def package_faces(packages: Sequence[str] | None = None) -> list[Path]:
    """The face files of ``packages`` (default ``FONT_PACKAGES``; all must be installed), in package order, then
    path order."""
    packages = FONT_PACKAGES if packages is None else tuple(packages)
    if not packages:
        raise ValueError("font_glyphs needs at least one font package; the default is FONT_PACKAGES")
    missing = [p for p in packages if not _installed(p)]
    if missing:
        raise ValueError(
            f"font_glyphs needs the Debian font packages {', '.join(missing)}, which are not installed here; "
            f"install them with `{INSTALL_COMMAND}` (root or sudo; about 15 s), then run again"
        )
    faces: list[Path] = []
    for package in packages:
        listed = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True, check=True).stdout
        files = sorted({Path(f) for f in listed.split("\n") if f.lower().endswith(FACE_SUFFIXES)})
        faces.extend(f for f in files if f.is_file() and f not in faces)
    if not faces:
        raise ValueError(
            f"the font packages {', '.join(packages)} hold no .ttf / .otf face; reinstall them with `{INSTALL_COMMAND}`"
        )
    return faces


def _installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False  # not a Debian system: the install script names the packages to install
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip().endswith("installed")


def face_name(path: Path) -> str:
    """A face's name in the table: its folder and file name (``noto/NotoSans-Regular.ttf``)."""
    return f"{path.parent.name}/{path.name}"


def faces_fingerprint(faces: Sequence[Path]) -> str:
    """A short hash of the faces (in order: path and contents) and of the Pillow version that renders them."""
    import PIL

    h = hashlib.sha256(f"pillow {PIL.__version__}".encode())
    for path in faces:
        h.update(f"|{path}:".encode())
        h.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()[:16]
