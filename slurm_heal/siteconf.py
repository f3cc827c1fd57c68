"""Fit the site's slurm.conf, never overwrite it (SPEC I7).

Slurm keeps the last of two lines with the same key: our ``SchedulerParameters=
nohold_on_prolog_fail`` written after a site's ``SchedulerParameters=bf_continue,...``
replaced the site's list, and our ``Prolog=``/``Epilog=`` replaced the site's prolog and
epilog (measured on a 22.05 lab, issue 36). So `install-node`, `install-controller` and
`policy check` read the live configuration (``scontrol show config``) and, for each
line slurm-heal needs, say whether the site already has it and print the one line that
keeps the site's setting and adds ours:

* ``SchedulerParameters``: the site's options kept, ``nohold_on_prolog_fail`` added.
* ``Prolog``/``Epilog``/``HealthCheckProgram``: none at the site: ours. A glob
  (``Prolog=/etc/slurm/prolog.d/*``, Slurm runs every program it matches): no change
  to slurm.conf, a link to our glue in that directory. One program of the site's own:
  the wrapper ``PREFIX/libexec/slurm-heal-site-prolog`` (written by `install-node`)
  runs the site's program first, unchanged, then ours; the printed line names the
  wrapper. A HealthCheckProgram that is NHC: kept; the NHC plugin is added to nhc.conf.
* ``HealthCheckInterval``/``HealthCheckNodeState``: the site's kept when it runs a
  health check already.
* ``ResumeTimeout`` below the reboot timeout of the ``slurm`` provider (Slurm's default
  60 s is far below a GPU node's boot: the node is marked DOWN "reboot timed out"),
  and no ``RebootProgram`` (``scontrol reboot`` then does nothing): warnings.

`plan` is pure (the parsed configuration in, lines and warnings out); `read_live` is the
one ``scontrol show config`` call.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_heal.errors import ConfigError

SCONTROL_TIMEOUT = 15.0
NOHOLD = "nohold_on_prolog_fail"
# What scontrol prints for a setting the site did not give.
_UNSET = ("(null)", "", "none", "None")
# 25.11+ show a key slurm.conf may repeat with its index: "Prolog[0]   = /etc/..."
_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:\[(\d+)\])?\s+=\s?(.*)$")
# glue name -> slurm.conf key it is for
HOOKS = {"healthcheck": "HealthCheckProgram", "prolog": "Prolog", "epilog": "Epilog"}
# Link names tried, in order, against a site's glob (the first that matches is used).
_LINK_NAMES = ("slurm-heal", "50-slurm-heal", "slurm-heal.sh", "50-slurm-heal.sh")
_SAFE_PATH = re.compile(r'^[^"\\`$\s]+$')


@dataclass(frozen=True)
class ConfLine:
    """One slurm.conf setting slurm-heal needs, against what the site has.

    ``status``: ``present`` (the site has it: nothing to do), ``add`` (the site sets
    nothing: add ``line``), ``merge`` (replace the site's line of that key with ``line``,
    which keeps the site's setting), ``keep`` (leave the site's line as it is; ``note``
    says what to do instead), ``unknown`` (the live configuration could not be read).
    """

    key: str
    site: str | None
    status: str
    line: str | None
    note: str
    # a site's glob: the symbolic link to make (path -> target) instead of a line
    link: tuple[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "site": self.site, "status": self.status,
                "line": self.line, "note": self.note,
                "link": {"path": self.link[0], "target": self.link[1]} if self.link
                else None}

    def text(self) -> str:
        """The human line: what to write (or not) and why."""
        if self.line is None:
            head = f"# {self.key}: no change"
        elif self.status == "unknown":
            # Not knowing the site's value, a plain line could replace it (Slurm keeps the
            # last of two lines with one key): printed as a template to merge by hand.
            head = f"# {self.line}"
        else:
            head = self.line
        return f"{head}    # {self.status}: {self.note}"


@dataclass
class SitePlan:
    """What to merge into the site's slurm.conf, and what to warn about."""

    live: bool
    source: str
    lines: list[ConfLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # glue name ("prolog") -> the site's own program the wrapper runs first
    wrap: dict[str, str] = field(default_factory=dict)

    def snippet(self) -> str:
        """The slurm.conf lines to write, with what each does (a comment)."""
        head = [f"# slurm-heal's slurm.conf lines, merged with {self.source} (SPEC I7).",
                "# 'merge': REPLACE the site's line of that key with this one (it keeps the "
                "site's setting);",
                "# 'add': add the line; 'keep'/'present': leave slurm.conf as it is."]
        body = [ln.text() for ln in self.lines]
        tail = [f"# WARNING: {w}" for w in self.warnings]
        return "\n".join(head + body + tail) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {"live": self.live, "source": self.source,
                "lines": [ln.as_dict() for ln in self.lines], "warnings": self.warnings,
                "wrap": self.wrap}


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = Value`` lines (22.05-26.05) as key -> value;
    keys Slurm shows unset (``(null)``) are left out. A repeated key (25.11+: ``Prolog[0]``,
    ``Prolog[1]``) is ``Prolog`` for its first value, ``Prolog[1]``... for the others."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if m is None:
            continue
        key, index, value = m.group(1), m.group(2), m.group(3).strip()
        if index is not None and index != "0":
            key = f"{key}[{index}]"
        if value not in _UNSET and key not in out:
            out[key] = value
    return out


def seconds_of(value: str | None) -> float | None:
    """``60 sec`` / ``60`` (how scontrol shows a time) -> 60.0; None when not a number."""
    if not value:
        return None
    m = re.match(r"^(\d+)(?:\s*sec)?$", value.strip())
    return float(m.group(1)) if m else None


def read_live(slurm_conf: Path | str | None, slurm_bin: Path | None = None,
              timeout: float = SCONTROL_TIMEOUT) -> tuple[dict[str, str] | None, str]:
    """The live configuration (``scontrol show config``), and where it came from or why
    it could not be read (then None)."""
    scontrol = str(slurm_bin / "scontrol") if slurm_bin is not None else "scontrol"
    env = dict(os.environ)
    if slurm_conf is not None:
        env["SLURM_CONF"] = str(slurm_conf)
    try:
        proc = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)  # argv, never a shell
    except FileNotFoundError:
        return None, f"{scontrol} is not installed"
    except subprocess.TimeoutExpired:
        return None, f"`scontrol show config` did not answer within {timeout:g}s"
    except OSError as exc:
        return None, f"cannot run {scontrol}: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"`scontrol show config` failed (exit {proc.returncode}): {tail[0]}"
    where = f" (SLURM_CONF={slurm_conf})" if slurm_conf is not None else ""
    return parse_show_config(proc.stdout), f"the live configuration{where}"


