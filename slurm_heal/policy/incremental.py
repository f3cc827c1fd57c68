"""decide() cycle after cycle, at the cost of what changed (issue 20).

`Decide` is what the controller and simulate call once per cycle in place of the bare
`decide`: it keeps, between calls, each node's check data validated once per change
of its Extra text (`extra.CheckCache`) and the index of the store's records
(`Records`, rebuilt only for the records that changed), and passes them in with the
catalog. Keeping things between calls is its job, not decide()'s: decide() stays a
pure function of its arguments (ARCHITECTURE "pure core"), and a plan made through
`Decide` is the one the bare call makes on the same snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from slurm_heal import catalog as catalog_mod
from slurm_heal.config import Policy
from slurm_heal.extra import CheckCache
from slurm_heal.models import Plan, State
from slurm_heal.policy.engine import decide
from slurm_heal.policy.records import Records
from slurm_heal.types import Alert, ClusterView


class Decide:
    """``decide(view, state, now, policy[, alerts])`` with the check data kept."""

    def __init__(self, catalog: catalog_mod.Catalog) -> None:
        self.catalog = catalog  # loaded by the caller, at its edge (issue 33)
        self.checks = CheckCache()
        self.records: Records | None = None

    def __call__(self, view: ClusterView, state: State, now: datetime, policy: Policy,
                 alerts: Mapping[str, Sequence[Alert]] | None = None) -> Plan:
        checks = self.checks.read_view(view.nodes, now)
        self.records = Records.of(state.remediations, self.records)
        return decide(view, state, now, policy, alerts, catalog=self.catalog, checks=checks,
                      records=self.records)
