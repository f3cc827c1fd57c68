"""The operator's admin commands (SPEC I4): alerts, remediations, approve, deny, request,
cancel, history, explain, breaker, reset-breaker, pause, unpause, policy. Every command has ``--json`` (one JSON
object on stdout); plain output is for people.

Commands that change something (approve, deny, cancel, request, reset-breaker) never act
themselves: they put a `models.Command` in the store's inbox and the controller consumes
it at its next cycle, under the same checks as everything else (SPEC Q4, S3-S5).

Where the store is: found as the daemon finds it (`slurm_heal.location`: ``--state-dir``,
``$SLURM_HEAL_STATE_DIR``, the config's ``[controller] state_dir``, beside slurmctld's
StateSaveLocation) and said on every command (stderr, or the ``store`` field of
``--json``). A write to a store that does not exist or has no controller heartbeat is
refused unless ``--force``: a person's word must not land where no daemon reads it.

Embedding/tests: a `SlurmClient` placed in the click context object under ``"slurm"``
(``slurm_heal.cli.cli.main(args, obj={"slurm": client})``) is used instead of `slurm_heal.slurm.make_client`.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, TypeVar

import click

from slurm_heal import operations
from slurm_heal.commands.hostlists import expand_hosts
from slurm_heal.commands.jsonmode import json_option
from slurm_heal.errors import HealError, NotFound
from slurm_heal.location import ENV_STATE_DIR, Location, config_path, locate
from slurm_heal.models import Command, Remediation, State
from slurm_heal.operations import alert_json as _alert_json
from slurm_heal.operations import alerts_of as _alerts_of
from slurm_heal.operations import rem_json as _rem_json
from slurm_heal.readmodel.words import (
    approval,
    held,
    held_head,
    held_words,
    provider_error,
    provider_words,
    requester,
    waiting_for_evidence,
)
from slurm_heal.readmodel.words import plain as _plain
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Action

F = TypeVar("F", bound=Callable[..., Any])
EXPLAIN_DECISIONS = 10


# --------------------------------------------------------------------------- plumbing


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _default_by() -> str:
    """The person running the command (the one behind sudo, when there is one)."""
    for var in ("SUDO_USER", "USER", "LOGNAME"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _location(state_dir: str | None, config: str | None) -> Location:
    """The store this command uses, found as the daemon finds it (`slurm_heal.location`),
    said once: on stderr, or as the ``store`` field of the JSON output."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    loc: Location | None = root.meta.get("slurm_heal.location")
    if loc is None:
        loc = locate(state_dir, config)
        root.meta["slurm_heal.location"] = loc
        if not root.meta.get("slurm_heal.json"):
            click.echo(f"slurm-heal: store {loc.describe()}", err=True)
    return loc


def _store(state_dir: str | None, config: str | None) -> Any:
    from slurm_heal.store import Store

    return Store(_location(state_dir, config).state_dir)


def _controller_section(config: str | None) -> dict[str, Any]:
    from slurm_heal.config import load_policy

    path = config_path(config)
    return dict(load_policy(path).controller) if path is not None else {}


def _slurm(config: str | None) -> SlurmClient:
    """The Slurm client: the one the context carries, else `slurm_heal.slurm.make_client`
    for the slurm.conf the daemon uses (a missing one fails at once, one message)."""
    ctx = click.get_current_context()
    obj = ctx.find_object(dict)
    if obj is not None and obj.get("slurm") is not None:
        client: SlurmClient = obj["slurm"]
        return client
    return operations.slurm_client(_controller_section(config))


