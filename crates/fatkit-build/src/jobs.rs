//! Cargo's jobserver: the compile jobs of a build script take a token each beyond the first,
//! as `cc` does, so that crates built in parallel share the machine's `-j` instead of each
//! running `NUM_JOBS` compiles at once.
#![allow(unsafe_code)]

use std::sync::{Arc, OnceLock};

/// The jobserver cargo handed this process (`CARGO_MAKEFLAGS`), if any: taken once.
pub(crate) fn inherited() -> Option<Arc<jobserver::Client>> {
    static CLIENT: OnceLock<Option<Arc<jobserver::Client>>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // SAFETY: the descriptors `CARGO_MAKEFLAGS` names were opened by cargo for this
            // build script and stay open for its whole life; this process takes them once,
            // here (cc's own client, if the build script also uses cc, only reads and writes
            // tokens on the same pipe, which the protocol allows).
            unsafe { jobserver::Client::from_env() }.map(Arc::new)
        })
        .clone()
}
