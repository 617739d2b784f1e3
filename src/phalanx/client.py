"""The typed Python client of the phalanx REST API.

>>> import phalanx
>>> with phalanx.Client() as c:                                 # doctest: +SKIP
...     job = c.submit({"podSets": [{"count": 1}], "run": {"command": ["hostname"]}})
...     for state in c.watch(job): print(state["state"])

Where the server is and who you are comes from the arguments, then
``PHALANX_URL`` / ``PHALANX_TOKEN``, then the state directory's
``client.json`` (which ``phalanx up`` writes; the state directory is
``PHALANX_STATE_DIR``, else ``/var/lib/phalanx`` for root and
``~/.local/state/phalanx`` for other users), then ``http://127.0.0.1:6900``.
An ``https`` server's certificate is verified against ``PHALANX_CA`` (a CA or
certificate file in PEM) when it is set, else against the system's store.
Several servers on one PostgreSQL (one leads, the others forward to it) are
given as a comma-separated list, ``PHALANX_URL=https://a:6900,https://b:6900``:
a server that cannot be reached is passed over for the next.

Standard library only: the CLI builds on this module and a command such as
``squeue`` should cost little more than the interpreter's own start, so it loads
neither httpx nor pydantic, and an ``http://`` server is talked to through
:mod:`phalanx.wire` (a socket and the JSON scanner) rather than ``http.client``,
``ssl`` and ``json``, which are imported only for ``https`` and for request bodies.
Submissions are plain dicts (a :class:`~phalanx.model.JobSubmission` is accepted
too and sent as its ``to_dict()``).
"""

from __future__ import annotations

import os
import time

from phalanx import errors, wire
from phalanx.statedir import CLIENT_CONFIG, state_dir_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    import http.client
    import ssl
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path
    from typing import Any

__all__ = ["DEFAULT_URL", "Client", "ClientConfig", "resolve_config"]

DEFAULT_URL = "http://127.0.0.1:6900"
CA_ENV = "PHALANX_CA"
"""A CA or certificate file (PEM) an https server's certificate is verified against."""
MAX_PAGE = 10_000
"""The most jobs the server returns per page."""
_FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}
)
_ERRORS: dict[str, type[errors.PhalanxError]] = {
    "Invalid": errors.Invalid,
    "NotFound": errors.NotFound,
    "Conflict": errors.Conflict,
    "Unauthorized": errors.Unauthorized,
    "Forbidden": errors.Forbidden,
    "Unavailable": errors.Unavailable,
}
_BY_STATUS: dict[int, type[errors.PhalanxError]] = {cls.status: cls for cls in _ERRORS.values()}


class _Unreachable(Exception):
    """The connection was refused or the name did not resolve: nothing was sent."""


class ClientConfig:
    """The resolved URL, token and state directory of a client."""

    __slots__ = ("_state_dir", "token", "url")

    def __init__(self, url: str, token: str | None, state_dir: str | Path) -> None:
        self.url = url
        self.token = token
        self._state_dir = os.fspath(state_dir)

    @property
    def state_dir(self) -> Path:
        from pathlib import Path

        return Path(self._state_dir)

    def __repr__(self) -> str:
        hidden = "set" if self.token else "none"
        return f"ClientConfig(url={self.url!r}, token={hidden}, state_dir={self._state_dir!r})"


def resolve_config(
    url: str | None = None, token: str | None = None, state_dir: str | Path | None = None
) -> ClientConfig:
    """Arguments first, then the environment, then ``STATE/client.json``, then the defaults."""
    state = state_dir_text() if state_dir is None else os.fspath(state_dir)
    url = url or os.environ.get("PHALANX_URL") or None
    token = token or os.environ.get("PHALANX_TOKEN") or None
    if url is None or token is None:
        saved = _read_client_json(os.path.join(state, CLIENT_CONFIG))
        url = url or saved.get("url") or DEFAULT_URL
        token = token or saved.get("token") or None
    return ClientConfig(url.rstrip("/"), token, state)


def _read_client_json(path: str) -> dict[str, str]:
    try:
        with open(path, "rb") as file:
            data = wire.loads(file.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)}


