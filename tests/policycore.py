"""The pure core as the tests call it (issue 33): the fault catalog is an input of
`decide()`, which opens no file for it, so the tests read the shipped catalog here,
once, at their edge, and pass it to every call that does not pass its own (as the
controller, the daemon, simulate and `plan` do at theirs)."""

from __future__ import annotations

from functools import partial

from slurm_heal import catalog as catalog_mod
from slurm_heal.policy import engine, incremental

CATALOG = catalog_mod.load()

decide = partial(engine.decide, catalog=CATALOG)
decide_effort = partial(engine.decide_effort, catalog=CATALOG)
decide_counted = partial(engine.decide_counted, catalog=CATALOG)
begin = partial(engine.begin, catalog=CATALOG)


def Decide() -> incremental.Decide:  # noqa: N802 - stands for the class it makes
    """`incremental.Decide` over the shipped catalog, as the controller makes it."""
    return incremental.Decide(CATALOG)
