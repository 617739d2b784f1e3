"""``phalanx sinfo``: partitions (ClusterQueues) and their nodes, grouped by state.

A partition's nodes are the nodes its flavors select (ClusterQueue
``resourceGroups`` -> ResourceFlavor ``nodeLabels`` -> Node labels), computed
here from ``/api/v1/clusterqueues``, ``/resourceflavors`` and ``/nodes``. Formats
follow sinfo.1: default ``%#P %.5a %.10l %.6D %.6t %N``, ``-N``, ``-l``, ``-s``.
"""

from __future__ import annotations

from phalanx.cli.slurm.common import compress_hostlist, fit, format_specs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["DEFAULT_FORMAT", "Row", "build_rows", "format_rows", "partition_nodes"]

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
NODE_FORMAT = "%#N %.6D %#P %6t"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
SUMMARIZE_FORMAT = "%#P %.5a %.10l %.16F %N"
NODE_LONG_FORMAT = "%#N %.6D %#P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"
REASONS_FORMAT = "%20E %9u %19H %N"
"""``sinfo -R`` (Slurm 22.05's sinfo.1; its output checked against a real slurmctld)."""
REASONS_LONG_FORMAT = "%20E %12U %19H %6t %N"
REASON_STATES = ("down", "drain", "draining")
"""The node states ``sinfo -R`` lists: down, drained, draining."""

_COMPACT = {"idle": "idle", "mixed": "mix", "allocated": "alloc", "drain": "drain", "down": "down"}
_COMPACT["draining"] = "drng"
_LONG = {"idle": "idle", "mixed": "mixed", "allocated": "allocated", "drain": "drained"}
_LONG["down"] = "down"
_LONG["draining"] = "draining"


class Row:
    """One partition x node, the unit sinfo groups."""

    __slots__ = ("available", "default", "node", "partition")

    def __init__(self, partition: str, default: bool, available: str, node: dict[str, Any]) -> None:
        self.partition = partition
        self.default = default
        self.available = available
        self.node = node


def _state(node: dict[str, Any]) -> str:
    return str((node.get("status") or {}).get("state") or "idle")


def _capacity(node: dict[str, Any], key: str) -> str:
    return str(((node.get("status") or {}).get("capacity") or {}).get(key, ""))


def _mem_mb(node: dict[str, Any]) -> str:
    text = _capacity(node, "memory")
    # re.fullmatch(r"(\d+)([KMGTP]i?)?", text), by hand: digits, then an optional unit
    digits = text.rstrip("i") if text.endswith(("Ki", "Mi", "Gi", "Ti", "Pi")) else text
    unit = digits[-1:] if digits[-1:] in ("K", "M", "G", "T", "P") else ""
    digits = digits[: len(digits) - len(unit)]
    if not digits.isdecimal():
        return text or "1"
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
    if not unit:
        return str(int(digits) // (1024 * 1024))
    return str(int(int(digits) * scale[unit]))


def _gres(node: dict[str, Any]) -> str:
    gpus = _capacity(node, "nvidia.com/gpu")
    return f"gpu:{gpus}" if gpus and gpus != "0" else "(null)"


def _status(node: dict[str, Any], key: str) -> Any:
    return (node.get("status") or {}).get(key)


def _reason(node: dict[str, Any]) -> str:
    return str(_status(node, "reason") or "") or "none"


def _reason_user(node: dict[str, Any], uid: bool = False) -> str:
    user = str(_status(node, "reason_user") or "")
    if not user:
        return "Unknown"
    if not uid:
        return user
    try:
        import pwd

        return f"{user}({pwd.getpwnam(user).pw_uid})"
    except (KeyError, ImportError):
        return user


def _reason_time(node: dict[str, Any]) -> str:
    import time

    when = _status(node, "reason_time")
    if when is None:
        return "Unknown"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(when)))


def _counts(rows: Sequence[Row]) -> str:
    alloc = sum(_state(r.node) in ("allocated", "mixed", "draining") for r in rows)
    idle = sum(_state(r.node) == "idle" for r in rows)
    return f"{alloc}/{idle}/{len(rows) - alloc - idle}/{len(rows)}"


if TYPE_CHECKING:
    Getter = Callable[[Sequence[Row]], str]

