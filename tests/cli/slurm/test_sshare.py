"""sshare's rows and columns, and sacct's ledger fields, from the real report functions."""

from __future__ import annotations

from phalanx.cli.slurm import sacct, sshare
from phalanx.control.share_report import share_report
from phalanx.model import Tenant

TENANTS = {
    "team-a": Tenant(name="team-a", allocation=3, users=["alice"]),
    "nlp": Tenant(name="nlp", parent="team-a", allocation=1, users=["bob"]),
    "team-b": Tenant(name="team-b", allocation=1, users=["carol"]),
}
USAGE = {
    ("", ""): (7200.0, 1000.0),
    ("team-a", ""): (7200.0, 1000.0),
    ("team-a", "alice"): (3600.0, 600.0),
    ("nlp", ""): (3600.0, 400.0),
    ("nlp", "bob"): (3600.0, 400.0),
}


def _rows(**kwargs: object) -> list[dict[str, object]]:
    return sshare.select_rows(share_report(TENANTS, USAGE), **kwargs)  # type: ignore[arg-type]


def test_default_layout_shows_accounts_and_the_callers_rows() -> None:
    lines = sshare.format_usage(_rows(me="alice")).splitlines()
    assert lines[0] == (
        "Account                    User  RawShares  NormShares    RawUsage  EffectvUsage"
        "  FairShare "
    )
    assert lines[1] == " ".join("-" * w for w in (20, 10, 10, 11, 11, 13, 10)) + " "
    body = [line.rstrip() for line in lines[2:]]
    assert body == [
        "root                                          1.000000        1000      1.000000",
        " team-a                                  3    0.750000        1000      1.000000",
        "  team-a                  alice          1    0.500000         600      0.600000"
        "   0.333333",
        "  nlp                                    1    0.500000         400      0.400000",
        " team-b                                  1    0.250000           0      0.000000",
    ]


def test_all_users_long_and_parsable() -> None:
    rows = _rows(all_users=True)
    assert [(r["account"], r["user"]) for r in rows] == [
        ("root", None),
        ("team-a", None),
        ("team-a", "alice"),
        ("nlp", None),
        ("nlp", "bob"),
        ("team-b", None),
        ("team-b", "carol"),
    ]
    text = sshare.format_usage(rows, long=True, parsable="plain")
    lines = text.splitlines()
    assert lines[0] == (
        "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS|"
        "GrpTRESMins|TRESRunMins"
    )
    by_user = {line.split("|")[1]: line.split("|") for line in lines[1:] if line.split("|")[1]}
    # Fair Tree: carol (no usage) ranks first, then bob (nlp is under-served: 0.5 / 0.4),
    # then alice (0.5 / 0.6).
    assert [by_user[u][7] for u in ("carol", "bob", "alice")] == [
        "1.000000",
        "0.666667",
        "0.333333",
    ]
    assert by_user["carol"][8] == "inf"
    assert by_user["alice"][5] == "0.600000"  # NormUsage: 600 of the root's 1000
    trailing = sshare.format_usage(rows, parsable="trailing", header=False).splitlines()
    assert trailing[0] == "root|||1.000000|1000|1.000000||"
    assert len(trailing) == len(rows)


def test_accounts_and_users_select_rows() -> None:
    rows = _rows(accounts=["nlp"], users=["bob"])
    assert [(r["account"], r["user"]) for r in rows] == [("nlp", None), ("nlp", "bob")]
    classic = share_report(TENANTS, USAGE, fair_tree_mode=False)
    # Classic fair-share: accounts get a factor too; team-b has no usage: 2^0.
    team_b = next(r for r in classic if r["account"] == "team-b" and r["user"] is None)
    assert team_b["fair_share"] == 1.0


def test_sacct_alloc_tres_charged_and_gpu_hours_from_the_ledger() -> None:
    job = {
        "id": 7,
        "start_time": "2026-12-03T10:00:00Z",
        "num_cpus": 8,
        "gpus": 2,
        sacct.CHARGE_KEY: {
            "alloc_tres": {"cpu": 8, "mem": 65536, "gres/gpu": 2, "node": 1},
            "billing": 24.5,
            "gpu_seconds": 5400.0,
            "billing_seconds": 66150.7,
        },
    }
    fields = sacct.parse_fields("jobid,alloctres%50,charged,gpuhours")
    text = sacct.format_jobs([job], fields, parsable="plain", now=0.0)
    assert text.splitlines() == [
        "JobID|AllocTRES|Charged|GPUHours",
        "7|billing=24,cpu=8,gres/gpu=2,mem=64G,node=1|66150|1.50",
    ]
    assert sacct._megabytes(4000) == "4000M" and sacct._megabytes(2 << 20) == "2T"
    # A job the ledger never charged: nothing charged, AllocTRES from the job itself.
    plain = {k: v for k, v in job.items() if k != sacct.CHARGE_KEY}
    row = sacct.format_jobs([plain], fields, parsable="plain", now=0.0).splitlines()[1]
    assert row == "7|billing=8,cpu=8,gres/gpu=2,node=1|0|0.00"
