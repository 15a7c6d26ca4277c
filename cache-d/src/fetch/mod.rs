//! The backend side of a request (Varnish's `FETCH_STEPS`): one backend
//! transaction (`txn`: the log, the exchange on a pooled connection), the
//! state machine that runs vcl_backend_fetch, the exchange,
//! vcl_backend_response or vcl_backend_error and retries over it
//! (`steps`), and the fetch for the cache that stores what it gets as it
//! streams in (`miss`, its body through the filters or in transit: `stream`).

mod crange;
pub mod miss;
pub mod steps;
mod stream;
pub mod txn;

pub(crate) use stream::esi_page;
