#!/usr/bin/env python3
"""Sluice and Apache Kafka side by side, same machine, same run, same client tools.

Producer: Kafka's own ProducerPerformance (org.apache.kafka.tools, the kafka-producer-perf-test
tool) against each broker, on a fresh topic with 6 partitions per case:
  - 100 B records, acks=all, as fast as possible;
  - 1 KiB records, acks=all, as fast as possible;
  - 100 B records, acks=all, at a fixed 50,000 records/s (latency below saturation), once with
    linger.ms=5 like the other cases and once with linger.ms=0.
Consumer: Kafka's own ConsumerPerformance (the kafka-consumer-perf-test tool: one consumer in a
new consumer group, classic protocol) reading the 100 B topic from the beginning to its end;
then kcat (librdkafka, no group) reading it again. Sluice runs with
--group-initial-rebalance-delay-ms 0, as the Kafka baseline is configured
(group.initial.rebalance.delay.ms=0).
Broker cost: peak RSS (VmHWM) and CPU seconds (utime+stime) of the broker process per case.

Brokers alternate (Kafka, Sluice, then Sluice, Kafka, ...) and each run starts both on fresh
data directories. Results go to OUT (default target/bench-vs-kafka): one JSON line per
measurement and summary.md (min / median / max per case and broker, and the ratios).

Usage: scripts/bench-vs-kafka.sh   (environment: RUNS, N_SMALL, N_LARGE, FIXED_SECONDS, CASES, OUT)
"""