class Response:
    """A finished HTTP exchange: status, headers (lower-case names) and body bytes."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return wire.loads(self.body) if self.body else None


class Client:
    """A synchronous client of one phalanx server; reuses one keep-alive connection."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        state_dir: str | Path | None = None,
        timeout: float = 30,
    ) -> None:
        self.config = resolve_config(url, token, state_dir)
        self.urls = [u.strip().rstrip("/") for u in self.config.url.split(",") if u.strip()]
        """The servers to try, in order (one, or several that share a PostgreSQL)."""
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | wire.Connection | None = None
        for candidate in self.urls or [self.config.url]:
            parts = _split_url(candidate)
            if parts[0] not in ("http", "https") or not parts[1]:
                raise errors.Invalid(
                    f"server URL {candidate!r} is not an http(s) URL such as {DEFAULT_URL}"
                )
        self._use(0)

    def _use(self, index: int) -> None:
        """Talk to the ``index``-th server of :attr:`urls` from now on."""
        self._current = index
        self.url = self.urls[index]
        scheme, host, port, path = _split_url(self.url)
        self._https = scheme == "https"
        self._host = host
        self._port = port or (443 if self._https else 80)
        self._base = path.rstrip("/")

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on the kept-alive connection (opened if need be): the answer's
        status, headers (lower-case names) and body."""
        if not self._https:
            if self._conn is None:
                self._conn = wire.Connection(self._host, self._port, self.timeout)
            assert isinstance(self._conn, wire.Connection)
            return self._conn.request(method, target, body, headers)
        import http.client

        if self._conn is None:
            self._conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=_tls_context()
            )
        assert isinstance(self._conn, http.client.HTTPConnection)
        self._conn.request(method, target, body=body, headers=headers)
        raw = self._conn.getresponse()
        data = raw.read()
        return raw.status, {k.lower(): v for k, v in raw.getheaders()}, data

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        auth: bool = True,
        ok: Iterable[int] = (),
    ) -> Response:
        """One request; a 4xx/5xx answer raises the matching :mod:`phalanx.errors` class."""
        target = self._base + path
        if params:
            items = params.items() if hasattr(params, "items") else params
            query = [(k, _param(v)) for k, v in items if v is not None]
            if query:
                target += "?" + wire.urlencode(query)
        headers = {"Accept": "application/json"}
        if auth and self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        body = content
        if json_body is not None:
            import json

            body = json.dumps(json_body).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        response = self._send_any(method, target, body, headers)
        if response.status >= 400 and response.status not in ok:
            raise _error(response, method, target)
        return response

    def _send_any(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        """:meth:`_send` to the current server; one that refuses the connection (so the
        request never reached it) is passed over for the next of :attr:`urls`."""
        tried = 0
        while True:
            try:
                return self._send(method, target, body, headers)
            except _Unreachable as exc:
                tried += 1
                if tried >= len(self.urls):
                    raise errors.Unavailable(str(exc)) from exc.__cause__
                self._use((self._current + 1) % len(self.urls))

    def _send(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        for attempt in (1, 2):
            reused = self._conn is not None
            try:
                status, answer, data = self._exchange(method, target, body, headers)
            except ConnectionRefusedError as exc:
                self.close()
                raise _Unreachable(
                    f"no phalanx server at {self.url}: start one with `phalanx up`"
                ) from exc
            except OSError as exc:
                self.close()
                self._failed(exc, retry=reused and attempt == 1)
                continue
            if answer.get("connection", "").lower() == "close":
                self.close()
            return Response(status, answer, data)
        raise AssertionError("unreachable")

    def _failed(self, exc: OSError, *, retry: bool) -> None:
        """What a failed exchange means: returns when it is worth sending again on a fresh
        connection (a kept-alive one the server closed meanwhile), else raises."""
        import _socket

        if isinstance(exc, _socket.gaierror):
            raise _Unreachable(
                f"no phalanx server at {self.url}: start one with `phalanx up`"
            ) from exc
        if isinstance(exc, ConnectionResetError | BrokenPipeError):
            if retry:
                return
            raise errors.Unavailable(f"the phalanx server at {self.url} hung up: {exc}") from exc
        if isinstance(exc, TimeoutError):
            raise errors.Unavailable(
                f"the phalanx server at {self.url} did not answer within {self.timeout}s"
            ) from exc
        if self._https:
            import ssl

            if isinstance(exc, ssl.SSLCertVerificationError):
                trusted = os.environ.get(CA_ENV) or "the system's certificate store"
                raise errors.Unavailable(
                    f"the certificate of {self.url} cannot be verified against {trusted} "
                    f"({exc.verify_message}); set {CA_ENV} to the CA or certificate file "
                    "the server uses"
                ) from exc
        raise errors.Unavailable(
            f"cannot reach the phalanx server at {self.url}: {exc.strerror or exc}"
        ) from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # ------------------------------------------------------------------ server

    def healthz(self) -> bool:
        """Whether the server accepts work (``GET /healthz`` is 200)."""
        return self.request("GET", "/healthz", auth=False, ok=(503,)).status == 200

    def whoami(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/api/v1/whoami")
        return result

    def metrics(self) -> str:
        """The Prometheus metrics (with the token: ``/metrics`` needs one unless the server
        runs with ``--public-metrics``)."""
        return self.request("GET", "/metrics").body.decode()

    # ------------------------------------------------------------------ jobs

    def submit(self, submission: Any) -> int:
        """Submit one job (a JobSubmission or its dict); its id once durable."""
        result = self._json("POST", "/api/v1/jobs", json_body=_as_dict(submission))
        return int(result["id"])

    def submit_many(self, submissions: Iterable[Any]) -> list[int]:
        """Submit jobs in one transaction (all or none); their ids in order."""
        jobs = [_as_dict(s) for s in submissions]
        if not jobs:
            return []
        result = self._json("POST", "/api/v1/jobs/batch", json_body={"jobs": jobs})
        return [int(i) for i in result["ids"]]

    def get(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/api/v1/jobs/{int(job_id)}")
        return result

    def jobs(
        self,
        *,
        state: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        user: str | Iterable[str] | None = None,
        queue: str | None = None,
        cluster_queue: str | Iterable[str] | None = None,
        name: str | Iterable[str] | None = None,
        ids: Iterable[int] | None = None,
        array_job_id: int | None = None,
        order: str = "asc",
        page_size: int = 500,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Jobs the token may see, filtered, following ``continue`` page by page."""
        page_size = max(1, min(page_size, MAX_PAGE))
        seen = 0
        token: str | None = None
        while True:
            size = page_size if limit is None else min(page_size, limit - seen)
            if size <= 0:
                return
            params: list[tuple[str, Any]] = [
                *_multi("state", state),
                *_multi("tenant", tenant),
                *_multi("user", user),
                ("queue", queue),
                *_multi("cluster_queue", cluster_queue),
                *_multi("name", name),
                *_multi("id", None if ids is None else [str(int(i)) for i in ids]),
                ("array_job_id", array_job_id),
                ("order", order),
                ("limit", size),
                ("continue", token),
            ]
            page = self._json("GET", "/api/v1/jobs", params=params)
            for item in page["items"]:
                seen += 1
                yield item
            token = page.get("continue")
            if not token:
                return

    def job_list(
        self,
        *,
        user: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        name: str | Iterable[str] | None = None,
        state: Iterable[str] | None = None,
        mine: bool = False,
        steps: bool = False,
        nodes_down: bool = False,
        page_size: int = 500,
    ) -> dict[str, Any] | None:
        """Every page of ``GET /api/v1/jobs`` in one answer: ``items``; with ``mine``, only
        the caller's jobs (the admin's: everyone's) and ``mine`` (``{"user", "admin"}``);
        with ``steps``, ``steps`` (each job's steps by id, as :meth:`steps_of`); with
        ``nodes_down``, ``nodes_down`` (the names of the nodes draining, drained or down).
        ``None`` when the server does not know one of them (an older one)."""
        items: list[dict[str, Any]] = []
        found_steps: dict[str, list[dict[str, Any]]] = {}
        whose: Any = None
        down: list[str] = []
        token: str | None = None
        while True:
            params: list[tuple[str, Any]] = [
                *_multi("state", state),
                *_multi("tenant", tenant),
                *_multi("user", user),
                *_multi("name", name),
                ("limit", max(1, min(page_size, MAX_PAGE))),
                ("continue", token),
                ("mine", "true" if mine else None),
                ("steps", "true" if steps else None),
                ("nodes_down", "true" if nodes_down and token is None else None),
            ]
            page = self._json("GET", "/api/v1/jobs", params=params)
            if (mine and "mine" not in page) or (steps and "steps" not in page):
                return None
            if nodes_down and token is None:
                if "nodes_down" not in page:
                    return None
                down = page["nodes_down"]
            items += page["items"]
            found_steps.update(page.get("steps") or {})
            whose = page.get("mine", whose)
            token = page.get("continue")
            if not token:
                break
        answer: dict[str, Any] = {"items": items}
        if mine:
            answer["mine"] = whose
        if steps:
            answer["steps"] = found_steps
        if nodes_down:
            answer["nodes_down"] = down
        return answer

    def cluster(self) -> dict[str, Any] | None:
        """ClusterQueues, ResourceFlavors and Nodes with their status, and the caller's
        ``default_partition``, in one request (``GET /api/v1/cluster``); ``None`` when
        the server does not have that endpoint (an older one)."""
        response = self.request("GET", "/api/v1/cluster", ok=(404,))
        if response.status == 404:
            return None
        answer = response.json()
        return answer if isinstance(answer, dict) and "nodes" in answer else None

    def steps_of(self, job_ids: Iterable[int]) -> dict[str, list[dict[str, Any]]]:
        """The steps of each job (by id, as a string), in chunks of 500 ids."""
        ids = [int(i) for i in job_ids]
        found: dict[str, list[dict[str, Any]]] = {}
        for start in range(0, len(ids), 500):
            chunk = ",".join(str(i) for i in ids[start : start + 500])
            answer = self._json("GET", f"/api/v1/steps?jobs={chunk}")
            found.update(answer.get("items") or {})
        return found

    def cancel(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._json("DELETE", f"/api/v1/jobs/{int(job_id)}")
        return result

    def hold(self, job_id: int) -> dict[str, Any]:
        """Hold a pending job (``scontrol hold``)."""
        result: dict[str, Any] = self._json("POST", f"/api/v1/jobs/{int(job_id)}/hold")
        return result

    def release(self, job_id: int) -> dict[str, Any]:
        """Release a held job (``scontrol release``)."""
        result: dict[str, Any] = self._json("POST", f"/api/v1/jobs/{int(job_id)}/release")
        return result

    def requeue(self, job_id: int, *, hold: bool = False) -> dict[str, Any]:
        """Requeue a job (``scontrol requeue``; ``hold``: ``requeuehold``)."""
        body = {"hold": True} if hold else None
        result: dict[str, Any] = self._json(
            "POST", f"/api/v1/jobs/{int(job_id)}/requeue", json_body=body
        )
        return result

    def signal(self, job_id: int, signal: int, *, batch_only: bool = False) -> dict[str, Any]:
        """Send ``signal`` to the job's tasks (``batch_only``: the batch shell only)."""
        body = {"signal": int(signal), "batch_only": batch_only}
        result: dict[str, Any] = self._json(
            "POST", f"/api/v1/jobs/{int(job_id)}/signal", json_body=body
        )
        return result

    def update(self, job_id: int, **fields: Any) -> dict[str, Any]:
        """Change a job's ``time_limit`` (seconds), ``nice``, ``comment``, ..."""
        result: dict[str, Any] = self._json(
            "PATCH", f"/api/v1/jobs/{int(job_id)}", json_body=fields
        )
        return result

    def cluster_queues(self) -> list[dict[str, Any]]:
        """ClusterQueue manifests with their live status (Slurm's partitions)."""
        return self.get_objects("clusterqueues")

    def nodes(self) -> list[dict[str, Any]]:
        """Node manifests with status (``state``, ``gpus``, ``gpus_used``, ``jobs``)."""
        return self.get_objects("nodes")

    def update_nodes(
        self, names: Iterable[str], state: str = "", reason: str = ""
    ) -> list[dict[str, str]]:
        """Drain, down or resume nodes, all or none (admin only; ``scontrol update
        NodeName=``): ``state`` is ``drain``, ``down``, ``resume``, ``undrain``, ``idle``,
        or empty to change the reason only."""
        body = {"nodes": list(names), "state": state, "reason": reason}
        result = self._json("POST", "/api/v1/nodes/state", json_body=body)
        return list(result["results"])

    def resource_flavors(self) -> list[dict[str, Any]]:
        return self.get_objects("resourceflavors")

    def tenants(self) -> list[dict[str, Any]]:
        """Tenant manifests (Slurm's accounts)."""
        return self.get_objects("tenants")

    def usage(self) -> dict[str, Any]:
        """The fair-share tree from the usage ledger (``sshare``): ``associations`` in
        sshare's order, each with shares, decayed usage and fair-share factor."""
        result: dict[str, Any] = self._json("GET", "/api/v1/usage")
        return result

    def job_charges(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """What the usage ledger charged each job (by id; jobs never charged are absent)."""
        wanted = [str(int(i)) for i in ids]
        out: dict[int, dict[str, Any]] = {}
        for start in range(0, len(wanted), 500):
            chunk = ",".join(wanted[start : start + 500])
            page = self._json("GET", "/api/v1/usage/jobs", params=[("id", chunk)])
            for item in page["items"]:
                out[int(item["job_id"])] = item
        return out

    def estimate(self, submission: Any) -> dict[str, Any] | None:
        """The server's start estimate for a submission, without submitting it.

        ``None`` when the server has no estimate endpoint (``sbatch --test-only``).
        """
        response = self.request(
            "POST", "/api/v1/jobs/estimate", json_body=_as_dict(submission), ok=(404, 405)
        )
        if response.status >= 400:
            return None
        result = response.json()
        return result if isinstance(result, dict) else None

    def explain(self, job_id: int) -> dict[str, Any]:
        """Why the job is pending, or where it runs and why: the facts, and ``text``
        saying them in plain words (``GET /api/v1/jobs/{id}/explain``)."""
        result: dict[str, Any] = self._json("GET", f"/api/v1/jobs/{int(job_id)}/explain")
        return result

    def priority(
        self, ids: list[int] | None = None, users: list[str] | None = None
    ) -> dict[str, Any]:
        """Pending jobs' priority factors and the ordering weights (``GET /api/v1/priority``)."""
        params = ["id=" + ",".join(str(int(i)) for i in ids)] if ids else []
        params += ["user=" + wire.quote(",".join(users))] if users else []
        path = "/api/v1/priority" + ("?" + "&".join(params) if params else "")
        result: dict[str, Any] = self._json("GET", path)
        return result

    def events(self, job_id: int) -> list[dict[str, Any]]:
        result = self._json("GET", f"/api/v1/jobs/{int(job_id)}/events")
        return list(result["items"])

    def read_log(
        self, job_id: int, *, stream: str = "stdout", offset: int = 0, limit: int | None = None
    ) -> tuple[bytes, int, bool]:
        """One chunk of output: ``(data, next offset, finished)``."""
        response = self.request(
            "GET",
            f"/api/v1/jobs/{int(job_id)}/log",
            params={"stream": stream, "offset": offset, "limit": limit},
        )
        next_offset = int(response.headers.get("x-phalanx-offset", offset + len(response.body)))
        finished = response.headers.get("x-phalanx-finished", "false") == "true"
        return response.body, next_offset, finished

    def logs(
        self,
        job_id: int,
        *,
        stream: str = "stdout",
        follow: bool = False,
        interval: float = 0.2,
        offset: int = 0,
    ) -> Iterator[str]:
        """The job's output as text; with ``follow``, until the job finishes."""
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            data, offset, finished = self.read_log(job_id, stream=stream, offset=offset)
            if data:
                text = decoder.decode(data)
                if text:
                    yield text
                continue
            if finished or not follow:
                break
            time.sleep(interval)
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def watch(
        self, job_id: int, *, until_finished: bool = True, interval: float = 0.2
    ) -> Iterator[dict[str, Any]]:
        """The job each time its state or reason changes (first: as it is now)."""
        last: tuple[Any, ...] | None = None
        while True:
            job = self.get(job_id)
            key = (job["state"], job.get("reason"), job.get("attempt"))
            if key != last:
                last = key
                yield job
            if until_finished and job["state"] in _FINISHED:
                return
            time.sleep(interval)

    def wait(
        self, job_id: int, *, timeout: float | None = None, interval: float = 0.2
    ) -> dict[str, Any]:
        """Block until the job finishes; its final view."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job["state"] in _FINISHED:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout}s")
            time.sleep(interval)

    # ------------------------------------------------------------------ objects

    def apply(
        self, manifests: str | Iterable[Mapping[str, Any]], source: str = "client"
    ) -> list[dict[str, str]]:
        """Create or update objects from YAML text or manifest dicts: all or none."""
        if isinstance(manifests, str):
            response = self.request(
                "POST",
                "/api/v1/apply",
                params={"source": source},
                content=manifests.encode(),
                content_type="application/yaml",
            )
            result = response.json()
        else:
            docs = [dict(m) for m in manifests]
            result = self._json(
                "POST", "/api/v1/apply", json_body={"documents": docs, "source": source}
            )
        return list(result["results"])

    def get_objects(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` (plural or short names work: ``cq``, ``nodes``)."""
        result = self._json("GET", f"/api/v1/{_segment(kind)}")
        return list(result["items"])

    def get_object(self, kind: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/api/v1/{_segment(kind)}/{_name(name)}")
        return result

    def delete_object(self, kind: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("DELETE", f"/api/v1/{_segment(kind)}/{_name(name)}")
        return result

    # ------------------------------------------------------------------ tokens

    def create_token(
        self,
        user: str,
        tenants: Iterable[str] = (),
        *,
        admin: bool = False,
        name: str = "",
        expires: float | None = None,
    ) -> dict[str, Any]:
        """A new token (admin only): ``{"token", "user", "tenants", ...}``."""
        body = {
            "user": user,
            "tenants": list(tenants),
            "admin": admin,
            "name": name,
            "expires": expires,
        }
        result: dict[str, Any] = self._json("POST", "/api/v1/tokens", json_body=body)
        return result

    def tokens(self) -> list[dict[str, Any]]:
        """Every token (admin only), with ``revoked`` and ``expired``; never the secrets."""
        return list(self._json("GET", "/api/v1/tokens")["items"])

    def revoke_token(self, name: str) -> list[dict[str, Any]]:
        """Revoke every token named ``name`` (admin only); the tokens, now revoked."""
        result = self._json("DELETE", f"/api/v1/tokens/{wire.quote(name, safe='')}")
        return list(result["items"])


def _tls_context() -> ssl.SSLContext:
    """Certificate checks against ``PHALANX_CA`` when set, else the system's store."""
    import ssl

    cafile = os.environ.get(CA_ENV) or None
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise errors.Invalid(
            f"{CA_ENV}: cannot use {cafile} as the CA file (a PEM certificate): {reason}"
        ) from None


def _as_dict(submission: Any) -> dict[str, Any]:
    from collections.abc import Mapping

    if isinstance(submission, Mapping):
        return dict(submission)
    to_dict = getattr(submission, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, dict):
            return data
    raise TypeError(f"a submission is a dict or a JobSubmission, not {type(submission).__name__}")


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _multi(name: str, value: str | Iterable[str] | None) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [(name, value)]
    return [(name, v) for v in value]


def _segment(kind: str) -> str:
    return wire.quote(kind.strip(), safe="")


def _name(name: str) -> str:
    return wire.quote(name, safe="/")


def _split_url(url: str) -> tuple[str, str, int | None, str]:
    """``(scheme, host, port, path)`` of a server URL (``urllib.parse`` only for the
    unusual ones: a user, a query)."""
    parts = wire.split_url(url)
    if parts is not None:
        return parts
    from urllib.parse import urlsplit

    split = urlsplit(url)
    try:
        port = split.port
    except ValueError:
        port = None
    return split.scheme, split.hostname or "", port, split.path


def _error(response: Response, method: str, target: str) -> errors.PhalanxError:
    """The phalanx error a 4xx/5xx answer stands for, with the server's detail."""
    code = None
    detail = None
    try:
        body = wire.loads(response.body)
        if isinstance(body, dict):
            code = body.get("error")
            detail = body.get("detail")
    except ValueError:
        pass
    if not isinstance(detail, str):
        text = response.body.decode(errors="replace").strip()[:200]
        detail = f"{method} {target} answered {response.status}" + (f": {text}" if text else "")
    cls = _ERRORS.get(str(code)) or _BY_STATUS.get(response.status) or errors.PhalanxError
    if cls is errors.PhalanxError:
        return errors.PhalanxError(detail, error=str(code) if code else None)
    return cls(detail)
