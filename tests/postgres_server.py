"""A throwaway PostgreSQL server for tests of what shares state through a PostgreSQL URL (``dmlkit tune``).

The server is Debian's ``postgresql`` package (binaries in ``/usr/lib/postgresql/<ver>/bin``, installed
for CI by ``scripts/install_system_packages.sh``, which ``.ci/run`` calls before ``make test``); Python
talks to it through ``psycopg2`` (``psycopg2-binary``, in the ``tune`` and ``test`` extras). Nothing of
the system's own clusters (``/var/lib/postgresql``, port 5432) is used or touched.

Use it by importing the fixtures into a test module (pytest then sees them there)::

    from postgres_server import postgres_database, postgres_url  # noqa: F401  (pytest fixtures)

    def test_two_workers_share_a_study(postgres_database):
        url = postgres_database              # postgresql+psycopg2://dmlkit@127.0.0.1:PORT/<fresh db>
        study = optuna.create_study(storage=url, study_name="s")
        ...

``postgres_url`` (session scope) starts one server for the whole test session on first use and yields
the URL of its database ``dmlkit_test``; ``postgres_database`` (function scope) creates a fresh,
empty database on that server for one test (``new_database(url, name)`` does the same by hand and
returns the new database's URL). ``postgres_server()`` is the context manager underneath: it

- runs ``initdb`` into a fresh temporary folder (superuser ``dmlkit``, ``trust`` authentication for
  the unix socket and 127.0.0.1 only, C locale, UTF-8, ``--no-sync``),
- picks a free TCP port on 127.0.0.1 and starts ``postgres`` listening on 127.0.0.1 only, its unix
  socket inside the temporary folder, durability off (``fsync``, ``synchronous_commit``,
  ``full_page_writes``: a test server loses nothing worth keeping),
- waits until it accepts a connection (at most ``START_TIMEOUT_S``; on failure the error quotes the
  tail of the server log),
- creates the database, yields a ``PostgresServer`` (``.url``, ``.dsn``, ``.port``, ``.folder``,
  ``.start_s``, ``.log_tail()``),
- and on exit stops the server (``pg_ctl stop -m immediate``) and removes the folder.

PostgreSQL refuses to run as root. When the tests run as root (as here and in CI), ``initdb`` and
``pg_ctl`` run as the ``postgres`` system user that the Debian package creates (``runuser -u postgres
--``, else ``su``), and the temporary folder is chowned to it; otherwise they run as the current user.

When the binaries, the ``postgres`` user (as root) or ``psycopg2`` are missing the tests using the
fixtures are *skipped* with the reason and the install command, unless the environment variable ``CI``
is set (as in ``.ci/run``): then they *fail*, so CI can never silently skip the PostgreSQL tests.
Override the binary folder with ``DMLKIT_POSTGRES_BIN=/path/to/bin`` (holding initdb, pg_ctl, postgres).

The URLs are SQLAlchemy URLs naming the driver, ``postgresql+psycopg2://``: SQLAlchemy 2.1 maps a bare
``postgresql://`` to psycopg 3, which the extras do not install (optuna then raises "Failed to import DB
access module"). ``.dsn`` / ``libpq_dsn(url)`` give the bare libpq form for ``psycopg2.connect``/``psql``.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

SUPERUSER = "dmlkit"
# SQLAlchemy >= 2.1 maps a bare ``postgresql://`` to the psycopg (3) driver, which is not what the extras
# install (psycopg2-binary): the URLs handed out name the driver.
SQLALCHEMY_SCHEME = "postgresql+psycopg2"
DEFAULT_DATABASE = "dmlkit_test"
SERVER_USER = "postgres"  # the system user the server runs as when the tests run as root
START_TIMEOUT_S = 30.0  # pg_ctl start -w -t
TCP_READY_TIMEOUT_S = 10.0  # then, the first connection over TCP
STOP_TIMEOUT_S = 15
INSTALL_HINT = "run `bash scripts/install_system_packages.sh` (as root) to install Debian's postgresql"
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "32MB",
}


class PostgresUnavailable(RuntimeError):
    """No server can be started on this machine (binaries, user or driver missing)."""


def unavailable(reason: str) -> None:
    """Skip the test (locally) or fail it (when ``CI`` is set): the PostgreSQL tests must run in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"postgresql test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _version_key(path: str) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` -> (15,); newest version first when sorted descending."""
    match = re.search(r"/postgresql/([0-9.]+)/bin$", path)
    return tuple(int(part) for part in match.group(1).split(".") if part) if match else (0,)


def find_binaries() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: ``$DMLKIT_POSTGRES_BIN``, else the newest
    ``/usr/lib/postgresql/<ver>/bin`` (Debian keeps them off PATH), else the folder of ``initdb`` on PATH."""
    candidates = [os.environ.get("DMLKIT_POSTGRES_BIN")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    candidates.append(str(Path(on_path).parent) if on_path else None)
    for candidate in candidates:
        if candidate and all(os.access(Path(candidate) / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return Path(candidate)
    return None


def _as_server_user(command: list[str]) -> list[str]:
    """``command`` as it must be run: unchanged when not root, else as the ``postgres`` user."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", SERVER_USER, "--", *command]
    return ["su", SERVER_USER, "-s", "/bin/sh", "-c", " ".join(f"'{part}'" for part in command)]


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _private_folder() -> Path:
    """A fresh temporary folder the server user can reach (as root: chowned to it, under a world-traversable
    parent, falling back to /tmp when ``$TMPDIR`` is private); short, since the unix socket lives in it."""
    parent = Path(tempfile.gettempdir())
    if os.geteuid() == 0 and any(not (p.stat().st_mode & 0o001) for p in [parent, *parent.parents]):
        parent = Path("/tmp")
    folder = Path(tempfile.mkdtemp(prefix="dmlkit-pg-", dir=parent))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    folder.chmod(0o700)
    return folder


