"""Shared fixtures. The `lab` fixture: a private Slurm lab for tests marked `slurm`.

One lab per session, in a temporary directory on free ports (never a lab the user
started). Where Slurm is not installed those tests skip with the reason, except in CI
(env CI=true), where a missing Slurm is a failure, never a skip.

The version matrix (SPEC I6): ``--slurm VERSION`` picks the lab's Slurm (22.05, the
default, 25.11 or 26.05) and ``--slurm-backend NAME`` the backend the Slurm-facing tests
talk through (cli, the default; rest on 25.11 and 26.05; pyslurm on 25.11 only, as pyslurm
has no 26.05 release). `make test` runs every pair. In a pyslurm or rest pass the
Slurm-marked tests that do not go through the backend (they use the lab's own commands)
are skipped: their cli pass ran them.

A Slurm version the lab cannot run here (no build, no source to build it from, not
root) skips every Slurm-marked test at collection with what is missing and the command
that adds it, before any fixture of theirs runs; with CI=true the run stops there with
that reason instead (a usage error, exit 4).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from slurm_heal.slurm.base import SlurmClient
from tests.lab import BACKENDS, VERSIONS, Lab, make_backend, skip_reason, version_bin

# Timing is never asserted in tests (benchmarks/ measures it): Hypothesis's per-example
# deadline (200 ms by default) failed a property test once when CI's passes ran side by
# side on two cores (268 ms for the first call, 0.07 ms again).
settings.register_profile("slurm-heal", deadline=None)
settings.load_profile("slurm-heal")

LAB_NODES = 4
# Fixtures through which a test reaches the backend under test.
BACKEND_FIXTURES = ("slurm_client", "backend")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("slurm", "Slurm lab")
    group.addoption("--slurm", choices=VERSIONS,
                    default=os.environ.get("SLURM_HEAL_TEST_SLURM", "22.05"),
                    help="Slurm version of the test lab (default 22.05)")
    group.addoption("--slurm-backend", choices=("cli", "pyslurm", "rest"), default="cli",
                    help="backend the Slurm-marked tests use (rest: 25.11, 26.05; "
                         "pyslurm: 25.11)")


def pytest_configure(config: pytest.Config) -> None:
    version, backend = config.getoption("--slurm"), config.getoption("--slurm-backend")
    if backend not in BACKENDS[version]:
        raise pytest.UsageError(f"--slurm-backend {backend} does not exist on Slurm {version} "
                                f"(there: {', '.join(BACKENDS[version])})")
    bindir = version_bin(version)
    if bindir is not None:
        # In-process clients run `sinfo` & co. from PATH: that version's first (`lab env`).
        os.environ["PATH"] = f"{bindir}:{bindir.parent / 'sbin'}:{os.environ.get('PATH', '')}"
    # Labs that programs under test start themselves (`slurm-heal demo --lab`) run it too.
    os.environ["LAB_SLURM"] = version


def pytest_report_header(config: pytest.Config) -> str:
    return (f"slurm lab: Slurm {config.getoption('--slurm')}, "
            f"backend {config.getoption('--slurm-backend')}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slurm` get the lab (and a clean one: `lab_clean`) automatically.
    Where the lab cannot run they are skipped here, with the reason (CI=true: an error)."""
    if sys.version_info < (3, 11) and importlib.util.find_spec("openstack") is None:
        # openstacksdk >= 4.15 (the openstack extra: the first that does not resend a
        # POST, issue 38) needs 3.11: the dev extra leaves it out on 3.10.
        for item in items:
            if "openstack" in item.nodeid.lower():
                item.add_marker(pytest.mark.skip(reason="the openstack provider needs "
                                                 "Python >= 3.11 (openstacksdk >= 4.15)"))
    backend = config.getoption("--slurm-backend")
    marked = [item for item in items if item.get_closest_marker("slurm") is not None]
    unavailable = skip_reason(str(config.getoption("--slurm"))) if marked else ""
    if unavailable and _in_ci():
        raise pytest.UsageError(f"CI=true and {unavailable}")
    for item in marked:
        if unavailable:
            item.add_marker(pytest.mark.skip(reason=unavailable))
            continue
        # The lab first: a test's own fixtures (a lab of its own, a pip install) run on it.
        item.fixturenames[:0] = [f for f in ("lab",) if f not in item.fixturenames]
        item.fixturenames.extend(f for f in ("lab_clean",) if f not in item.fixturenames)
        if backend != "cli" and not set(BACKEND_FIXTURES) & set(item.fixturenames):
            item.add_marker(pytest.mark.skip(
                reason=f"does not go through the Slurm backend; ran in the cli pass, "
                       f"not again with {backend}"))


