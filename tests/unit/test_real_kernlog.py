"""Kernel-log scan on real output others captured (tests/data/real/kernlog, origins in
tests/data/real/SOURCES.md): multi-line "fallen off the bus" (SPEC D2), dmesg
``--time-format=iso`` / ``--decode`` stamps (D1), NVLink5 ``Link -1`` (D1), NVSwitch SXid
(D10); and the scan's work on one long line (linear, counted, not timed)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import catalog
from slurm_heal.checks import kernlog, paths, sources
from slurm_heal.checks.runner import cordons
from slurm_heal.types import Severity

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "kernlog"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def _latch(res: kernlog.ScanResult) -> dict[str, dict[str, object]]:
    cat = catalog.load()

    def recovery(text: str) -> str | None:
        action = cat.recovery_action(text)
        return action.value if action else None

    return kernlog.latch({}, res.events, kernlog.GpuMap(uuid=res.gpu_uuids), NOW, None,
                         lambda f: cat.get(f).severity, lambda f: cat.get(f).explanation,
                         recovery)


# ------------------------------------------------------------ SPEC D2: three-line off-bus

def test_a_gpu_fallen_off_the_bus_over_three_dmesg_lines_is_named() -> None:
    """SPEC D2 on a real 570.158 capture (NVSentinel #155): the driver prints the GPU on
    the first line and "fallen off the bus" on the third; the alert names 0000:b3:00 and
    its evidence holds the three lines."""
    res = kernlog.scan((REAL / "nvsentinel-155-off-bus-dmesg.log").read_bytes())
    (ev,) = res.events
    assert ev.fault == "gpu.off_bus"
    assert ev.pci == "0000:b3:00" and ev.key == "0000:b3:00"
    assert "NVRM: The NVIDIA GPU 0000:b3:00.0" in ev.line.raw
    assert "not responding to commands" in ev.line.raw
    (finding,) = kernlog.findings(_latch(res), "gpu07")
    assert finding.evidence[0].data["pci"] == "0000:b3:00"
    assert "0000:b3:00" in finding.summary


def test_two_gpus_fallen_off_the_bus_in_the_three_line_form_are_two_alerts() -> None:
    """SPEC D2: the real capture's message, once for each of two GPUs (the second bus
    written by hand), gives two alerts, not one merged under an empty key."""
    real = (REAL / "nvsentinel-155-off-bus-dmesg.log").read_bytes().split(b"\n")[:3]
    other = [real[0].replace(b"0000:b3:00.0", b"0000:c1:00.0"), *real[1:]]
    res = kernlog.scan(b"\n".join(real + other) + b"\n")
    assert sorted(e.pci or "" for e in res.events) == ["0000:b3:00", "0000:c1:00"]
    assert len(_latch(res)) == 2


def test_the_one_line_off_bus_after_an_xid_79_stays_one_alert() -> None:
    """SPEC D2 on the real gpud capture: Xid 79 and the driver's own "GPU 0000:91:00.0:
    GPU has fallen off the bus." line are one fault, not two."""
    res = kernlog.scan((REAL / "gpud-sxid-readme-dmesg.log").read_bytes())
    gpu = [e for e in res.events if not e.fault.startswith("nvswitch.")]
    assert [(e.fault, e.pci) for e in gpu] == [("gpu.xid.79", "0000:91:00")]


# ------------------------------------------------------ SPEC D1: dmesg iso / decode stamps

def test_dmesg_decode_iso_stamps_are_read_with_their_comma_fraction() -> None:
    """SPEC D1 on gpud's real ``dmesg --decode --time-format=iso`` capture: every line
    keeps its wall time (``,498559`` is the fraction) and the message without the
    ``kern  :warn  :`` prefix."""
    res = kernlog.scan((REAL / "gpud-dmesg-decode-iso.log").read_bytes())
    assert [e.xid for e in res.events] == [13] * 15 + [43]
    assert res.events[0].line.at == "2025-01-21T02:21:33.498559+00:00"
    assert res.events[0].line.message.startswith("NVRM: Xid (PCI:0000:38:00): 13,")
    assert res.events[-1].process == "pt_main_thread" and res.events[-1].pid == 2815167
    sxid = kernlog.split_line(
        (REAL / "gpud-pr338-dmesg-decode-iso-sxid.log").read_text().strip())
    assert sxid is not None and sxid.at == "2025-01-25T10:34:54.859532+00:00"
    assert sxid.message.startswith("nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028,")