def is_ours(value: str, name: str) -> bool:
    """Is this Prolog/Epilog/HealthCheckProgram value slurm-heal's glue (any prefix)?"""
    base = Path(value.split()[0] if value.strip() else value).name
    return base in (f"slurm-heal-{name}", f"slurm-heal-site-{name}")


def _glob_link(value: str) -> Path | None:
    """For a site's glob ``DIR/PATTERN``: the link in DIR (matching PATTERN) to make."""
    path = Path(value)
    if not any(c in path.name for c in "*?[") or any(c in str(path.parent) for c in "*?["):
        return None
    for name in _LINK_NAMES:
        if fnmatch.fnmatchcase(name, path.name):
            return path.parent / name
    return None


def _hook(plan: SitePlan, name: str, site: str | None, lib: Path, prefix: Path,
          more: list[str]) -> None:
    key = HOOKS[name]
    ours = lib / f"slurm-heal-{name}"
    if site is not None and more:  # several lines (25.11+): Slurm runs each of them
        every = [site, *more]
        if any(is_ours(v, name) for v in every):
            plan.lines.append(ConfLine(key, ", ".join(every), "present", None,
                                       f"slurm-heal's {name} is one of the site's {key} "
                                       "lines"))
        else:
            plan.lines.append(ConfLine(
                key, ", ".join(every), "keep", None,
                f"the site has {len(every)} {key} lines: keep them and add a "
                f"{key} directory glob holding links to them and to {ours}, or wrap "
                "one of them by hand"))
        return
    if site is None:
        plan.lines.append(ConfLine(key, None, "add", f"{key}={ours}",
                                   f"the site sets no {key}"))
        return
    if is_ours(site, name):
        plan.lines.append(ConfLine(key, site, "present", None,
                                   f"slurm-heal's {name} is already {key}"))
        return
    if name == "healthcheck" and "nhc" in Path(site.split()[0]).name.lower():
        plan.lines.append(ConfLine(
            key, site, "keep", None,
            f"the site runs NHC: keep it and add `* || check_slurm_heal` to nhc.conf (copy "
            f"{prefix}/share/slurm-heal/nhc/slurm_heal.nhc to /etc/nhc/scripts/)"))
        return
    link = _glob_link(site)
    if link is not None:
        if link.is_symlink() and link.resolve() == ours.resolve():
            plan.lines.append(ConfLine(key, site, "present", None,
                                       f"{link} links to slurm-heal's {name}"))
        else:
            plan.lines.append(ConfLine(key, site, "keep", None,
                                       "the site's glob runs every program it matches: "
                                       f"ln -s {ours} {link}", link=(str(link), str(ours))))
        return
    if any(c in site for c in "*?[") or not _SAFE_PATH.match(site):
        plan.lines.append(ConfLine(
            key, site, "keep", None,
            f"cannot merge {key}={site} automatically: make slurm.conf's {key} a glob "
            f"(e.g. /etc/slurm/{name}.d/*) holding the site's program and a link to {ours}"))
        return
    wrapper = lib / f"slurm-heal-site-{name}"
    plan.wrap[name] = site
    plan.lines.append(ConfLine(
        key, site, "merge", f"{key}={wrapper}",
        f"{wrapper} runs the site's {site} first, unchanged (its exit status kept), then "
        f"slurm-heal's {name}"))


