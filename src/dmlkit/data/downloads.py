"""Download-with-checksum for the datasets that can be fetched (MNIST, Fashion-MNIST, CIFAR).

A ``RemoteFile`` names a file, the URLs it can be fetched from (tried in
order) and the MD5 digests it may have (the official archive's, and, for
Fashion-MNIST, Debian's recompressed copy). ``ensure_file`` returns the file
when it is already in the folder *and* has an accepted digest; otherwise,
with ``download=True``, it fetches it into a temporary name in the same
folder, checks the digest and moves it into place with ``os.replace`` (a
reader never sees half a file); with ``download=False`` it raises a
``ValueError`` that names the file, where it was expected, and how to get it.

No test downloads: the tests write the files themselves and patch
``fetch_url``.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from dmlkit.io import atomic_write

__all__ = ["RemoteFile", "md5_of", "ensure_file", "fetch_url", "extract_tar"]


@dataclass(frozen=True)
class RemoteFile:
    """A file of a dataset: its name, where to fetch it, and the MD5 digests it may have."""

    name: str
    urls: tuple[str, ...]
    md5: tuple[str, ...]


class _WrongDigest(Exception):
    """A fetched file whose MD5 is not one of the accepted digests (the next URL is tried)."""


def md5_of(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex MD5 digest of a file's bytes."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def fetch_url(url: str, dest: Path, timeout: float = 60.0) -> None:
    """Write the bytes at ``url`` to ``dest`` (the one place dmlkit touches the network)."""
    request = urllib.request.Request(url, headers={"User-Agent": "dmlkit"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        while block := response.read(1 << 20):
            out.write(block)


def ensure_file(
    folder: Path,
    spec: RemoteFile,
    dataset: str,
    download: bool = False,
    fetch: Callable[[str, Path], None] | None = None,
) -> Path:
    """``folder / spec.name``, verified against ``spec.md5``; fetched first when missing and ``download``.

    Raises ``ValueError`` for a file with a wrong digest (naming the file, the
    digest found and the ones expected) and for a missing file when
    ``download`` is false or every URL failed.
    """
    folder = Path(folder)
    path = folder / spec.name
    if path.is_file():
        digest = md5_of(path)
        if digest not in spec.md5:
            raise ValueError(
                f"{dataset}: file '{path}' is corrupt or not the official one (MD5 {digest}, expected "
                f"{' or '.join(spec.md5)}); delete it and download it again from {spec.urls[0]}"
            )
        return path
    if not download:
        raise ValueError(
            f"{dataset}: file '{spec.name}' is missing; expected it at '{path}'. Get it with "
            f"`dmlkit data prepare {dataset} --root {folder}` (downloads and checks it) or download it "
            f"yourself from {spec.urls[0]} into that folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    fetch = fetch or fetch_url
    errors: list[str] = []
    for url in spec.urls:
        try:
            with atomic_write(path) as out:  # fetch writes the temporary file by name; a raise discards it
                fetch(url, Path(out.name))
                digest = md5_of(out.name)
                if digest not in spec.md5:
                    raise _WrongDigest(f"MD5 {digest}, expected {' or '.join(spec.md5)}")
            return path
        except (OSError, _WrongDigest) as err:  # URLError is an OSError
            errors.append(f"{url}: {err}")
    raise ValueError(
        f"{dataset}: could not download '{spec.name}' into '{folder}' ({'; '.join(errors)}); "
        f"download it by hand from one of {', '.join(spec.urls)} and place it there"
    )


def extract_tar(archive: Path, folder: Path, members: Sequence[str]) -> None:
    """Extract the regular files ``members`` (paths inside the archive) of a ``.tar.gz`` into ``folder``.

    Only the named members are written, each atomically, so a crafted archive
    cannot write outside ``folder`` and an interrupted extraction leaves no
    half file.
    """
    wanted = set(members)
    with tarfile.open(archive, "r:*") as tar:
        found = set()
        for member in tar:
            if member.name not in wanted or not member.isfile():
                continue
            target = folder / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                continue
            with source, atomic_write(target) as out:
                while block := source.read(1 << 20):
                    out.write(block)
            found.add(member.name)
    missing = sorted(wanted - found)
    if missing:
        raise ValueError(f"archive '{archive}' lacks {', '.join(missing)}; delete it and download it again")
