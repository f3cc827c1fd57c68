"""The redfish provider against sushy-tools' emulator (fake driver) on 127.0.0.1, through
a recording proxy that counts the resets that reached the BMC. SPEC L2, E4, S6."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError, ProviderError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.redfish import RedfishProvider
from slurm_heal.types import Action
from tests.emulators import RecordingProxy, SushyEmulator, self_signed

BUSY = '{"error": {"code": "Base.1.8.ServiceTemporarilyUnavailable", "message": "busy"}}'


@pytest.fixture
def bmc(sushy_emulator: SushyEmulator) -> Iterator[RecordingProxy]:
    with RecordingProxy(sushy_emulator.url) as proxy:
        yield proxy


def _provider(bmc: RecordingProxy, tmp_path: Path, **kw: object) -> RedfishProvider:
    pw = tmp_path / "bmc.pass"
    pw.write_text("secret\n")
    p = make_provider({"type": "redfish", "username": "admin", "password_file": str(pw),
                       "backoff": 0.01, "bmcs": {"gpu01": {"address": bmc.url}}, **kw},
                      state_dir=tmp_path)
    assert isinstance(p, RedfishProvider)
    return p


def test_reboot_is_one_force_restart_the_bmc_advertises(bmc: RecordingProxy,
                                                        tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path)
    op = p.submit("gpu01", Action.REBOOT, "r-b1:act:0")
    assert op.status == "succeeded" and "ForceRestart" in op.detail
    assert p.submit("gpu01", Action.REBOOT, "r-b1:act:0").id == op.id  # SPEC S6
    assert bmc.redfish_resets() == ["ForceRestart"]
    assert p.bmcs["gpu01"].password == "secret"


def test_reboot_follows_the_configured_preference(bmc: RecordingProxy, tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path, reboot_types=["GracefulRestart", "ForceRestart"])
    p.submit("gpu01", Action.REBOOT, "r-b2:act:0")
    assert bmc.redfish_resets() == ["GracefulRestart"]


def test_reboot_type_the_bmc_does_not_advertise_is_refused_naming_what_it_allows(
        bmc: RecordingProxy, tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path, reboot_types=["PowerCycle"])
    with pytest.raises(ProviderRefused, match="advertises none of PowerCycle.*ForceRestart"):
        p.submit("gpu01", Action.REBOOT, "r-b3:act:0")
    assert bmc.redfish_resets() == []


def test_power_cycle_without_power_cycle_is_force_off_then_on(bmc: RecordingProxy,
                                                              tmp_path: Path) -> None:
    """SPEC E4: the emulator advertises no PowerCycle; off, seen off, then on."""
    p = _provider(bmc, tmp_path)
    op = p.submit("gpu01", Action.POWER_CYCLE, "r-b4:act:0")
    # "On" goes out once the BMC reports the system off; on a busy machine that can take
    # a poll or two (the controller polls status by key, as here).
    deadline = time.monotonic() + 30
    while op.status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        op = p.status("r-b4:act:0") or op
    assert op.status == "succeeded", op.detail
    assert bmc.redfish_resets() == ["ForceOff", "On"]


def test_a_reset_whose_answer_was_lost_is_never_sent_again(bmc: RecordingProxy,
                                                           tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path)
    bmc.lose["Reset"] = (500, '{"error": {"message": "internal"}}')
    op = p.submit("gpu01", Action.REBOOT, "r-b5:act:0")
    assert op.status == "running"
    done = p.status("r-b5:act:0")
    assert done is not None and done.status == "failed" and "unknown" in done.detail
    assert bmc.redfish_resets() == ["ForceRestart"]


def test_a_busy_bmc_is_asked_again_and_resets_once(bmc: RecordingProxy, tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path)
    bmc.answer_for["Reset"] = [(503, BUSY)]
    assert p.submit("gpu01", Action.REBOOT, "r-b6:act:0").status == "succeeded"
    assert bmc.redfish_resets() == ["ForceRestart"]  # the busy one never reached it


def test_rebuild_and_migrate_are_not_bmc_actions(bmc: RecordingProxy, tmp_path: Path) -> None:
    p = _provider(bmc, tmp_path)
    for action in (Action.REBUILD, Action.MIGRATE, Action.REMOVE):
        assert not p.supports(action)
        with pytest.raises(ProviderRefused):
            p.submit("gpu01", action, f"r-b7-{action.value}:act:0")
    with pytest.raises(ProviderRefused, match="no BMC configured for gpu09"):
        p.submit("gpu09", Action.REBOOT, "r-b8:act:0")


def test_tls_is_verified_by_default(sushy_emulator: SushyEmulator, tmp_path: Path) -> None:
    """A BMC with a certificate we do not trust is refused; its CA bundle makes it work."""
    cert, key = self_signed(tmp_path)
    with RecordingProxy(sushy_emulator.url, tls=(cert, key)) as bmc:
        assert bmc.url.startswith("https://")
        p = _provider(bmc, tmp_path)
        assert p.verify is True
        with pytest.raises(ProviderError, match="(?i)certificate|ssl"):
            p.submit("gpu01", Action.REBOOT, "r-b9:act:0")
        assert bmc.redfish_resets() == []
        (tmp_path / "t").mkdir()
        trusted = _provider(bmc, tmp_path / "t", verify=str(cert))
        assert trusted.submit("gpu01", Action.REBOOT, "r-b10:act:0").status == "succeeded"
        assert bmc.redfish_resets() == ["ForceRestart"]


def test_bmcs_come_from_a_file_and_passwords_stay_out_of_the_config(
        bmc: RecordingProxy, tmp_path: Path) -> None:
    inventory = tmp_path / "bmcs.toml"
    inventory.write_text(f'[gpu01]\naddress = "{bmc.url}"\nusername = "root"\n'
                         'password = "calvin"\n')
    p = make_provider({"type": "redfish", "bmcs_file": str(inventory)}, state_dir=tmp_path)
    assert isinstance(p, RedfishProvider)
    assert p.submit("gpu01", Action.REBOOT, "r-b11:act:0").status == "succeeded"
    with pytest.raises(ConfigError, match="provider.password: never in this file"):
        make_provider({"type": "redfish", "password": "x", "bmcs_file": str(inventory)})
    with pytest.raises(ConfigError, match="provider.bmcs.gpu02.password"):
        make_provider({"type": "redfish", "bmcs": {"gpu02": {"address": bmc.url,
                                                             "password": "x"}}})
    with pytest.raises(ConfigError, match="provider.bmcs.gpu02: no password_file"):
        make_provider({"type": "redfish", "username": "u",
                       "bmcs": {"gpu02": {"address": bmc.url}}})
