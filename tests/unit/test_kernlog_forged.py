"""Issue 34 item 1 (SPEC D1, P1): no one but the kernel writes a kernel fault.

With `[kernel_log] source = "file"` on a syslog file, any local user can add a line with
a fault's text (`logger "NVRM: Xid (PCI:0000:3b:00): 79, ..."`). A line is a kernel
event only where its format says the kernel wrote it: syslog's `kernel` tag, facility
kern where the line carries one (`<PRI>`, talos's facility), or a source that holds only
the kernel's records (`journalctl -k`, /dev/kmsg). The forged lines below are the forms
rsyslog, journald and talos write for a program's message (written for the test after
the real formats of tests/data/real/kernlog; the lab test beside this one has a real
rsyslogd write a real `logger` call)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from slurm_heal.checks import kernlog

NOW = datetime(2025, 3, 1, tzinfo=timezone.utc)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."

FORGED = {
    "rsyslog, logger's default tag (the user)": f"Feb 23 16:24:18 gpu07 alice: {XID}",
    "rsyslog, a tag with a pid": f"Feb 23 16:24:18 gpu07 myjob[4242]: {XID}",
    "rsyslog's ISO form": f"2025-02-23T16:24:18.123456+00:00 gpu07 alice: {XID}",
    "journalctl short-iso of a syslog file": f"2025-02-23T16:24:18+0000 gpu07 bob[77]: {XID}",
    "remote syslog, user facility": f"<12>Feb 23 16:24:18 gpu07 alice: {XID}",
    "remote syslog RFC 5424, user facility": f"<12>1 2025-02-23T16:24:18Z gpu07 alice - - - {XID}",
    "RFC 5424, facility 0 but another app": f"<4>1 2025-02-23T16:24:18Z gpu07 alice 99 - - {XID}",
    "talos, user facility": f"10.5.0.3: user: warning: [2025-02-23T16:24:18.5Z]: {XID}",
}

KERNEL = {
    "rsyslog, the kernel's tag": f"Feb 23 16:24:18 gpu07 kernel: [ 123.456789] {XID}",
    "rsyslog's ISO form, kernel": f"2025-02-23T16:24:18.123456+00:00 gpu07 kernel: {XID}",
    "remote syslog, kern facility": f"<4>Feb 23 16:24:18 gpu07 kernel: {XID}",
    "RFC 5424, kernel": f"<4>1 2025-02-23T16:24:18Z gpu07 kernel - - - {XID}",
    "talos, kern facility": f"10.5.0.3: kern: warning: [2025-02-23T16:24:18.5Z]: {XID}",
    "plain dmesg": f"[ 123.456789] {XID}",
    "dmesg -T": f"[Sun Feb 23 16:24:18 2025] {XID}",
    "dmesg --time-format=iso": f"2025-02-23T16:24:18,470068+00:00 {XID}",
    "kmsg record": f"4,1234,123456789,-;{XID}",
}


def _events(lines: list[str], kernel: bool = False) -> kernlog.ScanResult:
    return kernlog.scan(("\n".join(lines) + "\n").encode(), now=NOW, kernel=kernel)


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_programs_line_with_a_faults_text_is_never_a_kernel_event(name: str) -> None:
    """aacb2a0: every one of these was a critical gpu.xid.79 (drain, then migrate)."""
    result = _events([FORGED[name]])
    assert result.events == [], name
    assert result.foreign == 1 and FORGED[name][:40] in result.foreign_sample


@pytest.mark.parametrize("name", sorted(KERNEL))
def test_the_kernels_own_line_in_every_form_is_still_read(name: str) -> None:
    [ev] = _events([KERNEL[name]]).events
    assert (ev.fault, ev.xid, ev.pci) == ("gpu.xid.79", 79, "0000:3b:00"), name


def test_a_forged_line_between_kernel_lines_changes_nothing_they_say() -> None:
    result = _events([KERNEL["rsyslog, the kernel's tag"], FORGED["rsyslog's ISO form"],
                      KERNEL["plain dmesg"]])
    assert len(result.events) == 2 and result.foreign == 1


def test_journalctl_k_shows_a_record_root_wrote_to_kmsg_under_its_own_tag() -> None:
    """journald files a /dev/kmsg record of the user facility under the tag it names
    (`echo '<4>NVRM: Xid ...' > /dev/kmsg`: "host NVRM: Xid ..."); `journalctl -k` holds
    the kernel's records only (only root writes /dev/kmsg), so the journal source reads
    it as before."""
    line = "2025-02-23T16:24:18+0000 gpu07 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    assert _events([line]).events == []  # in a file: a program's line
    [ev] = _events([line], kernel=True).events
    assert ev.xid == 79
