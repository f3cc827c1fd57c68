"""Shared fixtures. The `lab` fixture: a private Slurm lab for tests marked `slurm`.

One lab per session, in a temporary directory on free ports (never a lab the user
started). Where Slurm is not installed those tests skip with the reason, except in CI
(env CI=true), where a missing Slurm is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.lab import Lab, slurm_missing

LAB_NODES = 4


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slurm` get the lab (and a clean one: `lab_clean`) automatically."""
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.fixturenames.extend(f for f in ("lab", "lab_clean")
                                     if f not in item.fixturenames)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A running Slurm 22.05 lab of 4 nodes (gpu01..gpu04) on 127.0.0.1, for the session."""
    missing = slurm_missing()
    if missing:
        message = (f"Slurm lab needs {', '.join(missing)}; install with "
                   "`contrib/lab/lab install` (root, Debian 12)")
        if _in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    if os.geteuid() != 0:
        message = "the Slurm lab runs its daemons as root (SlurmUser=root); run the tests as root"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    the_lab = Lab(tmp_path_factory.mktemp("lab"), nodes=LAB_NODES)
    try:
        the_lab.start()
    except Exception:
        the_lab.stop()
        raise
    try:
        yield the_lab
    finally:
        the_lab.stop()


@pytest.fixture
def lab_clean(lab: Lab) -> Lab:
    """The lab with every node IDLE, Extra empty and no jobs before the test runs."""
    lab.reset()
    return lab


# --- cloud and BMC emulators (tests/emulators.py), one each per session -----------------------
def _emulator(kind: type) -> Iterator[object]:
    try:
        server = kind().start()
    except (FileNotFoundError, RuntimeError) as exc:
        if _in_ci():
            raise
        pytest.skip(f"{kind.__name__} unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[object]:
    """moto's EC2 in server mode on 127.0.0.1 (a free port)."""
    from tests.emulators import MotoServer

    yield from _emulator(MotoServer)


@pytest.fixture(scope="session")
def sushy_emulator() -> Iterator[object]:
    """sushy-tools' Redfish emulator (fake driver) on 127.0.0.1 (a free port)."""
    from tests.emulators import SushyEmulator

    yield from _emulator(SushyEmulator)