FIELDS: dict[str, tuple[str, Getter, bool]] = {
    "P": ("PARTITION", lambda rs: rs[0].partition + ("*" if rs[0].default else ""), True),
    "R": ("PARTITION", lambda rs: rs[0].partition, True),
    "a": ("AVAIL", lambda rs: rs[0].available, True),
    "l": ("TIMELIMIT", lambda rs: "infinite", True),
    "D": ("NODES", lambda rs: str(len(rs)), False),
    "t": ("STATE", lambda rs: _COMPACT.get(_state(rs[0].node), _state(rs[0].node)), True),
    "T": ("STATE", lambda rs: _LONG.get(_state(rs[0].node), _state(rs[0].node)), True),
    "N": (
        "NODELIST",
        lambda rs: compress_hostlist([r.node["metadata"]["name"] for r in rs]),
        False,
    ),
    "n": (
        "HOSTNAMES",
        lambda rs: compress_hostlist([r.node["metadata"]["name"] for r in rs]),
        False,
    ),
    "c": ("CPUS", lambda rs: _capacity(rs[0].node, "cpu"), True),
    "m": ("MEMORY", lambda rs: _mem_mb(rs[0].node), True),
    "G": ("GRES", lambda rs: _gres(rs[0].node), True),
    "f": ("AVAIL_FEATURES", lambda rs: "(null)", True),
    "F": ("NODES(A/I/O/T)", _counts, False),
    "s": ("JOB_SIZE", lambda rs: "1-infinite", True),
    "r": ("ROOT", lambda rs: "no", True),
    "h": ("OVERSUBS", lambda rs: "NO", True),
    "g": ("GROUPS", lambda rs: "all", True),
    "z": ("S:C:T", lambda rs: "1:1:1", True),
    "d": ("TMP_DISK", lambda rs: "0", True),
    "w": ("WEIGHT", lambda rs: "1", True),
    "E": ("REASON", lambda rs: _reason(rs[0].node), True),
    "u": ("USER", lambda rs: _reason_user(rs[0].node), True),
    "U": ("USER", lambda rs: _reason_user(rs[0].node, uid=True), True),
    "H": ("TIMESTAMP", lambda rs: _reason_time(rs[0].node), True),
}
"""sinfo letters: header, value, whether it is part of the grouping key."""

if TYPE_CHECKING:
    Part = tuple[str, int | None, bool, str | None]


def parse_format(fmt: str, rows: Sequence[Row]) -> list[Part]:
    """``%[.][#|size]type``; ``#`` is the width of the longest value (at least the header)."""
    from phalanx.errors import Invalid

    parts: list[Part] = []
    pos = 0
    for start, end, dot, widest, digits, letter in format_specs(fmt, "#"):
        if start > pos:
            parts.append((fmt[pos:start], None, False, None))
        pos = end
        if letter == "%":
            parts.append(("%", None, False, None))
            continue
        if letter not in FIELDS:
            raise Invalid(f"Invalid node format specification: {letter}")
        header, get, _ = FIELDS[letter]
        width = int(digits) if digits else None
        if widest:
            width = max([len(header)] + [len(get([r])) for r in rows])
        parts.append((header, width, dot, letter))
    if pos < len(fmt):
        parts.append((fmt[pos:], None, False, None))
    return parts


def group_rows(rows: Sequence[Row], parts: Sequence[Part], *, per_node: bool) -> list[list[Row]]:
    """Rows with equal displayed values (node list and count aside) share one line."""
    keys = [p[3] for p in parts if p[3] is not None and FIELDS[p[3]][2]]
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        key = tuple(FIELDS[k][1]([row]) for k in keys)
        if per_node:
            key += (row.node["metadata"]["name"],)
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def format_rows(
    rows: Sequence[Row], fmt: str, *, header: bool = True, per_node: bool = False
) -> str:
    """The sinfo text for partition x node ``rows``."""
    parts = parse_format(fmt, rows)
    lines = []
    if header:
        lines.append("".join(t if k is None else fit(t, w, r) for t, w, r, k in parts))
    for group in group_rows(rows, parts, per_node=per_node):
        lines.append(
            "".join(t if k is None else fit(FIELDS[k][1](group), w, r) for t, w, r, k in parts)
        )
    return "".join(line + "\n" for line in lines)


