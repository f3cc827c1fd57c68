"""`slurm-heal check` without click: the fast entry point (``python -m slurm_heal.checks``,
and ``slurm-heal check`` itself, which `slurm_heal.entry` routes here before click loads).

The click command in `slurm_heal.commands.check` shares everything here; this path
exists because the check runs on every node every few minutes and in every job's
epilog, where click's import time (~40 ms) is a large part of the budget. For the same
reason its options are read by a small parser of its own, not argparse (which imports
gettext, locale, shutil, bz2 and lzma: ~17 ms, issue 26); it reads what argparse read
(``--opt VALUE``, ``--opt=VALUE``, unambiguous prefixes) and says a usage error the way
argparse said it (usage line, ``slurm-heal check: error: ...``, exit 2).

Exit statuses: 0 healthy, 1 findings (prolog: only faults that make the node unusable;
epilog: always 0), 2 usage or configuration error, 3 Slurm error (the findings were
still printed and the state saved), 10 a detector failed and nothing was found, 11 the
check itself broke (an unexpected exception: reported in the node's Extra as a
record-only alert; our Prolog lets the job run).
"""

from __future__ import annotations

import json
import sys

from slurm_heal.checks import config, paths, runner
from slurm_heal.errors import ConfigError, HealError, SlurmError, exit_code_for

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import NoReturn, TextIO

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "WARNING", "info": "info"}


def render_text(result: runner.CheckResult, out: TextIO) -> None:
    """Plain-language report of a check run."""
    if not result.findings:
        out.write(f"{result.node}: healthy\n")
    else:
        n = len(result.findings)
        out.write(f"{result.node}: {n} finding{'s' if n != 1 else ''}\n")
        for f in result.findings:
            out.write(f"  {SEVERITY_LABEL[f.severity.value]:8} {f.fault}: {f.summary}\n")
            for e in f.evidence[:2]:
                when = f" [{e.at}]" if e.at else ""
                out.write(f"           evidence{when}: {e.text[:200]}\n")
    for ack in result.acknowledged:
        out.write(f"  acknowledged {ack.fault}: {ack.summary} (a person resumed the node; "
                  "not drained again for it, SPEC S8)\n")
    for s in result.statuses:
        if s.status not in ("ok", "skipped") or (s.status == "ok" and s.message):
            out.write(f"  detector {s.name}: {s.status}{': ' + s.message if s.message else ''}\n")
    for a in result.actions:
        out.write(f"  -> {a}\n")
    for n_ in result.notes:
        out.write(f"  (note) {n_}\n")


def render_json(result: runner.CheckResult, out: TextIO) -> None:
    """The findings as a JSON list (fault, severity, summary, evidence, detector, node)."""
    json.dump([f.to_json() for f in result.findings], out, indent=2)
    out.write("\n")


class UsageError(Exception):
    """Bad arguments: the message, said as argparse said it (`Parser.fail`)."""


class Option:
    __slots__ = ("flags", "dest", "metavar", "choices", "default", "help")

    def __init__(self, flags: tuple[str, ...], dest: str, help: str, metavar: str = "",
                 choices: tuple[str, ...] = (), default: str | bool | None = None) -> None:
        self.flags = flags
        self.dest = dest
        self.metavar = metavar  # "" = a flag without a value
        self.choices = choices
        self.default = default
        self.help = help


class Parser:
    """The check's options (what argparse gave it): ``parse(argv)`` -> dest -> value."""

    prog = "slurm-heal check"

    def __init__(self, description: str, options: list[Option]) -> None:
        self.description = description
        self.options = options
        self.as_json = False

    def usage(self) -> str:
        parts = ["[-h]"]
        for o in self.options:
            value = "{" + ",".join(o.choices) + "}" if o.choices else o.metavar
            parts.append(f"[{o.flags[0]}{' ' + value if value else ''}]")
        return f"usage: {self.prog} {' '.join(parts)}\n"

    def format_help(self) -> str:
        lines = [self.usage(), f"{self.description}\n", "options:",
                 "  -h, --help            show this help message and exit"]
        for o in self.options:
            value = "{" + ",".join(o.choices) + "}" if o.choices else o.metavar
            names = ", ".join(f"{f} {value}" if value else f for f in o.flags)
            lines.append(f"  {names}\n                        {o.help}" if len(names) > 20
                         else f"  {names:<22}{o.help}")
        return "\n".join(lines) + "\n"

    def _option(self, word: str) -> Option:
        exact = [o for o in self.options if word in o.flags]
        if exact:
            return exact[0]
        near = [(f, o) for o in self.options for f in o.flags if f.startswith(word)]
        if len({o.dest for _, o in near}) == 1:
            return near[0][1]
        if near:
            raise UsageError(f"ambiguous option: {word} could match "
                             f"{', '.join(f for f, _ in near)}")
        raise UsageError(f"unrecognized arguments: {word}")

    def parse(self, argv: list[str]) -> dict[str, str | bool | None]:
        values: dict[str, str | bool | None] = {o.dest: o.default for o in self.options}
        extra: list[str] = []
        i = 0
        while i < len(argv):
            word = argv[i]
            i += 1
            if word in ("-h", "--help"):
                sys.stdout.write(self.format_help())
                sys.exit(0)
            if not word.startswith("--") or word == "--":
                extra.extend(argv[i - 1:] if word != "--" else argv[i:])
                break
            name, eq, value = word.partition("=")
            o = self._option(name)
            if not (o.metavar or o.choices):
                if eq:
                    raise UsageError(f"argument {'/'.join(o.flags)}: ignored explicit "
                                     f"argument {value!r}")
                values[o.dest] = True
                continue
            if not eq:
                if i >= len(argv) or (argv[i].startswith("--") and len(argv[i]) > 2):
                    raise UsageError(f"argument {'/'.join(o.flags)}: expected one argument")
                value = argv[i]
                i += 1
            if o.choices and value not in o.choices:
                raise UsageError(f"argument {'/'.join(o.flags)}: invalid choice: {value!r} "
                                 f"(choose from {', '.join(repr(c) for c in o.choices)})")
            values[o.dest] = value
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return values

    def fail(self, message: str) -> NoReturn:
        """A usage error: as JSON under --json, else argparse's words; exit 2."""
        if self.as_json:
            error(message, "UsageError", runner.EXIT_USAGE, True, sys.stdout, sys.stderr)
        else:
            sys.stderr.write(self.usage() + f"{self.prog}: error: {message}\n")
        sys.exit(runner.EXIT_USAGE)


