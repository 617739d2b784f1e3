"""``sstat -j JOB[.STEP]``: the running steps' usage, as Slurm's sstat prints it.

The server samples each running step's tasks (each with its descendants) from
``/proc`` when asked (``GET /api/v1/jobs/N/steps/usage``), as Slurm's
``jobacct_gather/linux`` does: CPU time, resident and virtual size, page faults.
Fields and layouts are sacct's (``-o``, ``-p``, ``-P``, ``-n``, ``-e``); a job
given without a step shows every running ``srun`` step. As Slurm's, a job with no
running step, an unknown job or step are reported on standard error after the
header and sstat still exits 0. Energy, disk I/O and CPU frequency are not
measured: those fields print 0 (``Unknown`` for the requested frequencies), and
the batch step is not sampled (``-a`` adds nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DEFAULT_FIELDS", "FIELDS", "run"]

Row = dict[str, Any]
Getter = Callable[[Row], str]

DEFAULT_FIELDS = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,"
    "AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,"
    "AveCPU,NTasks,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,"
    "MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,"
    "MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,TRESUsageInAve,TRESUsageInMax,"
    "TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,"
    "TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,TRESUsageOutMax,"
    "TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,TRESUsageOutMinNode,"
    "TRESUsageOutMinTask,TRESUsageOutTot"
)


def _kb(value: float) -> str:
    return f"{int(value)}K"


def _cpu(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _extreme(row: Row, key: str, pick: Callable[..., Any]) -> dict[str, Any]:
    tasks = row["tasks"]
    return dict(pick(tasks, key=lambda t: t[key])) if tasks else {}


def _average(row: Row, key: str) -> float:
    tasks = row["tasks"]
    return sum(float(t[key]) for t in tasks) / len(tasks) if tasks else 0.0


def _node(row: Row, task: dict[str, Any]) -> str:
    nodes = row.get("taskNodes") or []
    rank = int(task.get("rank", 0))
    return str(nodes[rank]) if rank < len(nodes) else ""


def _tres(row: Row, key: str) -> str:
    task = _extreme(row, key, max)
    if not task:
        return ""
    cpu, mem, vmem = _cpu(float(task["cpu"])), _kb(task["maxRssKb"]), _kb(task["vmSizeKb"])
    return f"cpu={cpu},mem={mem},pages={task['pages']},vmem={vmem}"


def _max(key: str, fmt: Callable[[Any], str]) -> Getter:
    return lambda r: fmt(_extreme(r, key, max).get(key, 0))


def _min(key: str, fmt: Callable[[Any], str]) -> Getter:
    return lambda r: fmt(_extreme(r, key, min).get(key, 0))


def _where(key: str, pick: Callable[..., Any], what: str) -> Getter:
    def get(row: Row) -> str:
        task = _extreme(row, key, pick)
        if not task:
            return ""
        return _node(row, task) if what == "node" else str(task.get("rank", 0))

    return get


FIELDS: dict[str, tuple[str, int, Getter]] = {
    "jobid": ("JobID", -12, lambda r: f"{r['jobId']}.{r['step']}"),
    "maxvmsize": ("MaxVMSize", 10, _max("vmSizeKb", _kb)),
    "maxvmsizenode": ("MaxVMSizeNode", 14, _where("vmSizeKb", max, "node")),
    "maxvmsizetask": ("MaxVMSizeTask", 14, _where("vmSizeKb", max, "task")),
    "avevmsize": ("AveVMSize", 10, lambda r: _kb(_average(r, "vmSizeKb"))),
    "maxrss": ("MaxRSS", 10, _max("maxRssKb", _kb)),
    "maxrssnode": ("MaxRSSNode", 10, _where("maxRssKb", max, "node")),
    "maxrsstask": ("MaxRSSTask", 10, _where("maxRssKb", max, "task")),
    "averss": ("AveRSS", 10, lambda r: _kb(_average(r, "rssKb"))),
    "maxpages": ("MaxPages", 8, _max("pages", str)),
    "maxpagesnode": ("MaxPagesNode", 12, _where("pages", max, "node")),
    "maxpagestask": ("MaxPagesTask", 14, _where("pages", max, "task")),
    "avepages": ("AvePages", 10, lambda r: str(int(_average(r, "pages")))),
    "mincpu": ("MinCPU", 10, _min("cpu", lambda v: _cpu(float(v)))),
    "mincpunode": ("MinCPUNode", 10, _where("cpu", min, "node")),
    "mincputask": ("MinCPUTask", 10, _where("cpu", min, "task")),
    "avecpu": ("AveCPU", 10, lambda r: _cpu(_average(r, "cpu"))),
    "ntasks": ("NTasks", 8, lambda r: str(len(r["tasks"]))),
    "avecpufreq": ("AveCPUFreq", 10, lambda r: "0"),
    "reqcpufreqmin": ("ReqCPUFreqMin", 13, lambda r: "Unknown"),
    "reqcpufreqmax": ("ReqCPUFreqMax", 13, lambda r: "Unknown"),
    "reqcpufreqgov": ("ReqCPUFreqGov", 13, lambda r: "Unknown"),
    "consumedenergy": ("ConsumedEnergy", 14, lambda r: "0"),
    # Disk I/O is not sampled: 0, on the first task's node, as an idle task shows.
    "maxdiskread": ("MaxDiskRead", 12, lambda r: "0"),
    "maxdiskreadnode": ("MaxDiskReadNode", 15, _where("rank", min, "node")),
    "maxdiskreadtask": ("MaxDiskReadTask", 15, _where("rank", min, "task")),
    "avediskread": ("AveDiskRead", 12, lambda r: "0"),
    "maxdiskwrite": ("MaxDiskWrite", 12, lambda r: "0"),
    "maxdiskwritenode": ("MaxDiskWriteNode", 16, _where("rank", min, "node")),
    "maxdiskwritetask": ("MaxDiskWriteTask", 16, _where("rank", min, "task")),
    "avediskwrite": ("AveDiskWrite", 12, lambda r: "0"),
    "tresusageinave": ("TRESUsageInAve", 14, lambda r: _tres(r, "cpu")),
    "tresusageinmax": ("TRESUsageInMax", 14, lambda r: _tres(r, "maxRssKb")),
    "tresusageinmaxnode": ("TRESUsageInMaxNode", 18, _where("maxRssKb", max, "node")),
    "tresusageinmaxtask": ("TRESUsageInMaxTask", 18, _where("maxRssKb", max, "task")),
    "tresusageinmin": ("TRESUsageInMin", 14, lambda r: ""),
    "tresusageinminnode": ("TRESUsageInMinNode", 18, lambda r: ""),
    "tresusageinmintask": ("TRESUsageInMinTask", 18, lambda r: ""),
    "tresusageintot": ("TRESUsageInTot", 14, lambda r: ""),
    "tresusageoutave": ("TRESUsageOutAve", 15, lambda r: ""),
    "tresusageoutmax": ("TRESUsageOutMax", 15, lambda r: ""),
    "tresusageoutmaxnode": ("TRESUsageOutMaxNode", 19, lambda r: ""),
    "tresusageoutmaxtask": ("TRESUsageOutMaxTask", 19, lambda r: ""),
    "tresusageoutmin": ("TRESUsageOutMin", 15, lambda r: ""),
    "tresusageoutminnode": ("TRESUsageOutMinNode", 19, lambda r: ""),
    "tresusageoutmintask": ("TRESUsageOutMinTask", 19, lambda r: ""),
    "tresusageouttot": ("TRESUsageOutTot", 15, lambda r: ""),
    "nodelist": ("Nodelist", 20, lambda r: _nodelist(r)),
    "pids": ("Pids", 20, lambda r: ",".join(str(t["pid"]) for t in r["tasks"])),
}
"""sstat's fields: header, width (negative: left-justified), value."""


