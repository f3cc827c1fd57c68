"""The openstack provider (openstacksdk) against the simulator's Keystone v3 + Nova subset,
version discovery included: real HTTP on 127.0.0.1, nothing patched (SPEC L2, S6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providers.openstack import OpenStackProvider, nova_request_id
from slurm_heal.providers.simulator import SimulatorServer, image_id, server_id
from slurm_heal.types import Action
from tests.fakes import Clock


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.05, os_users={"heal": "pw"}) as server:
        yield server


def _provider(sim: SimulatorServer, tmp_path: Path, **kw: object) -> OpenStackProvider:
    args: dict[str, object] = dict(auth_url=sim.url, username="heal", password="pw",
                                   project_name="hpc", image="img-clean", state_dir=tmp_path,
                                   read_timeout=1.0, backoff=0.01, sleep=lambda s: None)
    args.update(kw)
    return OpenStackProvider(**args)  # type: ignore[arg-type]


def test_hard_reboot_through_nova_succeeds_once_active(sim: SimulatorServer,
                                                      tmp_path: Path) -> None:
    p = _provider(sim, tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-1:act:0")
    assert op.status == "running" and "reboot:HARD" in op.detail and "accepted" in op.detail
    assert sim.wait_idle(5)
    done = p.status("r-1:act:0")
    assert done is not None and done.status == "succeeded"
    assert sim.stats()["executed"] == {nova_request_id("r-1:act:0"): 1}
    (call,) = sim.nova_calls()
    assert (call["action"], call["args"]) == ("reboot", {"type": "HARD"})
    # The SDK read the simulator's version document: the highest microversion both know.
    assert call["microversion"] == "2.96"
    # The global request id Nova logs with the action is derived from the key.
    assert call["request_id"] == nova_request_id("r-1:act:0")


def test_rebuild_and_migrate_reach_nova(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path)
    p.submit("gpu07", Action.REBUILD, "r-2:act:0")
    p.submit("gpu08", Action.MIGRATE, "r-3:act:0")
    actions = {o["node"]: o["action"] for o in sim.operations()}
    assert actions == {"gpu07": "rebuild", "gpu08": "migrate"}
    # Migrate hands the old host to validation (SPEC V1).
    assert [v["host"] for v in sim.validation()] == ["host-gpu08"]


def test_a_key_is_never_posted_twice_even_after_a_restart(sim: SimulatorServer,
                                                          tmp_path: Path) -> None:
    """Nova has no idempotency key: the local record keeps S6."""
    _provider(sim, tmp_path).submit("gpu07", Action.REBOOT, "r-4:act:0")
    again = _provider(sim, tmp_path).submit("gpu07", Action.REBOOT, "r-4:act:0")
    assert again.key == "r-4:act:0"
    assert sim.stats()["executed"] == {nova_request_id("r-4:act:0"): 1}


def test_lost_answer_is_resolved_by_polling_not_by_posting_again(sim: SimulatorServer,
                                                                 tmp_path: Path) -> None:
    """After a lost answer only a server seen busy (or updated in a later second: Nova's
    timestamps have whole seconds) proves the action ran."""
    sim.set_faults(lose_response=1)
    sim.duration = 1.0  # a reboot takes a while: the poll sees the server rebooting
    p = _provider(sim, tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-5:act:0")
    assert op.status == "running" and "unknown" in op.detail
    busy = p.status("r-5:act:0")
    assert busy is not None and busy.status == "running"
    assert sim.wait_idle(5)
    done = p.status("r-5:act:0")
    assert done is not None and done.status == "succeeded"
    assert sim.stats()["executed"] == {nova_request_id("r-5:act:0"): 1}


def test_failed_server_ends_the_operation_failed(sim: SimulatorServer, tmp_path: Path) -> None:
    sim.set_faults(fail_actions=1)
    p = _provider(sim, tmp_path)
    p.submit("gpu07", Action.REBOOT, "r-6:act:0")
    assert sim.wait_idle(5)
    done = p.status("r-6:act:0")
    assert done is not None and done.status == "failed" and "ERROR" in done.detail


def test_configured_server_map_skips_the_name_lookup(sim: SimulatorServer,
                                                     tmp_path: Path) -> None:
    sim.host_of("gpu07")  # the server exists in the simulated cloud
    p = _provider(sim, tmp_path, servers={"gpu07": server_id("gpu07")})
    assert p.submit("gpu07", Action.REBOOT, "r-7:act:0").node == "gpu07"


def test_wrong_password_is_a_clear_error(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path, password="nope")
    with pytest.raises(ProviderError, match="HTTP 401"):
        p.submit("gpu07", Action.REBOOT, "r-8:act:0")
    assert sim.stats()["executed"] == {}


def test_power_cycle_is_refused(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path)
    assert not p.supports(Action.POWER_CYCLE)
    with pytest.raises(ProviderRefused, match="cannot power_cycle"):
        p.submit("gpu07", Action.POWER_CYCLE, "r-10:act:0")
    assert sim.nova_calls() == []


def test_rebuild_uses_the_servers_own_image_unless_one_is_configured(
        sim: SimulatorServer, tmp_path: Path) -> None:
    """SPEC L2: rebuild re-creates the VM from a clean image: by default the one the
    server was booted from (read from Nova), or the configured one."""
    p = _provider(sim, tmp_path, image=None)
    assert p.supports(Action.REBUILD)
    p.submit("gpu07", Action.REBUILD, "r-9:act:0")
    _provider(sim, tmp_path / "o", image="img-clean").submit("gpu08", Action.REBUILD,
                                                               "r-9b:act:0")
    assert [(c["node"], c["args"]) for c in sim.nova_calls()] == [
        ("gpu07", {"imageRef": image_id("gpu07")}), ("gpu08", {"imageRef": "img-clean"})]


def test_rebuild_of_a_volume_backed_server_is_refused(tmp_path: Path) -> None:
    with SimulatorServer(port=0, duration=0.05, volume_backed=("gpu07",)) as sim:
        p = _provider(sim, tmp_path, image=None)
        with pytest.raises(ProviderRefused, match="boots from a volume.*set \\[provider\\] image"):
            p.submit("gpu07", Action.REBUILD, "r-9c:act:0")
        assert sim.nova_calls() == []


# --- a stricter Nova: VERIFY_RESIZE, microversions, application credentials (issue 16) ----
def _server_status(sim: SimulatorServer, node: str) -> str:
    import requests

    token = requests.post(sim.url + "/v3/auth/tokens", timeout=5, json={"auth": {"identity": {
        "methods": ["password"], "password": {"user": {"name": "heal", "password": "pw",
                                                       "domain": {"name": "Default"}}}}}}
                          ).headers["X-Subject-Token"]
    body = requests.get(f"{sim.url}/compute/v2.1/servers/{server_id(node)}", timeout=5,
                        headers={"X-Auth-Token": token}).json()
    status: str = body["server"]["status"]
    return status


def test_cold_migrate_is_confirmed_through_verify_resize(sim: SimulatorServer,
                                                         tmp_path: Path) -> None:
    """SPEC L2: on Nova a cold migration stops at VERIFY_RESIZE until confirmResize."""
    p = _provider(sim, tmp_path)
    p.submit("gpu08", Action.MIGRATE, "r-m1:act:0")
    assert sim.wait_idle(5)
    assert _server_status(sim, "gpu08") == "VERIFY_RESIZE"
    op = p.status("r-m1:act:0")
    assert op is not None and "confirmResize" in op.detail
    done = p.status("r-m1:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert _server_status(sim, "gpu08") == "ACTIVE"
    assert sim.stats()["executed"] == {nova_request_id("r-m1:act:0"): 1}


def test_live_migrate_asks_for_the_compute_microversion_it_needs(sim: SimulatorServer,
                                                                 tmp_path: Path) -> None:
    """block_migration "auto" is a 2.25 feature (at 2.1 Nova answers 400); the SDK reads
    the simulator's version document (2.1 .. 2.96) and sends the call at 2.30."""
    p = _provider(sim, tmp_path, live=True)
    op = p.submit("gpu07", Action.MIGRATE, "r-m2:act:0")
    assert op.status == "running", op.detail
    assert sim.wait_idle(5)
    done = p.status("r-m2:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert sim.stats()["executed"] == {nova_request_id("r-m2:act:0"): 1}
    (call,) = sim.nova_calls()
    assert call["action"] == "os-migrateLive" and call["microversion"] == "2.30"
    assert call["args"] == {"host": None, "block_migration": "auto"}


def test_application_credentials_authenticate_without_a_password(tmp_path: Path) -> None:
    with SimulatorServer(port=0, duration=0.05, os_users={"appcred:ac-1": "s3cret"}) as sim:
        p = OpenStackProvider(auth_url=sim.url, application_credential_id="ac-1",
                              application_credential_secret="s3cret", state_dir=tmp_path)
        assert p.submit("gpu07", Action.REBOOT, "r-m3:act:0").status == "running"
        wrong = OpenStackProvider(auth_url=sim.url, application_credential_id="ac-1",
                                  application_credential_secret="nope",
                                  state_dir=tmp_path / "w")
        with pytest.raises(ProviderError, match="401"):
            wrong.submit("gpu07", Action.REBOOT, "r-m4:act:0")


def test_clouds_yaml_entries_configure_the_provider(tmp_path: Path) -> None:
    """clouds.yaml read by openstacksdk's loader: an application credential and a password."""
    from slurm_heal.errors import ConfigError
    from slurm_heal.providers import make_provider

    with SimulatorServer(port=0, duration=0.05,
                         os_users={"appcred:ac-1": "s3cret", "heal": "pw"}) as sim:
        clouds = tmp_path / "clouds.yaml"
        clouds.write_text(f"""clouds:
  hpc:
    auth_type: v3applicationcredential
    auth:
      auth_url: {sim.url}/v3
      application_credential_id: ac-1
      application_credential_secret: s3cret
    region_name: RegionOne
    interface: internal
    cacert: {tmp_path / "cloud-ca.pem"}
  legacy:
    auth:
      auth_url: {sim.url}
      username: heal
      password: pw
      project_name: hpc
      user_domain_name: Default
      project_domain_name: Default
""")
        p = make_provider({"type": "openstack", "cloud": "hpc", "clouds_yaml": str(clouds)},
                          state_dir=tmp_path / "a")
        assert isinstance(p, OpenStackProvider) and p.interface == "internal"
        assert p.verify == str(tmp_path / "cloud-ca.pem")  # TLS: the entry's CA bundle
        p.verify = True  # the simulator speaks plain HTTP
        assert p.submit("gpu07", Action.REBOOT, "r-m5:act:0").status == "running"
        q = make_provider({"type": "openstack", "cloud": "legacy",
                           "clouds_yaml": str(clouds)}, state_dir=tmp_path / "b")
        assert q.submit("gpu08", Action.REBOOT, "r-m6:act:0").status == "running"
        with pytest.raises(ConfigError, match="provider.cloud: cannot use cloud 'nope'"):
            make_provider({"type": "openstack", "cloud": "nope", "clouds_yaml": str(clouds)})


# --- reboot by policy, retries and unknown outcomes (issue 16) -------------------------
def test_soft_reboot_by_policy_is_a_soft_reboot(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path, reboot="soft")
    p.submit("gpu07", Action.REBOOT, "r-s1:act:0")
    assert sim.wait_idle(5)
    done = p.status("r-s1:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert [c["args"] for c in sim.nova_calls()] == [{"type": "SOFT"}]


def test_ignored_soft_reboot_falls_back_to_hard_after_the_timeout(sim: SimulatorServer,
                                                                 tmp_path: Path) -> None:
    """A guest that ignores ACPI keeps the server in REBOOT: after soft_reboot_timeout
    the provider posts a HARD reboot (once), which Nova lets supersede the soft one."""
    clock = Clock(1000.0)
    sim.set_faults(ignore_soft_reboot=1)
    p = _provider(sim, tmp_path, reboot="soft", soft_reboot_timeout=120, clock=clock)
    p.submit("gpu07", Action.REBOOT, "r-s2:act:0")
    clock.now += 60
    op = p.status("r-s2:act:0")
    assert op is not None and op.status == "running"
    assert _server_status(sim, "gpu07") == "REBOOT"
    clock.now += 61
    op = p.status("r-s2:act:0")
    assert op is not None and op.status == "running" and "rebooting hard" not in op.detail
    assert [c["args"] for c in sim.nova_calls()] == [{"type": "SOFT"}, {"type": "HARD"}]
    assert sim.wait_idle(5)
    done = p.status("r-s2:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert "reboot:HARD" in done.detail
    assert sim.stats()["executed"] == {nova_request_id("r-s2:act:0"): 1,
                                       nova_request_id("r-s2:act:0", "hard"): 1}
    assert len(sim.nova_calls()) == 2  # the HARD reboot was sent once


def test_busy_nova_is_retried_and_the_action_runs_once(sim: SimulatorServer,
                                                      tmp_path: Path) -> None:
    """429 (Retry-After honoured) and 503 mean Nova did not run it: retried, with backoff."""
    sleeps: list[float] = []
    p = _provider(sim, tmp_path, sleep=sleeps.append)
    p.submit("gpu07", Action.REBOOT, "r-b0:act:0")  # authenticated, servers looked up
    assert sim.wait_idle(5)
    sim.set_faults(error_429=1, retry_after=2, error_5xx=1)
    op = p.submit("gpu08", Action.REBOOT, "r-b1:act:0")
    assert op.status == "running", op.detail
    assert 2.0 in sleeps and len(sleeps) == 2
    assert sim.stats()["executed"][nova_request_id("r-b1:act:0")] == 1


def test_a_reset_action_post_is_never_sent_again(sim: SimulatorServer,
                                                 tmp_path: Path) -> None:
    """SPEC S6: keystoneauth's own retries are off (it would resend the POST after a
    reset): the outcome is unknown, the server is asked, nothing is posted twice."""
    sim.host_of("gpu07")  # the server exists in the simulated cloud
    p = _provider(sim, tmp_path, servers={"gpu07": server_id("gpu07")})
    p.submit("gpu08", Action.REBOOT, "r-u0:act:0")  # authenticated and discovered
    assert sim.wait_idle(5)
    before = sim.stats()["requests"]
    sim.set_faults(reset=1)
    op = p.submit("gpu07", Action.REBOOT, "r-u1:act:0")
    assert op.status == "running" and "unknown" in op.detail
    assert sim.stats()["requests"] == before + 1  # the one POST, not re-sent
    again = p.status("r-u1:act:0")
    assert again is not None and again.status == "running"
    assert nova_request_id("r-u1:act:0") not in sim.stats()["executed"]
    assert [c["node"] for c in sim.nova_calls()] == ["gpu08"]


def test_refused_action_fails_without_retrying(sim: SimulatorServer, tmp_path: Path) -> None:
    """A 4xx from Nova (here 409: the server is busy with another action) means nothing
    ran: the operation fails at once, without a retry."""
    sim.set_faults(never_finish=1)
    p = _provider(sim, tmp_path)
    p.submit("gpu07", Action.MIGRATE, "r-f0:act:0")
    op = p.submit("gpu07", Action.REBOOT, "r-f1:act:0")  # gpu07 is busy migrating: 409
    assert op.status == "failed" and "HTTP 409" in op.detail
    assert nova_request_id("r-f1:act:0") not in sim.stats()["executed"]
    assert [c["action"] for c in sim.nova_calls()] == ["migrate"]


def test_an_unreadable_answer_to_an_action_is_an_unknown_outcome(sim: SimulatorServer,
                                                                tmp_path: Path) -> None:
    """SPEC S6: the rebuild ran and its answer is 100,000 levels deep: never a
    RecursionError, never posted again; the server says how it ended."""
    p = _provider(sim, tmp_path)
    p.submit("gpu08", Action.REBOOT, "r-d0:act:0")  # authenticated and discovered
    sim.duration = 1.0
    sim.set_faults(deep_json=1)
    p.servers["gpu07"] = server_id("gpu07")
    sim.host_of("gpu07")
    op = p.submit("gpu07", Action.REBUILD, "r-d1:act:0")
    assert op.status == "running" and "nested too deeply" in op.detail
    busy = p.status("r-d1:act:0")
    assert busy is not None and busy.status == "running"
    assert sim.wait_idle(5)
    done = p.status("r-d1:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert sim.stats()["executed"][nova_request_id("r-d1:act:0")] == 1
    assert [c["action"] for c in sim.nova_calls()] == ["reboot", "rebuild"]


def test_an_older_nova_is_spoken_to_at_its_own_microversion(tmp_path: Path) -> None:
    """A Nova that knows only 2.1 .. 2.20: a reboot goes out at 2.20; a live migration,
    whose block_migration "auto" needs 2.25, is refused before anything is sent."""
    with SimulatorServer(port=0, duration=0.05, nova_max_microversion=(2, 20)) as sim:
        p = _provider(sim, tmp_path, live=True)
        p.submit("gpu08", Action.REBOOT, "r-v1:act:0")
        op = p.submit("gpu07", Action.MIGRATE, "r-v2:act:0")
        assert op.status == "failed" and "needs compute microversion 2.25" in op.detail
        assert [(c["action"], c["microversion"]) for c in sim.nova_calls()] == [
            ("reboot", "2.20")]


@pytest.mark.parametrize("found", ["4.13.0", "4.14.0", "1.0.2"])
def test_an_openstacksdk_that_resends_a_lost_post_is_refused(
        found: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38, SPEC S6: before openstacksdk 4.15 every request passed keystoneauth
    connect_retries=1 over the connection's 0, and a reboot whose answer was lost was
    posted again (test_a_reset_action_post_is_never_sent_again fails on 4.13 and 4.14,
    passes from 4.15 with keystoneauth1 5.10). The provider refuses such a library
    installed beside slurm-heal by other means than its extra."""
    import importlib.metadata

    from slurm_heal.errors import ConfigError
    from slurm_heal.providers import make_provider

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: found if name == "openstacksdk" else real(name))
    with pytest.raises(ConfigError, match=rf"openstacksdk {found} resends an action .*"
                                          r"openstacksdk >= 4\.15"):
        make_provider({"type": "openstack", "auth_url": "http://127.0.0.1:9/v3",
                       "username": "u", "password": "p", "project_name": "p"})


def test_the_installed_openstacksdk_is_one_that_does_not_resend() -> None:
    import importlib.metadata

    from slurm_heal.providers import OPENSTACKSDK_FLOOR

    release = tuple(int(p) for p in importlib.metadata.version("openstacksdk").split(".")[:2])
    assert release >= OPENSTACKSDK_FLOOR == (4, 15)
