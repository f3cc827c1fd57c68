"""docs/provider-api.json is valid OpenAPI-shaped JSON and matches what the simulator
(the reference implementation) and the http provider actually do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.types import Action

DOC = Path(__file__).resolve().parents[2] / "docs" / "provider-api.json"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    data = json.loads(DOC.read_text())
    assert isinstance(data, dict)
    return data


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _check(value: Any, schema: dict[str, Any], doc: dict[str, Any], where: str) -> None:
    """A small JSON-schema check: $ref, type object/array/string, required, enum."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return _check(value, doc["components"]["schemas"][name], doc, where)
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), where
        for key in schema.get("required", []):
            assert key in value, f"{where}: missing {key}"
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _check(value[key], sub, doc, f"{where}.{key}")
    elif kind == "array":
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check(item, schema["items"], doc, f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), where
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    return None


def test_document_is_openapi_3_with_resolvable_refs(doc: dict[str, Any]) -> None:
    assert doc["openapi"].startswith("3.0")
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"], ref


def test_documented_actions_are_the_provider_actions(doc: dict[str, Any]) -> None:
    documented = set(doc["components"]["schemas"]["Action"]["enum"])
    assert documented == {a.value for a in (Action.REBOOT, Action.REBUILD, Action.MIGRATE,
                                            Action.POWER_CYCLE)}


def test_simulator_answers_match_the_documented_schemas(doc: dict[str, Any]) -> None:
    paths = doc["paths"]

    def schema(path: str, method: str, status: str) -> dict[str, Any]:
        resp = paths[path][method]["responses"][status]
        return dict(resp["content"]["application/json"]["schema"])

    with SimulatorServer(port=0, duration=0) as sim:
        created = requests.post(f"{sim.url}/v1/nodes/gpu07/actions", json={"action": "migrate"},
                                headers={"Idempotency-Key": "k"}, timeout=5)
        assert created.status_code == 201
        _check(created.json(), schema("/v1/nodes/{node}/actions", "post", "201"), doc, "create")
        again = requests.post(f"{sim.url}/v1/nodes/gpu07/actions", json={"action": "migrate"},
                              headers={"Idempotency-Key": "k"}, timeout=5)
        assert again.status_code == 200
        op_id = created.json()["operation"]["id"]
        one = requests.get(f"{sim.url}/v1/operations/{op_id}", timeout=5)
        _check(one.json(), schema("/v1/operations/{id}", "get", "200"), doc, "get")
        found = requests.get(f"{sim.url}/v1/operations", params={"idempotency_key": "k"},
                             timeout=5)
        _check(found.json(), schema("/v1/operations", "get", "200"), doc, "find")
        hosts = requests.get(f"{sim.url}/v1/validation", timeout=5)
        _check(hosts.json(), schema("/v1/validation", "get", "200"), doc, "validation")
        bad = requests.post(f"{sim.url}/v1/nodes/gpu07/actions", json={"action": "x"},
                            headers={"Idempotency-Key": "k2"}, timeout=5)
        assert str(bad.status_code) in paths["/v1/nodes/{node}/actions"]["post"]["responses"]
        _check(bad.json(), doc["components"]["schemas"]["Error"], doc, "error")
