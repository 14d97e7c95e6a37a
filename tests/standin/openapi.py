"""GitHub's published REST description, used to check what the app sends.

The stand-in must not accept a request that real GitHub would refuse: a misspelt field, a
wrong enum value or a route that does not exist would pass a hand-written fake and fail
in production. So every request is matched against the ``paths`` of GitHub's OpenAPI
description (pinned by ``tests/fetch_github_fixtures.py``) and its parameters and JSON
body are validated against the schemas there.

The description is OpenAPI 3.0, whose schema dialect is JSON Schema draft 4 plus a few
extensions. The one that matters for validation is ``nullable: true``; it is rewritten
into plain JSON Schema once at load time, so stock ``jsonschema`` validators can be used.
``$ref``s to ``#/components/...`` are resolved through a ``referencing`` registry that
holds the whole (rewritten) document. Everything costly happens once per process:
loading, the rewrite and the path regexes eagerly; one validator per operation lazily.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from jsonschema import Draft4Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.jsonschema import DRAFT4

from tests import fetch_github_fixtures

DOC_URI = "urn:github:openapi:api.github.com"
METHODS = ("get", "put", "post", "patch", "delete", "head", "options")
_MAX_MESSAGE = 300

JSONDict = dict[str, Any]


class Route(NamedTuple):
    """A request matched to the description: its path template, operation and params."""

    template: str
    method: str
    operation: JSONDict | None  # None: the path exists but not with this method
    params: dict[str, str]


@dataclass
class _Template:
    template: str
    regex: re.Pattern[str]
    names: list[str]
    # Literal segments beat parameters: /issues/comments/{id} over /issues/{number}/...
    specificity: tuple[int, int, tuple[int, ...]]
    item: JSONDict = field(repr=False)


def _pointer(*segments: str) -> str:
    return "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in segments)


def _ref_segments(ref: str) -> list[str]:
    """``#/components/schemas/a~1b`` → ``["components", "schemas", "a/b"]``."""
    return [s.replace("~1", "/").replace("~0", "~") for s in ref.removeprefix("#/").split("/")]


_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
)


def _format_checker() -> FormatChecker:
    """Formats GitHub actually enforces on input; other formats are annotations only."""
    checker = FormatChecker(formats=())

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if not _RFC3339.match(value):
            return False
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        return True

    @checker.checks("uri")
    def _uri(value: object) -> bool:
        if not isinstance(value, str):
            return True
        parts = urlsplit(value)
        return bool(parts.scheme) and bool(parts.netloc or parts.path)

    return checker


