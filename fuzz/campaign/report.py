"""A campaign's report in its `--out` folder: `report.json`, `report.md`, two plots (`workers.png`: steps per worker
and each worker's steps/s over time; `coverage.png`: lifecycle corners, and abstract transitions per engine and in
union, over time) and a regression test per finding (`regressions/`). A finding with no fault switch on the
reference pool is a false alarm, listed first.

Strings that come from counterexample files (failure kinds and ids, file names, re-check reasons) are quoted, not
trusted: in Markdown every character that can start markup is backslash-escaped and control characters are shown
as escapes (`text`), code spans are fenced longer than any backtick run inside (`code`), and shell commands quote
their paths; `report.json` is written by `json.dumps` (strict: no NaN)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from fuzz.campaign.findings import found_line
from fuzz.campaign.report_data import EXIT_FAILED, worker_lines
from fuzz.campaign.series import MAX_POINTS
from fuzz.emit import emit
from model.trace import TraceError, load, one_line, write_atomically

WORKERS_PNG = "workers.png"
COVERAGE_PNG = "coverage.png"
REGRESSIONS = "regressions"


def write_report(out: Path, report: dict[str, Any]) -> None:
    """Emit each group's regression test, draw the plots, then write report.json and report.md (atomically)."""
    for group in report["groups"]:
        group["regression"] = _emit(Path(group["representative"]), out / REGRESSIONS)
    report["plots"] = _plots(out, report)
    write_atomically(out / "report.json", json.dumps(report, indent=1, allow_nan=False) + "\n")
    write_atomically(out / "report.md", markdown(report))


def _emit(trace_path: Path, regressions: Path) -> str | None:
    try:
        return str(emit(load(trace_path), regressions))
    except TraceError:
        return None


def _plots(out: Path, report: dict[str, Any]) -> list[str]:
    """Draw both plots; none where matplotlib is missing (an upstream SGLang venv), said in the report."""
    try:
        import matplotlib
    except ImportError:
        report["plots_skipped"] = "matplotlib is not installed in this environment"
        return []
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return [_plot_workers(plt, out / WORKERS_PNG, report), _plot_coverage(plt, out / COVERAGE_PNG, report)]


def _plot_workers(plt: Any, path: Path, report: dict[str, Any]) -> str:
    workers = report["per_worker"]
    labels = [str(w["worker"]) for w in workers]
    fig, (steps_ax, rate_ax, time_ax) = plt.subplots(1, 3, figsize=(13, 3.5))
    steps_ax.bar(labels, [w["steps"] for w in workers])
    steps_ax.set(title="lockstep steps per worker", xlabel="worker", ylabel="steps")
    rate_ax.bar(labels, [w["steps_per_s"] for w in workers], color="tab:orange")
    rate_ax.set(title="steps/s per worker", xlabel="worker", ylabel="steps/s")
    drawn = [w for w in workers if w["series"]]
    for w in drawn:
        series = w["series"]  # each rate is that of the interval ending at its point: drawn back to the last one
        times, rates = [0.0, *(p[0] for p in series)], [series[0][2], *(p[2] for p in series)]
        time_ax.step(times, rates, where="pre", label=f"worker {w['worker']}")
    time_ax.set(title="steps/s over time (a flat zero is a stall)", xlabel="elapsed seconds", ylabel="steps/s")
    if 0 < len(drawn) <= 8:
        time_ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _plot_coverage(plt: Any, path: Path, report: dict[str, Any]) -> str:
    points = [(0.0, 0), *report["coverage"], (report["elapsed_s"], len(report["corners"]))]
    fig, (corners_ax, moves_ax) = plt.subplots(1, 2, figsize=(11, 3.5))
    corners_ax.step([p[0] for p in points], [p[1] for p in points], where="post")
    corners_ax.set(title="lifecycle-corner coverage", xlabel="elapsed seconds", ylabel="distinct corners reached")
    over_time = report["transitions_over_time"]
    final = [report["elapsed_s"], *(report["transitions"][name] for name in over_time["columns"][1:])]
    rows = [[0.0] * len(over_time["columns"]), *over_time["points"], final]
    for column, name in enumerate(over_time["columns"][1:], start=1):
        moves_ax.step([r[0] for r in rows], [r[column] for r in rows], where="post", label=name)
    moves_ax.set(title="abstract transitions", xlabel="elapsed seconds", ylabel="distinct transitions reached")
    moves_ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def markdown(report: dict[str, Any]) -> str:
    """The human report: false alarms first, then the run, the findings, the re-checks and the coverage."""
    lines = [f"# Fuzz campaign: {_verdict(report)}", ""]
    alarms = [g for g in report["groups"] if g["false_alarm"]]
    if alarms:
        lines += [
            f"**FALSE ALARM: {len(alarms)} findings with no fault switch on the reference pool; the harness "
            "or the model is wrong, or the pool has a real bug.**",
            "",
        ]
    lines += _run_section(report) + _findings_section(report) + _recheck_section(report)
    lines += _coverage_section(report) + _points_section(report) + _throughput_section(report)
    return "\n".join(lines) + "\n"


