//! ESI markup from arbitrary bytes in arbitrary pieces: the parser never
//! panics, gives the same instructions however the body is cut, and its
//! instructions never cover more than the body.
#![no_main]

use cache_d::esi::{Features, Instr, Parser};
use libfuzzer_sys::fuzz_target;

fn parse(body: &[u8], piece: usize, f: Features) -> Option<Vec<Instr>> {
    let mut p = Parser::new(b"/a/b?c", f);
    for c in body.chunks(piece) {
        p.parse(c);
    }
    p.finish().0
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else { return };
    let f = Features {
        disable_xml_check: flags & 1 != 0,
        ignore_https: flags & 2 != 0,
        ignore_other_elements: flags & 4 != 0,
        remove_bom: flags & 8 != 0,
    };
    let whole = parse(body, body.len().max(1), f);
    let piece = 1 + (flags >> 4) as usize;
    assert_eq!(parse(body, piece, f), whole, "the same however the body is cut");
    if let Some(instrs) = whole {
        let covered: u64 = instrs
            .iter()
            .map(|i| match i {
                Instr::Verbatim(n) | Instr::Skip(n) => *n,
                Instr::Include { .. } => 0,
            })
            .sum();
        assert_eq!(covered, body.len() as u64);
    }
});
