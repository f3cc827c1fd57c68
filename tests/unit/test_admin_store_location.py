"""One store, found the same way by the daemon and every admin command, and said (SPEC I4,
I5): a person's word never lands in a store no controller reads, and a missing slurm.conf
fails at once with one message instead of a minute of Slurm's configless lookup.

No Slurm needed: the store is a real one in a temp directory; Slurm, where a command asks
it, is the in-process `MemorySlurm`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.location import locate
from slurm_heal.models import Plan, Remediation, Step, remediation_id
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
# Nothing from the machine running the tests may choose the store.
CLEAN = {"SLURM_HEAL_STATE_DIR": None, "SLURM_HEAL_CONFIG": None, "SUDO_USER": "alice"}


def run(args: list[str], env: dict[str, Any] | None = None, slurm: Any = None) -> Result:
    return CliRunner().invoke(cli, args, env={**CLEAN, **(env or {})},
                              obj={"slurm": slurm} if slurm else None)


def live(directory: Path, at: datetime | None = None) -> Path:
    """A state directory a controller runs on (what the daemon writes every cycle)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "heartbeat").write_text((at or datetime.now(timezone.utc)).isoformat() + "\n")
    return directory


def proposed(node: str = "gpu01") -> Remediation:
    return Remediation(id=remediation_id(node, "gpu.xid.79", None, None, T0), node=node,
                       fault="gpu.xid.79", action=Action.REBOOT, created=T0, updated=T0,
                       steps=(Step(at=T0, phase="proposed", rule="P2:default",
                                   why="waits for a person"),))


def config(tmp_path: Path, state_dir: Path) -> Path:
    f = tmp_path / "heal.toml"
    f.write_text(f'[controller]\nstate_dir = "{state_dir}"\n[provider]\ntype = "simulator"\n')
    return f


@pytest.fixture
def slurm() -> MemorySlurm:
    return MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: T0)


# ------------------------------------------------------------------ one way to find it


def test_without_config_flag_the_commands_read_the_store_of_slurm_heal_config(
        tmp_path: Path) -> None:
    """The daemon's config reached through $SLURM_HEAL_CONFIG gives every command (and
    the daemon, which calls the same `locate`) the same store."""
    state = live(tmp_path / "daemon-state")
    Store(state).apply(Plan(updates=(proposed(),)), T0)
    env = {"SLURM_HEAL_CONFIG": str(config(tmp_path, state))}
    result = run(["remediations"], env)
    assert result.exit_code == 0, result.output
    assert proposed().id in result.output
    assert f"store {state} (from [controller] state_dir of" in result.stderr
    data = json.loads(run(["remediations", "--json"], env).stdout)
    assert data["store"]["dir"] == str(state)
    assert data["store"]["from"].startswith("[controller] state_dir of")


def test_locate_orders_flag_then_environment_then_config(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path, tmp_path / "from-config")
    monkeypatch.delenv("SLURM_HEAL_STATE_DIR", raising=False)
    monkeypatch.setenv("SLURM_HEAL_CONFIG", str(cfg))
    assert locate(None, None).state_dir == tmp_path / "from-config"
    monkeypatch.setenv("SLURM_HEAL_STATE_DIR", str(tmp_path / "from-env"))
    assert locate(None, None).source == "$SLURM_HEAL_STATE_DIR"
    assert locate(str(tmp_path / "flag"), None).state_dir == tmp_path / "flag"


def test_every_store_command_says_which_store_it_used(tmp_path: Path, slurm: MemorySlurm) -> None:
    state = live(tmp_path / "state")
    Store(state).apply(Plan(updates=(proposed(),)), T0)
    env = {"SLURM_HEAL_STATE_DIR": str(state)}
    for args in (["remediations"], ["history", "gpu01"], ["explain", "gpu01"], ["breaker"],
                 ["approve", "gpu01", "--force"]):
        result = run(args, env, slurm)
        assert f"slurm-heal: store {state} (from $SLURM_HEAL_STATE_DIR)" in result.stderr, args
        as_json = run([*args, "--json"], env, slurm)
        assert json.loads(as_json.stdout)["store"]["dir"] == str(state), args
        assert as_json.stderr == "", args


# ------------------------------------------------------------------ writes no one reads


def test_a_request_to_a_store_that_does_not_exist_is_refused_and_nothing_written(
        tmp_path: Path, slurm: MemorySlurm) -> None:
    """The case that lost a person's request: exit 5 naming the path and how to point at
    the right store; no directory or file is created."""
    missing = tmp_path / "var-lib-slurm-heal"
    result = run(["request", "gpu01", "reboot", "--reason", "NCCL hangs"],
                 {"SLURM_HEAL_STATE_DIR": str(missing)}, slurm)
    assert result.exit_code == 5, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if "error" in ln]
    assert str(missing) in line and "does not exist" in line
    assert "--config" in line and "SLURM_HEAL_STATE_DIR" in line and "--force" in line
    assert not missing.exists()


@pytest.mark.parametrize("args", [["approve", "gpu01"], ["deny", "gpu01"], ["cancel", "gpu01"],
                                  ["request", "gpu01", "reboot", "--reason", "x"]])
def test_a_write_to_a_store_no_controller_has_a_heartbeat_in_is_refused(
        tmp_path: Path, slurm: MemorySlurm, args: list[str]) -> None:
    state = tmp_path / "state"
    Store(state).apply(Plan(updates=(proposed(),)), T0)  # a store, but no daemon on it
    result = run(args, {"SLURM_HEAL_STATE_DIR": str(state)}, slurm)
    assert result.exit_code == 5 and "no controller heartbeat" in result.output
    assert Store(state).load().inbox == ()
    forced = run([*args, "--force"], {"SLURM_HEAL_STATE_DIR": str(state)}, slurm)
    assert forced.exit_code == 0, forced.output
    assert len(Store(state).load().inbox) == 1


