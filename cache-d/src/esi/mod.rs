//! Edge Side Includes: the parser (`parse`, Varnish's VEP) that turns a
//! body into instructions once, at fetch, and what delivery needs of them.

pub mod parse;
mod tables;

pub use parse::{Features, Instr, Parser};

/// What an ESI object keeps: its instructions, made once at fetch.
#[derive(Clone, Debug, Default)]
pub struct EsiData {
    pub instrs: Vec<Instr>,
}

#[cfg(test)]
mod tests;