def _schema(node: Any) -> Any:
    """Rewrite one OpenAPI 3.0 schema object (recursively) into draft-4 JSON Schema."""
    if not isinstance(node, dict):
        return node
    out: JSONDict = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            out[key] = {name: _schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "additionalItems"):
            out[key] = [_schema(v) for v in value] if isinstance(value, list) else _schema(value)
        elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
            out[key] = [_schema(v) for v in value]
        elif key in ("example", "examples", "description"):
            continue  # documentation only; dropping it keeps the registry small
        else:
            out[key] = value
    if out.pop("nullable", False) is not True:
        return out
    if any(k in out for k in ("$ref", "allOf", "anyOf", "oneOf")):
        # draft 4 ignores $ref's siblings, and combinators may each reject null.
        return {"anyOf": [{"type": "null"}, out]}
    if "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"] if "null" not in types else types
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def _rewrite_document(node: Any) -> Any:
    """Rewrite every schema the document holds; leave examples and prose alone."""
    if isinstance(node, list):
        return [_rewrite_document(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: JSONDict = {}
    for key, value in node.items():
        if key in ("example", "examples", "description", "summary", "x-github"):
            continue
        out[key] = _schema(value) if key == "schema" else _rewrite_document(value)
    return out


def _coerce(raw: str, schema: Mapping[str, Any]) -> Any:
    """A query/path string as the JSON value its schema describes (GitHub's coercion)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "integer":
        return int(raw)
    if kind == "number":
        return float(raw)
    if kind == "boolean":
        if raw not in ("true", "false"):
            raise ValueError(f"{raw!r} is not true or false")
        return raw == "true"
    if kind == "array":
        items = schema.get("items", {})
        return [_coerce(part, items if isinstance(items, dict) else {}) for part in raw.split(",")]
    return raw


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _error_text(where: str, error: ValidationError) -> str:
    location = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
    return _short(f"{where}{location}: {error.message}")


class OpenAPI:
    """Match and validate requests against GitHub's REST description.

    Construct with :meth:`load` to share one parsed description per process.
    """

    def __init__(self, document: JSONDict) -> None:
        self.document = document
        self.version = str(document.get("info", {}).get("version", "?"))
        components: JSONDict = document.get("components", {})
        self._schemas_doc: JSONDict = {
            "paths": _rewrite_document(document["paths"]),
            "components": {
                **_rewrite_document({k: v for k, v in components.items() if k != "schemas"}),
                "schemas": {n: _schema(s) for n, s in components.get("schemas", {}).items()},
            },
        }
        self._registry: Registry[Any] = Registry().with_resource(
            DOC_URI, DRAFT4.create_resource(self._schemas_doc)
        )
        self._format_checker = _format_checker()
        self._validators: dict[str, Draft4Validator] = {}
        self._lock = threading.Lock()
        self._by_first: dict[str, list[_Template]] = {}
        self._wild: list[_Template] = []
        for template, item in document["paths"].items():
            compiled = self._compile(template, item)
            first = template.split("/")[1] if template.count("/") else ""
            if first.startswith("{"):
                self._wild.append(compiled)
            else:
                self._by_first.setdefault(first, []).append(compiled)

    @classmethod
    def load(cls, path: Path | None = None) -> OpenAPI:
        """The description at ``path`` (default: the fetched cache), parsed once."""
        return _load(path or fetch_github_fixtures.OPENAPI_PATH)

    # --- matching -------------------------------------------------------------------

    def _compile(self, template: str, item: JSONDict) -> _Template:
        multi = {
            param["name"]
            for method, op in item.items()
            if method in METHODS
            for param in self._parameters(op)
            if param.get("x-multi-segment")
        }
        names: list[str] = []
        parts: list[str] = []
        flags: list[int] = []
        literal_chars = 0
        for segment in template.strip("/").split("/"):
            pieces = re.split(r"\{([^}]+)\}", segment)
            regex = ""
            for i, piece in enumerate(pieces):
                if i % 2 == 0:
                    regex += re.escape(piece)
                    literal_chars += len(piece)
                else:
                    names.append(piece)
                    regex += "(.+?)" if piece in multi else "([^/]+?)"
            parts.append(regex)
            flags.append(1 if len(pieces) == 1 else 0)
        pattern = re.compile("^/" + "/".join(parts) + "/?$")
        return _Template(template, pattern, names, (sum(flags), literal_chars, tuple(flags)), item)

    def route(self, method: str, path: str) -> Route | None:
        """The most specific template matching ``path``; None if no template matches.

        A template that has ``method`` wins over a more specific one that lacks it, so
        ``/commits/{ref}`` still routes a ref that happens to end in ``/status``.
        """
        first = path.split("/")[1] if path.count("/") else ""
        candidates = []
        for compiled in [*self._by_first.get(first, ()), *self._wild]:
            found = compiled.regex.match(path)
            if found:
                candidates.append(
                    (compiled, dict(zip(compiled.names, found.groups(), strict=True)))
                )
        if not candidates:
            return None
        candidates.sort(key=lambda c: c[0].specificity, reverse=True)
        verb = method.lower()
        for compiled, params in candidates:
            if verb in compiled.item:
                return Route(compiled.template, verb, compiled.item[verb], params)
        compiled, params = candidates[0]
        return Route(compiled.template, verb, None, params)

    def match(self, method: str, path: str) -> tuple[str, JSONDict] | None:
        """``(template, operation)`` for a request, or None when GitHub has no such route."""
        found = self.route(method, path)
        if found is None or found.operation is None:
            return None
        return found.template, found.operation

    # --- validation -----------------------------------------------------------------

    def _deref(self, node: JSONDict) -> JSONDict:
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        target: Any = self.document
        for segment in _ref_segments(ref):
            target = target[segment]
        return self._deref(target)

    def _parameters(self, operation: JSONDict) -> list[JSONDict]:
        return [self._deref(p) for p in operation.get("parameters", [])]

    def _validator(self, *pointer: str, formats: bool = True) -> Draft4Validator:
        key = _pointer(*pointer)
        with self._lock:
            validator = self._validators.get(f"{formats}:{key}")
            if validator is None:
                validator = Draft4Validator(
                    {"$ref": f"{DOC_URI}#{key}"},
                    registry=self._registry,
                    format_checker=self._format_checker if formats else None,
                )
                self._validators[f"{formats}:{key}"] = validator
        return validator

    def _param_pointer(self, template: str, method: str, index: int, raw: JSONDict) -> list[str]:
        ref = raw.get("$ref")
        if isinstance(ref, str):
            return [*_ref_segments(ref), "schema"]
        return ["paths", template, method, "parameters", str(index), "schema"]

    def _check_param(
        self, where: str, raw_value: str, schema_pointer: list[str], schema: JSONDict
    ) -> list[str]:
        try:
            value = _coerce(raw_value, schema)
        except ValueError:
            return [_short(f"{where}: {raw_value!r} is not a valid {schema.get('type')}")]
        # Formats are not checked here: GitHub documents e.g. ``created`` as a date-time
        # but accepts its search syntax (``>=2024-01-01``, ``a..b``) in that parameter.
        validator = self._validator(*schema_pointer, formats=False)
        return [_error_text(where, e) for e in validator.iter_errors(value)]

    def validate(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | Sequence[str]],
        body: bytes | None,
        content_type: str | None,
    ) -> list[str]:
        """Everything GitHub's description says is wrong with one request (empty: valid).

        ``path`` is the API path without any Enterprise prefix (``/repos/o/r``); ``query``
        maps names to one value or a list of values.
        """
        label = f"{method.upper()} {path}"
        found = self.route(method, path)
        if found is None:
            return [f"{label}: no such route in GitHub's REST API {self.version}"]
        if found.operation is None:
            allowed = ", ".join(
                m.upper() for m in self.document["paths"][found.template] if m in METHODS
            )
            return [f"{label}: {found.template} has no {method.upper()} (allowed: {allowed})"]
        template, verb, operation = found.template, found.method, found.operation
        problems: list[str] = []
        declared: dict[tuple[str, str], tuple[list[str], JSONDict]] = {}
        for index, raw in enumerate(operation.get("parameters", [])):
            param = self._deref(raw)
            pointer = self._param_pointer(template, verb, index, raw)
            declared[(param["in"], param["name"])] = (pointer, param)
        for name, value in found.params.items():
            pointer, param = declared.get(("path", name), ([], {}))
            if pointer and "schema" in param:
                problems += self._check_param(
                    f"path parameter {name}", value, pointer, param["schema"]
                )
        for name, values in query.items():
            if ("query", name) not in declared:
                problems.append(f"{label}: unknown query parameter {name!r}")
                continue
            pointer, param = declared[("query", name)]
            for value in [values] if isinstance(values, str) else values:
                problems += self._check_param(
                    f"query parameter {name}", value, pointer, param["schema"]
                )
        for (where, name), (_, param) in declared.items():
            if where == "query" and param.get("required") and name not in query:
                problems.append(f"{label}: required query parameter {name!r} is missing")
        problems += self._check_body(label, template, verb, operation, body, content_type)
        return problems

    def _check_body(
        self,
        label: str,
        template: str,
        verb: str,
        operation: JSONDict,
        body: bytes | None,
        content_type: str | None,
    ) -> list[str]:
        spec = operation.get("requestBody")
        has_body = bool(body and body.strip())
        if spec is None:
            return [f"{label}: sends a body but the operation takes none"] if has_body else []
        spec = self._deref(spec)
        if not has_body:
            return [f"{label}: request body is required"] if spec.get("required") else []
        assert body is not None
        media = (content_type or "application/json").split(";")[0].strip().lower()
        content = spec.get("content", {})
        if "application/json" not in content:
            if media not in content:
                return [f"{label}: body type {media} not accepted ({', '.join(content)})"]
            return []
        if media != "application/json" and not media.endswith("+json") and media in content:
            return []
        if media != "application/json" and not media.endswith("+json"):
            return [f"{label}: JSON body sent as Content-Type {media}"]
        try:
            payload = json.loads(body)
        except ValueError as exc:
            return [f"{label}: body is not JSON ({exc})"]
        validator = self._validator(
            "paths", template, verb, "requestBody", "content", "application/json", "schema"
        )
        return [_error_text(f"{label} body", e) for e in _sorted(validator.iter_errors(payload))]

    def validate_response(self, method: str, path: str, status: int, payload: Any) -> list[str]:
        """Check a response body against the documented schema for its status.

        Used to keep the stand-in honest: its answers must look like GitHub's.
        """
        label = f"{method.upper()} {path} → {status}"
        found = self.route(method, path)
        if found is None or found.operation is None:
            return [f"{label}: no such operation"]
        responses = found.operation.get("responses", {})
        key = next(
            (k for k in (str(status), f"{str(status)[0]}XX", "default") if k in responses), None
        )
        if key is None:
            return [f"{label}: status not documented ({', '.join(responses)})"]
        response = self._deref(responses[key])
        content = response.get("content", {})
        if "application/json" not in content or "schema" not in content["application/json"]:
            return [] if payload is None else [f"{label}: documented without a JSON body"]
        ref = responses[key].get("$ref")
        base = (
            _ref_segments(ref)
            if isinstance(ref, str)
            else ["paths", found.template, found.method, "responses", key]
        )
        validator = self._validator(*base, "content", "application/json", "schema")
        return [_error_text(label, e) for e in _sorted(validator.iter_errors(payload))]

    def example(self, name: str) -> Any:
        """A deep copy of ``components.examples[name].value`` (GitHub's sample data)."""
        return copy.deepcopy(self.document["components"]["examples"][name]["value"])


def _sorted(errors: Iterable[ValidationError]) -> list[ValidationError]:
    return sorted(errors, key=lambda e: [str(p) for p in e.path])


@cache
def _load(path: Path) -> OpenAPI:
    if path == fetch_github_fixtures.OPENAPI_PATH:
        fetch_github_fixtures.ensure()
    with path.open("rb") as fh:
        return OpenAPI(json.load(fh))