def _verdict(report: dict[str, Any]) -> str:
    if report["exit_code"] == EXIT_FAILED:
        return f"failed ({len(report['crashed'])} workers crashed)"
    never = report.get("fault_points_never_failed", [])
    unfired = f"; fault points never failed: {', '.join(text(p) for p in never)}" if never else ""
    if report["groups"]:
        return f"{sum(g['count'] for g in report['groups'])} counterexamples, {found_line(report['groups'])}{unfired}"
    return "nothing found" if not never else "no counterexample" + unfired


def _run_section(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Run",
        "",
        f"- commit {text(report['commit'])}, seed base {report['seed_base']}, shard {report['shard']}, "
        f"{report['workers']} workers, target {text(report['target'])}, faults {_names(report['faults'])}",
        f"- budget {report['budget_s']:g} s, elapsed {report['elapsed_s']:.0f} s, {len(report['units'])} units "
        f"of {report['examples_per_unit']} test cases",
        f"- {report['steps']:,} lockstep steps, {report['steps_per_s']:,.0f} steps/s: "
        f"{report['steps_per_core_hour'] / 1e6:.2f} million per core-hour ({report['workers']} workers over the "
        f"elapsed time), {report['steps_per_cpu_hour'] / 1e6:.2f} million per CPU-hour of the workers",
        f"- engines: {_names(report['engines'])}; each worker's units cycle through {_names(report['engine_cycle'])}",
        f"- rerun: {code(report['rerun'])}",
        "",
        "| engine | units | steps | seconds in units | steps/s | M steps per core-hour | counterexamples "
        "| distinct transitions |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {text(e['engine'])} | {e['units']} | {e['steps']:,} | {e['seconds']:.0f} | {e['steps_per_s']:,.0f} "
            f"| {e['steps_per_core_hour'] / 1e6:.2f} | {e['counterexamples']} | {e['transitions']:,} |"
            for e in report["per_engine"]
        ),
        "",
        "| worker | units | steps | seconds | steps/s | CPU seconds | steps per CPU second |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {w['worker']} | {w['units']} | {w['steps']:,} | {w['seconds']:.0f} | {w['steps_per_s']:,.0f} "
        f"| {w['cpu_s']:.0f} | {w['steps_per_cpu_s']:,.0f} |"
        for w in report["per_worker"]
    ]
    lines += ["", _image("steps per worker", WORKERS_PNG, report), ""]
    lines += [f"- worker {w} crashed: {text(why)}" for w, why in report["crashed"].items()]
    return lines


def _findings_section(report: dict[str, Any]) -> list[str]:
    lines = ["## Counterexamples (one finding per failure kind and id; each shrunk op sequence kept once)", ""]
    if not report["groups"]:
        return [*lines, "None.", ""]
    for g in report["groups"]:
        flag = "FALSE ALARM: " if g["false_alarm"] else ""
        size = f"{g['count']}x, {len(g['shapes'])} shapes, shortest {len(g['ops'])} steps"
        lines += [
            f"### {flag}{text(g['kind'])} {text(g['id'])} ({size})",
            "",
            f"- faults: {_names(g['faults'])}; target {text(g['target'])}",
            f"- replay the shortest: {code(g['replay'])}",
            f"- regression test: {code(str(g['regression']))}",
            "",
            "| times | ops | replay |",
            "|---|---|---|",
            *(
                f"| {sh['count']} | {text(' '.join(sh['ops']))} | "
                f"{code('python -m fuzz replay ' + shlex.quote(sh['file']), cell=True)} |"
                for sh in g["shapes"]
            ),
            "",
        ]
    return lines