# What locates a config, a slurm.conf or a store outside the test's own hands (issue 36
# item 10): an operator's controller host has /etc/slurm-heal/heal.toml, often
# $SLURM_CONF, sometimes $SLURM_HEAL_CONFIG; none of it may reach a test.
HOST_LOCATIONS = ("SLURM_HEAL_CONFIG", "SLURM_HEAL_STATE_DIR", "SLURM_CONF")


def _clear_host_locations(patch: pytest.MonkeyPatch, root: Path) -> None:
    for name in HOST_LOCATIONS:
        patch.delenv(name, raising=False)
    patch.setenv("SLURM_HEAL_DEFAULT_ROOT", str(root))


@pytest.fixture(scope="session", autouse=True)
def hermetic_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The same for what session- and module-wide fixtures start (a `serve`, a lab's
    helpers): they run before any test's own fixture."""
    with pytest.MonkeyPatch.context() as patch:
        _clear_host_locations(patch, tmp_path_factory.mktemp("session-default-root"))
        yield


@pytest.fixture(autouse=True)
def hermetic_locations(hermetic_session: None, monkeypatch: pytest.MonkeyPatch,
                       tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No test reads the host's /etc/slurm-heal, /var/lib/slurm-heal, /etc/slurm/slurm.conf,
    $SLURM_HEAL_CONFIG, $SLURM_HEAL_STATE_DIR or $SLURM_CONF unless it sets them itself:
    the built-in defaults are looked for under an empty directory of the test's own
    (``$SLURM_HEAL_DEFAULT_ROOT``, which the CLI's subprocesses inherit) and those
    variables are cleared. Returns that directory (a test may put a default file there)."""
    root = tmp_path_factory.mktemp("default-root")
    _clear_host_locations(monkeypatch, root)
    return root


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The Slurm backend under test (--slurm-backend)."""
    return str(request.config.getoption("--slurm-backend"))


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A running Slurm lab of 4 nodes (gpu01..gpu04) on 127.0.0.1, for the session, of
    the --slurm version (with slurmrestd when the backend is rest)."""
    version = str(request.config.getoption("--slurm"))
    # Slurm-marked tests were skipped at collection already; this catches the others.
    unavailable = skip_reason(version)
    if unavailable:
        if _in_ci():
            pytest.fail(f"CI=true and {unavailable}", pytrace=False)
        pytest.skip(unavailable)
    rest = request.config.getoption("--slurm-backend") == "rest"
    if rest:
        # slurmrestd reads slurm.conf as an unprivileged user: pytest's temporary
        # directories (mode 700) would hide it, so this lab lives in one of its own.
        directory = Path(tempfile.mkdtemp(prefix="slurm-heal-lab-"))
        directory.chmod(0o755)
    else:
        directory = tmp_path_factory.mktemp("lab")
    the_lab = Lab(directory, nodes=LAB_NODES, slurm=version, rest=rest)
    try:
        the_lab.start()
    except Exception:
        the_lab.stop()
        raise
    try:
        yield the_lab
    finally:
        the_lab.stop()
        if rest:
            shutil.rmtree(directory, ignore_errors=True)


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
@pytest.fixture
def slurm_client(lab: Lab, backend: str) -> SlurmClient:
    """A client of the backend under test, on the lab."""
    return make_backend(lab, backend)
