"""The throwaway PostgreSQL server of tests/postgres_server.py: it serves SQLAlchemy and Optuna, isolates
databases, and is gone after its context manager exits."""

import time

import pytest

from postgres_server import (  # noqa: F401  (pytest fixtures)
    PostgresUnavailable,
    new_database,
    postgres_database,
    postgres_server,
    postgres_url,
    unavailable,
)


def test_sqlalchemy_connects_and_selects(postgres_url):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    assert postgres_url.startswith("postgresql+psycopg2://dmlkit@127.0.0.1:")
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(sqlalchemy.text("select 1")).scalar() == 1
            assert connection.execute(sqlalchemy.text("select current_database()")).scalar() == "dmlkit_test"
    finally:
        engine.dispose()


def test_new_databases_are_independent(postgres_url):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    first = new_database(postgres_url, "isolation_a")
    second = new_database(postgres_url, "isolation_b")
    assert first.endswith("/isolation_a") and second.endswith("/isolation_b")
    engines = [sqlalchemy.create_engine(first), sqlalchemy.create_engine(second)]
    try:
        with engines[0].begin() as connection:
            connection.execute(sqlalchemy.text("create table only_here (x int)"))
            connection.execute(sqlalchemy.text("insert into only_here values (7)"))
        assert sqlalchemy.inspect(engines[0]).has_table("only_here")
        assert not sqlalchemy.inspect(engines[1]).has_table("only_here")
        with engines[0].connect() as connection:
            assert connection.execute(sqlalchemy.text("select x from only_here")).scalar() == 7
    finally:
        for engine in engines:
            engine.dispose()
    with pytest.raises(ValueError):
        new_database(postgres_url, "bad; drop")


def test_optuna_study_is_shared_between_storages(postgres_database):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=postgres_database, study_name="shared", direction="minimize")
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
    study.tell(trial, 0.25)

    other_storage = optuna.storages.RDBStorage(postgres_database)  # another worker's view of the same URL
    loaded = optuna.load_study(study_name="shared", storage=other_storage)
    assert [t.state for t in loaded.trials] == [optuna.trial.TrialState.COMPLETE]
    assert loaded.best_value == 0.25
    assert loaded.best_params == {"lr": trial.params["lr"]}
    # and a trial told through the second storage is seen by the first
    loaded.tell(loaded.ask(), 0.125)
    assert sorted(t.value for t in study.trials) == [0.125, 0.25]


def test_server_is_stopped_and_removed_after_exit():
    psycopg2 = pytest.importorskip("psycopg2")
    try:
        with postgres_server(database="short_lived") as server:
            connection = psycopg2.connect(server.dsn, connect_timeout=2)
            connection.close()
            folder = server.folder
            assert (folder / "data" / "postmaster.pid").exists()
            print(f"postgres_server started in {server.start_s:.2f} s")
    except PostgresUnavailable as err:
        unavailable(str(err))
    assert not folder.exists()
    started = time.monotonic()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(server.dsn, connect_timeout=2)
    assert time.monotonic() - started < 5


def test_missing_server_skips_locally_but_fails_in_ci(monkeypatch, tmp_path):
    import postgres_server as module

    monkeypatch.setattr(module, "find_binaries", lambda: None)
    with pytest.raises(PostgresUnavailable, match="install_system_packages.sh"):
        with postgres_server():
            pass
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no postgres"):
        unavailable("no postgres")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI: no postgres"):
        unavailable("no postgres")