def _emit_json(obj: Any) -> None:
    loc = click.get_current_context().find_root().meta.get("slurm_heal.location")
    if isinstance(obj, dict) and isinstance(loc, Location):
        obj = {**obj, "store": loc.as_json()}
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _ts(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a cut one ends with an ellipsis."""
    return text if len(text) <= width else text[:max(1, width - 1)].rstrip() + "…"


def _last_column_width(rows: list[list[str]], header: list[str], default: int,
                       least: int = 20) -> int:
    """What the last column of a `_table` may take: the terminal's width ($COLUMNS,
    else the terminal's own) less the other columns; ``default`` when neither is known
    (output to a pipe); never less than ``least``."""
    import shutil

    columns = shutil.get_terminal_size(fallback=(0, 0)).columns
    if columns <= 0:
        return default
    taken = sum(max(len(str(r[i])) for r in [header[:-1], *rows]) + 2
                for i in range(len(header) - 1))
    return max(least, columns - taken)


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def state_options(func: F) -> F:
    """--state-dir and --config, shared by every command that reads the store."""
    func = click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
                        help="The controller's TOML config (its [controller] state_dir and "
                             "slurm_conf are used; default: $SLURM_HEAL_CONFIG, else "
                             "/etc/slurm-heal/heal.toml when it exists).")(func)
    func = click.option("--state-dir", "state_dir", type=click.Path(file_okay=False),
                        default=None, help=f"The store directory (default: ${ENV_STATE_DIR}, "
                        "else beside slurmctld's StateSaveLocation).")(func)
    return func


def force_option(func: F) -> F:
    return click.option("--force", is_flag=True,
                        help="Write even to a store no controller has a heartbeat in.")(func)


# A heartbeat older than this is worth a word: the command waits for a daemon that may be
# down (the daemon writes one every cycle, 30 s by default).
STALE_HEARTBEAT = timedelta(minutes=10)


def _writable(state_dir: str | None, config: str | None, force: bool) -> None:
    """Refuse a write no controller would read (unless --force); warn when the
    controller's heartbeat is old."""
    loc = _location(state_dir, config)
    if force:
        return
    loc.check_writable()
    beat = loc.last_heartbeat()
    if beat is not None and _now() - beat > STALE_HEARTBEAT:
        click.echo(f"warning: the controller's last heartbeat in {loc.heartbeat_file} is from "
                   f"{_ts(beat)}: is the daemon running? The command waits for it.", err=True)


def _reason_length(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A reason is kept in the audit record and shown everywhere: at most MAX_REASON
    characters, as the API takes (issue 25 item 9); longer is refused, not cut."""
    from slurm_heal.api.bodies import MAX_REASON

    if value and len(value) > MAX_REASON:
        raise click.BadParameter(f"is {len(value)} characters long; at most {MAX_REASON} are "
                                 "kept (the API takes as many): say why in short, and put "
                                 "the long text in a ticket")
    return value


def by_option(func: F) -> F:
    return click.option("--by", default=None, metavar="NAME",
                        help="Who is asking (default: $SUDO_USER, else $USER).")(func)


def paused_line(state: State) -> str:
    """The words for a paused controller: who paused it, when and why (SPEC O2)."""
    p = state.pause
    who = (f" by {p.by} at {_ts(p.at)}" + (f" ({p.reason})" if p.reason else "")
           if p is not None and p.paused else "")
    return f"PAUSED{who}: nothing disruptive runs until `slurm-heal unpause`."


def _pause_json(state: State) -> dict[str, Any] | None:
    return operations.pause_json(state)


def _last_why(rem: Remediation) -> str:
    return rem.steps[-1].why if rem.steps else ""


# --------------------------------------------------------------------------- remediations


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Include finished remediations.")
@click.option("--node", default=None, metavar="NODES",
              help="Only these nodes (a node name or a host list, e.g. gpu[01-04]).")
@state_options
@json_option
def remediations(show_all: bool, node: str | None, state_dir: str | None, config: str | None,
                 as_json: bool) -> None:
    """List open remediations (with --all, finished ones too)."""
    wanted = set(expand_hosts([node])) if node is not None else None  # a typo: exit 2
    store = _store(state_dir, config)
    # --all: the finished ones the audit archive holds too (issue 26)
    one = next(iter(wanted)) if wanted is not None and len(wanted) == 1 else None
    state: State = store.load_history(node=one) if show_all else store.load()
    rems = [r for r in state.remediations
            if (show_all or not r.phase.terminal) and (wanted is None or r.node in wanted)]
    pending = [c for c in state.inbox if wanted is None or c.node in wanted]
    if as_json:
        _emit_json({"remediations": [_rem_json(r) for r in rems],
                    "pending_commands": [c.model_dump(mode="json") for c in pending],
                    "breaker": state.breaker.model_dump(mode="json"), "paused": state.paused, "pause": _pause_json(state)})
        return
    if state.breaker.open:
        click.echo(f"Breaker OPEN since {_ts(state.breaker.opened_at)}: {state.breaker.why} "
                   "(automatic remediation stopped, SPEC S5)")
    if state.paused:
        click.echo(paused_line(state))
    if not rems:
        click.echo("No open remediations." if not show_all else "No remediations recorded.")
    else:
        _table([[r.id, r.node, r.fault, r.action.value, r.phase.value, r.origin,
                 _ts(r.updated), _cut(_last_why(r), 60)] for r in rems],
               ["ID", "NODE", "FAULT", "ACTION", "PHASE", "ORIGIN", "UPDATED", "WHY"])
    if pending:
        def waits(c: Command) -> str:
            blocking = state.open_for(c.node) if c.kind == "request" and c.node else ()
            return (f" (waits for {blocking[0].id} to end, rule L3)" if blocking else "")

        click.echo(f"{len(pending)} command(s) waiting for the controller: "
                   + ", ".join(f"{c.kind} {c.remediation or c.node or ''}".strip() + waits(c)
                               for c in pending))


# --------------------------------------------------------------------------- history


def _print_remediation(rem: Remediation) -> None:
    state = "open" if not rem.phase.terminal else "finished"
    click.echo(f"{rem.id}  {rem.node}  {rem.fault}  {rem.action.value}  phase={rem.phase.value} "
               f"({state})")
    trouble = provider_error(rem)
    if trouble is not None:  # O6: the cause beside the remediation, with its age
        click.echo("  PROVIDER NOT ANSWERING: "
                   + provider_words(trouble, datetime.now(timezone.utc)))
    waiting = waiting_for_evidence(rem)
    if waiting:  # O6: held for want of evidence, neither approved nor running
        click.echo(f"  WAITING FOR EVIDENCE: {waiting}")
    elif (h := held(rem)) is not None:  # O6: what holds it, until when, what lifts it
        click.echo(f"  {held_head(h)}: {held_words(h)}")
    click.echo(f"  requested by {requester(rem)}; {approval(rem)}; "
               f"action chosen by {rem.action_rule or '-'}"
               + (f" (escalated from {rem.escalated_from.value})" if rem.escalated_from else ""))
    for step in rem.steps:
        by = f"  by {step.by}" if step.by else ""
        click.echo(f"  {_ts(step.at)}  {step.phase:<10} [{step.rule}] {step.why}{by}")
    for a in rem.attempts:
        outcome = a.outcome or "in flight"
        detail = f": {a.detail[:100]}" if a.detail else ""
        click.echo(f"  {_ts(a.started)}  {a.effect:<10} {a.action.value} key={a.key} "
                   f"-> {outcome}{detail}")


@click.command()
@click.argument("node")
@state_options
@json_option
def history(node: str, state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Every remediation of NODE with its steps: phase, time, rule, why, who (SPEC P4)."""
    state: State = _store(state_dir, config).load_history(node=node)  # + the archive
    rems = sorted((r for r in state.remediations if r.node == node), key=lambda r: r.created)
    if not rems:
        _known_somewhere(node, config)  # like explain: a node nobody knows exits 6
    if as_json:
        _emit_json({"node": node, "remediations": [_rem_json(r) for r in rems]})
        return
    if not rems:
        click.echo(f"No remediation recorded for {node}.")
        return
    for i, rem in enumerate(rems):
        if i:
            click.echo("")
        _print_remediation(rem)


def _known_somewhere(node: str, config: str | None) -> None:
    """NotFound (exit 6) when Slurm answers that it has no such node and the store has no
    record of it; a Slurm that does not answer proves nothing (the store alone speaks)."""
    try:
        _slurm(config).node(node)
    except NotFound:
        raise NotFound(f"Slurm does not know a node {node!r} and the store has no record "
                       "of it") from None
    except HealError:
        return


# --------------------------------------------------------------------------- alerts


@click.command()
@click.option("--node", default=None, metavar="NODES",
              help="Only these nodes (a node name or a host list, e.g. gpu[01-04]).")
@state_options
@json_option
def alerts(node: str | None, state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Active alerts: what the node checks published in Slurm (node Extra, SPEC D7, I2)
    and nodes DOWN or drained by someone else (D5)."""
    wanted = expand_hosts([node]) if node is not None else None  # a typo: exit 2
    state = _site_state(state_dir, config)  # SPEC D13: the site's own alerts too
    if wanted is not None and len(wanted) == 1:
        found = _alerts_of(_slurm(config), wanted[0], state)
    else:
        found = [a for a in _alerts_of(_slurm(config), None, state)
                 if wanted is None or a.node in wanted]
    if as_json:
        _emit_json({"alerts": [_alert_json(a) for a in found]})
        return
    if not found:
        click.echo("No active alerts." if node is None else f"No active alerts on {node}.")
        return
    rows = [[a.node, a.fault, a.severity.value, _ts(a.first_seen), _ts(a.last_seen)]
            for a in found]
    header = ["NODE", "FAULT", "SEVERITY", "FIRST SEEN", "LAST SEEN", "SUMMARY"]
    width = _last_column_width(rows, header, default=70)
    _table([[*row, _cut(a.summary, width)] for row, a in zip(rows, found, strict=True)], header)


def _site_state(state_dir: str | None, config: str | None) -> Any:
    """The store's state for the site's alerts (SPEC D13); None where no store is found
    (`alerts` works from Slurm alone, as it always did)."""
    try:
        return _store(state_dir, config).load()
    except (HealError, OSError):
        return None


# --------------------------------------------------------------------------- explain


@click.command()
@click.argument("node")
@state_options
@json_option
def explain(node: str, state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Why NODE is in the state it is: alerts, what they mean, the open remediation and
    the last decisions with their rule ids (house style 9). Works without Slurm."""
    store = _store(state_dir, config)
    got = operations.explain(node, lambda: _slurm(config),
                             lambda: store.load_history(node=node), EXPLAIN_DECISIONS)
    slurm_info, found, state = got.slurm, got.alerts, got.state
    open_rems, recent, recs = got.open, got.recent, got.decisions
    if as_json:
        _emit_json(got.as_json())
        return
    click.echo(f"Node {node}")
    if slurm_info["reachable"]:
        click.echo(f"  Slurm: {'+'.join(slurm_info['states']) or '?'}"
                   + (f", reason: {slurm_info['reason']}" if slurm_info["reason"] else ""))
    else:
        click.echo(f"  Slurm: not reachable ({slurm_info['error']}); showing the store only")
    click.echo("Alerts:" if found else ("Alerts: none active" if slurm_info["reachable"]
                                        else "Alerts: unknown (Slurm not reachable)"))
    if slurm_info.get("acknowledged"):
        click.echo("Acknowledged by a person's resume (SPEC S8, never acted on): "
                   + ", ".join(slurm_info["acknowledged"]))
    for a in found:
        j = _alert_json(a)
        click.echo(f"  {a.fault} ({a.severity.value}) since {_ts(a.first_seen)}: {a.summary}")
        click.echo(f"    what it means: {j['explanation']}")
        click.echo(f"    default action: {j['default_action'] or 'none (record and notify)'}")
        if "nvidia" in j:
            nv = j["nvidia"]
            click.echo(f"    NVIDIA's advice: {nv['bucket']} ({nv['mnemonic']}); "
                       f"investigate: {nv['investigatory'] or '-'}")
    if state.breaker.open:
        click.echo(f"Breaker OPEN: {state.breaker.why}")
    if state.paused:
        click.echo(paused_line(state))
    if got.incidents:  # SPEC S7
        from slurm_heal.readmodel.incidents import render as render_incidents

        click.echo("Incidents:")
        for line in render_incidents(got.incidents):
            click.echo(line)
    if open_rems:
        click.echo("Open remediation:")
        for rem in open_rems:
            _print_remediation(rem)
    else:
        click.echo("Open remediation: none")
    if recent and not open_rems:
        last = recent[-1]
        click.echo(f"Last finished: {last.id} {last.action.value} {last.phase.value} at "
                   f"{_ts(last.updated)}: {_last_why(last)}")
    if recs:
        click.echo("Last decisions:")
        for d in recs:
            click.echo(f"  {_ts(d.at)}  {d.phase:<10} [{d.rule}] {d.action.value}: {d.why}")


# --------------------------------------------------------------------------- commands


def _queue(state_dir: str | None, config: str | None, cmd: Command, as_json: bool,
           force: bool) -> None:
    _writable(state_dir, config, force)  # refused or warned about already: force=True below
    stored = operations.queue(_location(state_dir, config), cmd, force=True)
    if as_json:
        _emit_json({"queued": stored.model_dump(mode="json")})
        return
    target = stored.remediation or stored.node or "the cluster"
    where = f" on {stored.node}" if stored.node and stored.remediation else ""
    click.echo(f"{stored.kind} queued for {target}{where} by {stored.by} (command {stored.id}); "
               "the controller acts on it at its next cycle.")
    note = operations.detector_drain_note(
        _store(state_dir, config).load().get(stored.remediation or ""), stored.kind)
    if note:
        click.echo(f"Note: {note}")


OperatorKind = Literal["approve", "deny", "cancel"]


def _target_command(kind: OperatorKind, help_text: str, reason_help: str) -> click.Command:
    """approve/deny/cancel: the same shape, one inbox command each."""

    def run(target: str, reason: str, by: str | None, force: bool, state_dir: str | None,
            config: str | None, as_json: bool) -> None:
        # The store resolves TARGET: a remediation id first, else a node with an open one.
        cmd = operations.new_command(kind, by or _default_by(), reason=reason, node=target,
                                     channel="cli")
        _queue(state_dir, config, cmd, as_json, force)

    run.__doc__ = help_text
    decorated = json_option(state_options(force_option(by_option(
        click.option("--reason", callback=_reason_length, default="", help=reason_help)(
            click.argument("target", metavar="NODE|REMEDIATION_ID")(run))))))
    return click.command(name=kind, help=help_text)(decorated)


approve = _target_command(
    "approve", "Approve the proposed remediation of NODE (or by id) (SPEC P2).",
    "Why (kept in the audit record).")
deny = _target_command(
    "deny", "Deny the proposed remediation of NODE (or by id); the node is released (P2).",
    "Why it is denied (kept in the audit record).")
cancel = _target_command(
    "cancel", "Cancel the open remediation of NODE (or by id); cancelled ones are not counted "
    "for escalation (SPEC E2).", "Why it is cancelled (kept in the audit record).")


@click.command()
@click.argument("node")
@click.argument("action", type=click.Choice([a.value for a in (
    Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.REMOVE)]))
@click.option("--reason", callback=_reason_length, required=True, help="Why (kept in the audit record).")
@click.option("--detector", default=None, help="The detector this request comes from (Q3).")
@click.option("--id", "request_id", default=None,
              help="The detector's request id; detector + id deduplicate (SPEC Q3).")
@by_option
@force_option
@state_options
@json_option
def request(node: str, action: str, reason: str, detector: str | None, request_id: str | None,
            by: str | None, force: bool, state_dir: str | None, config: str | None,
            as_json: bool) -> None:
    """Ask for ACTION on NODE (SPEC Q1-Q4): reboot, rebuild, migrate, or remove.

    The request goes through the same checks as an alert: evidence (P1), capacity and
    the cluster limits. ``remove`` is queued so that the ask is on record, but slurm-heal
    never removes a node (Q2): the controller records the request and refuses it (rule
    Q2); removal is done by a person outside slurm-heal. With --detector it is rejected
    here already, since a detector may never ask for removal.
    """
    act = Action(action)
    problem = operations.request_problem(  # bad tokens: ReasonError, exit 2
        act, reason, detector, request_id,
        names={"id": "--id", "detector": "--detector", "reason": "--reason"})
    if problem:
        raise click.UsageError(problem)
    _writable(state_dir, config, force)  # before asking Slurm: a refusal comes at once
    _check_node(node, config)
    cmd = operations.new_command("request", by or _default_by(), node=node, action=act,
                                 detector=detector, request_id=request_id,
                                 reason=reason.strip(), channel="cli")
    _queue(state_dir, config, cmd, as_json, force)
    note = _evidence_note(node, config) if act is not Action.REMOVE and not as_json else ""
    if note:
        click.echo(f"Note: {note}")


def _evidence_note(node: str, config: str | None) -> str:
    """SPEC P1/Q4, O6: said when the request is made, not found out later: under the
    policy the daemon reads, a person's request needs a confirmed alert on the node."""
    from slurm_heal.config import format_duration, load_policy, policy_from_dict

    try:
        path = config_path(config)
        pol = load_policy(path) if path is not None else policy_from_dict({})
    except HealError:
        return ""  # the daemon's own check says what is wrong with its policy
    if pol.requests.operator_is_evidence:
        return ""
    return (f"unless {node} has a confirmed alert, this waits for one: SPEC P1; set "
            "requests.operator_is_evidence = true to take requests as evidence; withdrawn "
            f"after {format_duration(pol.requests.evidence_wait)} (requests.evidence_wait)")


@click.command()
@click.argument("node")
@click.option("--level", type=click.IntRange(1, 4), default=None,
              help="The suite's {level} (e.g. dcgmi diag -r LEVEL); default: the policy's "
              "([validation] level, level_after_failure for a machine that failed before).")
@click.option("--reason", callback=_reason_length, default="", help="Why (kept in the validation's audit record).")
@by_option
@force_option
@state_options
@json_option
def validate(node: str, level: int | None, reason: str, by: str | None, force: bool,
             state_dir: str | None, config: str | None, as_json: bool) -> None:
    """Validate NODE's machine now (SPEC V1, V2): the controller holds it in a maintenance
    reservation, runs the suite there as a Slurm job and follows it. A pass returns it,
    a clear failure files a hardware ticket and keeps it out, an interruption restores
    it as it was. `slurm-heal status` shows where it is.
    """
    _writable(state_dir, config, force)
    _check_node(node, config)
    cmd = operations.new_command("validate", by or _default_by(), node=node,
                                 reason=reason.strip(), level=level, channel="cli")
    _queue(state_dir, config, cmd, as_json, force)


def _check_node(node: str, config: str | None) -> None:
    """A typo'd node name is caught now when Slurm answers; without Slurm, the request is
    queued and the controller reports it."""
    try:
        _slurm(config).node(node)
    except NotFound:
        raise NotFound(f"Slurm does not know a node {node!r}") from None
    except HealError as exc:
        click.echo(f"warning: could not check {node} with Slurm ({exc}); queued anyway",
                   err=True)


# --------------------------------------------------------------------------- breaker


def _reset_breaker(reason: str, by: str | None, force: bool, state_dir: str | None,
                   config: str | None, as_json: bool) -> None:
    state: State = _store(state_dir, config).load()
    if not state.breaker.open:
        if as_json:
            _emit_json({"breaker": state.breaker.model_dump(mode="json"), "queued": None})
        else:
            click.echo("The breaker is closed; nothing to reset.")
        return
    cmd = operations.new_command("reset_breaker", by or _default_by(), reason=reason,
                                 channel="cli")
    _queue(state_dir, config, cmd, as_json, force)


def old_spelling(old: str, new: str) -> None:
    """A spelling kept as an alias for one release (docs/cli.md "Grammar"): it works, and
    says what to write instead (on stderr; never under --json)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or not ctx.find_root().meta.get("slurm_heal.json"):
        click.echo(f"slurm-heal: `{old}` is now `{new}`; the old spelling goes in the next "
                   "release", err=True)


@click.command()
@click.argument("what", type=click.Choice(["show", "reset"]), required=False, default=None,
                metavar="")
@click.option("--reason", callback=_reason_length, default="", hidden=True)
@by_option
@force_option
@state_options
@json_option
def breaker(what: str | None, reason: str, by: str | None, force: bool, state_dir: str | None,
            config: str | None, as_json: bool) -> None:
    """Show the circuit breaker (SPEC S5); `slurm-heal reset-breaker` resets it. (`breaker
    show` and `breaker reset` are the old spellings, kept for one release.)"""
    if what is not None:
        old_spelling(f"breaker {what}", "breaker" if what == "show" else "reset-breaker")
    if what == "reset":
        _reset_breaker(reason, by, force, state_dir, config, as_json)
        return
    state: State = _store(state_dir, config).load()
    b = state.breaker
    pending = [c for c in state.inbox if c.kind == "reset_breaker"]
    if as_json:
        _emit_json({"breaker": b.model_dump(mode="json"), "paused": state.paused,
                    "pause": _pause_json(state), "reset_pending": bool(pending)})
        return
    if b.open:
        click.echo(f"Breaker OPEN since {_ts(b.opened_at)}: {b.why}")
        click.echo("Automatic remediation is stopped; manual requests still run. "
                   + ("A reset is queued for the next cycle." if pending
                      else "Reset with `slurm-heal reset-breaker` once you have looked."))
    else:
        last = f" (last reset by {b.reset_by} at {_ts(b.reset_at)})" if b.reset_by else ""
        click.echo(f"Breaker closed: automatic remediation allowed{last}.")
    if state.paused:
        click.echo(paused_line(state))


@click.command("reset-breaker")
@click.option("--reason", callback=_reason_length, default="", help="Why it is reset (kept in the audit record).")
@by_option
@force_option
@state_options
@json_option
def reset_breaker(reason: str, by: str | None, force: bool, state_dir: str | None,
                  config: str | None, as_json: bool) -> None:
    """Reset the circuit breaker (SPEC S5): a person's decision that automatic remediation
    may start again. Queued for the controller's next cycle, like every write."""
    _reset_breaker(reason, by, force, state_dir, config, as_json)


# --------------------------------------------------------------------------- pause


def _pause_command(kind: Literal["pause", "unpause"], reason: str, by: str | None,
                   force: bool, state_dir: str | None, config: str | None,
                   as_json: bool) -> None:
    cmd = operations.new_command(kind, by or _default_by(), reason=reason.strip(),
                                 channel="cli")
    _queue(state_dir, config, cmd, as_json, force)


@click.command()
@click.option("--reason", callback=_reason_length, required=True, help="Why (shown by status and explain, kept in "
                                              "the audit record).")
@by_option
@force_option
@state_options
@json_option
def pause(reason: str, by: str | None, force: bool, state_dir: str | None,
          config: str | None, as_json: bool) -> None:
    """Stop all automation (SPEC O2): nothing new starts; started remediations hold
    before their next disruptive step (no cordon, no signal, no requeue, no action)
    until `slurm-heal unpause`. Who and why are recorded and shown by status and explain."""
    if not reason.strip():
        raise click.UsageError("--reason must say why")
    _pause_command("pause", reason, by, force, state_dir, config, as_json)


@click.command()
@click.option("--reason", callback=_reason_length, default="", help="Why (kept in the audit record).")
@by_option
@force_option
@state_options
@json_option
def unpause(reason: str, by: str | None, force: bool, state_dir: str | None,
            config: str | None, as_json: bool) -> None:
    """Let automation run again after `slurm-heal pause` (SPEC O2): held remediations go
    on from the step they were held before."""
    _pause_command("unpause", reason, by, force, state_dir, config, as_json)


# --------------------------------------------------------------------------- policy


def _flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, value


@click.group()
def policy() -> None:
    """Check or show a policy file (the daemon's --config)."""


@policy.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--no-slurm", is_flag=True,
              help="Do not ask Slurm (host lists and pools are then not checked).")
@json_option
def policy_check(file: str, no_slurm: bool, as_json: bool) -> None:
    """Check FILE as the daemon reads it: the policy, [controller] and [provider] (built
    dry). A problem exits 2 naming the file, the key and why; what matches nothing (a
    fault glob no fault has, a host list no node has) is a warning."""
    from slurm_heal.configcheck import check_config

    client: SlurmClient | None = None
    slurm_note = "Slurm not asked (--no-slurm)"
    if not no_slurm:
        try:
            client = _slurm(file)
        except HealError as exc:  # the file is still checked; the cluster part is not
            slurm_note = f"Slurm not asked ({exc})"
    report = check_config(file, client)
    _daemon_and_serve_needs(file, report, no_slurm)
    from slurm_heal.configcheck import site_fit

    # SPEC I7: what slurm.conf has of what slurm-heal needs (not with --no-slurm)
    fit = site_fit(report) if not no_slurm else None
    p = report.policy
    if report.cluster_checked:
        slurm_note = "host lists and pools checked against the cluster"
    elif client is not None:
        slurm_note = ""
    summary = {"file": file, "ok": True, "mode": p.mode,
               "approvals_default": p.approvals.default,
               "approval_rules": len(p.approvals.rules), "provider": report.provider_type,
               "warnings": report.warnings, "cluster_checked": report.cluster_checked,
               "slurm_conf": fit.as_dict() if fit is not None else None}
    if as_json:
        _emit_json(summary)
        return
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if fit is not None and fit.live:
        click.echo(f"# slurm.conf, merged with {fit.source} (SPEC I7):")
        for line in fit.lines:
            click.echo(line.text())
    elif fit is not None:
        click.echo(f"slurm.conf not checked: the live configuration could not be read "
                   f"({fit.source})", err=True)
    click.echo(f"{file}: OK (mode {p.mode}, approvals default {p.approvals.default}, "
               f"{len(p.approvals.rules)} approval rule(s), provider {report.provider_type}"
               + (f", {len(report.warnings)} warning(s)" if report.warnings else "")
               + (f"; {slurm_note}" if slurm_note else "") + ")")


def _daemon_and_serve_needs(file: str, report: Any, no_slurm: bool) -> None:
    """What the daemon and `serve` open at start beyond the file itself (issue 25 item
    4): the slurm.conf (not with --no-slurm: a file checked away from the cluster) and
    `[api] tokens`. A configured path to nothing is the file's error (exit 2, naming the
    key); no configured slurm.conf and none where Slurm looks is Slurm's (exit 3), as
    the daemon would stop."""
    from pathlib import Path

    from slurm_heal.errors import ConfigError, SlurmError
    from slurm_heal.location import slurm_conf_path

    configured = report.settings.slurm_conf
    obj = click.get_current_context().find_object(dict)
    embedded = obj is not None and obj.get("slurm") is not None  # no slurm.conf is read
    if not no_slurm and not embedded:
        try:
            slurm_conf_path(configured)
        except SlurmError as exc:
            if configured:
                raise ConfigError(f"{configured} is no readable file: the daemon would stop "
                                  "at start (it reads the cluster's slurm.conf from there)",
                                  file=file, key="controller.slurm_conf") from None
            raise SlurmError(f"{exc}: the daemon would stop at start") from None
    if report.policy.api:
        from slurm_heal.api.auth import TokenFile
        from slurm_heal.api.settings import api_settings

        tokens = api_settings(report.policy.api, file, Path(file).resolve().parent).tokens
        if tokens is not None:
            try:
                TokenFile(tokens)  # what serve reads at start: missing, unsafe, malformed
            except ConfigError as exc:
                raise ConfigError(f"{exc}: `slurm-heal serve` would stop at start (make it "
                                  f"with `slurm-heal api-token NAME --file {tokens}`)",
                                  file=file, key="api.tokens") from None


@policy.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
def policy_show(file: str, as_json: bool) -> None:
    """Show FILE's effective policy: every knob, defaults filled in."""
    from slurm_heal.config import load_policy

    p = load_policy(file)
    data = _plain(p.model_dump(mode="python", exclude_none=False))
    if as_json:
        _emit_json({"file": file, "policy": data})
        return
    rules = data.get("approvals", {}).pop("rules", [])
    for key, value in _flatten("", data):
        click.echo(f"{key} = {json.dumps(value)}")
    for i, rule in enumerate(rules):
        matchers = ", ".join(f"{k}={v}" for k, v in rule.items() if k != "mode" and v is not None)
        click.echo(f"approvals.rules[{i}]: {matchers or 'anything'} -> {rule['mode']}")
