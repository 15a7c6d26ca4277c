//! Edge Side Includes: the parser (`parse`, Varnish's VEP) that turns a
//! body into instructions once, at fetch, and what delivery needs of them.

pub mod gz;
pub mod parse;
mod tables;

pub use parse::{Features, Instr, Parser};

/// What an ESI object keeps: its instructions, made once at fetch.
#[derive(Clone, Debug, Default)]
pub struct EsiData {
    pub instrs: Vec<Instr>,
    /// A page kept gzip: the instructions count bytes of the gzip body,
    /// and each verbatim segment's plain CRC and length, in order.
    pub gzip: Option<Vec<(u32, u64)>>,
}

#[cfg(test)]
mod tests;
