"""IPMI fallback of the redfish provider (pyghmi) for BMCs without Redfish (SPEC L2, E4,
S6): real IPMI 2.0 over LAN (RMCP+, UDP) against pyghmi's own BMC server on 127.0.0.1
(tests/ipmi_bmc.py, its own process); nothing patched."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError, ProviderError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.base import Provider
from slurm_heal.types import Action
from tests.emulators import IpmiBmc

pytest.importorskip("pyghmi")


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[IpmiBmc]:
    with IpmiBmc(tmp_path / "bmc.log", off_delay=0.3) as server:
        yield server


def _provider(tmp_path: Path, port: int, *, password: str = "secret",
              deadline: float = 20.0, state: str = "state") -> Provider:
    (tmp_path / "pw").write_text(password + "\n")
    return make_provider({"type": "redfish", "username": "admin",
                          "password_file": str(tmp_path / "pw"), "deadline": deadline,
                          "bmcs": {"gpu01": {"protocol": "ipmi", "address": "127.0.0.1",
                                             "port": port}}},
                         state_dir=tmp_path / state)


def test_reboot_over_ipmi_resets_the_running_machine_once(bmc: IpmiBmc,
                                                          tmp_path: Path) -> None:
    """SPEC L2, S6: reboot is chassis control "boot" (a hard reset of a machine that is
    on); the same key submitted again is answered from the record."""
    p = _provider(tmp_path, bmc.port)
    op = p.submit("gpu01", Action.REBOOT, "r-i1:act:0")
    assert op.status == "succeeded", op.detail
    assert "ipmi: boot on gpu01 accepted" in op.detail
    again = p.submit("gpu01", Action.REBOOT, "r-i1:act:0")
    assert again.id == op.id
    assert bmc.commands() == ["reset"]


def test_power_cycle_over_ipmi_waits_for_power_off_before_on(bmc: IpmiBmc,
                                                             tmp_path: Path) -> None:
    """SPEC E4: off, then on only once the BMC reports the power off."""
    p = _provider(tmp_path, bmc.port)
    op = p.submit("gpu01", Action.POWER_CYCLE, "r-i2:act:0")
    for _ in range(400):  # the controller's polls, until the BMC has powered off
        if op.finished:
            break
        assert op.status == "running"
        time.sleep(0.05)
        op = p.status("r-i2:act:0") or op
    assert op.status == "succeeded", op.detail
    assert bmc.commands() == ["off", "on"]


def test_wrong_ipmi_password_is_a_clear_error_and_nothing_runs(bmc: IpmiBmc,
                                                               tmp_path: Path) -> None:
    p = _provider(tmp_path, bmc.port, password="nope")
    with pytest.raises(ProviderError, match="refused the credentials"):
        p.submit("gpu01", Action.REBOOT, "r-i3:act:0")
    assert bmc.commands() == []


def test_unreachable_bmc_sends_nothing_and_the_next_poll_tries_again(tmp_path: Path
                                                                      ) -> None:
    """Nothing answers: the login fails within the deadline and nothing was sent, so the
    next poll of the same key logs in again, and once the BMC is back it runs once."""
    with IpmiBmc(tmp_path / "first.log") as first:
        port = first.port
    p = _provider(tmp_path, port, deadline=3.0)
    with pytest.raises(ProviderError, match="gpu01"):
        p.submit("gpu01", Action.REBOOT, "r-i4:act:0")
    with IpmiBmc(tmp_path / "back.log", port=port) as back:
        op = None
        for _ in range(10):  # the controller's next cycles: each poll tries again
            try:
                op = p.status("r-i4:act:0")
            except ProviderError:  # pyghmi still finishing the abandoned login
                continue
            if op.status != "running":  # still running (a loaded machine: no answer
                break                   # within the deadline) is polled again next cycle
        assert op is not None and op.status == "succeeded", op
        # Sent once: the login abandoned at the first deadline never sends it.
        assert back.commands() == ["reset"]


def test_a_reset_the_bmc_refuses_ends_the_operation_failed_with_its_reason(
        tmp_path: Path) -> None:
    """An IPMI completion code is an answer: nothing ran, the operation fails with the
    BMC's reason, and the key is never sent again."""
    with IpmiBmc(tmp_path / "bmc.log", refuse_reset=True) as bmc:
        p = _provider(tmp_path, bmc.port)
        op = p.submit("gpu01", Action.REBOOT, "r-i6:act:0")
        assert op.status == "failed" and "refused" in op.detail, op.detail
        assert p.status("r-i6:act:0") == op
        assert bmc.commands() == []


def test_a_bmc_does_not_rebuild_or_migrate(bmc: IpmiBmc, tmp_path: Path) -> None:
    p = _provider(tmp_path, bmc.port)
    with pytest.raises(ProviderRefused, match="cannot rebuild"):
        p.submit("gpu01", Action.REBUILD, "r-i5:act:0")
    assert bmc.commands() == []


@pytest.mark.parametrize(("entry", "key", "problem"), [
    ({"protocol": "ipmi", "address": "https://10.0.0.1"}, "provider.bmcs.gpu01.address",
     "no URL"),
    ({"protocol": "ipmi", "address": "10.0.0.1", "port": 70000}, "provider.bmcs.gpu01.port",
     "UDP port"),
    ({"protocol": "ipmi", "address": "10.0.0.1", "system": "/redfish/v1/Systems/1"},
     "provider.bmcs.gpu01.system", "only for Redfish"),
    ({"address": "https://10.0.0.1", "port": 623}, "provider.bmcs.gpu01.port",
     "only for IPMI"),
    ({"protocol": "snmp", "address": "10.0.0.1"}, "provider.bmcs.gpu01.protocol",
     '"redfish" or "ipmi"'),
])
def test_bad_ipmi_config_names_the_key(tmp_path: Path, entry: dict[str, object], key: str,
                                       problem: str) -> None:
    (tmp_path / "pw").write_text("x")
    with pytest.raises(ConfigError, match=problem) as info:
        make_provider({"type": "redfish", "username": "admin",
                       "password_file": str(tmp_path / "pw"), "bmcs": {"gpu01": entry}})
    assert info.value.key == key
