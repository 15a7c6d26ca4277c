//! The coders: gzip, gunzip and test-gunzip streams (zlib-rs) and the
//! Brotli encoder, fed a body piece by piece, handing out what they make.
//! zlib-rs is used through its own safe API rather than flate2's, which
//! cannot set the memory level Varnish's `gzip_memlevel` chooses.

use bytes::{Bytes, BytesMut};
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Inflate, InflateFlush, Status};

/// Compression settings (the `gzip_*` and `brotli_*` parameters).
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub level: u32,
    pub memlevel: u32,
    /// Bytes of output made at a time.
    pub buffer: usize,
    pub brotli_quality: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { level: 6, memlevel: 8, buffer: 32 * 1024, brotli_quality: 5 }
    }
}

/// A failed coder: what Varnish's `Gzip` record and `FetchError` say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeError {
    /// The `Gzip` record Varnish writes when zlib itself fails
    /// (`Gunzip error: -3 (invalid block type)`).
    pub record: Option<String>,
    /// What went wrong (`junk after VGZ_END`, zlib's message).
    pub msg: String,
    /// For the fetch's FetchError (`Invalid Gzip data: ...`).
    pub fetch_error: String,
}

/// Which way a zlib stream goes, and what it is called in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Compress (`G`).
    Gzip,
    /// Decompress and hand out the result (`U`).
    Gunzip,
    /// Decompress only to check (`u`): the input is what is kept.
    Test,
}

enum Z {
    Deflate(Box<Deflate>),
    Inflate(Box<Inflate>),
}

/// One zlib stream.
pub struct Zstream {
    pub dir: Dir,
    z: Z,
    buffer: usize,
    ended: bool,
    /// The output buffer, when the last one was not handed out.
    scratch: Vec<u8>,
    /// Hand a test gunzip's plain bytes out too (for a Brotli copy).
    pub plain: bool,
}

/// An error zlib returned (`code`, its message), with Varnish's record.
fn zerr(gzip: bool, code: i32, msg: Option<&str>, fetch_error: impl FnOnce(&str) -> String) -> CodeError {
    let msg = msg.unwrap_or("(null)").to_string();
    let record = Some(format!("{} error: {code} ({msg})", if gzip { "Gzip" } else { "Gunzip" }));
    CodeError { record, fetch_error: fetch_error(&msg), msg }
}

/// An error of ours (no zlib return code).
fn ours(msg: &str, fetch_error: &str) -> CodeError {
    CodeError { record: None, msg: msg.into(), fetch_error: fetch_error.into() }
}

impl Zstream {
    pub fn new(dir: Dir, s: &Settings) -> Zstream {
        let z = match dir {
            Dir::Gzip => Z::Deflate(Box::new(Deflate::new_with_config(DeflateConfig {
                level: s.level.min(9) as i32,
                window_bits: 16 + 15,
                mem_level: s.memlevel.clamp(1, 9) as i32,
                ..DeflateConfig::default()
            }))),
            Dir::Gunzip | Dir::Test => Z::Inflate(Box::new(Inflate::new(true, 16 + 15))),
        };
        Zstream { dir, z, buffer: s.buffer.max(2048), ended: false, scratch: Vec::new(), plain: false }
    }

    pub fn total_in(&self) -> u64 {
        match &self.z {
            Z::Deflate(d) => d.total_in(),
            Z::Inflate(i) => i.total_in(),
        }
    }

    pub fn total_out(&self) -> u64 {
        match &self.z {
            Z::Deflate(d) => d.total_out(),
            Z::Inflate(i) => i.total_out(),
        }
    }

