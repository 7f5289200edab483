#!/usr/bin/env python3
"""Summary of scripts/bench-tls.sh: SASL_SSL against PLAINTEXT, Sluice and Apache Kafka.

Reads the manifest the script writes (one line per `sluice bench` campaign: round, broker,
protocol, case, results directory) and each campaign.json, and prints Markdown:

1. per configuration (broker x protocol), min / median / max over the rounds of: closed-loop
   produce throughput with the broker's CPU seconds per million records (and the client's),
   consume throughput (draining a backlog) with the broker's CPU per million, and the ack and
   e2e p99 at the fixed rate;
2. the ratios, each computed within one round (the four configurations of a round ran minutes
   apart; rounds ran up to half an hour apart) and then min / median / max over the rounds:
   SASL_SSL / PLAINTEXT per broker, Sluice / Kafka per protocol, and Sluice's lead with TLS over
   its lead without;
3. the two targets of the security issue, met or not.

Usage: scripts/bench_tls.py OUT/manifest.tsv
"""

import json
import statistics
import sys
from pathlib import Path

BROKERS = ["sluice", "kafka"]
PROTOCOLS = ["PLAINTEXT", "SASL_SSL"]
PRODUCE, FIXED, DRAIN = "tls-produce-max", "tls-fixed-20mbps", "tls-drain-2gib"
STEAL_KEYS = ("produce_steal", "fixed_steal", "drain_steal")


def per_m(cpu_s, records):
    if cpu_s is None or not records:
        return None
    return cpu_s / (records / 1e6)


def measure_steal(run):
    steal = [i.get("steal", 0.0) for i in run["intervals"] if i["phase"] in ("measure", "fill", "drain")]
    return max(steal) if steal else None


def numbers(case, run):
    """The numbers of one repeat that the tables use, by name."""
    t = run["totals"]
    if case == PRODUCE:
        return {
            "produce_rps": run["produce_rps"],
            "produce_mbps": run["produce_mbps"],
            "produce_broker_cpu": per_m(run.get("broker_cpu_s"), t["acked_records"]),
            "produce_client_cpu": per_m(run["generator_cpu_s"], t["acked_records"]),
            "produce_steal": measure_steal(run),
        }
    if case == FIXED:
        return {
            "ack_p50": run["ack_latency"]["p50_ms"],
            "ack_p99": run["ack_latency"]["p99_ms"],
            "e2e_p99": run["e2e_latency"]["p99_ms"],
            "fixed_rps": run["produce_rps"],
            "fixed_broker_cpu": per_m(run.get("broker_cpu_s"), t["acked_records"]),
            "fixed_steal": measure_steal(run),
        }
    if case == DRAIN:
        d = run["drain"]
        return {
            "consume_rps": run["consume_rps"],
            "consume_mbps": run["consume_mbps"],
            "consume_broker_cpu": per_m(d.get("drain_broker_cpu_s"), t["consumed_records"]),
            "consume_client_cpu": per_m(d.get("drain_generator_cpu_s"), t["consumed_records"]),
            "fill_rps": run["produce_rps"],
            "fill_broker_cpu": per_m(d.get("fill_broker_cpu_s"), d["backlog_records"]),
            "drain_s": d["drain_s"],
            "drain_steal": measure_steal(run),
        }
    return {}


def load(manifest):
    """{(round, broker, protocol): {name: value}}, and the notes on what is missing."""
    cells, notes, saturated = {}, [], []
    for line in Path(manifest).read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 5:
            continue
        rnd, broker, protocol, case, directory = parts[:5]
        path = Path(directory) / "campaign.json"
        if not directory or not path.exists():
            notes.append(f"round {rnd} {broker} {protocol} {case}: no results (the case failed)")
            continue
        campaign = json.loads(path.read_text())
        repeats = [r for p in campaign["points"] for r in p["repeats"]]
        if not repeats:
            notes.append(f"round {rnd} {broker} {protocol} {case}: no finished repeat")
            continue
        run = repeats[0]
        if run.get("generator_saturated"):
            saturated.append(f"round {rnd} {broker} {protocol} {case}")
        cells.setdefault((int(rnd), broker, protocol), {}).update(numbers(case, run))
    return cells, notes, saturated


