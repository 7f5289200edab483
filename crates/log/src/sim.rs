//! The seed runner of the power-loss simulations (`tests/simulation*.rs` of the log, the group
//! store and the broker): which seeds to run, running them on a few threads until the first
//! failure, and turning a panic inside a scenario into that seed's failure message.
//!
//! A simulation test names its own scenario (`run_one(seed)`, which builds a world from the
//! seed on a [`crate::DiskFaults::simulated`] disk) and its totals; everything here is the
//! same for all of them, so a failing seed reproduces the same way everywhere:
//! `SLUICE_SIM_SEED=N` runs that one seed, `SLUICE_SIM_SEEDS=N` runs seeds `0..N`.

use std::any::Any;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The most threads a run uses (the scenarios are CPU-bound and small).
const WORKERS_MAX: usize = 4;

/// The seeds to run: `SLUICE_SIM_SEED` alone if set, else `0..SLUICE_SIM_SEEDS`, else
/// `0..default`. A value that is not a number panics, naming the variable.
pub fn seeds_from_env(default: u64) -> Vec<u64> {
    match (env_u64("SLUICE_SIM_SEED"), env_u64("SLUICE_SIM_SEEDS")) {
        (Some(seed), _) => vec![seed],
        (None, Some(n)) => (0..n).collect(),
        (None, None) => (0..default).collect(),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

/// The message of a panic payload (`panic!` with a format or a literal).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panic".to_owned())
}

/// Runs `scenario`, turning a panic into an `Err` with its message.
pub fn catch<T>(scenario: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(scenario)) {
        Ok(outcome) => outcome,
        Err(payload) => Err(panic_message(payload.as_ref())),
    }
}

/// Runs `run_one` for every seed on up to [`WORKERS_MAX`] threads, adding each seed's totals
/// into one with `add`. Stops at the first failure and returns its message (of the first
/// seed found failing; the others may still finish the seed they run).
pub fn run_seeds<T: Default + Send>(
    seeds: &[u64],
    run_one: impl Fn(u64) -> Result<T, String> + Sync,
    add: impl Fn(&mut T, &T) + Sync,
) -> Result<T, String> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let totals = Mutex::new(T::default());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(WORKERS_MAX));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut mine = T::default();
                while !stop.load(Ordering::Relaxed) {
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    match run_one(seed) {
                        Ok(t) => add(&mut mine, &t),
                        Err(msg) => {
                            stop.store(true, Ordering::Relaxed);
                            let mut first = failure.lock().unwrap_or_else(|p| p.into_inner());
                            if first.is_none() {
                                *first = Some(msg);
                            }
                        }
                    }
                }
                add(&mut totals.lock().unwrap_or_else(|p| p.into_inner()), &mine);
            });
        }
    });
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(msg) => Err(msg),
        None => Ok(totals.into_inner().unwrap_or_else(|p| p.into_inner())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_runs_once_and_the_first_failure_stops_the_run() {
        let seeds: Vec<u64> = (0..100).collect();
        let total = run_seeds(&seeds, Ok, |a: &mut u64, b| *a += b).unwrap();
        assert_eq!(total, (0..100).sum::<u64>());

        let failed = run_seeds(
            &seeds,
            |s| {
                if s == 37 {
                    Err(format!("seed {s}"))
                } else {
                    Ok(1u64)
                }
            },
            |a: &mut u64, b| *a += b,
        );
        assert_eq!(failed.unwrap_err(), "seed 37");
    }

    #[test]
    fn a_panic_becomes_the_seeds_failure() {
        let r: Result<(), String> = catch(|| panic!("broke at {}", 3));
        assert_eq!(r.unwrap_err(), "broke at 3");
        let r: Result<(), String> = catch(|| std::panic::panic_any("literal"));
        assert_eq!(r.unwrap_err(), "literal");
    }
}
