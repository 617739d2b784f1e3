"""The CLI's fast path means what the click path means: options, parsers, tables, HTTP.

Each hand-written piece is checked against what it stands in for: the option tables
against the click commands, the parser against click's parse of the same command
lines, the scanners against the regular expressions they replace, the plain table
against rich's, the socket transport and JSON scanner against a real HTTP server.
"""

from __future__ import annotations

import http.server
import io
import json
import re
import socketserver
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from datetime import datetime
from typing import Any

import click
import pytest

from phalanx import wire
from phalanx.cli import fast, jobtable, render
from phalanx.cli.app import app
from phalanx.cli.slurm import common
from phalanx.hostranges import _numbered
from phalanx.model.job import JobState


def _command(tool: str) -> click.Command:
    command = app.commands[tool]
    assert isinstance(command, click.Command)
    return command


def test_option_tables_are_the_click_options() -> None:
    for tool, spec in fast.OPTIONS.items():
        params = {p.name: p for p in _command(tool).params if isinstance(p, click.Option)}
        skipped = {"iterate"}  # squeue -i: click parses it (a float)
        assert {dest for dest, _, _ in spec} == set(params) - skipped - {"kind", "name"}, tool
        for dest, kind, names in spec:
            option = params[dest]
            assert set(names) == set(option.opts), (tool, dest)
            expected = (
                fast.FLAG if option.is_flag else fast.MULTI if option.multiple else fast.VALUE
            )
            assert kind == expected, (tool, dest)
        arguments = [p.name for p in _command(tool).params if isinstance(p, click.Argument)]
        if tool == "get":
            assert arguments == ["kind", "name"]
        else:
            assert arguments == ([fast.POSITIONAL[tool]] if tool in fast.POSITIONAL else [])


COMMAND_LINES = [
    ("squeue", []),
    ("squeue", ["-h", "-o", "%.18i %P"]),
    ("squeue", ["-ho%i", "--states=PD,R", "-t", "CG"]),
    ("squeue", ["--me", "-u", "a,b", "--user", "c", "-l", "--start", "-r", "-a", "--json"]),
    ("squeue", ["-j", "12_[1-3]", "--jobs=13", "-p", "gpu", "-A", "x", "-n", "job"]),
    ("squeue", ["--Format", "JobID,Name:20", "-O", "jobid"]),
    ("squeue", ["-o", "-h"]),
    ("squeue", ["--help"]),
    ("squeue", ["-i", "5"]),
    ("squeue", ["--noheader=1"]),
    ("squeue", ["extra"]),
    ("squeue", ["-x"]),
    ("squeue", ["--", "-h"]),
    ("sinfo", ["-N", "-l", "-p", "a,b", "-t", "idle", "-R", "-s", "-o", "%P %#N"]),
    ("sinfo", ["-hNl"]),
    ("sacct", ["-j", "12", "-o", "JobID,State", "-n", "-P", "-p", "-X", "-b", "-D"]),
    ("sacct", ["-S", "now-1hours", "-E", "now", "-s", "CD", "-u", "u", "-a", "-A", "t"]),
    ("sacct", ["-r", "gpu", "--name", "x", "--json"]),
    ("scontrol", ["show", "job", "12"]),
    ("scontrol", ["-o", "show", "job", "12", "-d"]),
    ("scontrol", ["update", "JobId=12", "TimeLimit=10"]),
    ("scancel", ["12", "13_[1-2]", "-s", "USR1", "-b", "-f", "-Q", "-v", "--me"]),
    ("scancel", ["-t", "PD", "-p", "gpu", "-A", "t", "-u", "u", "-n", "x"]),
    ("sprio", ["-j", "1,2", "-u", "u", "-h", "-l", "-n", "-w"]),
    ("sshare", ["-n", "-p", "-P", "-A", "a", "-u", "u", "-a", "-l"]),
    ("get", ["jobs"]),
    ("get", ["jobs", "-o", "wide", "-t", "RUNNING", "-n", "t", "-u", "u", "-q", "q", "-A"]),
    ("get", ["jobs", "--limit", "20"]),
    ("get", ["jobs", "-h"]),
    ("get", ["job", "12"]),
]


