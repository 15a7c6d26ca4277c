//! Transaction grouping for the log readers (varnishlog's `-g`).
//!
//! Records arrive in ring order: each transaction's records together (the
//! daemon appends a transaction in one batch), transactions interleaved. The
//! grouper collects records per vxid until `End`, then hands out:
//! * `raw`: every record alone (level 0);
//! * `vxid`: each transaction alone (level 1);
//! * `request`: a client request (level 1) followed by the backend requests
//!   it links to (level 2);
//! * `session`: a client connection (level 1), its requests (level 2) and
//!   their backend requests (level 3).
//!
//! A child usually ends before its parent does, so finished transactions
//! wait until the root of their group (a request, or a session) has ended
//! and every transaction it links to, all the way down, has arrived. Anything
//! left waiting longer than the timeout (or at a flush) is emitted with what
//! has arrived.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::log::vsl::{Record, Side, Tag};

/// The `-g` modes supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    Raw,
    Vxid,
    Request,
    Session,
}

impl std::str::FromStr for Grouping {
    type Err = String;
    fn from_str(s: &str) -> Result<Grouping, String> {
        match s {
            "raw" => Ok(Grouping::Raw),
            "vxid" => Ok(Grouping::Vxid),
            "request" => Ok(Grouping::Request),
            "session" => Ok(Grouping::Session),
            _ => Err(format!("unknown grouping \"{s}\"; use raw, vxid, request or session")),
        }
    }
}

/// A record copied out of the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    pub tag: Tag,
    pub side: Side,
    pub vxid: u32,
    pub payload: Vec<u8>,
}

impl OwnedRecord {
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.payload)
    }
}

impl From<&Record<'_>> for OwnedRecord {
    fn from(r: &Record<'_>) -> OwnedRecord {
        OwnedRecord { tag: r.tag, side: r.side, vxid: r.vxid, payload: r.payload.to_vec() }
    }
}

/// Transaction type, from its `Begin` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxKind {
    Session,
    Request,
    BeReq,
    /// A raw record, or a transaction whose Begin was not seen.
    Record,
}

impl TxKind {
    /// varnishlog's group header label.
    pub fn label(self) -> &'static str {
        match self {
            TxKind::Session => "Session",
            TxKind::Request => "Request",
            TxKind::BeReq => "BeReq",
            TxKind::Record => "Record",
        }
    }
}

/// One transaction.
#[derive(Clone, Debug)]
pub struct Tx {
    pub vxid: u32,
    pub kind: TxKind,
    pub parent: u32,
    pub records: Vec<OwnedRecord>,
    /// vxids named by this transaction's `Link` records.
    pub links: Vec<u32>,
    pub complete: bool,
    /// A request begun by another one (`Begin req N restart`, or an ESI
    /// subrequest): part of its parent's request group, not a group of
    /// its own.
    pub linked: bool,
    /// Begun by a restart: shown at its parent's level, as varnishlog does.
    pub restart: bool,
    seen: Instant,
}

impl Tx {
    /// A transaction built outside the grouper (tests, files).
    pub fn detached(vxid: u32, kind: TxKind) -> Tx {
        Tx { kind, ..Tx::new(vxid, Instant::now()) }
    }

    fn new(vxid: u32, now: Instant) -> Tx {
        Tx {
            vxid,
            kind: TxKind::Record,
            parent: 0,
            records: Vec::new(),
            links: Vec::new(),
            complete: false,
            linked: false,
            restart: false,
            seen: now,
        }
    }

    /// First record with this tag.
    pub fn find(&self, tag: Tag) -> Option<&OwnedRecord> {
        self.records.iter().find(|r| r.tag == tag)
    }

    /// True if the transaction is a client one (its records carry `C`).
    pub fn is_client(&self) -> bool {
        self.records.iter().any(|r| r.side == Side::Client)
    }
}

