"""Kept honest: what the client reads and sends, checked against the running server's
/openapi.json. The models declare each field's property and wire type (``_models.wire``), the
request bodies the fields they send (``_models.SENDS``); parsing and sending use exactly
these declarations, so a field the server renames or retypes fails here."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx

from agentaddress_client import _models


def _types(schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(JSON types the property may have, components it may reference)."""
    types: set[str] = set()
    refs: set[str] = set()
    if "$ref" in schema:
        refs.add(schema["$ref"].rsplit("/", 1)[1])
        types.add("object")
    t = schema.get("type")
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(t)
    for alt in schema.get("oneOf", []) + schema.get("anyOf", []):
        at, ar = _types(alt)
        types |= at
        refs |= ar
    return types, refs


def test_models_match_the_schema(server: Any) -> None:
    doc = httpx.get(f"{server.base}/openapi.json").json()
    components = doc["components"]["schemas"]
    checked = 0
    for name, model in _models.MODELS.items():
        assert name in components, f"{model.__name__}: no component {name}"
        component = components[name]
        props = component.get("properties", {})
        required = set(component.get("required", []))
        for f in dataclasses.fields(model):
            if "json" not in f.metadata:
                continue
            prop, kind = f.metadata["json"], f.metadata["kind"]
            where = f"{model.__name__}.{f.name} ({name}.{prop})"
            assert prop in props, f"{where}: the schema has no such property"
            optional = kind.endswith("?")
            base = kind.rstrip("?")
            types, refs = _types(props[prop])
            if not optional:
                assert prop in required, f"{where}: read as always present, but not required"
                assert "null" not in types, f"{where}: read as never null, but nullable"
            if base == "any":
                pass  # the client takes whatever JSON the property holds
            elif base.startswith("ref:"):
                assert base[4:] in refs, f"{where}: the schema references {refs}"
            else:
                assert base in types, f"{where}: expected {base}, the schema says {types}"
            checked += 1
    assert checked > 80


def test_envelopes_match_the_schema(server: Any) -> None:
    doc = httpx.get(f"{server.base}/openapi.json").json()
    components = doc["components"]["schemas"]
    for envelope, (key, inner) in _models.ENVELOPES.items():
        prop = components[envelope]["properties"][key]
        assert key in components[envelope].get("required", []), envelope
        if prop.get("type") == "array":
            prop = prop["items"]
        _, refs = _types(prop)
        assert inner in refs, f"{envelope}.{key} is not {inner}: {refs}"


def test_request_bodies_match_the_schema(server: Any) -> None:
    doc = httpx.get(f"{server.base}/openapi.json").json()
    components = doc["components"]["schemas"]
    for name, spec in _models.SENDS.items():
        component = components[name]
        props = set(component.get("properties", {}))
        assert spec["may"] <= props, f"{name}: the client sends {spec['may'] - props}, unknown"
        required = set(component.get("required", []))
        assert required <= spec["always"], f"{name}: the client may leave out {required}"
    # Every operation the client calls exists with the components it uses.
    for method, path, request, responses in _models.OPERATIONS:
        op = doc["paths"].get(path, {}).get(method.lower())
        assert op is not None, f"{method} {path} is not in /openapi.json"
        if request is not None:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/" + request), f"{method} {path}: {schema}"
        for status, component in responses.items():
            answer = op["responses"].get(str(status))
            assert answer is not None, f"{method} {path} has no {status}"
            if component is not None:
                schema = answer["content"]["application/json"]["schema"]
                assert schema["$ref"].endswith("/" + component), f"{method} {path} {status}"


def test_the_client_sends_what_it_declares(client: Any, server: Any) -> None:
    """The bodies built by the client's operations, checked against SENDS at build time: a
    field not declared raises, so every operation that runs here sent only declared fields."""
    a = client.create_address(name="n", task_id="t", expires_in_seconds=120)
    a.state.put("k", None)
    a.ask("t?", body="b", options=["A"], expires_in_seconds=60, comment="none")
    a.add_hook(
        "http://127.0.0.1:9/x",
        types=["*"],
        format="standard",
        headers={"a": "b"},
        debounce_seconds=1,
    )
    a.set_timer(60, type="timer.x", data={"a": 1})
    try:
        _models.body("PutStateRequest", value=1, bogus=2)
    except ValueError:
        pass
    else:
        raise AssertionError("an undeclared field was accepted")