def _nodelist(row: Row) -> str:
    from phalanx.cli.slurm.common import compress_hostlist

    return compress_hostlist(list(dict.fromkeys(row.get("taskNodes") or [])))


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _parse(argv: Sequence[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"jobs": [], "fields": None, "parsable": None, "header": True}
    opts["all"] = False
    i = 0
    args = list(argv)
    while i < len(args):
        word = args[i]
        name, eq, value = word.partition("=")
        takes = name in ("-j", "--jobs", "-o", "--format", "--fields")
        if takes and not eq:
            if len(word) > 2 and not word.startswith("--"):
                name, value = word[:2], word[2:]
            else:
                if i + 1 >= len(args):
                    raise ValueError(f"option '{name}' requires an argument")
                i += 1
                value = args[i]
        if name in ("-j", "--jobs"):
            opts["jobs"] += [v for v in value.split(",") if v]
        elif name in ("-o", "--format", "--fields"):
            opts["fields"] = value
        elif word in ("-p", "--parsable"):
            opts["parsable"] = "trailing"
        elif word in ("-P", "--parsable2"):
            opts["parsable"] = "plain"
        elif word in ("-n", "--noheader"):
            opts["header"] = False
        elif word in ("-a", "--allsteps"):
            opts["all"] = True
        elif word in ("-e", "--helpformat"):
            opts["helpformat"] = True
        elif word in ("-h", "--help", "--usage"):
            opts["help"] = True
        elif not word.startswith("-"):
            opts["jobs"] += [v for v in word.split(",") if v]
        else:
            raise ValueError(f"unrecognized option '{word}'")
        i += 1
    return opts


def render(rows: Sequence[Row], fields: Sequence[tuple[str, int, Getter]], *, header: bool,
           parsable: str | None) -> str:  # fmt: skip
    """sstat's text for ``rows`` (one per step), in sacct's layouts."""
    from phalanx.cli.slurm.sacct import cell

    lines: list[str] = []
    values = [[get(row) for _, _, get in fields] for row in rows]
    if parsable is not None:
        end = "|" if parsable == "trailing" else ""
        if header:
            lines.append("|".join(f[0] for f in fields) + end)
        lines += ["|".join(v) + end for v in values]
    else:
        if header:
            lines.append(" ".join(cell(f[0], f[1]) for f in fields) + " ")
            lines.append(" ".join("-" * abs(f[1]) for f in fields) + " ")
        lines += [
            " ".join(cell(v, f[1]) for v, f in zip(row, fields, strict=True)) + " "
            for row in values
        ]
    return "".join(line + "\n" for line in lines)


def run(argv: Sequence[str]) -> int:
    """The sstat command; returns its exit status."""
    try:
        opts = _parse(argv)
    except ValueError as exc:
        _say(f"sstat: {exc}")
        _say('Try "sstat --help" for more information')
        return 1
    if opts.get("help"):
        sys.stdout.write("Usage: sstat [-a] [-n] [-p|-P] [-o fields] -j job[.step][,...]\n")
        return 0
    if opts.get("helpformat"):
        names = [f[0] for f in FIELDS.values()]
        sys.stdout.write(
            "".join(f"{n:<20}" + ("\n" if i % 4 == 3 else "") for i, n in enumerate(names)) + "\n"
        )
        return 0
    if not opts["jobs"]:
        _say("sstat: error: You didn't give me any jobs to stat.")
        return 1
    fields = []
    for name in (opts["fields"] or DEFAULT_FIELDS).split(","):
        base, _, width = name.strip().partition("%")
        field = FIELDS.get(base.lower())
        if field is None:
            _say(f'sstat: error: Invalid field requested: "{base}"')
            return 1
        size = field[1] if not width.isdigit() else (int(width) if field[1] > 0 else -int(width))
        fields.append((field[0], size, field[2]))
    from phalanx.client import Client
    from phalanx.errors import NotFound, PhalanxError

    targets: list[tuple[str, str | None]] = []
    for text in opts["jobs"]:
        job, dot, step = text.partition(".")
        if not job.isdigit() or (dot and not step.isdigit()):
            _say(f"sstat: fatal: Bad job/step specified: {text}")
            return 1
        targets.append((job, step if dot else None))
    rows: list[Row] = []
    errors: list[str] = []
    try:
        with Client() as client:
            for job, step in targets:
                try:
                    usage = client._json("GET", f"/api/v1/jobs/{job}/steps/usage")
                    steps = client._json("GET", f"/api/v1/jobs/{job}/steps")
                except NotFound:
                    errors.append(f"sstat: error: couldn't get steps for job {job}")
                    continue
                records = {int(s["step"]): s for s in steps.get("steps") or ()}
                running = usage.get("steps") or []
                if step is not None:
                    running = [s for s in running if s["step"] == int(step)]
                    if not running:
                        errors.append(f"sstat: error: StepId={job}.{step} not found running.")
                        continue
                if not running:
                    errors.append(f"sstat: error: No steps running for job {job}")
                    continue
                for item in running:
                    record = records.get(int(item["step"]), {})
                    rows.append({**record, **item, "jobId": int(job)})
    except PhalanxError as exc:
        _say(f"sstat: error: {exc.detail}")
        return 1
    sys.stdout.write(render(rows, fields, header=opts["header"], parsable=opts["parsable"]))
    sys.stdout.flush()
    for line in errors:
        _say(line)
    return 0