def _recheck_section(report: dict[str, Any]) -> list[str]:
    if not report["rechecked"]:
        return []
    lines = ["## Counterexamples from earlier runs, re-checked", ""]
    return [*lines, *[f"- {code(r['file'])}: {text(r['status'])}" for r in report["rechecked"]], ""]


def _coverage_section(report: dict[str, Any]) -> list[str]:
    reached, over_time = report["transitions"], report["transitions_over_time"]
    each = ", ".join(f"{text(name)} {count:,}" for name, count in reached.items() if name != "union")
    lines = [
        "## Coverage: lifecycle corners and abstract transitions",
        "",
        f"{len(report['corners'])} distinct corners reached; {reached['union']:,} distinct abstract transitions "
        f"(shape, op, outcome) in union ({each}).",
        "",
        _image("coverage over time", COVERAGE_PNG, report),
        "",
        "| seconds | " + " | ".join(text(c) for c in over_time["columns"][1:]) + " |",
        "|---" * len(over_time["columns"]) + "|",
        *(f"| {' | '.join(f'{v:g}' for v in point)} |" for point in _thinned(over_time["points"])),
        "",
        "| corner | first reached (s) |",
        "|---|---|",
    ]
    return lines + [f"| {text(name)} | {seconds:.0f} |" for name, seconds in report["corners"].items()]


def _points_section(report: dict[str, Any]) -> list[str]:
    """The fault points: each installed one's calls and planned failures over every unit (plans only)."""
    if not report.get("fault_rate"):
        return []
    return [
        "## Fault points",
        "",
        f"Plans in {report['fault_rate']}% of the walker's steps and wherever Hypothesis armed one; a point the "
        "pools installed that no unit failed fails the campaign.",
        "",
        "| point | calls reached | planned failures |",
        "|---|---|---|",
        *(f"| {text(p)} | {c['reached']:,} | {c['failed']:,} |" for p, c in report["fault_points"].items()),
        "",
    ]


def _thinned(points: list[list[float]], most: int = 12) -> list[list[float]]:
    """At most `most` of `points`, evenly spaced, the last included: the table shows the trend, the plot the rest."""
    step = max(1, -(-len(points) // most))
    return [*points[:-1:step], points[-1]] if points else []


def _throughput_section(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Throughput over time",
        "",
        f"Each worker's steps/s per interval are in `report.json` (`per_worker[].series`, at most {MAX_POINTS + 1} "
        f"points however long the campaign); a stall is an interval of more than {report['stall_s']:g} s in which "
        "its heartbeat showed no new step.",
        "",
    ]
    return [*lines, *(f"- {text(line)}" for line in worker_lines(report)), ""]


def _image(title: str, name: str, report: dict[str, Any]) -> str:
    if name in report.get("plots", []):
        return f"![{title}]({name})"
    return f"({title}: no plot, {report.get('plots_skipped', 'not drawn')})"


# The characters that can start markup inside a line (emphasis, code, links, images, HTML, entities, table cells,
# strikethrough, math); `_` only at a word's edge (inside a word, as in `reuse_released`, it is plain text).
_MARKUP = re.compile(r"([\\`*\[\]<>|!&~$])|((?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def text(value: str) -> str:
    """`value` as Markdown text, rendered as written: one line, every markup character escaped (no emphasis,
    link, HTML or table cell can start inside it)."""
    return _MARKUP.sub(lambda m: "\\" + m.group(0), one_line(value, limit=2000))


def code(value: str, cell: bool = False) -> str:
    """`value` as a Markdown code span on one line, fenced by more backticks than any run inside it; in a table
    `cell`, its pipes are escaped (GitHub splits cells on them even inside a span, and unescapes them there)."""
    flat = one_line(value, limit=2000)
    if cell:
        flat = flat.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat[:1] in ("`", " ") or flat[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _names(names: list[str]) -> str:
    return text(", ".join(names)) if names else "none"