def plan(live: dict[str, str] | None, prefix: Path, *, source: str = "",
         reboot_timeout: float | None = None, reboot_source: str = "") -> SitePlan:
    """The slurm.conf lines for the glue under ``prefix``, merged with ``live`` (the
    parsed ``scontrol show config``; None: not readable, ``source`` says why).
    ``reboot_timeout``: seconds the ``slurm`` provider waits for a reboot (None: the
    controller does not reboot through Slurm, or is not known here)."""
    lib = prefix / "libexec"
    if live is None:
        out = SitePlan(live=False, source=source or "no live configuration")
        out.warnings.append(
            f"the live Slurm configuration could not be read ({source}): the lines below "
            "assume the site sets none of these keys; where slurm.conf has one, merge by "
            "hand (SchedulerParameters: add nohold_on_prolog_fail to the site's list; "
            "Prolog/Epilog: a prolog.d glob), or run the install again once slurmctld "
            "answers")
        for name, key in HOOKS.items():
            out.lines.append(ConfLine(key, None, "unknown", f"{key}={lib}/slurm-heal-{name}",
                                      "the site's value is not known"))
        out.lines += [ConfLine("HealthCheckInterval", None, "unknown",
                               "HealthCheckInterval=300", "the site's value is not known"),
                      ConfLine("HealthCheckNodeState", None, "unknown",
                               "HealthCheckNodeState=ANY,CYCLE",
                               "the site's value is not known"),
                      ConfLine("SchedulerParameters", None, "unknown",
                               f"SchedulerParameters={NOHOLD}",
                               f"the site's value is not known: add {NOHOLD} to its list")]
        return out
    out = SitePlan(live=True, source=source or "the live configuration")
    for name, key in HOOKS.items():
        more = [v for k, v in sorted(live.items()) if k.startswith(f"{key}[")]
        _hook(out, name, live.get(key), lib, prefix, more)
    interval = seconds_of(live.get("HealthCheckInterval"))
    if interval:
        out.lines.append(ConfLine("HealthCheckInterval", live["HealthCheckInterval"], "keep",
                                  None, f"the site's interval is kept: slurm-heal's check "
                                  f"runs every {interval:g} s with it"))
    else:
        out.lines.append(ConfLine("HealthCheckInterval", live.get("HealthCheckInterval"),
                                  "add", "HealthCheckInterval=300",
                                  "the site runs no periodic health check"))
    state = live.get("HealthCheckNodeState")
    if live.get("HealthCheckProgram") and interval:
        out.lines.append(ConfLine("HealthCheckNodeState", state, "keep", None,
                                  "the site's node states are kept (slurm-heal needs its "
                                  "check on drained nodes too: ANY)" if state and "ANY"
                                  not in state.upper() else "the site's node states are kept"))
    else:
        out.lines.append(ConfLine("HealthCheckNodeState", state, "add",
                                  "HealthCheckNodeState=ANY,CYCLE",
                                  "the site runs no health check of its own"))
    params = live.get("SchedulerParameters")
    options = [o.strip() for o in (params or "").split(",") if o.strip()]
    if NOHOLD in options:
        out.lines.append(ConfLine("SchedulerParameters", params, "present", None,
                                  f"{NOHOLD} is there"))
    elif options:
        out.lines.append(ConfLine("SchedulerParameters", params, "merge",
                                  "SchedulerParameters=" + ",".join([*options, NOHOLD]),
                                  f"the site's options kept, {NOHOLD} added: replace the "
                                  "site's SchedulerParameters line (Slurm keeps the last)"))
    else:
        out.lines.append(ConfLine("SchedulerParameters", None, "add",
                                  f"SchedulerParameters={NOHOLD}",
                                  "the site sets no SchedulerParameters"))
    if reboot_timeout is not None:
        _reboot_warnings(out, live, reboot_timeout, reboot_source)
    return out