def libpq_dsn(url: str) -> str:
    """The libpq form (``postgresql://...``, what ``psycopg2.connect``/``psql`` take) of a SQLAlchemy URL
    (``postgresql+psycopg2://...``)."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def _connect(url: str, timeout_s: float = 2.0):
    import psycopg2

    return psycopg2.connect(libpq_dsn(url), connect_timeout=max(1, int(timeout_s)))


def new_database(url: str, name: str) -> str:
    """Create the empty database ``name`` on the server of ``url`` and return its URL (same user, host, port)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: use letters, digits and _ (at most 63)")
    connection = _connect(url)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
    return url.rsplit("/", 1)[0] + "/" + name


@dataclass
class PostgresServer:
    """A running throwaway server; see the module docstring."""

    url: str  # SQLAlchemy URL: postgresql+psycopg2://dmlkit@127.0.0.1:PORT/dmlkit_test
    port: int
    folder: Path  # data/, server.log, the unix socket
    start_s: float  # seconds from initdb to the first accepted connection

    @property
    def dsn(self) -> str:
        """The libpq URL (no driver name): for ``psycopg2.connect`` and ``psql``."""
        return libpq_dsn(self.url)

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as err:
            return f"(no server log: {err})"


def _run(command: list[str], folder: Path, what: str, timeout_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", LANG="C", PGTZ="UTC")
    try:
        result = subprocess.run(
            _as_server_user(command),
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"{what} took over {timeout_s:.0f} s: {' '.join(command)}") from err
    return result


@contextmanager
def postgres_server(
    database: str = DEFAULT_DATABASE, start_timeout_s: float = START_TIMEOUT_S
) -> Iterator[PostgresServer]:
    """Start a throwaway server, yield it with database ``database`` created, stop it and remove its folder.

    Raises ``PostgresUnavailable`` when it cannot be started here at all (nothing to install or no
    driver), ``RuntimeError`` (with the server log's tail) when it was tried and failed.
    """
    binaries = find_binaries()
    if binaries is None:
        raise PostgresUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; {INSTALL_HINT}")
    try:
        import psycopg2  # noqa: F401
    except ImportError as err:
        raise PostgresUnavailable("the python package 'psycopg2' is not installed; pip install -e '.[test]'") from err
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError as err:
            raise PostgresUnavailable(f"running as root but there is no '{SERVER_USER}' user; {INSTALL_HINT}") from err

    started = time.monotonic()
    folder = _private_folder()
    data = folder / "data"
    server: PostgresServer | None = None
    try:
        result = _run(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            folder,
            "initdb",
            start_timeout_s,
        )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
        # Only the unix socket and IPv4 loopback, both without password.
        (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        for attempt in range(3):  # the free port may be taken between choosing and binding it: choose again
            port = _free_port()
            server = PostgresServer(f"{SQLALCHEMY_SCHEME}://{SUPERUSER}@127.0.0.1:{port}/{database}", port, folder, 0.0)
            options = " ".join(f"-c {key}={value}" for key, value in SERVER_SETTINGS.items())
            options += f" -p {port} -k {folder}"
            result = _run(
                [
                    str(binaries / "pg_ctl"),
                    "start",
                    "-D",
                    str(data),
                    "-l",
                    str(server.log),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    str(int(start_timeout_s)),
                ],
                folder,
                "pg_ctl start",
                start_timeout_s + 5,
            )
            if result.returncode == 0:
                break
            if attempt < 2 and "could not bind" in server.log_tail(50).lower():
                continue
            raise RuntimeError(
                f"the PostgreSQL server did not start (pg_ctl exit {result.returncode}): {result.stderr.strip()}\n"
                f"--- tail of {server.log} ---\n{server.log_tail()}"
            )
        assert server is not None
        # pg_ctl -w saw the server ready (on its socket); check that it answers on TCP, as the tests will use it.
        admin_url = server.url.rsplit("/", 1)[0] + "/postgres"
        deadline = time.monotonic() + min(start_timeout_s, TCP_READY_TIMEOUT_S)
        while True:
            try:
                _connect(admin_url).close()
                break
            except Exception as err:  # psycopg2.OperationalError while it comes up
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the PostgreSQL server on 127.0.0.1:{port} accepted no connection within "
                        f"{min(start_timeout_s, TCP_READY_TIMEOUT_S):.0f} s: {err}\n"
                        f"--- tail of {server.log} ---\n{server.log_tail()}"
                    ) from err
                time.sleep(0.1)
        new_database(admin_url, database)
        server.start_s = time.monotonic() - started
        yield server
    finally:
        try:
            if (data / "postmaster.pid").exists():
                _run(
                    [
                        str(binaries / "pg_ctl"),
                        "stop",
                        "-D",
                        str(data),
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        str(STOP_TIMEOUT_S),
                    ],
                    folder,
                    "pg_ctl stop",
                    STOP_TIMEOUT_S + 5,
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


_SERVER: dict[str, PostgresServer] = {}


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of database ``dmlkit_test`` on one server shared by the whole test session."""
    try:
        with postgres_server() as server:
            _SERVER["server"] = server
            try:
                yield server.url
            finally:
                _SERVER.clear()
    except PostgresUnavailable as err:
        unavailable(str(err))


@pytest.fixture
def postgres_database(postgres_url: str, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh, empty database on the session's server, for one test (left there until the end)."""
    base = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    return new_database(postgres_url, f"t_{base}_{os.urandom(4).hex()}")
