"""The OpenAPI 3.1 document of the slurm-heal API (SPEC O5), served at
``/api/v1/openapi.json`` and committed as ``docs/api-openapi.json`` (a test keeps the
two equal, and every route of the app in it).

Write it again after a change: ``python -m slurm_heal.api.openapi > docs/api-openapi.json``.
"""

from __future__ import annotations

import json
from typing import Any

from slurm_heal import __version__

_OBJ: dict[str, Any] = {"type": "object"}


def _body_schemas() -> dict[str, Any]:
    from slurm_heal.api.bodies import DecisionBody, PauseBody, ReasonBody, RequestBody

    out: dict[str, Any] = {}
    for model in (DecisionBody, RequestBody, ReasonBody, PauseBody):
        schema = model.model_json_schema()
        schema.pop("title", None)
        out[model.__name__] = schema
    return out


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/problem+json": {
        "schema": {"$ref": "#/components/schemas/Problem"}}}}


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": schema or _OBJ}}}


_READ_ERRORS = {"401": {"$ref": "#/components/responses/Unauthorized"},
                "422": {"$ref": "#/components/responses/BadInput"},
                "502": {"$ref": "#/components/responses/Upstream"},
                "503": {"$ref": "#/components/responses/StoreUnavailable"}}
_WRITE_ERRORS = {**_READ_ERRORS,
                 "400": {"$ref": "#/components/responses/BadRequest"},
                 "403": {"$ref": "#/components/responses/Forbidden"},
                 "404": {"$ref": "#/components/responses/NotFound"},
                 "413": {"$ref": "#/components/responses/TooLarge"},
                 "415": {"$ref": "#/components/responses/NotJson"}}
_IDEM = {"name": "Idempotency-Key", "in": "header", "required": False,
         "schema": {"type": "string", "minLength": 1, "maxLength": 255},
         "description": "Any unique string of the client's (a UUID). A retry with the same "
                        "key gets the first answer back (header Idempotent-Replayed: true) "
                        "and never makes a second command; the same key with a different "
                        "request is refused (422). Kept 24 hours."}
_NODE = {"name": "node", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}}


def _read(summary: str, description: str, params: list[dict[str, Any]] | None = None,
          schema: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "description": description,
                          "responses": {"200": _ok("OK", schema), **_READ_ERRORS}}
    if params:
        op["parameters"] = params
    if "404" not in op["responses"]:
        op["responses"]["404"] = {"$ref": "#/components/responses/NotFound"}
    return {"get": op}


def _write(summary: str, description: str, body: str, params: list[dict[str, Any]],
           key_required: bool = False) -> dict[str, Any]:
    idem = dict(_IDEM, required=key_required)
    return {"post": {
        "summary": summary, "description": description + " Needs the operator role.",
        "parameters": [*params, idem],
        "requestBody": {"required": key_required, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}},
        "responses": {"202": _ok("Queued for the controller's next cycle",
                                 {"$ref": "#/components/schemas/Queued"}),
                      **_WRITE_ERRORS}}}


