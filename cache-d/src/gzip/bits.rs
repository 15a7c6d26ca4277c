//! Where a gzip member's deflate blocks start and end, in bits from the
//! start of the member: Varnish's gzip bits (`OA_GZIPBITS`), which its
//! `Gzip` log records show and which ESI needs to splice gzip bodies.
//! zlib-rs inflates and checks the data; this walk reads only the block
//! structure (block headers, Huffman tables, code lengths) and skips
//! the symbols, producing no output. It is fed the member as it streams
//! through a fetch, once per fetch, never per hit.

/// `start`: the first deflate block's first bit (after the gzip header);
/// `last`: the first bit of the block marked final; `stop`: the bit after
/// that block's end-of-block code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bits {
    pub start: u64,
    pub last: u64,
    pub stop: u64,
}

/// Why the walk stopped (the bytes are not a gzip member it can read).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// A step could not finish: more bytes are needed, or they are bad.
enum Stop {
    More,
    Bad(&'static str),
}

/// A little-endian bit reader over the bytes not yet walked.
struct Reader<'a> {
    data: &'a [u8],
    /// Bit position in `data`.
    at: u64,
}

impl Reader<'_> {
    fn bits(&mut self, n: u32) -> Result<u32, Stop> {
        if self.at + n as u64 > self.data.len() as u64 * 8 {
            return Err(Stop::More);
        }
        let mut v = 0u32;
        for i in 0..n {
            let b = self.at + i as u64;
            v |= (((self.data[(b / 8) as usize] >> (b % 8)) & 1) as u32) << i;
        }
        self.at += n as u64;
        Ok(v)
    }

    fn byte(&mut self) -> Result<u8, Stop> {
        self.bits(8).map(|b| b as u8)
    }

    /// Skip to the next byte boundary (stored blocks start on one).
    fn align(&mut self) {
        self.at = self.at.div_ceil(8) * 8;
    }
}

/// A canonical Huffman code, as counts per length and symbols in code
/// order (decoded a bit at a time).
struct Huffman {
    count: [u16; 16],
    symbol: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> Result<Huffman, Stop> {
        let mut count = [0u16; 16];
        for &l in lengths {
            count[l as usize] += 1;
        }
        // Over-subscribed codes cannot be decoded; incomplete ones can
        // (a single distance code is legal).
        let mut left: i32 = 1;
        for c in &count[1..] {
            left = (left << 1) - *c as i32;
            if left < 0 {
                return Err(Stop::Bad("over-subscribed Huffman code"));
            }
        }
        let mut offs = [0u16; 16];
        for l in 1..15 {
            offs[l + 1] = offs[l] + count[l];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbol[offs[l as usize] as usize] = s as u16;
                offs[l as usize] += 1;
            }
        }
        Ok(Huffman { count, symbol })
    }

    fn decode(&self, r: &mut Reader<'_>) -> Result<u16, Stop> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= r.bits(1)? as i32;
            let count = self.count[len] as i32;
            if code - first < count {
                return Ok(self.symbol[(index + code - first) as usize]);
            }
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
        Err(Stop::Bad("invalid Huffman code"))
    }
}

