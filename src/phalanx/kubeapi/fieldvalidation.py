"""Server-side field validation: unknown fields, as the API server reports them.

A write request's ``fieldValidation`` is ``Strict`` (kubectl's default since
1.27 when the server supports it), ``Warn`` (the server's default) or
``Ignore``. Unknown fields are found by walking the manifest against the kind's
published OpenAPI schema (:func:`phalanx.kubeapi.openapi.schema_of`, itself
phalanx's :data:`~phalanx.dialects.kueue.validation.SCHEMAS` for Kueue's kinds),
so what ``kubectl explain`` shows is what is accepted. Objects marked
``x-kubernetes-preserve-unknown-fields`` (the parts of the job kinds phalanx
does not model: probes, affinity, volumes' sources, ...) accept any field, as
phalanx's job dialect accepts and ignores them.

Paths are spelled as the API server spells them: dot-separated from the top
without a leading dot, list indexes in brackets, map keys as fields
(``spec.resourceGroups[0].flavors[0].bogus``). The texts are the API server's:

* Strict: ``<Kind> in version "<version>" cannot be handled as a <Kind>:
  strict decoding error: unknown field "spec.foo", unknown field "spec.bar"``
  (a 400 BadRequest Status);
* Warn: one ``unknown field "spec.foo"`` per field, each sent as a
  ``Warning: 299 - "..."`` header (:func:`warning_header`).

Duplicate fields (``duplicate field "spec.x"``) can only be seen in the request
body's text, not in a parsed manifest; the server passes those it finds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.kubeapi.openapi import resolve_ref, schema_of

__all__ = [
    "prune",
    "strict_error_message",
    "unknown_fields",
    "warn_messages",
    "warning_header",
]

Schema = dict[str, Any]


def _schema(kind: str, api_version: str) -> tuple[Schema, Schema]:
    found = schema_of(api_version, kind)
    if found is None:
        raise KeyError(f"{kind} in {api_version} is not served")
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(schema: Schema, value: Any, path: str, doc: Schema, out: list[str], drop: bool) -> Any:
    """``value`` (pruned when ``drop``); unknown paths appended to ``out``."""
    schema = resolve_ref(doc, schema)
    if isinstance(value, Mapping):
        props: Mapping[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        kept: dict[str, Any] = {}
        for key, item in value.items():
            where = _join(path, str(key))
            sub = props.get(key) if isinstance(key, str) else None
            if sub is not None:
                kept[key] = _walk(sub, item, where, doc, out, drop)
            elif isinstance(extra, dict):
                kept[key] = _walk(extra, item, where, doc, out, drop)
            elif preserve or extra is True:
                kept[key] = item
            else:
                out.append(where)
        return kept if drop else value
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return value
        walked = [_walk(items, v, f"{path}[{i}]", doc, out, drop) for i, v in enumerate(value)]
        return walked if drop else value
    return value


def unknown_fields(kind: str, api_version: str, manifest: Mapping[str, Any]) -> list[str]:
    """The paths of ``manifest``'s fields ``kind`` in ``api_version`` does not declare,
    in document order. Raises KeyError for a kind that is not served."""
    schema, doc = _schema(kind, api_version)
    out: list[str] = []
    _walk(schema, manifest, "", doc, out, drop=False)
    return out


def prune(kind: str, api_version: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` without its unknown fields (what ``Ignore`` and ``Warn`` store)."""
    schema, doc = _schema(kind, api_version)
    pruned: dict[str, Any] = _walk(schema, manifest, "", doc, [], drop=True)
    return pruned


def _field_errors(unknown: Iterable[str], duplicates: Iterable[str]) -> list[str]:
    return [f'unknown field "{p}"' for p in unknown] + [
        f'duplicate field "{p}"' for p in duplicates
    ]


def strict_error_message(
    kind: str, api_version: str, unknown: Iterable[str], duplicates: Iterable[str] = ()
) -> str:
    """The message of the 400 a ``fieldValidation=Strict`` write with these fields gets."""
    version = api_version.rpartition("/")[2]
    errors = ", ".join(_field_errors(unknown, duplicates))
    return (
        f'{kind} in version "{version}" cannot be handled as a {kind}: '
        f"strict decoding error: {errors}"
    )


def warn_messages(unknown: Iterable[str], duplicates: Iterable[str] = ()) -> list[str]:
    """One warning text per field, for ``fieldValidation=Warn`` (and no parameter)."""
    return _field_errors(unknown, duplicates)


def warning_header(message: str) -> str:
    """A ``Warning`` header value (RFC 7234: code 299, agent ``-``, quoted text)."""
    quoted = message.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'
