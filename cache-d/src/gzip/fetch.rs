//! The filters a fetched body goes through before it is stored, chosen
//! as Varnish chooses them (`vbf_default_filter_list`): `gunzip` when
//! `beresp.do_gunzip` and the body is gzip, `gzip` when `beresp.do_gzip`
//! and it is plain, `testgunzip` for any other gzip body; and, beyond
//! Varnish, a Brotli copy made from the plain bytes when
//! `beresp.do_brotli`. Each runs once per fetch, never per hit.

use bytes::Bytes;
use common::counters::C;

use super::bits::Scanner;
use super::code::{BrotliEnc, CodeError, Dir, Settings, Zstream};
use super::{record, vary_ae, weaken_etag, GzipInfo};
use crate::vcl::model::Beresp;

/// What a response's body goes through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub filter: Option<Dir>,
    pub brotli: bool,
}

impl Plan {
    /// Is the stored body gzip (Varnish's `OF_GZIPED`)?
    pub fn gzipped(&self) -> bool {
        matches!(self.filter, Some(Dir::Gzip | Dir::Test))
    }

    /// Does the stored body differ in length from the one received?
    pub fn changes_length(&self) -> bool {
        matches!(self.filter, Some(Dir::Gzip | Dir::Gunzip))
    }

    pub fn any(&self) -> bool {
        self.filter.is_some() || self.brotli
    }
}

/// Choose the filters for `beresp` after vcl_backend_response, and make
/// the header changes they make (`vfp_gzip_init`): a changed encoding
/// loses Content-Encoding and Content-Length and has its ETag weakened,
/// `gzip` sets `Content-Encoding: gzip`, a gzip object varies on
/// Accept-Encoding. A body-less response loses Content-Encoding; a 206
/// is left alone.
pub fn plan(beresp: &mut Beresp, has_body: bool, gzip_support: bool, brotli_support: bool) -> Plan {
    if !has_body {
        beresp.headers.unset("content-encoding");
        return Plan::default();
    }
    if beresp.partial() {
        return Plan::default();
    }
    let (is_gzip, is_plain) = body_coding(&beresp.headers);
    let do_gunzip = gzip_support && beresp.do_gunzip && is_gzip;
    let do_gzip = gzip_support && beresp.do_gzip && is_plain;
    let filter = if do_gunzip {
        Some(Dir::Gunzip)
    } else if do_gzip {
        Some(Dir::Gzip)
    } else if is_gzip {
        Some(Dir::Test)
    } else {
        None
    };
    let plan = Plan { filter, brotli: brotli_support && beresp.do_brotli && (is_gzip || is_plain) };
    let h = &mut beresp.headers;
    if plan.changes_length() {
        h.unset("content-encoding");
        h.unset("content-length");
        weaken_etag(h);
    }
    if filter == Some(Dir::Gzip) {
        h.set("Content-Encoding", Bytes::from_static(b"gzip"));
    }
    if plan.gzipped() || plan.brotli {
        vary_ae(h);
    }
    plan
}

/// How a response's body is coded, as the filters see it: (gzip, plain) —
/// `Content-Encoding: gzip`, or none at all (any other is neither).
pub fn body_coding(h: &crate::vcl::model::Headers) -> (bool, bool) {
    let ce = h.get("content-encoding");
    (ce.is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"gzip")), ce.is_none())
}

/// The filters at work on one body.
pub struct Coder {
    z: Option<Zstream>,
    /// Walks the gzip side: what comes in (gunzip, testgunzip) or what
    /// goes out (gzip).
    scan: Option<Scanner>,
    br: Option<BrotliEnc>,
    /// A test gunzip's last piece, kept back until the next one (or the
    /// end) shows the gzip is sound so far: a body that turns out cut
    /// short or bad never reaches a client whole-looking (Varnish does not
    /// store the piece its check failed on either).
    held: Option<Bytes>,
    done: bool,
}

/// Where a coder's output goes: the body to store, the Brotli copy.
pub struct Sinks<'a> {
    pub body: &'a mut dyn FnMut(Bytes),
    pub br: &'a mut dyn FnMut(Bytes),
}