def document() -> dict[str, Any]:
    """The whole OpenAPI document."""
    target = {"name": "target", "in": "path", "required": True, "schema": {"type": "string"},
              "description": "A remediation id (r-...), or a node with one open remediation "
                             "(the store resolves it as the CLI does)."}
    incident = {"name": "target", "in": "path", "required": True,
                "schema": {"type": "string"},
                "description": "An incident id (i-...), or a component with an open incident "
                               "(switch:leaf1)."}
    paths: dict[str, Any] = {
        "/healthz": {"get": {"summary": "Liveness of serve itself", "security": [],
                             "responses": {"200": _ok("serve answers")}}},
        "/api/v1/openapi.json": {"get": {"summary": "This document", "security": [],
                                         "responses": {"200": _ok("OpenAPI 3.1")}}},
        "/api/v1/whoami": _read("Who the credentials name", "The name (as the audit record "
                                "will say it), the role and how it was found (token or "
                                "proxy).", schema={"$ref": "#/components/schemas/WhoAmI"}),
        "/api/v1/overview": _read(
            "The cluster at a glance", "What `slurm-heal status` gathers (each node's "
            "state, reason kind, alerts) plus the store's summary: controller heartbeat, "
            "breaker, pause (who, why), counts, approvals waiting, open remediations. "
            "Slurm not answering is said in `slurm`, not an error. Served from memory: "
            "at most 2 s old, a change of the store or the heartbeat shown at once."),
        "/api/v1/status": _read(
            "What `slurm-heal status --json` prints", "The CLI's twin, the same gathering "
            "and shape: the overview (controller, breaker, pause, counts by category, "
            "approvals, remediations in flight, foreign drains, incidents), `store` and "
            "`node_status` (each node as `/api/v1/nodes` shows it), with serve's config's "
            "policy as the CLI reads its config's. Slurm not answering is said in "
            "`slurm_error` (the CLI's exit 3), not an error. Served from memory as the "
            "overview is."),
        "/api/v1/nodes": _read("Every node as `slurm-heal status --json` shows it",
                               "State flags, reason (ours, a request, or foreign), alerts."),
        "/api/v1/nodes/{node}": _read(
            "Why a node is where it is (`explain`)", "Slurm's state and reason, active "
            "alerts with evidence, explanation and default action (NVIDIA's advice for "
            "an Xid), open and recent remediations, the last decisions with rule ids, and "
            "the node's whole history. Works from the store alone when Slurm does not "
            "answer; 404 when neither knows the node.", [_NODE]),
        "/api/v1/nodes/{node}/history": _read(
            "Every remediation of a node (`history`)", "The audit record of each (SPEC "
            "P4): who requested, who approved or which rule, the rule that chose the "
            "action, every step and attempt.", [_NODE]),
        "/api/v1/machines": _read(
            "The machines and their ledgers, worst first (`machines`)", "Per machine "
            "identity (GPU serials, instance id, else the node name; SPEC E7, D11): faults "
            "seen, remediations by action and outcome, days in service, first and last "
            "seen, the names it has had, and whether E7 holds its automatic work (lemon).",
            [{"name": "limit", "in": "query", "required": False,
              "schema": {"type": "integer", "minimum": 1}}]),
        "/api/v1/machines/{target}": _read(
            "One machine's ledger (`machines MACHINE`)", "By machine id, or by the name of "
            "a node it was last seen under; 404 when the ledger has neither.",
            [{"name": "target", "in": "path", "required": True,
              "schema": {"type": "string", "minLength": 1, "maxLength": 200}}]),
        "/api/v1/alerts": _read(
            "Active alerts (`alerts`)", "What the node checks published in Extra, evidence "
            "unchanged (SPEC D7), and nodes DOWN or drained by someone else (D5).",
            [{"name": "node", "in": "query", "required": False, "schema": {"type": "string"}}]),
        "/api/v1/approvals": _read(
            "The approvals queue", "Each proposal waiting for a person (SPEC P2): the "
            "remediation, the alert's plain text and evidence, the action and the rule that "
            "chose it, the approval rule that asks for a person, and the machine's earlier "
            "remediations (escalation history, E1)."),
        "/api/v1/remediations": _read(
            "Remediations (`remediations`)", "Open ones (all=true: finished ones too), the "
            "commands still waiting for the controller, the breaker and pause.",
            [{"name": "all", "in": "query", "required": False,
              "schema": {"type": "boolean"}},
             {"name": "node", "in": "query", "required": False, "schema": {"type": "string"}}]),
        "/api/v1/remediations/{target}": _read(
            "One remediation", "The whole record, who requested it, the approval as it "
            "stands, the machine's earlier remediations and the commands on their way.",
            [target]),
        "/api/v1/remediations/{target}/approve": _write(
            "Approve a proposal (`approve`)", "Queues an approve command; the audit record "
            "says `approved by <name>: <reason>` with the token's (or proxy user's) name.",
            "DecisionBody", [target]),
        "/api/v1/remediations/{target}/deny": _write(
            "Deny a proposal (`deny`)", "Queues a deny command; the node is released.",
            "DecisionBody", [target]),
        "/api/v1/remediations/{target}/cancel": _write(
            "Cancel an open remediation (`cancel`)", "Cancelled ones are not counted for "
            "escalation (SPEC E2).", "DecisionBody", [target]),
        "/api/v1/requests": _write(
            "Ask for an action on a node (`request`)", "Goes through the same checks as an "
            "alert: evidence (P1), capacity and the cluster limits (Q4). `remove` is "
            "recorded and refused by the controller (Q2). An Idempotency-Key is required.",
            "RequestBody", [], key_required=True),
        "/api/v1/breaker": _read("The circuit breaker (`breaker`)", "Open or closed, since "
                                 "when, why, the last reset, whether a reset is queued."),
        "/api/v1/breaker/reset": _write(
            "Reset the breaker (`reset-breaker`)", "A person's decision that automatic "
            "remediation may start again (SPEC S5). When the breaker is closed nothing is "
            "queued (200, queued null).", "ReasonBody", []),
        "/api/v1/pause": {**_read("Paused or not", "And who paused and why (SPEC O2)."),
                          **_write("Pause all automation", "Nothing disruptive starts while "
                                   "paused (SPEC O2); the reason is required.", "PauseBody",
                                   [])},
        "/api/v1/unpause": _write("Unpause", "Work resumes at the next cycle.", "ReasonBody",
                                  []),
        "/api/v1/policy": _read("The effective policy of serve's config file",
                                "Every knob, defaults filled in (`policy show`)."),
        "/api/v1/history": _read(
            "Repairs over time", "Issue 42: from the store and the audit archive, over the "
            "last `days` whole UTC days (today the last): remediations ended per day by "
            "outcome (done, failed, cancelled, withdrawn, denied); time to repair (alert "
            "first seen to done) by fault and action, its count, median and 90th "
            "percentile (nearest rank), in seconds; the machines whose remediations acted "
            "twice or more (repeats) and how many machines acted 1, 2, 3, 4+ times; the "
            "breaker's openings (S5); the incidents opened (S7), per day. What the "
            "console's /history page draws.",
            [{"name": "days", "in": "query", "required": False,
              "schema": {"type": "integer", "enum": [7, 30, 90], "default": 30}}]),
        "/api/v1/incidents": _read(
            "Incidents (`incidents`)", "SPEC S7: related alerts on several nodes under one "
            "switch, NVLink domain, rack or driver cohort, held as one cause for a person: "
            "the component, its nodes, every node's alert with its evidence, the "
            "remediations held, how it "
            "ended. Open ones and those ended in the last day (all=true: every one kept).",
            [{"name": "all", "in": "query", "required": False,
              "schema": {"type": "boolean"}}]),
        "/api/v1/incidents/{target}": _read(
            "One incident", "By its id (i-...), or the open one on a component "
            "(switch:leaf1).", [incident]),
        "/api/v1/incidents/{target}/close": _write(
            "Close an open incident (`incident close`)", "A person's close (SPEC S7): the "
            "remediations it held go on by their own rules at the controller's next cycle.",
            "ReasonBody", [incident]),
        "/api/v1/slack/interactions": {"post": {
            "summary": "Slack's button presses (the Slack app's Interactivity Request URL)",
            "description": (
                "SPEC O7: a press of Approve or Deny in a slurm-heal message. No bearer "
                "token: Slack's request signature (X-Slack-Signature over "
                "v0:{X-Slack-Request-Timestamp}:{raw body} with the app's signing secret, "
                "within five minutes) proves it; the Slack member is mapped to a console "
                "user and role by [notify.slack] users. The outcome, a refusal included, is "
                "written into the message (chat.update); docs/notifications.md."),
            "security": [],
            "requestBody": {"required": True, "content": {
                "application/x-www-form-urlencoded": {"schema": {
                    "type": "object", "required": ["payload"],
                    "properties": {"payload": {
                        "type": "string",
                        "description": "Slack's block_actions payload (JSON)"}}}}}},
            "responses": {"200": {"description": "taken, with an empty body (the message "
                                                 "tells the outcome)"},
                          "401": {"description": "the signature does not verify or is "
                                                 "older than five minutes"},
                          "404": {"description": "Slack is not configured"}}}},
        # SPEC D13: the site's own monitors (api/receiver.py, docs/sources.md)
        "/api/v1/sources": _read(
            "The site's monitors' alerts (`GET /api/v1/sources`)", "SPEC D13: each alert "
            "Alertmanager sent, newest first: the node and fault it mapped to, the rule "
            "that decided or why it leads to nothing, and its payload as sent."),
        "/api/v1/sources/alertmanager": {"post": {
            "summary": "Alertmanager's webhook receiver (SPEC D13)",
            "description": "Alertmanager's webhook message, version 4 "
                           "(`webhook_configs` with `http_config.authorization`, a bearer "
                           "token). Each alert is mapped by the policy's "
                           "[[sources.alertmanager.map]] rules and kept by its fingerprint "
                           "(Q3); the controller's next cycle reads it as evidence (P1); a "
                           "resolved one withdraws what was not yet done (L4). Needs the "
                           "operator role.",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"type": "object", "required": ["version", "status", "alerts"]}}}},
            "responses": {"200": _ok("Taken: how many alerts, how each was mapped"),
                          **{k: v for k, v in _WRITE_ERRORS.items() if k != "404"}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "slurm-heal API", "version": __version__,
            "description": (
                "Everything the admin CLI shows and does (SPEC O5, I4). `slurm-heal serve` "
                "never decides and never acts: writes put a command into the store's inbox "
                "exactly as the CLI does, and the daemon consumes it at its next cycle. "
                "Authentication: `Authorization: Bearer <token>` (named tokens from the "
                "server's token file), or a trusted reverse proxy's user header. Roles: "
                "viewer (reads), operator (reads and writes). Errors are RFC 9457 problem "
                "objects."),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                **_body_schemas(),
                "Problem": {"type": "object", "required": ["title", "status", "detail", "kind"],
                            "properties": {
                                "type": {"type": "string"}, "title": {"type": "string"},
                                "status": {"type": "integer"},
                                "detail": {"type": "string",
                                           "description": "What went wrong, for a person"},
                                "kind": {"type": "string",
                                         "description": "The error class (NotFound, ...)"},
                                "errors": {"type": "array", "items": {
                                    "type": "object", "properties": {
                                        "field": {"type": "string"},
                                        "message": {"type": "string"}}}}}},
                "Queued": {"type": "object", "required": ["queued", "message"], "properties": {
                    "queued": {"type": ["object", "null"],
                               "description": "The inbox command as stored"},
                    "message": {"type": "string"},
                    "note": {"type": ["string", "null"]},
                    "replayed": {"type": "boolean",
                                 "description": "true when this is a kept answer"}}},
                "WhoAmI": {"type": "object", "required": ["name", "role", "via"],
                           "properties": {"name": {"type": "string"},
                                          "role": {"enum": ["viewer", "operator"]},
                                          "via": {"enum": ["token", "proxy"]}}},
            },
            "responses": {
                "BadRequest": _problem("Malformed: not JSON, a bad Idempotency-Key"),
                "Unauthorized": _problem("No valid credentials"),
                "Forbidden": _problem("The viewer role may only look"),
                "NotFound": _problem("No such node, remediation, or nothing open to decide"),
                "TooLarge": _problem("Body over 64 KiB"),
                "NotJson": _problem("The body is not application/json"),
                "BadInput": _problem("Invalid input; `errors` names each field"),
                "Upstream": _problem("Slurm did not answer or failed"),
                "StoreUnavailable": _problem(
                    "The store is locked, corrupt, or no controller reads it"),
            },
        },
    }


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(document(), indent=1, sort_keys=True))  # noqa: T201
