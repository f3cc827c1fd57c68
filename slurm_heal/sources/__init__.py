"""Alerts from the site's own monitors (SPEC D13): Prometheus Alertmanager's webhook,
NHC's drain reasons and gpud's health states, mapped to faults of the catalog by the
operator's policy and kept with their payload unchanged (D7).

* `settings`: the ``[sources]`` section (``[[sources.alertmanager.map]]``, ``[sources.nhc]``).
* `alertmanager`: Alertmanager's webhook message (version 4) → `stored.SourceAlert`.
* `stored`: the alerts as the store keeps them (``State.data["sources"]``), deduplicated
  by the source's own id (Q3), and as the `types.Alert` the pure core reads (P1).
* `nhc`: NHC's ``NHC: check_x: ...`` reasons → the alert of the fault the policy maps.

A low layer: pydantic, the value types and the catalog; nothing that talks to Slurm.
The receiver is the API's (`slurm_heal.api.app`); gpud is read on the node by its
detector (`slurm_heal.checks.detectors.gpud`).
"""

# The detector names the site's alerts carry (their source: status, explain, the console
# and notifications name it).
SITE_SOURCES = frozenset({"alertmanager", "nhc", "gpud"})