@pytest.mark.parametrize(("tool", "argv"), COMMAND_LINES)
def test_parse_is_clicks_parse(tool: str, argv: list[str]) -> None:
    parsed = fast.parse(tool, argv)
    if parsed is None:
        return  # click parses it, as before
    ctx = _command(tool).make_context(tool, list(argv), resilient_parsing=True)
    expected = dict(ctx.params)
    if tool == "get":
        expected["args"] = tuple(a for a in (expected.pop("kind"), expected.pop("name")) if a)
        if expected["limit"] is not None:
            expected["limit"] = str(expected["limit"])
    if tool == "squeue":
        assert expected.pop("iterate") is None
    assert parsed == expected


def test_parse_leaves_the_unusual_to_click() -> None:
    for argv in (["--help"], ["-i", "5"], ["extra"], ["-x"], ["--", "-h"], ["-o", "-h"]):
        assert fast.parse("squeue", argv) is None
    assert fast.parse("get", ["jobs", "-h"]) is None
    assert fast.parse("sbatch", ["x.sh"]) is None


def test_job_states_are_the_models() -> None:
    assert tuple(JobState.__members__) == common.JOB_STATES
    assert common.server_states(frozenset({"PENDING", "CONFIGURING", "RUNNING"})) == [
        "PENDING",
        "ADMITTED",
        "RUNNING",
    ]
    assert common.server_states(frozenset({"SUSPENDED"})) is None
    assert common.server_states(None) is None


# --------------------------------------------------------------------------- scanners


@pytest.mark.parametrize("flag", ["-", "#"])
@pytest.mark.parametrize(
    "fmt",
    ["%.18i %.9P %.8j", "%i%%%P", "%.%", "%-5", "%5.3x", "%#N %.#P", "50%", "%-10j|%.٣i", ""],
)
def test_format_specs_are_the_regex(flag: str, fmt: str) -> None:
    pattern = re.compile(r"%(\.)?(" + re.escape(flag) + r")?(\d+)?([A-Za-z%])")
    expected = [
        (m.start(), m.end(), bool(m.group(1)), bool(m.group(2)), m.group(3) or "", m.group(4))
        for m in pattern.finditer(fmt)
    ]
    assert common.format_specs(fmt, flag) == expected


@pytest.mark.parametrize(
    "text",
    ["12", " 12 ", "12_3", "12_[1-3,5]", "12_[1-3%2]", "12+1", "12+", "+1", "12_", "12_x",
     "12_[]", "12_[a]", "1_2_3", "١٢", "12+1_2", "", "x", "12_[1-"],
)  # fmt: skip
def test_parse_job_ref_is_the_regex(text: str) -> None:
    ref_re = re.compile(r"(\d+)(?:_(\d+|\[[0-9,\-:%]+\]))?")
    het_re = re.compile(r"(\d+)\+(\d+)")
    stripped = text.strip()
    ref = common.parse_job_ref(text)
    if het := het_re.fullmatch(stripped):
        assert ref is not None
        assert (ref.job_id, ref.het_offset) == (int(het.group(1)), int(het.group(2)))
    elif m := ref_re.fullmatch(stripped):
        assert ref is not None and ref.job_id == int(m.group(1))
    else:
        assert ref is None


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-12-07T16:39:15Z",
        "2026-12-07T16:39:15.123Z",
        "2026-12-07T16:39:15.123456Z",
        "1969-12-31T23:59:59.999999Z",
        "2024-02-29T00:00:00Z",
        "2000-03-01T12:00:00Z",
        "2026-12-07T16:39:15+00:00",
        "2026-12-07T17:39:15+01:00",
    ],
)
def test_epoch_is_datetimes(stamp: str) -> None:
    expected = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    assert common.epoch(stamp) == expected


