#!/usr/bin/env python3
"""Merge compat suite results into compat/SCORECARD.md.

    compat/scorecard.py [--out compat/SCORECARD.md] RESULTS.json [RESULTS.json ...]

Each RESULTS.json is what one pytest run wrote with `--scorecard-json` (conftest.py): a label
("Sluice (local)", "Apache Kafka 4.3.1"), the client versions, and every test's outcome under a
(client, feature) label. `compat/run.sh --scorecard` runs the suite against Sluice and against
Apache Kafka and calls this with both files. Every file is one column; the Kafka run (target
kafka-baseline) is the control: a row Sluice fails and Kafka passes is a Sluice bug and is
marked **FAIL (Sluice only)** and listed at the top; a row that fails on Kafka as well is marked
"fail (Kafka too)". Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REASON_CHARS = 220  # a cell's reason is cut to this


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    for key in ("label", "target", "results"):
        if key not in data:
            raise SystemExit(f"{path}: not a scorecard results file (no {key!r})")
    return data


def cell_text(text: str, limit: int = REASON_CHARS) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_fail(outcome: str | None) -> bool:
    return outcome in ("failed", "xfailed")


def cell(entry: dict | None, control: dict | None, is_control: bool) -> str:
    if entry is None:
        return "—"
    outcome, reason = entry["outcome"], entry.get("reason") or ""
    if outcome in ("passed", "xpassed"):
        return "pass"
    if outcome == "skipped":
        return f"skipped: {cell_text(reason)}"
    known = " (known)" if outcome == "xfailed" else ""
    if is_control:
        return f"fail: {cell_text(reason)}"
    if control is None or control["outcome"] == "skipped":
        return f"**FAIL**{known}: {cell_text(reason)}"
    if is_fail(control["outcome"]):
        return f"fail (Kafka too){known}: {cell_text(reason)}"
    return f"**FAIL (Sluice only)**{known}: {cell_text(reason)}"


def render(runs: list[dict]) -> str:
    control_runs = [r for r in runs if r["target"] == "kafka-baseline"]
    control = control_runs[-1] if control_runs else None
    subjects = [r for r in runs if r is not control]

    def index(run):
        return {(e["client"], e["feature"]): e for e in run["results"]}

    indexed = {id(r): index(r) for r in runs}
    ctrl = indexed[id(control)] if control else {}

    # Rows in the order the tests ran (subjects first, then anything only the control ran).
    rows: list[tuple[str, str]] = []
    seen = set()
    for r in subjects + ([control] if control else []):
        for e in r["results"]:
            key = (e["client"], e["feature"])
            if key not in seen:
                seen.add(key)
                rows.append(key)
    clients: dict[str, list[str]] = {}
    for client, feature in rows:
        clients.setdefault(client, []).append(feature)

    out = ["# Compatibility scorecard", ""]
    out.append(
        "Written by `compat/run.sh --scorecard` (`compat/scorecard.py`); do not edit by hand. "
        "Each row is one test of the compat suite (`compat/python`), labelled by client (or area) and feature; "
        "each column one run of the whole suite"
        + (f", **{control['label']}** being the control" if control else "")
        + ". The long crash tests are left out."
    )
    out.append("")
    out.append("| run | finished | broker |")
    out.append("|---|---|---|")
    for r in runs:
        broker = "Apache Kafka (`../shared/kafka-baseline`)" if r["target"] == "kafka-baseline" else (
            f"`sluice serve`, {r.get('storage') or 'local'} storage")
        out.append(f"| {r['label']} | {r.get('finished', '?')} | {broker} |")
    out.append("")
    out.append(
        "Cells: `pass`; `skipped: why` (the client has no API for it, the feature is Sluice's own, or a known "
        "limit such as transactions on Sluice and share groups in cluster mode); **FAIL (Sluice only)**: fails "
        "on Sluice and passes on Kafka, a Sluice bug; `fail (Kafka too)`: fails on both, a client or suite "
        "matter; `(known)`: a failure the suite expects (xfail) and names; `—`: not run there."
    )
    out.append("")

    # Summary.
    out.append("## Summary")
    out.append("")
    out.append("| | " + " | ".join(r["label"] for r in runs) + " |")
    out.append("|---|" + "---|" * len(runs))
    for name, test in (
        ("pass", lambda e: e["outcome"] in ("passed", "xpassed")),
        ("fail", lambda e: is_fail(e["outcome"])),
        ("skipped", lambda e: e["outcome"] == "skipped"),
    ):
        counts = [sum(1 for e in r["results"] if test(e)) for r in runs]
        out.append(f"| {name} | " + " | ".join(str(c) for c in counts) + " |")
    out.append("")

    sluice_only = []
    both = []
    not_supported = []  # skipped on Sluice, passes on Kafka: a known limit
    for r in subjects:
        for key in rows:
            e = indexed[id(r)].get(key)
            c = ctrl.get(key)
            if e is None or c is None:
                continue
            if e["outcome"] == "skipped" and c["outcome"] in ("passed", "xpassed"):
                not_supported.append((r["label"], key, e))
            if not is_fail(e["outcome"]):
                continue
            if c["outcome"] in ("passed", "xpassed"):
                sluice_only.append((r["label"], key, e))
            elif is_fail(c["outcome"]):
                both.append((r["label"], key, e))
    out.append(f"## Fails on Sluice, passes on Kafka ({len(sluice_only)})")
    out.append("")
    if not sluice_only:
        out.append("None.")
    for label, (client, feature), e in sluice_only:
        known = " (known, xfail)" if e["outcome"] == "xfailed" else ""
        out.append(f"- **{client} / {feature}** on {label}{known}: {cell_text(e.get('reason') or '', 600)}")
    out.append("")
    out.append(f"## Skipped on Sluice, passes on Kafka ({len(not_supported)})")
    out.append("")
    if not not_supported:
        out.append("None.")
    for label, (client, feature), e in not_supported:
        out.append(f"- {client} / {feature} on {label}: {cell_text(e.get('reason') or '', 300)}")
    out.append("")
    if both:
        out.append(f"## Fails on Kafka too ({len(both)})")
        out.append("")
        for label, (client, feature), e in both:
            out.append(f"- {client} / {feature} on {label}: {cell_text(e.get('reason') or '', 300)}")
        out.append("")

    # Client versions (the union of what the runs reported; they run from one checkout).
    versions: dict[str, str] = {}
    for r in runs:
        for k, v in (r.get("clients") or {}).items():
            versions.setdefault(k, v)
    out.append("## Clients")
    out.append("")
    out.append("| client | version |")
    out.append("|---|---|")
    for k, v in versions.items():
        out.append(f"| {k} | {v} |")
    out.append("")

    out.append("## Results")
    for client, features in clients.items():
        out.append("")
        out.append(f"### {client}")
        out.append("")
        out.append("| feature | " + " | ".join(r["label"] for r in runs) + " |")
        out.append("|---|" + "---|" * len(runs))
        for feature in features:
            key = (client, feature)
            cells = [cell(indexed[id(r)].get(key), ctrl.get(key), r is control) for r in runs]
            out.append(f"| {cell_text(feature, 120)} | " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "SCORECARD.md")
    ap.add_argument("results", nargs="+", type=Path)
    args = ap.parse_args(argv)
    runs = [load(p) for p in args.results]
    args.out.write_text(render(runs))
    print(f"scorecard: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