    /// Has the stream seen its end (a gunzip) or been finished (a gzip)?
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Feed `input`; `out` gets what is made (the decompressed bytes of a
    /// gunzip, the compressed ones of a gzip; a test gunzip's plain bytes
    /// only if `plain` is set, for a Brotli copy). `finish` ends a gzip
    /// stream, and checks that a gunzip one ended.
    pub fn feed(&mut self, input: &[u8], finish: bool, out: &mut dyn FnMut(Bytes)) -> Result<(), CodeError> {
        self.feed_upto(input, finish, out, usize::MAX).map(|_| ())
    }

    /// [`feed`](Self::feed), stopping once `max_out` bytes or more are
    /// made: returns the input used and whether it stopped there (call
    /// again with the rest, even if none is left: zlib may hold more
    /// output). A delivery gunzips in such windows, so a small gzip body
    /// that inflates to gigabytes never sits whole in memory.
    pub fn feed_upto(
        &mut self,
        mut input: &[u8],
        finish: bool,
        out: &mut dyn FnMut(Bytes),
        max_out: usize,
    ) -> Result<(usize, bool), CodeError> {
        let (start_len, mut produced) = (input.len(), 0usize);
        loop {
            if self.ended && self.dir != Dir::Gzip {
                if !input.is_empty() {
                    return Err(ours("junk after VGZ_END", "Junk after gzip data"));
                }
                return Ok((start_len, false));
            }
            let (before_in, before_out) = (self.total_in(), self.total_out());
            let mut buf = std::mem::take(&mut self.scratch);
            buf.resize(self.buffer, 0);
            let status = match &mut self.z {
                Z::Deflate(d) => {
                    let flush = if finish { DeflateFlush::Finish } else { DeflateFlush::NoFlush };
                    d.compress(input, &mut buf, flush).map_err(|e| zerr(true, e as i32, d.error_message(), |_| "Gzip failed".into()))?
                }
                Z::Inflate(i) => i.decompress(input, &mut buf, InflateFlush::NoFlush).map_err(|e| {
                    let code = match e {
                        zlib_rs::InflateError::NeedDict { .. } => 2,
                        zlib_rs::InflateError::StreamError => -2,
                        zlib_rs::InflateError::DataError => -3,
                        zlib_rs::InflateError::MemError => -4,
                    };
                    zerr(false, code, i.error_message(), |m| format!("Invalid Gzip data: {m}"))
                })?,
            };
            let used = (self.total_in() - before_in) as usize;
            let made = (self.total_out() - before_out) as usize;
            input = &input[used..];
            if self.dir == Dir::Test {
                if made > 0 && self.plain {
                    out(Bytes::copy_from_slice(&buf[..made]));
                }
                self.scratch = buf;
            } else if made > self.buffer / 2 {
                buf.truncate(made);
                out(Bytes::from(buf));
            } else {
                // A small piece is copied out, so what is kept holds no
                // spare capacity; the buffer is used again.
                if made > 0 {
                    out(Bytes::copy_from_slice(&buf[..made]));
                }
                self.scratch = buf;
            }
            if status == Status::StreamEnd {
                self.ended = true;
                if self.dir == Dir::Gzip {
                    return Ok((start_len - input.len(), false));
                }
                continue;
            }
            produced = produced.saturating_add(made);
            if produced >= max_out {
                return Ok((start_len - input.len(), true));
            }
            let full = made == self.buffer;
            if input.is_empty() && !full && !(finish && self.dir == Dir::Gzip) {
                break;
            }
            if used == 0 && made == 0 {
                break;
            }
        }
        if finish && !self.ended {
            return Err(match self.dir {
                Dir::Gzip => ours("not finished", "Gzip failed"),
                Dir::Gunzip => ours("truncated", "Gunzip error at the very end"),
                Dir::Test => ours("truncated", "tGunzip failed"),
            });
        }
        Ok((start_len - input.len(), false))
    }
}

/// A Brotli encoder fed the plain bytes of a body.
pub struct BrotliEnc {
    w: Option<brotli::CompressorWriter<Vec<u8>>>,
    pub total_in: u64,
    pub total_out: u64,
}

impl BrotliEnc {
    pub fn new(s: &Settings) -> BrotliEnc {
        BrotliEnc {
            w: Some(brotli::CompressorWriter::new(Vec::new(), s.buffer.max(4096), s.brotli_quality.min(11), 22)),
            total_in: 0,
            total_out: 0,
        }
    }

    fn take(&mut self, made: Vec<u8>, out: &mut dyn FnMut(Bytes)) {
        if !made.is_empty() {
            self.total_out += made.len() as u64;
            out(Bytes::from(made));
        }
    }