@pytest.mark.parametrize(
    "zone", ["UTC", "America/New_York", "Europe/Paris", "America/Santiago", "Asia/Kolkata"]
)
def test_local_midnight_is_datetimes(zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from phalanx.cli.slurm import sacct

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        now = datetime.now()
        expected = now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
        assert sacct._local_midnight() == expected
    finally:
        monkeypatch.undo()
        time.tzset()


def test_epoch_refuses_what_datetime_refuses() -> None:
    with pytest.raises(ValueError):
        common.epoch("2026-02-30T00:00:00Z")


@pytest.mark.parametrize(
    "name", ["gpu01", "gpu", "01", "a1b2", "n1\n", "a\nb1", "x٣", "", "node-10", "n\n1"]
)
def test_numbered_is_the_regex(name: str) -> None:
    m = re.match(r"^(.*?)(\d+)$", name)
    assert _numbered(name) == (None if m is None else (m.group(1), m.group(2)))


# --------------------------------------------------------------------------- tables


TABLES = [
    (["ID", "NAME", "STATE"], [["1", "a", "RUNNING"], ["22", "longer name", "PENDING"]]),
    (["ID", "NAME", "STATE"], [["1", "", "R"]]),
    (["A", "TIME"], [["x y ", "1-02:03:04"], [" z", "00:00:01"]]),
    (["A"], [["<b>'\"=,!?@%&+{}|~`$^;"]]),
]


@pytest.mark.parametrize(("header", "rows"), TABLES)
def test_plain_table_is_richs(header: list[str], rows: list[list[str]]) -> None:
    text = jobtable.plain_table(header, rows)
    out = io.StringIO()
    with redirect_stdout(out):
        render.print_table(header, rows, state_col=min(5, len(header) - 1))
    assert text == out.getvalue()


@pytest.mark.parametrize(
    "cell", ["[bold]x[/bold]", ":smile:", "a:100:b", "é", "tab\there", "back\\slash", "a]"]
)
def test_plain_table_leaves_markup_to_rich(cell: str) -> None:
    assert jobtable.plain_table(["A"], [[cell]]) is None


def test_plain_table_leaves_forced_colours_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert jobtable.plain_table(["A"], [["x"]]) is None


# --------------------------------------------------------------------------- wire


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5, -3e2, null, true, false, "x\\u00e9\\n"]}', " [] ", '"s"', "1", '{"b": NaN}'],
)
def test_loads_is_json_loads(text: str) -> None:
    got, expected = wire.loads(text), json.loads(text)
    assert repr(got) == repr(expected)
    assert repr(wire.loads(text.encode())) == repr(expected)


@pytest.mark.parametrize("text", ["{bad", "[1,]", "", "1 2"])
def test_loads_raises_as_json_does(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        wire.loads(text)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6900", "https://Host.example/api/", "http://[::1]:80/x", "http://h"],
)
def test_split_url_is_urlsplits(url: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    assert wire.split_url(url) == (parts.scheme, parts.hostname, parts.port, parts.path)


def test_quote_is_urllibs() -> None:
    from urllib.parse import quote, urlencode

    for text in ("a b/c,é", "~_.-", "?&=#%+", ""):
        assert wire.quote(text, "") == quote(text, safe="")
        assert wire.quote(text) == quote(text)
    pairs = [("state", "PENDING,RUNNING"), ("name", "a b&c=é")]
    assert wire.urlencode(pairs) == urlencode(pairs)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "auth": self.headers.get("Authorization")})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path.startswith("/chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 7):
                piece = data[i : i + 7]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(data)))
        if self.path.startswith("/close"):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_connection_reads_length_chunked_and_closed_answers(server: tuple[str, int]) -> None:
    conn = wire.Connection(server[0], server[1], timeout=10)
    try:
        for path in ("/a?x=1", "/chunked/b", "/c", "/close/d", "/e"):
            status, headers, body = conn.request("GET", path, None, {"Authorization": "t"})
            assert status == 200
            assert headers["content-type"] == "application/json"
            assert wire.loads(body) == {"path": path, "auth": "t"}
    finally:
        conn.close()


def test_client_talks_through_the_socket_transport(server: tuple[str, int]) -> None:
    from phalanx.client import Client

    with Client(f"http://{server[0]}:{server[1]}", "tok") as client:
        answer = client.request("GET", "/x", params=[("a", "b c")]).json()
        assert answer == {"path": "/x?a=b+c", "auth": "Bearer tok"}
        assert isinstance(client._conn, wire.Connection)