def test_plain_dmesg_iso_stamps_without_decode_are_read() -> None:
    """SPEC D1: ``dmesg --time-format=iso`` without ``--decode`` (the same real line, its
    prefix cut off)."""
    raw = (REAL / "gpud-dmesg-decode-iso.log").read_text().splitlines()[-1]
    line = kernlog.split_line(raw.split(" : ", 1)[1])
    assert line is not None and line.at == "2025-01-21T02:21:33.502278+00:00"
    assert line.message.startswith("NVRM: Xid (PCI:0000:38:00): 43,")


def test_a_file_in_dmesg_iso_form_keeps_no_fault_from_before_this_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1: the file source's first read skips events older than this boot; with
    the iso stamps read, the 2025 capture's Xids are all from before a 2026 boot."""
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "uptime").write_text("3600.00 100.00\n")
    log = tmp_path / "kern.log"
    log.write_bytes((REAL / "gpud-dmesg-decode-iso.log").read_bytes())
    res = kernlog.ScanResult()
    sources.read_file(str(log), None, 1 << 30, res, now=NOW)
    assert res.events == []
    # ... and a boot before the capture keeps them all
    (tmp_path / "proc" / "uptime").write_text(
        f"{(NOW - datetime(2025, 1, 1, tzinfo=timezone.utc)).total_seconds():.0f} 1\n")
    res = kernlog.ScanResult()
    sources.read_file(str(log), None, 1 << 30, res, now=NOW)
    assert len(res.events) == 16


# -------------------------------------------------------------- SPEC D1: NVLink5 Link -1

def test_nvlink5_link_minus_one_is_decoded() -> None:
    """SPEC D1 on gpud's real GB200 lines: ``Link -1`` (NETIR, no single link) decodes
    like any link, so its Fatal/Nonfatal word is read."""
    res = kernlog.scan((REAL / "gpud-pr1174-nvlink5.log").read_bytes())
    first = res.events[0]
    assert first.xid == 149
    assert first.data["link"] == -1 and first.data["fatal"] is True
    assert first.data["subcode"] == "NETIR" and first.data["intr_info"] == "0x000fe406"
    assert res.events[2].data["fatal"] is False


def test_a_nonfatal_nvlink5_line_on_link_minus_one_is_informational() -> None:
    """SPEC D1: the real Link -1 line with its verdict turned Nonfatal (by hand) is
    recorded, never a drain."""
    raw = (REAL / "gpud-pr1174-nvlink5.log").read_text().splitlines()[0]
    res = kernlog.scan(raw.replace(" Fatal ", " Nonfatal ").encode() + b"\n")
    (finding,) = kernlog.findings(_latch(res), "gpu07")
    assert finding.severity is Severity.INFO
    assert not cordons(finding)


# --------------------------------------------------------------------- SPEC D10: SXid

def test_a_fatal_sxid_is_critical_and_drains_one_alert_per_switch_and_code() -> None:
    """SPEC D10 on gpud's real HGX capture: SXid 20034 "LTSSM Fault Up", Fatal, on three
    switches (switch 0 on two links); the Severity/Data lines are not events."""
    res = kernlog.scan((REAL / "gpud-sxid-readme-dmesg.log").read_bytes())
    sx = [e for e in res.events if e.fault.startswith("nvswitch.")]
    assert [(e.fault, e.data["nvswitch"], e.data["link"]) for e in sx] == [
        ("nvswitch.sxid.fatal", "nvidia-nvswitch1", 48),
        ("nvswitch.sxid.fatal", "nvidia-nvswitch0", 63),
        ("nvswitch.sxid.fatal", "nvidia-nvswitch2", 37),
        ("nvswitch.sxid.fatal", "nvidia-nvswitch0", 62)]
    latched = _latch(res)
    found = [f for f in kernlog.findings(latched, "gpu07") if f.fault.startswith("nvswitch")]
    assert len(found) == 3  # one per switch
    for f in found:
        assert f.severity is Severity.CRITICAL and cordons(f)
        assert f.evidence[0].data["sxid"] == 20034
        assert "SXid 20034" in f.summary and "LTSSM Fault Up" in f.summary
    assert catalog.load().get("nvswitch.sxid.fatal").action.value == "reboot"


