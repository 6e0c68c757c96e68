"""The control plane a process talks to, and whether a local project never deployed."""

from __future__ import annotations

from pathlib import Path

from mlpipe.config import Settings
from mlpipe.deployments import Deployment, control_plane
from mlpipe.deployments._plane import never_deployed


def test_one_control_plane_per_url(tmp_path: Path) -> None:
    a, b = Settings(home=tmp_path / "a"), Settings(home=tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert control_plane(a) is control_plane(Settings(home=tmp_path / "a"))
    assert control_plane(a) is not control_plane(b)
    assert control_plane(a).url == a.control


def test_a_local_project_has_never_deployed_until_its_database_exists(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert never_deployed(settings)
    assert not any(tmp_path.rglob("*.db"))  # asking created nothing
    control_plane(settings).commit(
        Deployment(model="fraud", champion="1", actor="ci"), read_generation=0, action="deploy"
    )
    assert not never_deployed(settings)


def test_a_server_control_plane_is_never_taken_as_never_deployed(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, control_url="postgresql+psycopg://h/db")
    assert not never_deployed(settings)