/// What the grouper hands out: transactions with their nesting level.
#[derive(Clone, Debug)]
pub struct Group {
    pub txs: Vec<(usize, Tx)>,
}

/// Assembles records into groups.
pub struct Grouper {
    mode: Grouping,
    open: HashMap<u32, Tx>,
    /// Finished transactions waiting for the rest of their group.
    done: HashMap<u32, Tx>,
    /// The tags whose records are kept in the transactions (by tag
    /// number); None: all of them.
    keep: Option<Box<[bool; 256]>>,
}

impl Grouper {
    pub fn new(mode: Grouping) -> Grouper {
        Grouper { mode, open: HashMap::new(), done: HashMap::new(), keep: None }
    }

    /// Keep only the records of `tags` in the transactions handed out
    /// (Begin, Link and End are always kept: grouping needs them): a
    /// reader that uses a few tags does not copy the others.
    pub fn keeping(mut self, tags: impl IntoIterator<Item = Tag>) -> Grouper {
        let mut keep = Box::new([false; 256]);
        for t in tags.into_iter().chain([Tag::Begin, Tag::Link, Tag::End]) {
            keep[t as u8 as usize] = true;
        }
        self.keep = Some(keep);
        self
    }

    /// Transactions held back, not yet handed out.
    pub fn pending(&self) -> usize {
        self.open.len() + self.done.len()
    }

    /// Feed one record; finished groups are pushed to `out`.
    pub fn feed(&mut self, rec: &Record<'_>, now: Instant, out: &mut Vec<Group>) {
        if self.mode == Grouping::Raw || rec.vxid == 0 {
            if self.mode == Grouping::Raw {
                let mut tx = Tx::new(rec.vxid, now);
                tx.records.push(rec.into());
                tx.complete = true;
                out.push(Group { txs: vec![(0, tx)] });
            }
            return;
        }
        let tx = self.open.entry(rec.vxid).or_insert_with(|| Tx::new(rec.vxid, now));
        match rec.tag {
            Tag::Begin => {
                let mut f = rec.payload.split(|&b| b == b' ');
                tx.kind = match f.next() {
                    Some(b"sess") => TxKind::Session,
                    Some(b"req") => TxKind::Request,
                    Some(b"bereq") => TxKind::BeReq,
                    _ => TxKind::Record,
                };
                tx.parent = f.next().and_then(|p| std::str::from_utf8(p).ok()?.parse().ok()).unwrap_or(0);
                let reason = f.next();
                tx.linked = tx.kind == TxKind::Request && matches!(reason, Some(b"restart" | b"esi"));
                tx.restart = tx.kind == TxKind::Request && reason == Some(b"restart");
            }
            Tag::Link => {
                if let Some(c) = rec.payload.split(|&b| b == b' ').nth(1) {
                    if let Some(c) = std::str::from_utf8(c).ok().and_then(|c| c.parse().ok()) {
                        tx.links.push(c);
                    }
                }
            }
            _ => {}
        }
        if self.keep.as_ref().is_none_or(|k| k[rec.tag as u8 as usize]) {
            tx.records.push(rec.into());
        }
        if rec.tag == Tag::End {
            if let Some(mut tx) = self.open.remove(&rec.vxid) {
                tx.complete = true;
                self.finished(tx, out);
            }
        }
    }

    /// Does `tx` head a group in this mode?
    fn is_root(&self, tx: &Tx) -> bool {
        match self.mode {
            Grouping::Session => matches!(tx.kind, TxKind::Session | TxKind::Record),
            _ => (tx.kind == TxKind::Request && !tx.linked) || tx.kind == TxKind::Record,
        }
    }