def test_a_nonfatal_sxid_is_recorded_never_a_drain() -> None:
    """SPEC D10 on a real H100 HGX boot (nvtrust #124): SXid 22013 Non-fatal on three
    links of one switch is one informational record."""
    res = kernlog.scan((REAL / "nvtrust-124-sxid-nonfatal.log").read_bytes())
    assert [e.data["link"] for e in res.events] == [44, 45, 46]
    (finding,) = kernlog.findings(_latch(res), "gpu07")
    assert finding.fault == "nvswitch.sxid.nonfatal"
    assert finding.severity is Severity.INFO and not cordons(finding)
    assert "3 times" in finding.summary
    assert catalog.load().get("nvswitch.sxid.nonfatal").record_only


# ------------------------------------------------- issue: one long line is linear work

LONG_LINES: dict[str, Callable[[int], bytes]] = {
    # the shapes that were super-linear: digits before the amdgpu RAS words (19-26 s at
    # 32 KB), PCI-like words before "fallen off the bus", many "INFO: task", many "rcu"
    "amdgpu_ras_digits": lambda n: b"uncorrectable hardware error " + b"1" * n,
    "off_bus_hex": lambda n: b"fallen off the bus " + b"0000:3b:00 " * (n // 11),
    "hung_tasks": lambda n: b"INFO: task " * (n // 11) + b"blocked for more than",
    "rcu_words": lambda n: b"INFO: rcu_" + b"rcu detected " * (n // 13),
    "xfs_parens": lambda n: b"XFS (" + b"XFS (a):" * (n // 8) + b" Shutting down filesystem",
    "xid_154_parens": lambda n: b"NVRM: Xid (PCI:0000:3b:00): 154, " + b"to 0x1 (" * (n // 8),
    "sxid_words": lambda n: b"nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 1, Fatal, " * (n // 52),
}


def _work(line: bytes) -> int:
    kernlog.WORK[0] = 0
    kernlog.scan(line + b"\n")
    return int(kernlog.WORK[0])


@pytest.mark.parametrize("shape", sorted(LONG_LINES))
def test_the_scan_of_one_long_line_is_linear_in_its_length(shape: str) -> None:
    """Issue 22 item 3: the characters the patterns may examine (``kernlog.WORK``, each
    anchored match counts the text it is given, each unanchored search the square of
    its window) grow with the line, not with its square: 8 times the line (4 KB ->
    32 KB) costs at most 8 times the work, plus a constant."""
    make = LONG_LINES[shape]
    small, big = _work(make(4096)), _work(make(8 * 4096))
    assert big <= 8 * small + 100_000, (small, big)
    assert big <= 40 * 8 * 4096  # and a small multiple of the line itself


def test_real_journalctl_short_iso_lines_are_dated_and_raise_nothing() -> None:
    """SPEC D1 on gpud's real ``journalctl -k -o short-iso`` capture: ``+0000`` zones,
    a long host name; nvidia-peermem errors and link changes are not faults."""
    data = (REAL / "gpud-journalctl-short-iso.log").read_bytes()
    res = kernlog.scan(data)
    assert res.events == [] and res.skipped == 0
    line = kernlog.split_line(data.decode().splitlines()[-1])
    assert line is not None and line.at == "2025-01-17T17:39:30+00:00"
    assert line.message.startswith("nvidia-peermem nv_get_p2p_free_callback:127 ERROR")


def test_a_file_mixing_the_real_forms_reads_each_line_in_its_own() -> None:
    """SPEC D1: dmesg --decode iso, plain dmesg and journal short-iso in one file (as
    a file source may see after a change of logger), each line read in its form."""
    parts = [(REAL / n).read_bytes() for n in (
        "gpud-dmesg-decode-iso.log", "nvsentinel-155-off-bus-dmesg.log",
        "gpud-journalctl-short-iso.log", "gpud-sxid-readme-dmesg.log")]
    res = kernlog.scan(b"".join(parts))
    faults = [e.fault for e in res.events]
    assert faults.count("gpu.xid.13") == 15 and faults.count("gpu.off_bus") == 1
    assert faults.count("nvswitch.sxid.fatal") == 4 and faults.count("gpu.xid.79") == 1


def test_a_fault_on_a_long_line_keeps_a_bounded_evidence_text() -> None:
    """Issue 22 item 3: the real Xid 79 line with 32 KB after it is still the fault, and
    its evidence in the state file is cut to kernlog.MAX_EVIDENCE_TEXT characters."""
    raw = (REAL / "gpud-sxid-readme-dmesg.log").read_bytes().splitlines()[2]
    res = kernlog.scan(raw + b" " + b"x" * 32768 + b"\n")
    (finding,) = kernlog.findings(_latch(res), "gpu07")
    assert finding.fault == "gpu.xid.79"
    assert len(finding.evidence[0].text) == kernlog.MAX_EVIDENCE_TEXT
    assert finding.evidence[0].text.startswith("[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79")


# ------------------------------------- SPEC D1 (issue 35): talos, and no time, no raise

TALOS = "talos-vllm-40652-a100-dmesg.log"


def _replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uptime: float) -> None:
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc" / "uptime").write_text(f"{uptime:.2f} 1.00\n")


def test_talosctl_dmesg_lines_are_read_with_their_nanosecond_stamps() -> None:
    """SPEC D1 on a real Talos 1.12 node (vLLM issue 40652, 8x A100): ``<node>: kern:
    warning: [2026-04-22T21:25:20.505406921Z]: NVRM: Xid ...``: the Xid 62 keeps its wall
    time (nanoseconds cut to microseconds), the message its own words; the padded
    ``kern:    info:`` level and a line without the node prefix read the same."""
    res = kernlog.scan((REAL / TALOS).read_bytes())
    (xid,) = [e for e in res.events if e.xid is not None]
    assert xid.xid == 62 and xid.pci == "0000:48:00"
    assert xid.line.at == "2026-04-22T21:25:20.505406+00:00"
    assert xid.line.message.startswith("NVRM: Xid (PCI:0000:48:00): 62, 00002740")
    assert res.gpu_uuids == {"0000:48:00": "GPU-5fc0bcec-c2e1-38dc-8994-2a9f9f3b709e"}
    raw = (REAL / TALOS).read_text().splitlines()[4]
    for variant in (raw.split(": ", 1)[1], raw.replace("kern: warning:", "kern:    info:")):
        line = kernlog.split_line(variant)
        assert line is not None and line.at == "2026-04-22T21:25:20.505406+00:00"


def test_a_talos_xid_from_months_before_this_boot_is_not_raised_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1, issue 35 item 3: a replay root booted 30 s ago with fresh state (a new
    install, a rebuilt node) reads the real Talos file: its critical Xid 62 of April is
    from before the boot and is not raised (before: no time read, raised as current)."""
    _replay(tmp_path, monkeypatch, 30.0)
    log = tmp_path / "kern.log"
    log.write_bytes((REAL / TALOS).read_bytes())
    res = kernlog.ScanResult()
    sources.read_file(str(log), None, 1 << 30, res, now=datetime(2026, 7, 1, tzinfo=timezone.utc))
    assert res.events == []


def test_the_first_line_of_a_three_line_off_bus_message_gives_its_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1/D2 on the real NVSentinel #155 capture: the stamp is on "NVRM: The NVIDIA
    GPU ..." (the first line); the event keeps it (before: none, the continuation line's),
    so after a boot of 20 minutes the off-bus GPU at 1843 s of an earlier boot is old."""
    res = kernlog.scan((REAL / "nvsentinel-155-off-bus-dmesg.log").read_bytes())
    assert res.events[0].line.usec == 1843308145
    _replay(tmp_path, monkeypatch, 1200.0)
    log = tmp_path / "kern.log"
    log.write_bytes((REAL / "nvsentinel-155-off-bus-dmesg.log").read_bytes())
    res = kernlog.ScanResult()
    sources.read_file(str(log), None, 1 << 30, res, now=NOW)
    assert res.events == []


# ----------------------------------------------- SPEC D1 (issue 35 item 4): PCI redacted

def test_an_xid_whose_pci_field_is_redacted_is_kept_on_an_unknown_gpu() -> None:
    """SPEC D1 on a real posted sequence (the PCI field written ``...`` by its poster):
    Xid 79 and Xid 154 are events on an unknown GPU, never dropped (before: no event),
    the Xid 79 critical with its catalog action, the summary saying "a GPU"."""
    res = kernlog.scan((REAL / "redacted-pci-xid-79-154-egpu.log").read_bytes())
    assert [(e.xid, e.pci, e.key) for e in res.events] == [(79, None, ""), (154, None, "")]
    assert res.events[0].data["pci_field"] == "..."
    found = {f.fault: f for f in kernlog.findings(_latch(res), "gpu07")}
    assert found["gpu.xid.79"].severity is Severity.CRITICAL and cordons(found["gpu.xid.79"])
    assert found["gpu.xid.79"].summary.startswith("a GPU reported Xid 79")
    # the same redaction on a B200's NVLink5 Xid 145 (the line's other words from
    # gpud's real GB200 capture): decoded, non-fatal, recorded
    line = (REAL / "gpud-pr1174-nvlink5.log").read_text().splitlines()[2]
    redacted = line.replace(line[line.index("(PCI:"):line.index("): ")], "(PCI:...")
    (ev,) = kernlog.scan(redacted.encode() + b"\n").events
    assert ev.xid == 145 and ev.pci is None and ev.data["fatal"] is False


# -------------------------------- issue 35 "keep looking": more real kernel-log excerpts

MORE = {
    # file: the (fault, PCI bus) of each event, in order
    "akash-244-dmesg-T-xid-43-31-94.log": [
        ("gpu.xid.43", "0000:00:05"), ("gpu.xid.43", "0000:00:05"),
        ("gpu.xid.31", "0000:00:07"), ("gpu.xid.94", "0000:00:08")],
    "gpud-pr46-dmesg-ctime-xid-13-109.log": [("gpu.xid.13", "0000:cb:00")] * 3 + [
        ("gpu.xid.109", "0000:cb:00")],
    "nvidia-ogkm-1150-journal-xid-45-after-149-145.log": [
        ("gpu.xid.45", bus) for bus in ("0000:dc:00", "0000:ed:00", "0000:ba:00",
                                        "0000:97:00", "0000:dc:00", "0000:ba:00",
                                        "0000:ed:00")],
    "bumblebee-677-dmesg-xid-32-31.log": [("gpu.xid.32", "0000:01:00")] * 2 + [
        ("gpu.xid.31", "0000:01:00")],
    "gpud-pr1160-nvlink5-144-149.log": [("gpu.xid.144", "0000:01:00")] + [
        ("gpu.xid.149", "0000:00:00")] * 2,
    "rocm-2533-syslog-sdma-timeout-reset.log": [("gpu.reset", "0000:0a:00")],
    "loongson-89-syslog-gfx-timeout-baco-reset.log": [("gpu.reset", "0000:07:00")],
    "cosmic-3764-dmesg-ring-timeout-reset-source.log": [("gpu.reset", "0000:28:00")],
    "rocm-4021-comment-mi300x-errevent-apei.log": [
        ("gpu.reset", "0000:9e:00"), ("gpu.ras.fatal", "0000:e6:00")],
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_real_kernel_logs_read_right(name: str) -> None:
    """SPEC D1, D9 on real excerpts posted in issue threads (SOURCES.md): dmesg -T,
    ``dmesg --ctime``, a journal without stamps, plain dmesg, NVLink5 Xids, syslog with
    and without ``[sec.usec]``, the 6.x ``GPU reset begin!. Source:  1`` form, a MI300X
    fatal RAS event. Every line with a fault is read, none skipped; a recovered reset is
    a record, the fatal RAS event critical."""
    res = kernlog.scan((REAL / name).read_bytes(), now=NOW)
    assert [(e.fault, e.pci) for e in res.events] == MORE[name]
    assert res.skipped == 0
    for f in kernlog.findings(_latch(res), "gpu07"):
        if f.fault == "gpu.reset":
            assert not cordons(f)
        if f.fault == "gpu.ras.fatal":
            assert cordons(f)
    if name.startswith("akash"):
        assert res.events[0].line.at == "2024-07-31T23:14:18"
        assert len(res.gpu_uuids) == 3 and res.events[3].process is None
    if name.startswith("gpud-pr1160"):
        assert [e.data["fatal"] for e in res.events] == [False, True, True]
