//! Backends: connection pools with their counters and limits (`pool`),
//! health and its probes (`health`, `probe`), and the directors that pick
//! one backend among several (`director`), HTTPS backends (`tls`), and
//! dynamic backends that follow a name in DNS (`dynamic`, `resolve`).

pub mod director;
pub mod dynamic;
pub mod health;
pub mod pool;
pub mod probe;
pub mod saintmode;
pub mod tls;
