//! Encoding allocates nothing per record: a counting allocator watches `ObjectWriter` encode
//! the same batches with 1 and with 1,000 records per batch. Its own binary, so no other test
//! allocates on the counted thread.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{build_batch, header, topic};
use sluice_objstore::{ObjectReader, ObjectWriter, parse_footer, parse_index, parse_meta};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as for `dealloc`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    let out = f();
    COUNTING.with(|on| on.set(false));
    (COUNT.with(Cell::get), out)
}

/// 8 partitions × 4 batches of `records_per_batch` records each, run by run.
fn runs(records_per_batch: usize) -> Vec<Vec<u8>> {
    let values: Vec<Vec<u8>> = (0..records_per_batch).map(|i| vec![i as u8; 16]).collect();
    (0..8)
        .map(|_| {
            let mut run = Vec::new();
            for b in 0..4 {
                build_batch(&mut run, &values, b * 100);
            }
            run
        })
        .collect()
}

fn encode(writer: &mut ObjectWriter, runs: &[Vec<u8>]) -> usize {
    for (p, run) in runs.iter().enumerate() {
        writer.begin_run(topic(1), p as i32).unwrap();
        writer.push_batches_at(run, 1_000).unwrap();
        writer.end_run().unwrap();
        writer.push_meta(1, b"committed offset").unwrap();
    }
    let object = writer.finish(header(5)).unwrap();
    object.len()
}

#[test]
fn encoding_allocates_nothing_per_record() {
    let small = runs(1);
    let large = runs(1_000);
    let mut writer = ObjectWriter::new();
    // Warm up: the writer's buffers grow to the largest object once.
    encode(&mut writer, &large);
    encode(&mut writer, &small);

    let (for_small, _) = allocations(|| encode(&mut writer, &small));
    let (for_large, len) = allocations(|| encode(&mut writer, &large));
    assert!(
        len > 8 * 4 * 1_000 * 16,
        "the large object holds every record"
    );
    assert_eq!(
        for_small, for_large,
        "allocations must not depend on the number of records"
    );
    // Once warm (and the previous object's bytes dropped, so the writer reclaims its buffer),
    // an object costs no allocation at all: none per run, batch or record.
    assert_eq!(for_large, 0, "allocations for one warm object");

    // Parsing allocates nothing, whatever it parses.
    let mut writer = ObjectWriter::new();
    let object = {
        encode(&mut writer, &large);
        for (p, run) in large.iter().enumerate() {
            writer.begin_run(topic(2), p as i32).unwrap();
            writer.push_batches_at(run, 0).unwrap();
            writer.end_run().unwrap();
        }
        writer.finish(header(6)).unwrap()
    };
    let (parsing, ok) = allocations(|| {
        let reader = ObjectReader::new(&object).unwrap();
        let runs_ok = reader.index().iter().all(|e| reader.run(&e).is_ok());
        let meta = reader.meta().iter().count();
        runs_ok && meta == 0
    });
    assert!(ok);
    assert_eq!(parsing, 0, "reading an object allocates nothing");

    // Hostile declared counts are refused without allocating.
    let footer = parse_footer(&object, object.len() as u64).unwrap();
    let mut bad = object.to_vec();
    let io = footer.index_offset as usize;
    bad[io..io + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    let mo = footer.meta_offset as usize;
    bad[mo..mo + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    common::reseal(&mut bad);
    let footer = parse_footer(&bad, bad.len() as u64).unwrap();
    let (hostile, refused) = allocations(|| {
        let i = footer.index_range();
        let m = footer.meta_range();
        parse_index(&bad[i.start as usize..i.end as usize], &footer).is_err()
            && parse_meta(&bad[m.start as usize..m.end as usize], &footer).is_err()
            && ObjectReader::new(&bad).is_err()
    });
    assert!(refused);
    assert_eq!(hostile, 0, "refusing u32::MAX entries allocates nothing");
}
