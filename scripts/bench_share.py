#!/usr/bin/env python3
"""Helper of scripts/bench-share.sh: share groups on Sluice (fair, greedy) and Apache Kafka.

  bench_share.py variant TARGET IN.toml OUT.toml
      Writes the copy of a share workload that TARGET runs: for `sluice-greedy`,
      `policy = "greedy"` added to its [share] table (Kafka refuses the config, Sluice's default
      is fair); for `sluice-fair-64k`, a diagnostic, `max_bytes = 65536` (ShareFetch responses
      of at most 64 KiB instead of the Java client's default 50 MiB); for
      `sluice-record-limit`, `acquire_mode = "record_limit"` (KIP-1206: at most max.poll.records
      per fetch) in place of the workload's `batch_optimized`.

  bench_share.py summary OUT/manifest.tsv
      Reads the manifest (one line per `sluice bench drain` campaign: round, target, case,
      results directory) and each campaign.json, and prints Markdown:
      1. per case and target, min / median / max over the rounds of: msg/s (and its share of
         the theoretical max, consumers x 1000 / ms per record), records per consumer
         (min / median / max within each run), Jain's fairness index, idle consumers, the
         broker's and the client's CPU seconds per million records, ShareFetch round trips,
         errors, and for a kill case the redelivery time;
      2. Sluice / Kafka ratios of msg/s and broker CPU per million, computed within each round
         and then min / median / max over the rounds;
      3. the target: Sluice (fair) at >= 90% of the theoretical max.
"""

import json
import re
import statistics
import sys
from pathlib import Path

TARGETS = ["sluice-fair", "sluice-record-limit", "sluice-greedy", "kafka", "sluice-fair-64k"]
TARGET_SHARE_OF_MAX = 0.90
# What each target adds to the workload's [share] table.
VARIANTS = {
    "sluice-greedy": ("policy", '"greedy"'),
    "sluice-record-limit": ("acquire_mode", '"record_limit"'),
    "sluice-fair-64k": ("max_bytes", "65536"),
}


def variant(target, src, dst):
    key, value = VARIANTS[target]
    text = Path(src).read_text()
    if not re.search(r"^\[share\]\s*$", text, re.M):
        sys.exit(f"{src} has no [share] table")
    # A key the workload sets is replaced; otherwise it is added to the [share] table.
    text, n = re.subn(rf"^(\s*){key}\s*=.*$", rf"\g<1>{key} = {value}", text, count=1, flags=re.M)
    if n == 0:
        text = re.sub(r"^\[share\]\s*$", f"[share]\n{key} = {value}", text, count=1, flags=re.M)
    suffix = target.removeprefix("sluice-")
    text = re.sub(r'^name = "([^"]*)"', rf'name = "\1-{suffix}"', text, count=1, flags=re.M)
    Path(dst).write_text(text)


def per_m(cpu_s, records):
    if cpu_s is None or not records:
        return None
    return cpu_s / (records / 1e6)


def numbers(run):
    """The numbers of one repeat that the tables use, by name."""
    s = run.get("share") or {}
    d = run.get("drain") or {}
    spread = s.get("per_consumer_spread") or {}
    workload_ms = s.get("processing_ms_per_record") or 0
    theoretical = s["consumers"] * 1000.0 / workload_ms if workload_ms else None
    kill = s.get("kill") or {}
    steal = [i.get("steal", 0.0) for i in run["intervals"] if i["phase"] == "share"]
    return {
        "rps": s.get("rps"),
        "of_max": (s["rps"] / theoretical) if theoretical else None,
        "theoretical": theoretical,
        "c_min": spread.get("min"),
        "c_median": spread.get("median"),
        "c_max": spread.get("max"),
        "jain": s.get("jain_index"),
        "idle": s.get("idle_consumers"),
        "broker_cpu": per_m(d.get("drain_broker_cpu_s"), s.get("records")),
        "client_cpu": per_m(d.get("drain_generator_cpu_s"), s.get("records")),
        "fill_broker_cpu": per_m(d.get("fill_broker_cpu_s"), d.get("backlog_records")),
        "fetch_p50": (s.get("fetch_latency_acquired") or {}).get("p50_ms"),
        "fetch_p99": (s.get("fetch_latency_acquired") or {}).get("p99_ms"),
        "bytes_per_record": (s["fetched_bytes"] / s["acquired_records"])
        if s.get("fetched_bytes") is not None and s.get("acquired_records")
        else None,
        "errors": s.get("errors"),
        "error_kinds": s.get("error_counts") or {},
        "redelivered": s.get("redelivered_records"),
        "kill_held": kill.get("held_records"),
        "kill_first": kill.get("first_redelivery_s"),
        "kill_all": kill.get("redelivery_s"),
        "kill_back": kill.get("redelivered_records"),
        "lock_ms": s.get("lock_timeout_ms"),
        "exhausted": s.get("backlog_exhausted"),
        "steal": max(steal) * 100 if steal else None,
    }


def load(manifest):
    """{(case, round, target): numbers}, and notes on what is missing."""
    cells, notes = {}, []
    for line in Path(manifest).read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 4:
            continue
        rnd, target, case, directory = parts[:4]
        path = Path(directory) / "campaign.json"
        if not directory or not path.exists():
            notes.append(f"round {rnd} {target} {case}: no results (the run failed)")
            continue
        campaign = json.loads(path.read_text())
        repeats = [r for p in campaign["points"] for r in p["repeats"]]
        if not repeats or not repeats[0].get("share"):
            notes.append(f"round {rnd} {target} {case}: no finished repeat")
            continue
        cells[(case, int(rnd), target)] = numbers(repeats[0])
    return cells, notes