def partition_nodes(
    cluster_queue: dict[str, Any],
    flavors: dict[str, dict[str, Any]],
    nodes: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The nodes a ClusterQueue's flavors select, in node order."""
    selectors = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            spec = (flavors.get(flavor.get("name", "")) or {}).get("spec") or {}
            selectors.append(spec.get("nodeLabels") or {})
    out = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if any(all(labels.get(k) == v for k, v in sel.items()) for sel in selectors):
            out.append(node)
    return out


def build_rows(
    cluster_queues: Sequence[dict[str, Any]],
    flavors: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]],
    *,
    default: str | None = None,
) -> list[Row]:
    """Partition x node rows, partitions in name order, nodes in node order."""
    by_name = {f["metadata"]["name"]: f for f in flavors}
    rows = []
    for cq in sorted(cluster_queues, key=lambda c: c["metadata"]["name"]):
        name = cq["metadata"]["name"]
        status = cq.get("status") or {}
        available = "up" if status.get("active", True) else "inact"
        for node in partition_nodes(cq, by_name, nodes):
            rows.append(Row(name, name == default, available, node))
    return rows


def run(
    *,
    fmt: str | None,
    node_oriented: bool,
    partitions: list[str] | None,
    noheader: bool,
    long: bool,
    summarize: bool,
    states: list[str] | None,
    reasons: bool = False,
) -> int:
    """The sinfo command; returns the exit status."""
    import sys

    from phalanx.cli.slurm.common import tool_error
    from phalanx.client import Client
    from phalanx.errors import Invalid, PhalanxError

    try:
        with Client() as client:
            everything = client.cluster()
            if everything is not None:
                cqs = everything["clusterqueues"]
                flavors = everything["resourceflavors"]
                nodes = everything["nodes"]
                default = everything["default_partition"]
            else:  # a server without GET /api/v1/cluster
                cqs = client.cluster_queues()
                flavors = client.resource_flavors()
                nodes = client.nodes()
                default = _default_partition(client)
    except PhalanxError as exc:
        tool_error("sinfo", exc.detail)
        return 1
    rows = build_rows(cqs, flavors, nodes, default=default)
    if partitions:
        rows = [r for r in rows if r.partition in partitions]
    if reasons:
        rows = reason_rows(rows, nodes)
    if states:
        wanted = {s.strip().lower() for v in states for s in v.split(",")}
        if wanted & {"drain", "drained"}:
            wanted.add("draining")  # Slurm's -t drain: drained and draining nodes
        rows = [
            r
            for r in rows
            if _state(r.node) in wanted
            or _COMPACT.get(_state(r.node)) in wanted
            or _LONG.get(_state(r.node)) in wanted
        ]
    if fmt is None:
        if reasons:
            fmt = REASONS_LONG_FORMAT if long else REASONS_FORMAT
        elif node_oriented:
            fmt = NODE_LONG_FORMAT if long else NODE_FORMAT
        elif summarize:
            fmt = SUMMARIZE_FORMAT
        else:
            fmt = LONG_FORMAT if long else DEFAULT_FORMAT
    try:
        text = format_rows(rows, fmt, header=not noheader, per_node=node_oriented and not reasons)
    except Invalid as exc:
        tool_error("sinfo", exc.detail)
        return 1
    if summarize:
        # one line per partition: group by partition only
        text = _summarize(rows, fmt, header=not noheader)
    if long:
        import time

        sys.stdout.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n")
    sys.stdout.write(text)
    return 0


def reason_rows(rows: Sequence[Row], nodes: Sequence[dict[str, Any]]) -> list[Row]:
    """``sinfo -R``: one row per down, drained or draining node, in node order (a node
    in several partitions is listed once)."""
    order = {n["metadata"]["name"]: i for i, n in enumerate(nodes)}
    seen: dict[str, Row] = {}
    for row in rows:
        name = row.node["metadata"]["name"]
        if _state(row.node) in REASON_STATES and name not in seen:
            seen[name] = row
    return sorted(seen.values(), key=lambda r: order.get(r.node["metadata"]["name"], 0))


def _summarize(rows: Sequence[Row], fmt: str, *, header: bool) -> str:
    parts = parse_format(fmt, rows)
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.partition, []).append(row)
    lines = []
    if header:
        lines.append("".join(t if k is None else fit(t, w, r) for t, w, r, k in parts))
    for group in groups.values():
        lines.append(
            "".join(t if k is None else fit(FIELDS[k][1](group), w, r) for t, w, r, k in parts)
        )
    return "".join(line + "\n" for line in lines)


def _default_partition(client: Any) -> str | None:
    """The ClusterQueue the caller's first tenant's ``default`` LocalQueue feeds, if any."""
    from phalanx.errors import PhalanxError

    try:
        tenants = client.whoami().get("tenants") or []
        if not tenants:
            return None
        queue = client.get_object("localqueues", f"{tenants[0]}/default")
    except PhalanxError:
        return None
    return (queue.get("spec") or {}).get("clusterQueue")