def test_a_write_with_an_old_heartbeat_is_queued_with_a_warning(tmp_path: Path) -> None:
    state = live(tmp_path / "state", at=datetime.now(timezone.utc) - timedelta(hours=3))
    Store(state).apply(Plan(updates=(proposed(),)), T0)
    result = run(["approve", "gpu01"], {"SLURM_HEAL_STATE_DIR": str(state)})
    assert result.exit_code == 0, result.output
    assert "is the daemon running?" in result.stderr


# ------------------------------------------------------------------ slurm.conf


@pytest.mark.parametrize("args", [["remediations"], ["request", "gpu01", "reboot", "--reason", "x"],
                                  ["alerts"], ["explain", "gpu01"]])
def test_a_missing_slurm_conf_fails_at_once_with_one_message(tmp_path: Path,
                                                             args: list[str]) -> None:
    missing = tmp_path / "etc-slurm" / "slurm.conf"
    result = run(args, {"SLURM_CONF": str(missing)})
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 3, result.output
    assert lines == [f"slurm-heal: error: slurm.conf not found: {missing} ($SLURM_CONF); set "
                     "SLURM_CONF or [controller] slurm_conf to the cluster's slurm.conf"]


@pytest.mark.parametrize("args", [["status"], ["alerts"], ["explain", "gpu01"]])
def test_every_admin_command_uses_the_configs_slurm_conf(tmp_path: Path,
                                                         args: list[str]) -> None:
    """SPEC I4, issue 36 item 5: with $SLURM_CONF unset, `status` asks Slurm with the
    config's [controller] slurm_conf, as `explain` and `alerts` do (one place resolves it)."""
    missing = tmp_path / "site" / "slurm.conf"
    cfg = tmp_path / "heal.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{tmp_path / "state"}"\nslurm_conf = "{missing}"\n'
                   '[provider]\ntype = "simulator"\n')
    result = run([*args, "--config", str(cfg)])
    # explain answers from the store alone when Slurm does not (docs/cli.md)
    assert result.exit_code == (0 if args[0] == "explain" else 3), result.output
    assert (f"slurm.conf not found: {missing} ([controller] slurm_conf)"
            in result.output), result.output


# ------------------------------------------------------------------ --json errors


def test_json_errors_are_one_json_object_with_the_exit_status(tmp_path: Path) -> None:
    state = live(tmp_path / "state")
    result = run(["approve", "gpu09", "--json"], {"SLURM_HEAL_STATE_DIR": str(state)})
    assert result.exit_code == 6
    err = json.loads(result.stdout)["error"]
    assert err["exit"] == 6 and err["kind"] == "NotFound" and "gpu09" in err["message"]
    assert json.loads(result.stdout)["store"]["dir"] == str(state)
    usage = run(["request", "gpu01", "reboot", "--reason", " ", "--json"],
                {"SLURM_HEAL_STATE_DIR": str(state)})
    assert usage.exit_code == 2
    assert json.loads(usage.stdout)["error"]["kind"] == "UsageError"


def test_the_config_check_creates_nothing_so_a_replica_starting_beside_it_keeps_its_dir(
        tmp_path: Path) -> None:
    """SPEC S6, issue 22: two replicas start on one fresh state_dir (the lab's
    two-daemon test under a loaded CI). Each checks its config (`usable_state_dir`
    without create: nothing is made, the nearest existing parent is probed) and then
    makes the directory and writes in it. Before, the check made the directory and
    removed it again, so the other replica could find its directory gone between its
    mkdir and its first file and exit 5. Here one thread checks over and over while
    the other makes the directory and writes a file in it, 300 times."""
    import threading

    from slurm_heal.location import usable_state_dir

    state = tmp_path / "var" / "state"
    usable_state_dir(state, create=False)
    assert not (tmp_path / "var").exists()  # the check made nothing
    assert [p.name for p in tmp_path.iterdir()] == []  # and left no probe
    stop = threading.Event()
    errors: list[BaseException] = []
    current = [state]  # each round a fresh state_dir, the checker on the same one

    def check() -> None:
        while not stop.is_set():
            try:
                usable_state_dir(current[0], create=False)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    checker = threading.Thread(target=check)
    checker.start()
    lost = []
    try:
        for i in range(300):
            current[0] = fresh = tmp_path / f"var{i}" / "state"
            usable_state_dir(fresh)  # what the daemon does, then its first write
            try:
                (fresh / "heartbeat").write_text(f"{i}\n")
            except FileNotFoundError as exc:
                lost.append(exc)
    finally:
        stop.set()
        checker.join()
    assert not errors and not lost, (errors, lost[:3])


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_the_config_check_refuses_a_state_dir_that_cannot_be_made(tmp_path: Path,
                                                                 where: str) -> None:
    """Issue 22 item 9 without creating anything: a file, or a path under a file, is a
    StoreError naming the path, with or without create."""
    from slurm_heal.errors import StoreError
    from slurm_heal.location import usable_state_dir

    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory\n")
    bad = blocker if where == "a file" else blocker / "state"
    for create in (False, True):
        with pytest.raises(StoreError, match="state_dir"):
            usable_state_dir(bad, create=create)
    assert blocker.read_text() == "not a directory\n"