def spread(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return values[0], statistics.median(values), values[-1]


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e4:
        return f"{v / 1e3:.1f}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_spread(s, f=fmt):
    if s is None:
        return "-"
    if f(s[0]) == f(s[2]):
        return f"**{f(s[1])}**"
    return f"{f(s[0])} / **{f(s[1])}** / {f(s[2])}"


def pct(v):
    return f"{v * 100:.0f}%"


def main_summary(manifest):
    cells, notes = load(manifest)
    cases = sorted({c for (c, _, _) in cells})
    out = []
    for case in cases:
        rounds = sorted({r for (c, r, _) in cells if c == case})
        targets = [t for t in TARGETS if any((case, r, t) in cells for r in rounds)]

        def get(target, key):
            return spread(cells.get((case, r, target), {}).get(key) for r in rounds)

        theoretical = next(
            (v["theoretical"] for (c, _, _), v in cells.items() if c == case and v["theoretical"]), None
        )
        out.append(f"### {case}\n")
        out.append(
            f"Rounds: {len(rounds)}. Each cell: min / **median** / max over the rounds"
            + (f"; theoretical max {theoretical:,.0f} msg/s." if theoretical else ".")
            + "\n"
        )
        columns = [
            ("msg/s", "rps", fmt),
            ("of max", "of_max", pct),
            ("rec/consumer min", "c_min", fmt),
            ("rec/consumer median", "c_median", fmt),
            ("rec/consumer max", "c_max", fmt),
            ("Jain", "jain", lambda v: f"{v:.3f}"),
            ("idle consumers", "idle", lambda v: f"{v:.0f}"),
            ("broker CPU s/M", "broker_cpu", fmt),
            ("client CPU s/M", "client_cpu", fmt),
            ("fetch p50 ms", "fetch_p50", fmt),
            ("fetch p99 ms", "fetch_p99", fmt),
            ("bytes fetched / record", "bytes_per_record", fmt),
            ("errors", "errors", lambda v: f"{v:.0f}"),
        ]
        if any(cells.get((case, r, t), {}).get("kill_held") is not None for r in rounds for t in targets):
            columns += [
                ("killed: held", "kill_held", lambda v: f"{v:.0f}"),
                ("first back s", "kill_first", fmt),
                ("all back s", "kill_all", fmt),
            ]
        out.append("| target | " + " | ".join(c for c, _, _ in columns) + " |")
        out.append("|---|" + "---|" * len(columns))
        for target in targets:
            out.append(
                f"| {target} | " + " | ".join(fmt_spread(get(target, k), f) for _, k, f in columns) + " |"
            )
        out.append("")

        def ratio(r, a, b, key):
            x = cells.get((case, r, a), {}).get(key)
            y = cells.get((case, r, b), {}).get(key)
            return x / y if x and y else None

        out.append("Ratios within each round, then min / **median** / max over the rounds:\n")
        for a, b in [
            ("sluice-fair", "kafka"),
            ("sluice-record-limit", "kafka"),
            ("sluice-greedy", "kafka"),
            ("sluice-fair", "sluice-greedy"),
            ("sluice-fair-64k", "kafka"),
        ]:
            if a in targets and b in targets:
                rps = spread(ratio(r, a, b, "rps") for r in rounds)
                cpu = spread(ratio(r, a, b, "broker_cpu") for r in rounds)
                out.append(
                    f"- {a} / {b}: msg/s {fmt_spread(rps, lambda v: f'{v:.2f}')}x; "
                    f"broker CPU s per M records {fmt_spread(cpu, lambda v: f'{v:.2f}')}x"
                )
        out.append("")
        for target in targets:
            kinds = {}
            for r in rounds:
                for k, n in (cells.get((case, r, target), {}).get("error_kinds") or {}).items():
                    kinds[k] = kinds.get(k, 0) + n
            extra = [
                f"fill broker CPU s/M {fmt_spread(get(target, 'fill_broker_cpu'))}",
                f"records processed twice {fmt_spread(get(target, 'redelivered'))}",
                f"largest steal of an interval {fmt_spread(get(target, 'steal'))} %",
            ]
            if kinds:
                extra.append("errors: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
            exhausted = [r for r in rounds if cells.get((case, r, target), {}).get("exhausted")]
            if exhausted:
                extra.append(f"backlog ran out in round(s) {exhausted}")
            out.append(f"- {target}: " + "; ".join(extra))
        out.append("")
        for target, label in [("sluice-fair", "batch_optimized"), ("sluice-record-limit", "record_limit")]:
            fair = get(target, "of_max")
            if fair and case.startswith("share-fair"):
                met = "met" if fair[1] >= TARGET_SHARE_OF_MAX else "NOT met"
                out.append(
                    f"Target: Sluice (fair, {label}) at >= {pct(TARGET_SHARE_OF_MAX)} of the theoretical "
                    f"max: median {pct(fair[1])} (rounds {pct(fair[0])}-{pct(fair[2])}): **{met}**\n"
                )
    if notes:
        out.append("Missing: " + "; ".join(notes))
    print("\n".join(out))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "variant" and sys.argv[2] in VARIANTS:
        variant(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        main_summary(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