const LEN_EXTRA: [u32; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_EXTRA: [u32; 30] = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
const CL_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

/// One symbol (with a match's distance): true at the end of the block.
fn symbol(r: &mut Reader<'_>, lit: &Huffman, dist: &Huffman) -> Result<bool, Stop> {
    let s = lit.decode(r)?;
    match s {
        0..=255 => Ok(false),
        256 => Ok(true),
        _ => {
            let extra = *LEN_EXTRA.get((s - 257) as usize).ok_or(Stop::Bad("invalid length code"))?;
            r.bits(extra)?;
            let d = dist.decode(r)? as usize;
            let extra = *DIST_EXTRA.get(d).ok_or(Stop::Bad("invalid distance code"))?;
            r.bits(extra)?;
            Ok(false)
        }
    }
}

fn fixed() -> Box<(Huffman, Huffman)> {
    let mut l = [0u8; 288];
    l[..144].fill(8);
    l[144..256].fill(9);
    l[256..280].fill(7);
    l[280..].fill(8);
    match (Huffman::new(&l), Huffman::new(&[5u8; 30])) {
        (Ok(lit), Ok(dist)) => Box::new((lit, dist)),
        _ => unreachable!("the fixed codes are well formed"),
    }
}

fn dynamic(r: &mut Reader<'_>) -> Result<Box<(Huffman, Huffman)>, Stop> {
    let nlen = r.bits(5)? as usize + 257;
    let ndist = r.bits(5)? as usize + 1;
    let ncode = r.bits(4)? as usize + 4;
    if nlen > 286 || ndist > 30 {
        return Err(Stop::Bad("bad counts"));
    }
    let mut cl = [0u8; 19];
    for &i in &CL_ORDER[..ncode] {
        cl[i] = r.bits(3)? as u8;
    }
    let lencode = Huffman::new(&cl)?;
    let mut lengths = [0u8; 316];
    let mut i = 0;
    while i < nlen + ndist {
        let s = lencode.decode(r)?;
        if s < 16 {
            lengths[i] = s as u8;
            i += 1;
            continue;
        }
        let (value, n) = match s {
            16 if i == 0 => return Err(Stop::Bad("repeat with no first length")),
            16 => (lengths[i - 1], 3 + r.bits(2)? as usize),
            17 => (0, 3 + r.bits(3)? as usize),
            _ => (0, 11 + r.bits(7)? as usize),
        };
        if i + n > nlen + ndist {
            return Err(Stop::Bad("too many lengths"));
        }
        lengths[i..i + n].fill(value);
        i += n;
    }
    if lengths[256] == 0 {
        return Err(Stop::Bad("no end-of-block code"));
    }
    Ok(Box::new((Huffman::new(&lengths[..nlen])?, Huffman::new(&lengths[nlen..nlen + ndist])?)))
}

/// Bytes the walk may hold not yet walked (a symbol or a block's tables
/// need a few hundred; a gzip header's name and comment have no bound).
const MAX_PENDING: usize = 1 << 20;

/// Where the walk is between steps.
enum State {
    Header,
    Block,
    /// Bytes of a stored block left.
    Stored(u32),
    Codes(Box<(Huffman, Huffman)>),
    Done,
    Failed,
}

/// The walk over one gzip member, fed as it streams.
pub struct Scanner {
    /// Bytes from `base` on, not all walked yet.
    data: Vec<u8>,
    base: u64,
    /// Bit position in `data` the walk has reached.
    at: u64,
    state: State,
    last_block: bool,
    bits: Bits,
}

impl Default for Scanner {
    fn default() -> Scanner {
        Scanner { data: Vec::new(), base: 0, at: 0, state: State::Header, last_block: false, bits: Bits::default() }
    }
}

impl Scanner {
    /// The bits, once the final block has been walked.
    pub fn bits(&self) -> Option<Bits> {
        matches!(self.state, State::Done).then_some(self.bits)
    }

    /// The bits seen so far (zeros for what was not reached), as a log
    /// record of a stream cut short shows them.
    pub fn partial(&self) -> Bits {
        self.bits
    }

    pub fn feed(&mut self, input: &[u8]) -> Result<(), Malformed> {
        match self.state {
            State::Done => return Ok(()),
            State::Failed => return Err(Malformed("already failed")),
            _ => {}
        }
        self.data.extend_from_slice(input);
        // Only a header (a name or comment without its end) holds bytes
        // back for long; past this it is not a header worth walking.
        if self.data.len() > MAX_PENDING {
            self.state = State::Failed;
            self.data = Vec::new();
            return Err(Malformed("gzip header too long"));
        }
        let outcome = loop {
            match self.step() {
                Ok(()) if matches!(self.state, State::Done) => break Ok(()),
                Ok(()) => {}
                Err(Stop::More) => break Ok(()),
                Err(Stop::Bad(m)) => {
                    self.state = State::Failed;
                    break Err(Malformed(m));
                }
            }
        };
        // Forget the bytes walked past.
        let walked = (self.at / 8) as usize;
        if walked > 0 {
            self.data.drain(..walked);
            self.base += walked as u64;
            self.at -= walked as u64 * 8;
        }
        if matches!(self.state, State::Done) {
            self.data = Vec::new();
        }
        outcome
    }

    /// One step from the committed position; on Err(More) nothing moves.
    fn step(&mut self) -> Result<(), Stop> {
        let base = self.base * 8;
        let mut r = Reader { data: &self.data, at: self.at };
        // What the step leads to: the next state, or the end of a block.
        let next = match &self.state {
            State::Header => {
                header(&mut r)?;
                self.bits.start = base + r.at;
                Some(State::Block)
            }
            State::Block => {
                let start = r.at;
                let last = r.bits(1)? == 1;
                let next = match r.bits(2)? {
                    0 => {
                        r.align();
                        let len = r.bits(16)?;
                        if r.bits(16)? != !len & 0xffff {
                            return Err(Stop::Bad("stored block length mismatch"));
                        }
                        State::Stored(len)
                    }
                    1 => State::Codes(fixed()),
                    2 => State::Codes(dynamic(&mut r)?),
                    _ => return Err(Stop::Bad("invalid block type")),
                };
                self.last_block = last;
                if last {
                    self.bits.last = base + start;
                }
                match next {
                    State::Stored(0) => None,
                    n => Some(n),
                }
            }
            State::Stored(left) => {
                let left = *left as u64;
                let have = (self.data.len() as u64 - r.at / 8).min(left);
                if have == 0 {
                    return Err(Stop::More);
                }
                r.at += have * 8;
                (have < left).then(|| State::Stored((left - have) as u32))
            }
            State::Codes(t) => {
                // As many symbols as there are bytes for; the position
                // moves past each whole one.
                loop {
                    match symbol(&mut r, &t.0, &t.1) {
                        Ok(false) => self.at = r.at,
                        Ok(true) => break None,
                        Err(e) => return Err(e),
                    }
                }
            }
            State::Done => return Ok(()),
            State::Failed => return Err(Stop::Bad("already failed")),
        };
        self.at = r.at;
        match next {
            Some(s) => self.state = s,
            None => self.end_block(),
        }
        Ok(())
    }

    fn end_block(&mut self) {
        if self.last_block {
            self.bits.stop = self.base * 8 + self.at;
            self.state = State::Done;
        } else {
            self.state = State::Block;
        }
    }
}

/// The gzip header (RFC 1952): magic, method, flags, mtime, xfl, os,
/// then the optional extra field, name, comment and header CRC.
fn header(r: &mut Reader<'_>) -> Result<(), Stop> {
    if (r.byte()?, r.byte()?, r.byte()?) != (0x1f, 0x8b, 8) {
        return Err(Stop::Bad("not gzip"));
    }
    let flags = r.byte()?;
    for _ in 0..6 {
        r.byte()?;
    }
    if flags & 4 != 0 {
        let n = r.byte()? as usize | (r.byte()? as usize) << 8;
        for _ in 0..n {
            r.byte()?;
        }
    }
    for flag in [8, 16] {
        if flags & flag != 0 {
            while r.byte()? != 0 {}
        }
    }
    if flags & 2 != 0 {
        r.byte()?;
        r.byte()?;
    }
    Ok(())
}

/// Walk a whole gzip member given as its pieces in order.
pub fn scan<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Result<Bits, Malformed> {
    let mut s = Scanner::default();
    for p in pieces {
        s.feed(p)?;
    }
    s.bits().ok_or(Malformed("truncated"))
}