impl Coder {
    /// Start the filters `plan` names, counting them as Varnish does
    /// (`MAIN.n_gzip`, `n_gunzip`, `n_test_gunzip`; `n_brotli` is ours).
    pub fn new(plan: Plan, s: &Settings, count: &dyn Fn(C)) -> Coder {
        let z = plan.filter.map(|d| {
            count(match d {
                Dir::Gzip => C::NGzip,
                Dir::Gunzip => C::NGunzip,
                Dir::Test => C::NTestGunzip,
            });
            let mut z = Zstream::new(d, s);
            z.plain = plan.brotli;
            z
        });
        if plan.brotli {
            count(C::NBrotli);
        }
        Coder { scan: z.as_ref().map(|_| Scanner::default()), z, br: plan.brotli.then(|| BrotliEnc::new(s)), held: None, done: false }
    }

    /// Feed a piece of the body as received.
    pub fn feed(&mut self, input: Bytes, out: &mut Sinks<'_>) -> Result<(), CodeError> {
        self.run(input, false, out)
    }

    /// The body ended: finish the streams (a gzip's last block and
    /// trailer, the Brotli end) and check that a gzip body was whole.
    pub fn finish(&mut self, out: &mut Sinks<'_>) -> Result<(), CodeError> {
        let r = self.run(Bytes::new(), true, out);
        self.done = r.is_ok();
        r
    }

    fn run(&mut self, input: Bytes, finish: bool, out: &mut Sinks<'_>) -> Result<(), CodeError> {
        let Coder { z, scan, br, held, .. } = self;
        let to_br = |b: &[u8], br: &mut Option<BrotliEnc>, sink: &mut dyn FnMut(Bytes)| {
            if let Some(e) = br.as_mut() {
                e.feed(b, sink);
            }
        };
        match z {
            None => {
                to_br(&input, br, out.br);
                if !input.is_empty() {
                    (out.body)(input);
                }
            }
            Some(zs) => {
                let dir = zs.dir;
                if dir != Dir::Gzip {
                    if let Some(s) = scan.as_mut() {
                        if s.feed(&input).is_err() {
                            *scan = None;
                        }
                    }
                }
                if dir == Dir::Gzip {
                    to_br(&input, br, out.br);
                }
                let (body, brs) = (&mut *out.body, &mut *out.br);
                let mut made = |b: Bytes| match dir {
                    Dir::Gzip => {
                        if let Some(s) = scan.as_mut() {
                            if s.feed(&b).is_err() {
                                *scan = None;
                            }
                        }
                        body(b);
                    }
                    Dir::Gunzip => {
                        to_br(&b, br, brs);
                        body(b);
                    }
                    Dir::Test => to_br(&b, br, brs),
                };
                zs.feed(&input, finish, &mut made)?;
                if dir == Dir::Test {
                    if let Some(h) = held.take() {
                        (out.body)(h);
                    }
                    if finish {
                        if !input.is_empty() {
                            (out.body)(input);
                        }
                    } else if !input.is_empty() {
                        *held = Some(input);
                    }
                }
            }
        }
        if finish {
            if let Some(e) = br.as_mut() {
                e.finish(out.br);
            }
        }
        Ok(())
    }

    /// The stored gzip body's bits and plain length, when it is gzip and
    /// was finished.
    pub fn info(&self) -> Option<GzipInfo> {
        let z = self.z.as_ref().filter(|z| self.done && z.dir != Dir::Gunzip)?;
        let bits = self.scan.as_ref().and_then(|s| s.bits()).unwrap_or_default();
        let plain_len = if z.dir == Dir::Gzip { z.total_in() } else { z.total_out() };
        Some(GzipInfo { bits, plain_len })
    }

    /// The `Gzip` record Varnish writes when the filter ends (`G F -`,
    /// `U F -`, `u F -`, with the totals and bits so far).
    pub fn record(&self) -> Option<String> {
        let z = self.z.as_ref()?;
        let kind = match z.dir {
            Dir::Gzip => "G F -",
            Dir::Gunzip => "U F -",
            Dir::Test => "u F -",
        };
        let bits = self.scan.as_ref().map(|s| s.partial()).unwrap_or_default();
        Some(record(kind, z.total_in(), z.total_out(), bits))
    }
}
