"""`slurm-heal check`'s own option parser (issue 26: no argparse on the check path)
reads what argparse read and says a usage error as argparse said it (SPEC I1: the glue
and slurm.conf lines written for it keep working)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from slurm_heal.checks import fastcli


def parse(*argv: str) -> dict[str, object]:
    return fastcli.parser().parse(list(argv))


def test_the_options_in_every_spelling_argparse_took() -> None:
    assert parse() == {"mode": "healthcheck", "json": False, "dry_run": False,
                       "publish": False, "config": None, "node": None}
    assert parse("--mode", "prolog", "--json", "--dry-run", "--check-config", "/c.toml",
                 "--node", "gpu01") == {"mode": "prolog", "json": True, "dry_run": True,
                                        "publish": False, "config": "/c.toml",
                                        "node": "gpu01"}
    assert parse("--mode=epilog", "--config=/old.toml", "--node=n2")["config"] == "/old.toml"
    assert parse("--dry", "--js", "--no", "n3") == {"mode": "healthcheck", "json": True,
                                                     "dry_run": True, "publish": False,
                                                     "config": None, "node": "n3"}
    assert parse("--publish")["publish"] is True  # issue 43: after a repair


@pytest.mark.parametrize(("argv", "words"), [
    (["--mode", "bogus"], "argument --mode: invalid choice: 'bogus' (choose from "
                          "'healthcheck', 'prolog', 'epilog')"),
    (["--node"], "argument --node: expected one argument"),
    (["--node", "--dry-run"], "argument --node: expected one argument"),
    (["--dry-run=yes"], "argument --dry-run: ignored explicit argument 'yes'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["stray"], "unrecognized arguments: stray"),
])
def test_a_usage_error_says_what_argparse_said_and_exits_2(argv: list[str], words: str) -> None:
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as ex:
        fastcli.main(argv)
    assert ex.value.code == 2
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("usage: slurm-heal check [-h] [--mode {healthcheck,prolog,epilog}]")
    assert lines[1] == f"slurm-heal check: error: {words}"


def test_help_lists_every_option_and_exits_0() -> None:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as ex:
        fastcli.main(["--help"])
    assert ex.value.code == 0
    for flag in ("--mode", "--json", "--dry-run", "--check-config FILE", "--config FILE",
                 "--node NAME"):
        assert flag in out.getvalue()


def test_the_console_script_sends_check_to_the_check_and_the_rest_to_click() -> None:
    """slurm_heal.entry (the `slurm-heal` script): `check` goes to the check's own entry
    point (its usage words), every other command and --version to the click application."""
    from slurm_heal import __version__, entry

    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as ex:
        entry.main(["check", "--frobnicate"])
    assert ex.value.code == 2
    assert "slurm-heal check: error: unrecognized arguments: --frobnicate" in err.getvalue()
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as ex:
        entry.main(["--version"])
    assert ex.value.code == 0 and out.getvalue().strip() == f"slurm-heal, version {__version__}"
