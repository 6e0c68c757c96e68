"""``settings`` here is a warehouse on each backend, migrated to the newest version: a DuckDB
file, then a PostgreSQL database (marked ``postgres``; under ``CI`` a missing server fails
the test, as :mod:`tests.integration.prod_services` does).

Migrating a new warehouse takes about a second, so each backend is migrated once a
session into a template, and each test gets a copy: the DuckDB file copied, the
PostgreSQL database created ``TEMPLATE`` the migrated one (and dropped afterwards).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from mlpipe.config import Settings
from mlpipe.warehouse import _engine
from tests.integration.prod_services import _admin_connect, postgres_database, sqlalchemy_url


def _migrate(settings: Settings) -> None:
    with _engine.write(settings):
        pass


def _database_file(settings: Settings) -> Path:
    return Path(str(make_url(settings.warehouse).database))


@pytest.fixture(scope="session")
def duckdb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB warehouse file at the newest migration."""
    settings = Settings(home=tmp_path_factory.mktemp("duckdb-template"))
    _migrate(settings)
    return _database_file(settings)


@pytest.fixture(scope="session")
def postgres_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The name of a PostgreSQL database at the newest migration (no one connected to it)."""
    with postgres_database() as url:
        _migrate(Settings(home=tmp_path_factory.mktemp("pg-template"), warehouse_url=url))
        yield str(make_url(url).database)


@contextmanager
def _copy_of(template: str, home: Path) -> Iterator[Settings]:
    """A new PostgreSQL database created from ``template``, dropped afterwards."""
    name = f"mlpipe_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield Settings(home=home, warehouse_url=sqlalchemy_url(name))
    finally:
        with _admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(
    name="settings", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def migrated_warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "duckdb":
        settings = Settings(home=tmp_path)
        path = _database_file(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(request.getfixturevalue("duckdb_template"), path)
        yield settings
        return
    with _copy_of(request.getfixturevalue("postgres_template"), tmp_path) as settings:
        yield settings


@pytest.fixture
def postgres_settings(postgres_template: str, tmp_path: Path) -> Iterator[Settings]:
    """A migrated PostgreSQL warehouse, for what only PostgreSQL does (mark the test
    ``postgres``)."""
    with _copy_of(postgres_template, tmp_path) as settings:
        yield settings


@pytest.fixture
def duckdb_settings(tmp_path: Path) -> Settings:
    """A project whose DuckDB warehouse does not exist yet."""
    return Settings(home=tmp_path)