    pub fn feed(&mut self, input: &[u8], out: &mut dyn FnMut(Bytes)) {
        use std::io::Write;
        let Some(w) = self.w.as_mut() else { return };
        self.total_in += input.len() as u64;
        // Writing into a Vec cannot fail.
        let _ = w.write_all(input);
        let made = std::mem::take(w.get_mut());
        self.take(made, out);
    }

    pub fn finish(&mut self, out: &mut dyn FnMut(Bytes)) {
        if let Some(w) = self.w.take() {
            let made = w.into_inner();
            self.take(made, out);
        }
    }
}

/// Join pieces into one buffer.
pub fn join(pieces: &[Bytes]) -> Bytes {
    match pieces {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut b = BytesMut::with_capacity(many.iter().map(|p| p.len()).sum());
            for p in many {
                b.extend_from_slice(p);
            }
            b.freeze()
        }
    }
}

/// A raw deflate stream (no gzip header) compressed segment by segment:
/// each segment ends with a full flush, so it starts no back-reference
/// into what came before and can be inflated on its own, or spliced
/// between other deflate data (an ESI page kept gzip).
pub struct Segmenter {
    d: Box<Deflate>,
    buf: Vec<u8>,
}

impl Segmenter {
    pub fn new(s: &Settings) -> Segmenter {
        let d = Deflate::new_with_config(DeflateConfig {
            level: s.level.min(9) as i32,
            window_bits: -15,
            mem_level: s.memlevel.clamp(1, 9) as i32,
            ..DeflateConfig::default()
        });
        Segmenter { d: Box::new(d), buf: vec![0; 64 * 1024] }
    }

    /// Compress `input` (in pieces) as one segment, full-flushed, or as
    /// the end of the stream (`finish`: the final block).
    pub fn segment<'a>(&mut self, input: impl IntoIterator<Item = &'a [u8]>, finish: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut run = |d: &mut Deflate, mut data: &[u8], flush: DeflateFlush, buf: &mut Vec<u8>| loop {
            let (i0, o0) = (d.total_in(), d.total_out());
            let st = d.compress(data, buf, flush);
            let (used, made) = ((d.total_in() - i0) as usize, (d.total_out() - o0) as usize);
            out.extend_from_slice(&buf[..made]);
            data = &data[used..];
            let done = match st {
                Ok(Status::StreamEnd) => true,
                Ok(_) => data.is_empty() && made < buf.len(),
                Err(_) => true,
            };
            if done {
                return;
            }
        };
        for piece in input {
            run(&mut self.d, piece, DeflateFlush::NoFlush, &mut self.buf);
        }
        run(&mut self.d, &[], if finish { DeflateFlush::Finish } else { DeflateFlush::FullFlush }, &mut self.buf);
        out
    }
}

/// Inflate one full-flushed raw deflate segment (see [`Segmenter`]).
pub fn inflate_segment(data: &[u8], out: &mut dyn FnMut(Bytes)) -> Result<(), CodeError> {
    let mut z = Inflate::new(false, 15);
    let mut input = data;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let (i0, o0) = (z.total_in(), z.total_out());
        let st =
            z.decompress(input, &mut buf, InflateFlush::SyncFlush).map_err(|_| ours("bad segment", "ESI segment is not deflate data"))?;
        let (used, made) = ((z.total_in() - i0) as usize, (z.total_out() - o0) as usize);
        if made > 0 {
            out(Bytes::copy_from_slice(&buf[..made]));
        }
        input = &input[used..];
        if st == Status::StreamEnd || (input.is_empty() && made < buf.len()) || (used == 0 && made == 0) {
            return Ok(());
        }
    }
}

/// zlib's crc32 and crc32_combine.
pub fn crc32(crc: u32, data: &[u8]) -> u32 {
    zlib_rs::crc32::crc32(crc, data)
}

pub fn crc32_combine(a: u32, b: u32, len_b: u64) -> u32 {
    zlib_rs::crc32::crc32_combine(a, b, len_b)
}
