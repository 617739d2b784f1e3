"""Label and field selectors, as ``?labelSelector=`` and ``?fieldSelector=`` take them.

Label selectors follow Kubernetes' grammar: requirements separated by commas,
each ``key``, ``!key``, ``key=value`` (or ``==``), ``key!=value``,
``key in (a,b)``, ``key notin (a,b)``, ``key>N`` or ``key<N``. Field selectors
are ``field=value``, ``field==value`` and ``field!=value`` over the fields each
resource supports (``metadata.name`` and ``metadata.namespace`` everywhere);
an unsupported field is refused as the API server refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.kubeapi.status import KubeError

__all__ = ["FieldSelector", "LabelSelector", "parse_fields", "parse_labels"]

_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_./]*)?[A-Za-z0-9]$")


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "==", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op in (">", "<"):
            try:
                number = int(str(value))
            except ValueError:
                return False
            bound = int(self.values[0])
            return number > bound if self.op == ">" else number < bound
        return False


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty one matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)


def _split(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _bad(text: str, why: str) -> KubeError:
    return KubeError.bad_request(f"unable to parse requirement: {why} in {text!r}")


def _key(text: str, key: str) -> str:
    if not _KEY.match(key) or len(key) > 317:
        raise _bad(text, f"invalid label key {key!r}")
    return key


def parse_labels(text: str | None) -> LabelSelector:
    """The label selector ``text`` (empty or None: everything)."""
    if not text:
        return LabelSelector()
    out: list[_Requirement] = []
    for part in _split(text):
        set_form = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", part)
        if set_form:
            values = tuple(v.strip() for v in set_form.group(3).split(",") if v.strip())
            out.append(_Requirement(_key(text, set_form.group(1)), set_form.group(2), values))
            continue
        if part.startswith("!"):
            out.append(_Requirement(_key(text, part[1:].strip()), "!"))
            continue
        compare = re.match(r"^([^=!<>\s]+)\s*(==|!=|=|>|<)\s*(.*)$", part)
        if compare:
            key, op, value = compare.groups()
            digits = value.strip().lstrip("-")
            if op in (">", "<") and not (digits.isascii() and digits.isdigit()):
                raise _bad(text, f"for {op!r}, the value must be an integer")
            out.append(_Requirement(_key(text, key), op, (value.strip(),)))
            continue
        if re.match(r"^\S+$", part):
            out.append(_Requirement(_key(text, part), "exists"))
            continue
        raise _bad(text, "found unexpected token")
    return LabelSelector(tuple(out))


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: ``(field, op, value)`` triples, ``op`` ``=`` or ``!=``."""

    terms: tuple[tuple[str, str, str], ...] = ()

    def matches(self, fields: Callable[[str], Any]) -> bool:
        for field, op, value in self.terms:
            have = fields(field)
            have_text = "" if have is None else str(have)
            if (have_text == value) != (op == "="):
                return False
        return True

    def value_of(self, field: str) -> str | None:
        """The value an ``=`` term requires of ``field`` (for a quick lookup by name)."""
        for f, op, value in self.terms:
            if f == field and op == "=":
                return value
        return None


def parse_fields(text: str | None, supported: tuple[str, ...], kind: str) -> FieldSelector:
    """The field selector ``text``; a field outside ``supported`` is a 400."""
    if not text:
        return FieldSelector()
    terms: list[tuple[str, str, str]] = []
    for part in _split(text):
        match = re.match(r"^([^=!\s]+)\s*(==|!=|=)\s*(.*)$", part)
        if not match:
            raise KubeError.bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        field, op, value = match.groups()
        if field not in supported:
            raise KubeError.bad_request(f"field label not supported: {field}")
        terms.append((field, "!=" if op == "!=" else "=", value.strip()))
    return FieldSelector(tuple(terms))


def field_getter(obj: Mapping[str, Any]) -> Callable[[str], Any]:
    """Reads a dotted field path (``metadata.name``, ``involvedObject.kind``) of ``obj``."""

    def get(path: str) -> Any:
        node: Any = obj
        for part in path.split("."):
            if not isinstance(node, Mapping):
                return None
            node = node.get(part)
        if isinstance(node, bool):
            return "true" if node else "false"
        return node

    return get
