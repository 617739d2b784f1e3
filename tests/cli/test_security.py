"""``phalanx token create --expires``, ``token revoke``, ``token list``'s status, and the
security flags of ``phalanx up``."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.cli.main import main
from tests.api.server import Cluster


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    return cluster


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _works(cluster: Cluster, token: str) -> bool:
    r = httpx.get(
        cluster.url + "/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    return r.status_code == 200


def _row(out: str, name: str) -> list[str]:
    [line] = [line for line in out.splitlines() if f" {name} " in f" {line} "]
    return line.split()


def test_create_with_expires_then_revoke(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    before = time.time()
    code, out, err = run(
        capsys, "token", "create", "--user", "kim", "-t", "team-a", "--name", "kim-ci",
        "--expires", "30d",
    )  # fmt: skip
    assert code == 0, err
    token = out.strip()
    assert _works(as_admin, token)
    with as_admin.admin as admin:
        [made] = [t for t in admin.tokens() if t["name"] == "kim-ci"]
    expires = datetime.fromisoformat(made["expires"].replace("Z", "+00:00")).timestamp()
    assert before + 30 * 86400 - 5 < expires < time.time() + 30 * 86400 + 5
    code, out, _ = run(capsys, "token", "list")
    assert code == 0 and "STATUS" in out
    assert _row(out, "kim-ci")[-1] == "active"

    code, out, err = run(capsys, "token", "revoke", "kim-ci")
    assert code == 0, err
    assert out.startswith("token/kim-ci revoked (1 token:")
    assert not _works(as_admin, token)
    code, out, _ = run(capsys, "token", "list")
    assert _row(out, "kim-ci")[-1] == "revoked"


@pytest.mark.parametrize("value", ["12h", "90m", "1-00:00:00", "2w"])
def test_expires_takes_units_and_slurm_times(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, out, err = run(
        capsys, "token", "create", "--user", "lee", "-t", "team-b", "--expires", value
    )
    assert code == 0, err
    assert _works(as_admin, out.strip())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ("token", "create", "--user", "x", "-t", "team-a", "--expires", "soon"),
            "--expires: 'soon'",
        ),
        (("token", "create", "--user", "x", "-t", "team-a", "--expires", "0d"), "--expires: '0d'"),
        (
            ("token", "create", "--user", "x", "-t", "team-a", "--expires", "9999999999w"),
            "expires: at most 100 years",
        ),
        (("token", "revoke", "no-such-token"), "no token named 'no-such-token'"),
    ],
)
def test_token_errors_are_one_line(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, out, err = run(capsys, *args)
    assert code == 1 and not out
    [line] = err.splitlines()
    assert line.startswith("phalanx: error: ") and needle in line


def test_a_user_cannot_revoke(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_TOKEN", as_admin.bob_token)
    code, _, err = run(capsys, "token", "revoke", "alice")
    assert code == 1 and "only the admin revokes tokens" in err
    assert _works(as_admin, as_admin.alice_token)


def test_up_passes_the_security_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("phalanx.server.run_server", lambda **kw: seen.update(kw))
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    code, _, err = run(
        capsys, "up", "--state-dir", str(tmp_path), "--public-metrics",
        "--tls-cert", str(cert), "--tls-key", str(key),
    )  # fmt: skip
    assert code == 0, err
    assert seen["public_metrics"] is True
    assert (seen["tls_cert"], seen["tls_key"]) == (cert, key)
    seen.clear()
    assert run(capsys, "up", "--state-dir", str(tmp_path))[0] == 0
    assert seen["public_metrics"] is False
    assert seen["tls_cert"] is None and seen["tls_key"] is None