    fn finished(&mut self, tx: Tx, out: &mut Vec<Group>) {
        if self.mode == Grouping::Vxid {
            out.push(Group { txs: vec![(1, tx)] });
            return;
        }
        // Sessions are not part of request grouping.
        if self.mode == Grouping::Request && tx.kind == TxKind::Session {
            return;
        }
        // Walk up to the root this transaction belongs to; if the chain is
        // not all here yet, wait.
        let mut cur = tx.vxid;
        self.done.insert(cur, tx);
        loop {
            let t = &self.done[&cur];
            if self.is_root(t) {
                if self.complete(cur, 0) {
                    let g = self.assemble(cur);
                    out.push(g);
                }
                return;
            }
            if self.done.contains_key(&t.parent) && t.parent != cur {
                cur = t.parent;
            } else {
                return;
            }
        }
    }

    /// Has `vxid` and everything it links to (all the way down) arrived?
    fn complete(&self, vxid: u32, depth: usize) -> bool {
        depth < 16 && self.done.get(&vxid).is_some_and(|t| t.links.iter().all(|c| self.complete(*c, depth + 1)))
    }

    /// Take `root` and whatever of its descendants has arrived, with their
    /// levels, breadth first in link order, as varnishlog lists a group
    /// (a page's ESI subrequests all come before their backend requests).
    fn assemble(&mut self, root: u32) -> Group {
        let mut txs = Vec::new();
        let mut queue = std::collections::VecDeque::from([(root, 1usize)]);
        while let Some((v, level)) = queue.pop_front() {
            if let Some(tx) = self.done.remove(&v) {
                for c in &tx.links {
                    let same = self.done.get(c).is_some_and(|t| t.restart);
                    if level < 16 {
                        queue.push_back((*c, if same { level } else { level + 1 }));
                    }
                }
                txs.push((level, tx));
            }
        }
        Group { txs }
    }

    /// Emit everything that waited longer than `timeout` (varnishlog `-T`).
    pub fn expire(&mut self, now: Instant, timeout: Duration, out: &mut Vec<Group>) {
        let old = |t: &Tx| now.duration_since(t.seen) >= timeout;
        let open: Vec<u32> = self.open.values().filter(|t| old(t)).map(|t| t.vxid).collect();
        for v in open {
            if let Some(tx) = self.open.remove(&v) {
                self.finished(tx, out);
            }
        }
        let mut stale: Vec<u32> =
            self.done.values().filter(|t| old(t) && (self.is_root(t) || !self.done.contains_key(&t.parent))).map(|t| t.vxid).collect();
        stale.sort_unstable();
        for v in stale {
            if self.done.contains_key(&v) {
                let g = self.assemble(v);
                out.push(g);
            }
        }
    }