def parser() -> Parser:
    return Parser(
        "Run the node health checks, publish alerts in the node's Extra and drain the node "
        "for faults that need it (SPEC D1-D4, I1, I2).",
        [Option(("--mode",), "mode", "healthcheck (default), prolog or epilog",
                choices=config.MODES[:3], default="healthcheck"),
         Option(("--json",), "json", "print findings as a JSON list", default=False),
         Option(("--dry-run",), "dry_run", "write nothing to Slurm", default=False),
         Option(("--publish",), "publish",
                "write the findings and the check time into Extra now, changed or not "
                "(after a repair; otherwise only changes and the heartbeat are written)",
                default=False),
         Option(("--check-config", "--config"), "config",
                f"the node check's configuration (default {paths.CONFIG_FILE} if present); "
                "--config is the old spelling, kept for one release", metavar="FILE"),
         Option(("--node",), "node",
                "node name (default $SLURMD_NODENAME, else the short host name)",
                metavar="NAME")])


def error(message: str, kind: str, code: int, as_json: bool, out: TextIO,
          err: TextIO) -> int:
    """An error as the CLI prints every error (`slurm_heal.cli._fail`): one line on
    stderr, or with --json one object ``{"error": {"message", "kind", "exit"}}`` on
    stdout. Returns ``code``."""
    if as_json:
        out.write(json.dumps({"error": {"message": message, "kind": kind, "exit": code}}) + "\n")
    else:
        err.write(f"slurm-heal: error: {message}\n")
    return code


def run(mode: str, as_json: bool, dry_run: bool, config_file: str | None,
        node: str | None, out: TextIO | None = None, err: TextIO | None = None,
        publish: bool = False) -> int:
    """Run a check and print it; return the exit status. Shared with the click command."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        cfg = config.load_config(config_file)
    except ConfigError as exc:
        return error(str(exc), type(exc).__name__, runner.EXIT_USAGE, as_json, out, err)
    name = runner.node_name(node)
    try:
        result = runner.run_check(cfg, node_name=name, mode=mode, dry_run=dry_run,
                                  publish=publish)
    except SlurmError as exc:
        return error(f"publishing to Slurm failed: {exc}", type(exc).__name__,
                     runner.EXIT_SLURM, as_json, out, err)
    except HealError as exc:
        return error(str(exc), type(exc).__name__, exit_code_for(exc), as_json, out, err)
    except Exception as exc:  # a bug in the check: never the node's fault (SPEC I1)
        return crashed(exc, name, dry_run, as_json, out, err)
    if as_json:
        render_json(result, out)
        for s in result.statuses:
            if s.status in ("error", "timeout"):
                err.write(f"slurm-heal: detector {s.name}: {s.status}: {s.message}\n")
    else:
        render_text(result, out)
    return result.exit_code


def crashed(exc: BaseException, node: str, dry_run: bool, as_json: bool, out: TextIO,
            err: TextIO) -> int:
    """The check itself broke (SPEC I1, O1): its traceback on stderr, the record-only
    alert in the node's Extra (best effort: `runner.report_crash`), exit 11, which our
    Prolog and Epilog never take for a fault of the node."""
    import traceback

    err.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    what = f"{type(exc).__name__}: {exc}"
    if not dry_run:
        try:
            err.write(f"slurm-heal: {runner.report_crash(node, what)}\n")
        except Exception as report:  # the report is best effort; the exit says it anyway
            err.write(f"slurm-heal: the crash could not be reported in Slurm: {report}\n")
    return error(f"the node check itself failed ({what}); not a fault of {node}: the job "
                 "is allowed and nothing is drained", "CheckCrashed", runner.EXIT_CRASHED,
                 as_json, out, err)


def main(argv: list[str] | None = None) -> int:
    """``slurm-heal check`` argv (without "check") -> exit status."""
    words = argv if argv is not None else sys.argv[1:]
    p = parser()
    p.as_json = "--json" in words
    try:
        args = p.parse(words)
    except UsageError as exc:
        p.fail(str(exc))
    config_file, node = args["config"], args["node"]
    return run(str(args["mode"]), bool(args["json"]), bool(args["dry_run"]),
               config_file if isinstance(config_file, str) else None,
               node if isinstance(node, str) else None, publish=bool(args["publish"]))