def spread(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return values[0], statistics.median(values), values[-1]


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_spread(s, ratio=False):
    if s is None:
        return "-"
    f = (lambda v: f"{v:.2f}") if ratio else fmt
    return f"{f(s[0])} / **{f(s[1])}** / {f(s[2])}"


def main():
    cells, notes, saturated = load(sys.argv[1])
    rounds = sorted({r for (r, _, _) in cells})
    out = []
    out.append(f"Rounds: {len(rounds)}. Each cell: min / **median** / max over the rounds.\n")
    columns = [
        ("produce rec/s", "produce_rps"),
        ("produce MB/s", "produce_mbps"),
        ("broker CPU s/M produced", "produce_broker_cpu"),
        ("client CPU s/M produced", "produce_client_cpu"),
        ("consume rec/s", "consume_rps"),
        ("consume MB/s", "consume_mbps"),
        ("broker CPU s/M consumed", "consume_broker_cpu"),
        ("client CPU s/M consumed", "consume_client_cpu"),
        ("ack p99 ms at 20 MB/s", "ack_p99"),
        ("e2e p99 ms at 20 MB/s", "e2e_p99"),
    ]
    out.append("| broker | protocol | " + " | ".join(c for c, _ in columns) + " |")
    out.append("|---|---|" + "---|" * len(columns))
    for broker in BROKERS:
        for protocol in PROTOCOLS:
            row = [broker, protocol]
            for _, key in columns:
                row.append(fmt_spread(spread(cells.get((r, broker, protocol), {}).get(key) for r in rounds)))
            out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append("Also measured (min / median / max):\n")
    for broker in BROKERS:
        for protocol in PROTOCOLS:
            def get(key):
                return spread(cells.get((r, broker, protocol), {}).get(key) for r in rounds)

            steal = spread(
                100 * max(cells.get((r, broker, protocol), {}).get(k) or 0.0 for k in STEAL_KEYS)
                for r in rounds
            )
            out.append(
                f"- {broker} {protocol}: ack p50 at 20 MB/s {fmt_spread(get('ack_p50'))} ms; "
                f"broker CPU s/M at 20 MB/s (consumers reading along) {fmt_spread(get('fixed_broker_cpu'))}; "
                f"backlog fill rec/s {fmt_spread(get('fill_rps'))}, broker CPU s/M {fmt_spread(get('fill_broker_cpu'))}; "
                f"drain s {fmt_spread(get('drain_s'))}; largest steal of a 1 s interval {fmt_spread(steal)} %"
            )
    out.append("")

    def ratio(r, num, den, key, invert=False):
        a = cells.get((r,) + num, {}).get(key)
        b = cells.get((r,) + den, {}).get(key)
        if not a or not b:
            return None
        return b / a if invert else a / b

    metrics = [
        ("produce throughput", "produce_rps", False),
        ("consume throughput", "consume_rps", False),
        ("ack p99 at 20 MB/s (lower is better; ratios read as 'times lower')", "ack_p99", True),
        ("broker CPU s per M produced", "produce_broker_cpu", False),
        ("broker CPU s per M consumed", "consume_broker_cpu", False),
    ]
    out.append("Ratios, each within one round, then min / **median** / max over the rounds:\n")
    out.append("| number | Sluice SASL_SSL / PLAINTEXT | Kafka SASL_SSL / PLAINTEXT | Sluice / Kafka, PLAINTEXT | Sluice / Kafka, SASL_SSL | Sluice's lead, SASL_SSL / PLAINTEXT |")
    out.append("|---|---|---|---|---|---|")
    judged = {}
    for title, key, lower_better in metrics:
        cost = {}
        for broker in BROKERS:
            # TLS over plaintext as the raw ratio (throughput: < 1 is a cost; p99: > 1 is a cost).
            cost[broker] = spread(ratio(r, (broker, "SASL_SSL"), (broker, "PLAINTEXT"), key) for r in rounds)
        lead = {}
        for protocol in PROTOCOLS:
            # Sluice's lead: throughput Sluice / Kafka; latency Kafka / Sluice (how many times lower).
            lead[protocol] = [ratio(r, ("sluice", protocol), ("kafka", protocol), key, invert=lower_better) for r in rounds]
        lead_change = spread(
            (t / p) if (t and p) else None for t, p in zip(lead["SASL_SSL"], lead["PLAINTEXT"])
        )
        if "CPU" in title:
            # For CPU per record, lower is better too: Sluice / Kafka as is, no lead column.
            lead_change = None
        judged[key] = (cost, {p: spread(v) for p, v in lead.items()}, lead_change)
        out.append(
            f"| {title} | {fmt_spread(cost['sluice'], True)} | {fmt_spread(cost['kafka'], True)} | "
            f"{fmt_spread(spread(lead['PLAINTEXT']), True)} | {fmt_spread(spread(lead['SASL_SSL']), True)} | "
            f"{fmt_spread(lead_change, True)} |"
        )
    out.append("")
    out.append("Targets (judged on the medians of the per-round ratios):\n")
    for key, name in [("produce_rps", "produce"), ("consume_rps", "consume")]:
        cost = judged[key][0]["sluice"]
        if cost:
            met = "met" if cost[1] >= 0.80 else "NOT met"
            out.append(
                f"- TLS costs Sluice at most 20% of its plaintext {name} throughput: Sluice keeps "
                f"{cost[1] * 100:.0f}% (rounds {cost[0] * 100:.0f}-{cost[2] * 100:.0f}%): **{met}**"
            )
    for key, name in [("produce_rps", "produce throughput"), ("consume_rps", "consume throughput"), ("ack_p99", "fixed-rate ack p99")]:
        _, lead, change = judged[key]
        if change and lead["PLAINTEXT"] and lead["SASL_SSL"]:
            met = "met" if change[1] >= 1.0 else "NOT met"
            out.append(
                f"- Sluice's lead over Kafka at least as large with TLS ({name}): "
                f"{lead['SASL_SSL'][1]:.2f}x with SASL_SSL against {lead['PLAINTEXT'][1]:.2f}x with PLAINTEXT "
                f"(per round, SASL_SSL lead / PLAINTEXT lead {change[0]:.2f}-{change[2]:.2f}, median {change[1]:.2f}): **{met}**"
            )
    if saturated:
        out.append("\nLoad generator marked saturated in: " + "; ".join(saturated))
    if notes:
        out.append("\nMissing: " + "; ".join(notes))
    print("\n".join(out))


if __name__ == "__main__":
    main()
