"""Hashes and provenance recorded on every version: a file's and a tree's sha256, the commit."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from mlpipe.registry._lineage import file_sha256, git_commit, tree_sha256


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def test_file_sha256_is_the_sha256_of_the_bytes_even_past_one_chunk(tmp_path: Path) -> None:
    content = b"0123456789abcdef" * (1 << 17)  # 2 MiB: read in two chunks
    path = tmp_path / "model.bin"
    path.write_bytes(content)
    assert file_sha256(path) == hashlib.sha256(content).hexdigest()


def test_tree_sha256_is_the_same_for_the_same_files_wherever_they_lie(tmp_path: Path) -> None:
    files = {"MLmodel": b"flavor", "data/model.lgb": b"tree", "data/z.json": b"{}"}
    assert tree_sha256(_tree(tmp_path / "a", files)) == tree_sha256(_tree(tmp_path / "b", files))


def test_tree_sha256_changes_with_one_byte_of_content(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"MLmodel": b"flavor", "data/model.lgb": b"tree"})
    b = _tree(tmp_path / "b", {"MLmodel": b"flavor", "data/model.lgb": b"Tree"})
    assert tree_sha256(a) != tree_sha256(b)


def test_tree_sha256_changes_when_a_file_is_renamed_or_moved(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"data/model.lgb": b"tree"})
    renamed = _tree(tmp_path / "b", {"data/model.txt": b"tree"})
    moved = _tree(tmp_path / "c", {"model.lgb": b"tree"})
    assert len({tree_sha256(a), tree_sha256(renamed), tree_sha256(moved)}) == 3


def test_tree_sha256_ignores_empty_directories(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"MLmodel": b"flavor"})
    b = _tree(tmp_path / "b", {"MLmodel": b"flavor"})
    (b / "empty").mkdir()
    assert tree_sha256(a) == tree_sha256(b)


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_git_commit_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None


def test_git_commit_names_head_and_marks_a_modified_tracked_file_dirty(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text("a = 1\n")
    _git(tmp_path, "add", "train.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = _git(tmp_path, "rev-parse", "HEAD")

    (tmp_path / "notes.txt").write_text("untracked files do not make it dirty\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "train.py").write_text("a = 2\n")
    assert git_commit(tmp_path) == head + "+dirty"
