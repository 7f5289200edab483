//! Fuzz target for the Kafka request path: framing, header and body decoding, and the broker's
//! handlers, on arbitrary bytes. Any panic is a bug (client input must never crash the broker).
//!
//! Run: `scripts/fuzz.sh` (every target) or `cd fuzz && cargo +nightly fuzz run request`.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_broker::{Broker, BrokerConfig};
use sluice_protocol::{codec, frame};

fn broker() -> &'static Arc<Broker> {
    static BROKER: OnceLock<(tempfile::TempDir, Arc<Broker>)> = OnceLock::new();
    &BROKER
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let broker = Broker::open(BrokerConfig::new(dir.path())).expect("open broker");
            (dir, Arc::new(broker))
        })
        .1
}

/// The broker's handlers run inside a Tokio runtime in the server (they create timers), so the
/// fuzz target polls them inside one too; the runtime is never driven, as the handlers are
/// polled only once here.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(Some(size)) = frame::check(data, 1 << 20) else {
        return;
    };
    let body = Bytes::copy_from_slice(&data[frame::SIZE_PREFIX_BYTES..size]);
    if let Ok(request) = codec::decode_request(body) {
        // Handlers must answer bad input with error codes, never panic. Long polls are cut
        // short by the broker's fetch wait limit only, so skip waiting on them here.
        let _context = runtime().enter();
        let handling = broker().handle(request);
        let _ = futures::executor::block_on(futures::future::select(
            handling,
            futures::future::ready(()),
        ));
    }
});