    /// Emit everything held, in vxid order (end of a dump, or an overrun).
    pub fn flush(&mut self, out: &mut Vec<Group>) {
        let mut open: Vec<Tx> = self.open.drain().map(|(_, t)| t).collect();
        open.sort_by_key(|t| t.vxid);
        for tx in open {
            self.finished(tx, out);
        }
        // Roots first (with what they have), then whatever is left alone.
        let mut roots: Vec<u32> = self.done.values().filter(|t| self.is_root(t)).map(|t| t.vxid).collect();
        roots.sort_unstable();
        for v in roots {
            let g = self.assemble(v);
            out.push(g);
        }
        let mut rest: Vec<u32> = self.done.keys().copied().collect();
        rest.sort_unstable();
        for v in rest {
            if self.done.contains_key(&v) {
                let g = self.assemble(v);
                out.push(g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::vsl::{Batch, Records};

    fn feed_all(g: &mut Grouper, b: &Batch, out: &mut Vec<Group>) {
        let now = Instant::now();
        for r in Records::new(b.as_bytes()) {
            g.feed(&r, now, out);
        }
    }

    fn tx(kind: &str, vxid: u32, parent: u32, side: Side, link: Option<u32>) -> Batch {
        let mut b = Batch::new();
        b.recf(Tag::Begin, side, vxid, format_args!("{kind} {parent} rxreq"));
        if let Some(c) = link {
            b.recf(Tag::Link, side, vxid, format_args!("bereq {c} fetch"));
        }
        b.rec(Tag::End, side, vxid, b"");
        b
    }

    #[test]
    fn request_waits_for_its_backend_request_and_vice_versa() {
        let mut g = Grouper::new(Grouping::Request);
        let mut out = Vec::new();
        // Backend first (the usual order), then the request.
        feed_all(&mut g, &tx("bereq", 3, 2, Side::Backend, None), &mut out);
        assert!(out.is_empty());
        feed_all(&mut g, &tx("req", 2, 1, Side::Client, Some(3)), &mut out);
        assert_eq!(out.len(), 1);
        let levels: Vec<_> = out[0].txs.iter().map(|(l, t)| (*l, t.vxid, t.kind)).collect();
        assert_eq!(levels, vec![(1, 2, TxKind::Request), (2, 3, TxKind::BeReq)]);
        // Request first, then its backend request.
        out.clear();
        feed_all(&mut g, &tx("req", 5, 4, Side::Client, Some(6)), &mut out);
        assert!(out.is_empty());
        feed_all(&mut g, &tx("bereq", 6, 5, Side::Backend, None), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].txs.len(), 2);
        // Sessions are dropped in request mode.
        out.clear();
        feed_all(&mut g, &tx("sess", 1, 0, Side::Client, None), &mut out);
        assert!(out.is_empty());
        assert_eq!(g.pending(), 0);
    }

    #[test]
    fn vxid_and_raw_modes() {
        let mut out = Vec::new();
        let mut g = Grouper::new(Grouping::Vxid);
        feed_all(&mut g, &tx("req", 2, 1, Side::Client, Some(3)), &mut out);
        assert_eq!(out.len(), 1);
        let mut g = Grouper::new(Grouping::Raw);
        out.clear();
        feed_all(&mut g, &tx("req", 2, 1, Side::Client, Some(3)), &mut out);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn flush_hands_out_what_waits() {
        let mut g = Grouper::new(Grouping::Request);
        let mut out = Vec::new();
        feed_all(&mut g, &tx("req", 5, 4, Side::Client, Some(6)), &mut out);
        let mut half = Batch::new();
        half.rec(Tag::Begin, Side::Client, 9, b"req 1 rxreq");
        feed_all(&mut g, &half, &mut out);
        assert!(out.is_empty());
        g.flush(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(g.pending(), 0);
    }

    #[test]
    fn sessions_hold_their_requests_and_those_their_fetches() {
        let mut g = Grouper::new(Grouping::Session);
        let mut out = Vec::new();
        // The usual order: bereq, its request, the next request, the session.
        feed_all(&mut g, &tx("bereq", 3, 2, Side::Backend, None), &mut out);
        feed_all(&mut g, &tx("req", 2, 1, Side::Client, Some(3)), &mut out);
        feed_all(&mut g, &tx("req", 4, 1, Side::Client, None), &mut out);
        assert!(out.is_empty(), "the session has not ended");
        let mut s = Batch::new();
        s.rec(Tag::Begin, Side::Client, 1, b"sess 0 HTTP/1");
        s.rec(Tag::Link, Side::Client, 1, b"req 2 rxreq");
        s.rec(Tag::Link, Side::Client, 1, b"req 4 rxreq");
        s.rec(Tag::End, Side::Client, 1, b"");
        feed_all(&mut g, &s, &mut out);
        assert_eq!(out.len(), 1);
        let levels: Vec<_> = out[0].txs.iter().map(|(l, t)| (*l, t.vxid)).collect();
        // Breadth first, as varnishlog -g session lists a keep-alive session.
        assert_eq!(levels, vec![(1, 1), (2, 2), (2, 4), (3, 3)]);
        assert_eq!(g.pending(), 0);
    }

    #[test]
    fn grouping_names() {
        assert_eq!("request".parse::<Grouping>(), Ok(Grouping::Request));
        assert_eq!("session".parse::<Grouping>(), Ok(Grouping::Session));
        assert!("bogus".parse::<Grouping>().is_err());
    }
}
