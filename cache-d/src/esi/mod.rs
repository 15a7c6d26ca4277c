//! Edge Side Includes: the parser (`parse`, Varnish's VEP) that turns a
//! body into instructions once, at fetch, and what delivery needs of them.

pub mod gz;
pub mod parse;
mod tables;

pub use parse::{Features, Instr, Parser};

/// The largest page (plain) parsed for ESI: a larger one fails its fetch
/// (FetchError), so a small gzip page that inflates to gigabytes of
/// includes is neither gathered whole nor parsed for seconds.
pub const MAX_PAGE: u64 = 16 << 20;

/// The most includes one page may hold: more than a request's whole
/// include tree may run (the same bound, `req::MAX_ESI_INCLUDES`) could never
/// be delivered, so such a page fails its fetch.
pub const MAX_PAGE_INCLUDES: usize = 20_000;

/// What an ESI object keeps: its instructions, made once at fetch.
#[derive(Clone, Debug, Default)]
pub struct EsiData {
    pub instrs: Vec<Instr>,
    /// A page kept gzip: the instructions count bytes of the gzip body,
    /// and each verbatim segment's plain CRC and length, in order.
    pub gzip: Option<Vec<(u32, u64)>>,
}

impl EsiData {
    /// What it takes in memory (charged to the object's store).
    pub fn bytes(&self) -> u64 {
        let instrs: usize = self
            .instrs
            .iter()
            .map(|i| match i {
                Instr::Include { url, host, .. } => url.capacity() + host.as_ref().map_or(0, |h| h.capacity()),
                _ => 0,
            })
            .sum();
        (std::mem::size_of::<EsiData>()
            + self.instrs.capacity() * std::mem::size_of::<Instr>()
            + instrs
            + self.gzip.as_ref().map_or(0, |g| g.capacity() * 16)) as u64
    }

    /// Its includes.
    pub fn includes(&self) -> usize {
        self.instrs.iter().filter(|i| matches!(i, Instr::Include { .. })).count()
    }
}

/// Parse a whole plain page (once: at fetch, or for a pass): its
/// instructions if it held any ESI. The `ESI_xmlerror` records go to
/// `log` as transaction `vxid`'s, the error and warning counts to `seg`.
pub fn parse_page<'a>(
    url: &[u8],
    features: Features,
    pieces: impl IntoIterator<Item = &'a [u8]>,
    seg: &common::segment::SegmentWriter,
    log: &mut common::log::vsl::Batch,
    side: common::log::vsl::Side,
    vxid: u32,
) -> Option<EsiData> {
    let mut p = Parser::new(url, features);
    for piece in pieces {
        p.parse(piece);
    }
    let (instrs, records, errors, warnings) = p.finish();
    for r in &records {
        log.rec(common::log::vsl::Tag::EsiXmlerror, side, vxid, r.as_bytes());
    }
    seg.add(common::counters::C::EsiErrors, errors);
    seg.add(common::counters::C::EsiWarnings, warnings);
    instrs.map(|instrs| EsiData { instrs, gzip: None })
}

#[cfg(test)]
mod tests;
