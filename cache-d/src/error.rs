//! cache-d's error types: [`Error`] for the request path (which side
//! failed, so the session can map it to a status, a counter and a log
//! record), and [`StartError`] for start-up.

use std::path::PathBuf;

use std::borrow::Cow;

/// The party at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something bad or went away: 400 or close.
    Client,
    /// The backend failed: 503 before the response head, close after it.
    Backend,
    /// Our own failure: 500.
    Internal,
}

#[derive(Debug)]
pub struct Error {
    pub side: Side,
    pub what: Cow<'static, str>,
    pub io: Option<std::io::Error>,
}

impl Error {
    pub fn new(side: Side, what: impl Into<Cow<'static, str>>) -> Error {
        Error { side, what: what.into(), io: None }
    }
    pub fn io(side: Side, what: &'static str, e: std::io::Error) -> Error {
        Error { side, what: what.into(), io: Some(e) }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.io {
            Some(e) => write!(f, "{}: {}", self.what, e),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for Error {}

/// A start-up failure, reported once on stderr with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Param(#[from] crate::params::ParamError),
    #[error("could not listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error(transparent)]
    Segment(#[from] common::segment::SegmentError),
    #[error(transparent)]
    Instance(#[from] common::instance::InstanceError),
    #[error("pid file {path}: {source}")]
    PidFile { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