import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = Path(os.environ.get("KAFKA_BASELINE_DIR", REPO.parent / "shared" / "kafka-baseline"))
KB_LIB = Path(os.environ["KB_LIB"])
SLUICE_BIN = Path(os.environ.get("SLUICE_BIN", REPO / "target" / "release" / "sluice"))
OUT = Path(os.environ.get("OUT", REPO / "target" / "bench-vs-kafka"))
RUNS = int(os.environ.get("RUNS", "3"))
N_SMALL = int(os.environ.get("N_SMALL", "3000000"))
N_LARGE = int(os.environ.get("N_LARGE", "1000000"))
FIXED_RATE = 50_000
FIXED_SECONDS = int(os.environ.get("FIXED_SECONDS", "20"))
# CASES: a comma-separated subset of the case names to run ("consume" runs both consume cases
# and needs produce-100B-acksall); all by default.
ONLY = {c for c in os.environ.get("CASES", "").split(",") if c}
PARTITIONS = 6
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOOL_JVM = ["-Xmx512m", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={BASELINE}/config/tools-log4j2.xml"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_cpu_seconds():
    """CPU seconds (user + system) of every child process this script has waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def steal_ticks():
    """(steal, all) ticks of the whole machine from /proc/stat: time the hypervisor ran something
    else while this VM wanted the CPU."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7], sum(fields[:8])


def tool(cls, *args, timeout=900):
    cmd = ["java", *TOOL_JVM, "-cp", f"{KB_LIB}/*", cls, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class Kafka:
    name = "kafka"

    def produce_histogram(self):
        return None

    def start(self):
        self.home = Path(tempfile.mkdtemp(prefix="bench-kafka-", dir=REPO / "target"))
        self.port = free_port()
        env = dict(os.environ, KB_HOME=str(self.home), KB_LIB=str(KB_LIB), KAFKA_PORT=str(self.port),
                   KAFKA_CONTROLLER_PORT=str(free_port()))
        self.env = env
        subprocess.run([str(BASELINE / "start.sh"), "--fresh"], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        self.pid = int((self.home / "kafka.pid").read_text().strip())

    def stop(self):
        subprocess.run([str(BASELINE / "stop.sh"), "--clean"], env=self.env, stdout=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(self.home, ignore_errors=True)


class Sluice:
    name = "sluice"

    def start(self):
        self.home = Path(tempfile.mkdtemp(prefix="bench-sluice-", dir=REPO / "target"))
        self.port = free_port()
        self.http_port = free_port()
        self.log = open(self.home / "sluice.log", "w")
        self.proc = subprocess.Popen(
            [str(SLUICE_BIN), "serve", "--data-dir", str(self.home / "data"),
             "--kafka-addr", f"127.0.0.1:{self.port}", "--http-addr", f"127.0.0.1:{self.http_port}",
             "--group-initial-rebalance-delay-ms", "0"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        deadline = time.time() + 30
        while "kafka listening on" not in (self.home / "sluice.log").read_text():
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("sluice did not start: " + (self.home / "sluice.log").read_text())
            time.sleep(0.05)

    def produce_histogram(self):
        """Cumulative (le seconds, count) buckets of the Produce request-duration histogram."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10).read().decode()
        buckets = []
        for line in text.splitlines():
            m = re.match(r'sluice_kafka_request_duration_seconds_bucket\{api="Produce",le="([^"]+)"\} (\d+)', line)
            if m:
                buckets.append((float(m.group(1)), int(m.group(2))))
        return buckets or None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


PERF_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def produce(broker, topic, n, size, rate, linger_ms=5):
    bootstrap = f"127.0.0.1:{broker.port}"
    r = tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create",
             "--topic", topic, "--partitions", str(PARTITIONS), "--replication-factor", "1")
    if r.returncode != 0:
        raise RuntimeError(f"create {topic}: {r.stderr}")
    subprocess.run(["sync"])
    cpu0 = cpu_seconds(broker.pid)
    hist0 = broker.produce_histogram()
    client0 = children_cpu_seconds()
    steal0, all0 = steal_ticks()
    t0 = time.time()
    r = tool("org.apache.kafka.tools.ProducerPerformance", "--bootstrap-server", bootstrap,
             "--topic", topic, "--num-records", str(n), "--record-size", str(size),
             "--throughput", str(rate), "--command-property", "acks=all", f"linger.ms={linger_ms}")
    wall = time.time() - t0
    cpu = cpu_seconds(broker.pid) - cpu0
    client = children_cpu_seconds() - client0
    steal1, all1 = steal_ticks()
    hist1 = broker.produce_histogram()
    m = PERF_LINE.search(r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"ProducerPerformance on {broker.name}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    g = m.groups()
    return {"records": int(g[0]), "records_per_s": float(g[1]), "mb_per_s": float(g[2]),
            "avg_ms": float(g[3]), "max_ms": float(g[4]), "p50_ms": int(g[5]), "p95_ms": int(g[6]),
            "p99_ms": int(g[7]), "p999_ms": int(g[8]), "broker_cpu_s": round(cpu, 2),
            "client_cpu_s": round(client, 2), "wall_s": round(wall, 1),
            "steal_pct": round(100 * (steal1 - steal0) / max(all1 - all0, 1), 1),
            **broker_side_latency(hist0, hist1)}


def broker_side_latency(before, after):
    """The broker's own Produce handling time (Sluice's sluice_kafka_request_duration_seconds:
    from decoding a request to having its response encoded, fdatasync included) over one case,
    as the upper bounds of the histogram buckets holding p50 / p99 / p99.9, in ms."""
    if before is None or after is None:
        return {}
    counts = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = counts[-1][1]
    if total == 0:
        return {}
    out = {"broker_requests": total}
    for name, q in (("broker_p50_ms", 0.5), ("broker_p99_ms", 0.99), ("broker_p999_ms", 0.999)):
        le = next(le for le, c in counts if c >= q * total)
        out[name] = le * 1000
    return out


def consume_perf(broker, topic, expected):
    """ConsumerPerformance: records/s over the whole run and over fetching alone (without the
    group join, which the tool reports separately)."""
    subprocess.run(["sync"])
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.time()
    r = tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", f"127.0.0.1:{broker.port}",
             "--topic", topic, "--messages", str(expected), "--timeout", "60000",
             "--group", f"perf-{broker.name}-{int(t0)}")
    wall = time.time() - t0
    # Header: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    values = None
    for line in r.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 10 and re.fullmatch(r"[\d.]+", fields[4] or "x"):
            values = fields
    if r.returncode != 0 or values is None or int(values[4]) < expected:
        raise RuntimeError(f"ConsumerPerformance on {broker.name}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return {"records": int(values[4]), "records_per_s": round(float(values[5])),
            "mb_per_s": float(values[3]), "rebalance_ms": int(float(values[6])),
            "fetch_records_per_s": round(float(values[9])),
            "broker_cpu_s": round(cpu_seconds(broker.pid) - cpu0, 2), "wall_s": round(wall, 2)}


def consume(broker, topic, expected):
    subprocess.run(["sync"])
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.time()
    r = subprocess.run(["kcat", "-b", f"127.0.0.1:{broker.port}", "-C", "-t", topic, "-o", "beginning",
                        "-e", "-q", "-f", "\n"], capture_output=True, timeout=600)
    wall = time.time() - t0
    count = r.stdout.count(b"\n")
    if r.returncode != 0 or count != expected:
        raise RuntimeError(f"kcat on {broker.name}: {count} of {expected} records: {r.stderr[-500:]}")
    return {"records": count, "records_per_s": round(count / wall), "broker_cpu_s":
            round(cpu_seconds(broker.pid) - cpu0, 2), "wall_s": round(wall, 2)}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    results = OUT / "results.jsonl"
    results.unlink(missing_ok=True)
    cases = [
        ("produce-100B-acksall", N_SMALL, 100, -1, 5),
        ("produce-1KiB-acksall", N_LARGE, 1024, -1, 5),
        ("produce-100B-acksall-50k/s", FIXED_RATE * FIXED_SECONDS, 100, FIXED_RATE, 5),
        # The same without the producer's own linger: with linger.ms=5 every record may wait up
        # to 5 ms in the client before it is sent, which puts a floor of about 5 ms under the p99
        # of any broker.
        ("produce-100B-acksall-50k/s-linger0", FIXED_RATE * FIXED_SECONDS, 100, FIXED_RATE, 0),
    ]
    if ONLY:
        cases = [c for c in cases if c[0] in ONLY]
    for run in range(1, RUNS + 1):
        order = [Kafka(), Sluice()] if run % 2 else [Sluice(), Kafka()]
        for broker in order:
            print(f"== run {run}: {broker.name}", file=sys.stderr, flush=True)
            broker.start()
            try:
                # Unrecorded warm-up (JIT for Kafka and the tool, page cache for both).
                produce(broker, "warmup", 1_000_000, 100, -1)
                for case, n, size, rate, linger_ms in cases:
                    r = produce(broker, f"t-{size}-{rate}-{linger_ms}", n, size, rate, linger_ms)
                    r.update(run=run, broker=broker.name, case=case, peak_rss_mib=round(peak_rss_mib(broker.pid)))
                    print(json.dumps(r), file=sys.stderr, flush=True)
                    with results.open("a") as f:
                        f.write(json.dumps(r) + "\n")
                if ONLY and "consume" not in ONLY:
                    continue
                r = consume_perf(broker, "t-100--1-5", N_SMALL)
                r.update(run=run, broker=broker.name, case="consume-100B-perf", peak_rss_mib=round(peak_rss_mib(broker.pid)))
                print(json.dumps(r), file=sys.stderr, flush=True)
                with results.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                r = consume(broker, "t-100--1-5", N_SMALL)
                r.update(run=run, broker=broker.name, case="consume-100B-kcat", peak_rss_mib=round(peak_rss_mib(broker.pid)))
                print(json.dumps(r), file=sys.stderr, flush=True)
                with results.open("a") as f:
                    f.write(json.dumps(r) + "\n")
            finally:
                broker.stop()
    summarize(results)


def summarize(results):
    rows = [json.loads(l) for l in results.read_text().splitlines()]
    def mmm(xs, fmt="{:,.0f}"):
        xs = sorted(xs)
        return " / ".join(fmt.format(x) for x in (xs[0], statistics.median(xs), xs[-1]))
    def med(case, broker, key):
        return statistics.median(r[key] for r in rows if r["case"] == case and r["broker"] == broker)
    lines = [f"runs: {RUNS}; min / median / max", "",
             "| case | broker | records/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms | broker CPU s | client CPU s | steal % | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for case in dict.fromkeys(r["case"] for r in rows):
        for broker in ("kafka", "sluice"):
            rs = [r for r in rows if r["case"] == case and r["broker"] == broker]
            if not rs:
                continue
            get = lambda k, fmt="{:,.0f}": mmm([r[k] for r in rs], fmt) if k in rs[0] else "-"
            lines.append(f"| {case} | {broker} | {get('records_per_s')} | {get('mb_per_s', '{:.1f}')} | "
                         f"{get('p50_ms')} | {get('p99_ms')} | {get('p999_ms')} | {get('max_ms')} | "
                         f"{get('broker_cpu_s', '{:.1f}')} | {get('client_cpu_s', '{:.1f}')} | {get('steal_pct', '{:.1f}')} | "
                         f"{get('peak_rss_mib')} |")
    lines += ["", "Ratios, Sluice / Kafka, of the medians:", ""]
    for case in dict.fromkeys(r["case"] for r in rows):
        k = {key: med(case, "kafka", key) for key in ("records_per_s", "broker_cpu_s", "peak_rss_mib")}
        s = {key: med(case, "sluice", key) for key in ("records_per_s", "broker_cpu_s", "peak_rss_mib")}
        extra = ""
        if "p99_ms" in rows[0] and case.startswith("produce"):
            kp, sp = med(case, "kafka", "p99_ms"), med(case, "sluice", "p99_ms")
            extra = f", p99 {sp} ms vs {kp} ms"
        if "fetch_records_per_s" in next(r for r in rows if r["case"] == case):
            kf, sf = med(case, "kafka", "fetch_records_per_s"), med(case, "sluice", "fetch_records_per_s")
            kr, sr = med(case, "kafka", "rebalance_ms"), med(case, "sluice", "rebalance_ms")
            extra = (f", fetch-only throughput {sf / kf:.2f}x ({sf:,.0f} vs {kf:,.0f} records/s),"
                     f" group join {sr:.0f} ms vs {kr:.0f} ms")
        lines.append(f"- {case}: throughput {s['records_per_s'] / k['records_per_s']:.2f}x, broker CPU "
                     f"{s['broker_cpu_s'] / max(k['broker_cpu_s'], 0.01):.2f}x, peak RSS "
                     f"{s['peak_rss_mib'] / k['peak_rss_mib']:.2f}x{extra}")
    lines += ["", "CPU per million records (medians; client = the ProducerPerformance JVM), and the",
              "highest Sluice / Kafka throughput ratio possible if Sluice's broker used no CPU at all",
              "and both runs had the same CPU to spend: (client + broker for Kafka) / client for Sluice:", ""]
    for case in dict.fromkeys(r["case"] for r in rows):
        if not case.startswith("produce") or "/s" in case or "client_cpu_s" not in rows[0]:
            continue
        per = {}
        for b in ("kafka", "sluice"):
            rs = [r for r in rows if r["case"] == case and r["broker"] == b]
            per[b] = (statistics.median(1e6 * r["client_cpu_s"] / r["records"] for r in rs),
                      statistics.median(1e6 * r["broker_cpu_s"] / r["records"] for r in rs))
        (kc, kb), (sc, sb) = per["kafka"], per["sluice"]
        lines.append(f"- {case}: Kafka client {kc:.1f} s + broker {kb:.1f} s; Sluice client {sc:.1f} s + "
                     f"broker {sb:.1f} s; ceiling {(kc + kb) / sc:.2f}x, at Sluice's own broker cost "
                     f"{(kc + kb) / (sc + sb):.2f}x")
    lines += ["", "Sluice's own Produce handling time (decode to encoded response, fdatasync included; upper",
              "bounds of its /metrics histogram buckets) next to what the producer saw, per run:", ""]
    for r in rows:
        if "broker_p99_ms" in r:
            lines.append(f"- {r['case']}, run {r['run']}: broker p50 / p99 / p99.9 <= {r['broker_p50_ms']:g} / "
                         f"{r['broker_p99_ms']:g} / {r['broker_p999_ms']:g} ms over {r['broker_requests']:,} "
                         f"requests; producer p50 / p99 / p99.9 {r['p50_ms']} / {r['p99_ms']} / {r['p999_ms']} ms")
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    # Stop the brokers this script started (the `finally` in main) on SIGTERM or SIGINT, even
    # when started in the background, where SIGINT is ignored by default.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        summarize(OUT / "results.jsonl")
    else:
        main()