def _reboot_warnings(out: SitePlan, live: dict[str, str], timeout: float,
                     source: str) -> None:
    """The ``slurm`` provider's `scontrol reboot` needs RebootProgram, and a node that
    boots for longer than ResumeTimeout is marked DOWN ("reboot timed out")."""
    if not live.get("RebootProgram"):
        out.warnings.append(
            "RebootProgram is not set: the slurm provider reboots with `scontrol reboot`, "
            "which then never reboots a node (every reboot ends failed at the provider's "
            "timeout); set RebootProgram (docs/providers.md)")
    resume = seconds_of(live.get("ResumeTimeout"))
    if resume is not None and resume < timeout:
        out.warnings.append(
            f"ResumeTimeout is {resume:g} s, below the reboot timeout {timeout:g} s "
            f"({source}): Slurm marks a node still booting after {resume:g} s DOWN ('reboot "
            "timed out') and the reboot fails; set ResumeTimeout to your nodes' boot time "
            "(a GPU node takes minutes), at most the reboot timeout, or lower the "
            "provider's timeout to it")


def reboot_timeout_of(provider: Any, source: str) -> tuple[float | None, str]:
    """The ``slurm`` provider's reboot timeout of a config's ``[provider]`` section (a
    `slurm_heal.sections.ProviderSection`), or None for a provider that does not reboot
    through Slurm."""
    if provider.kind != "slurm":
        return None, ""
    from slurm_heal.providers.settings import read_provider_section
    from slurm_heal.providers.slurm import SlurmSettings

    try:
        s = read_provider_section(SlurmSettings, provider.table)
    except ConfigError:
        return None, ""
    return float(s.timeout), f"[provider] timeout of {source}"


def site_wrapper(name: str, site: str, ours: Path) -> str:
    """The script that runs the site's own ``site`` program first, then our glue."""
    key = HOOKS[name]
    if name == "prolog":
        body = ('"$SITE" "$@" || exit $?   # the site\'s prolog failed: as without us\n'
                f'exec "{ours}" "$@"\n')
    else:  # epilog, healthcheck: ours runs whatever the site's did; the site's status wins
        body = ('"$SITE" "$@"\nsite=$?\n'
                f'"{ours}" "$@"\nours=$?\n'
                '[ "$site" -ne 0 ] && exit "$site"\nexit "$ours"\n')
    return ("#!/bin/sh\n"
            f"# Written by `slurm-heal install-node` (SPEC I7): slurm.conf's {key} names this\n"
            f"# script; it runs the site's own {key} first, unchanged, then slurm-heal's.\n"
            f"# To undo: set {key}={site} again in slurm.conf.\n"
            f'SITE="{site}"\n' + body)
