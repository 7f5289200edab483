//! Object-storage mode's series in `/metrics` (Prometheus text format 0.0.4), appended after
//! the broker's own by the HTTP API: PUTs and their outcomes, objects committed and given up,
//! what waits to be written, the read caches and their GETs, and the writer lease.

use std::fmt::Write;

use crate::backend::ObjectBackend;
use crate::lease::LeaseStatus;

/// One family: HELP, TYPE and one unlabelled sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// The series of `backend`, as Prometheus text.
pub fn render(backend: &ObjectBackend) -> String {
    let mut out = String::with_capacity(4096);
    render_flush_and_cache(
        &mut out,
        &backend.flusher().stats(),
        &backend.cache().stats(),
    );
    render_maintenance_and_lease(&mut out, backend);
    out
}

/// The flusher's and the read cache's series (shared with cluster mode, whose brokers run
/// both too).
pub fn render_flush_and_cache(
    out: &mut String,
    f: &crate::flush::FlushStats,
    c: &crate::cache::CacheStats,
) {
    let o = out;
    single(
        o,
        "sluice_object_puts_total",
        "counter",
        "PUT attempts of flush objects, retries included.",
        f.puts,
    );
    single(
        o,
        "sluice_object_put_errors_total",
        "counter",
        "PUT attempts that failed or got no answer in time.",
        f.put_errors,
    );
    single(
        o,
        "sluice_object_put_retries_total",
        "counter",
        "PUT attempts that were retries.",
        f.retries,
    );
    single(
        o,
        "sluice_object_put_bytes_total",
        "counter",
        "Bytes of the flush objects written.",
        f.bytes_put,
    );
    single(
        o,
        "sluice_objects_committed_total",
        "counter",
        "Flush objects written (their produce requests acknowledged).",
        f.objects_committed,
    );
    single(
        o,
        "sluice_objects_abandoned_total",
        "counter",
        "Flush objects given up (their produce requests failed with a retriable error).",
        f.objects_abandoned,
    );
    single(
        o,
        "sluice_object_put_last_seconds",
        "gauge",
        "Duration of the last successful PUT.",
        f.put_latency_last.as_secs_f64(),
    );
    single(
        o,
        "sluice_object_put_max_seconds",
        "gauge",
        "Duration of the slowest successful PUT since start.",
        f.put_latency_max.as_secs_f64(),
    );
    single(
        o,
        "sluice_object_open_bytes",
        "gauge",
        "Bytes in the flush object being filled.",
        f.open_bytes,
    );
    single(
        o,
        "sluice_object_sealed_waiting",
        "gauge",
        "Sealed flush objects waiting for a PUT slot.",
        f.sealed_waiting,
    );
    single(
        o,
        "sluice_object_puts_in_flight",
        "gauge",
        "Flush objects being written (or written and waiting for an earlier one).",
        f.in_flight,
    );
    single(
        o,
        "sluice_object_cache_memory_bytes",
        "gauge",
        "Bytes of recent objects (and loaded ranges) held in memory for readers.",
        c.memory_bytes,
    );
    single(
        o,
        "sluice_object_cache_disk_bytes",
        "gauge",
        "Bytes of the range cache on local disk.",
        c.disk_bytes,
    );
    single(
        o,
        "sluice_object_cache_hits_memory_total",
        "counter",
        "Reads served from recent objects in memory.",
        c.hits_memory,
    );
    single(
        o,
        "sluice_object_cache_hits_disk_total",
        "counter",
        "Reads served from the range cache on local disk.",
        c.hits_disk,
    );
    single(
        o,
        "sluice_object_cache_misses_total",
        "counter",
        "Reads whose bytes were in no cache (a GET follows).",
        c.misses,
    );
    single(
        o,
        "sluice_object_gets_total",
        "counter",
        "Ranged GETs started (concurrent reads of one range share one).",
        c.gets,
    );
    single(
        o,
        "sluice_object_get_bytes_total",
        "counter",
        "Bytes received by GETs.",
        c.get_bytes,
    );
    single(
        o,
        "sluice_object_get_joins_total",
        "counter",
        "Reads that joined a GET already under way.",
        c.single_flight_joins,
    );
}

/// The maintenance task's and the writer lease's series (single-broker object mode only).
fn render_maintenance_and_lease(o: &mut String, backend: &ObjectBackend) {
    let m = backend.maintenance_stats();
    single(
        o,
        "sluice_object_checkpoints_written_total",
        "counter",
        "Checkpoint objects written (they bound what a rebuild reads).",
        m.checkpoints_written,
    );
    single(
        o,
        "sluice_object_deletes_total",
        "counter",
        "Objects deleted from the bucket by the cleaner.",
        m.objects_deleted,
    );
    single(
        o,
        "sluice_object_compactions_total",
        "counter",
        "Compactions done (runs of one partition merged into one object).",
        m.compactions,
    );
    single(
        o,
        "sluice_object_runs_compacted_total",
        "counter",
        "Runs merged by compactions.",
        m.runs_compacted,
    );
    single(
        o,
        "sluice_object_maintenance_errors_total",
        "counter",
        "Maintenance steps that failed (tried again next round).",
        m.errors,
    );
    let (writable, epoch) = match &backend.lease_status() {
        LeaseStatus::Held {
            epoch,
            valid_until_ms,
            ..
        } => (u8::from(backend.now_ms() < *valid_until_ms), epoch.0),
        LeaseStatus::Lost(_) | LeaseStatus::Released => (0, 0),
    };
    single(
        o,
        "sluice_object_writer_lease_writable",
        "gauge",
        "1 while this broker holds the writer lease and may acknowledge writes.",
        writable,
    );
    single(
        o,
        "sluice_object_writer_epoch",
        "gauge",
        "The writer lease's epoch (fencing generation) held.",
        epoch,
    );
}
