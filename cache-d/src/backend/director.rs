//! Directors (vmod_directors): pick a member backend for a request,
//! skipping sick ones. round_robin, random (weights), fallback (first
//! healthy in order, optionally sticky), hash (a key to a member, by
//! weight) and shard (consistent hashing on a ring of replicas per member,
//! so removing a member moves only its keys). Members are names — a
//! backend or another director — and health is asked of the caller, so
//! directors nest.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    RoundRobin,
    Random,
    Fallback { sticky: bool },
    Hash,
    Shard,
}

impl Kind {
    /// The type backend.list -j shows (Varnish's director type names).
    pub fn word(self) -> &'static str {
        match self {
            Kind::RoundRobin => "round-robin",
            Kind::Random => "random",
            Kind::Fallback { .. } => "fallback",
            Kind::Hash => "hash",
            Kind::Shard => "shard",
        }
    }

    /// The constructor's name in VCL (`directors.round_robin`...).
    pub fn from_ctor(name: &str, sticky: bool) -> Option<Kind> {
        Some(match name {
            "directors.round_robin" => Kind::RoundRobin,
            "directors.random" => Kind::Random,
            "directors.fallback" => Kind::Fallback { sticky },
            "directors.hash" => Kind::Hash,
            "directors.shard" => Kind::Shard,
            _ => return None,
        })
    }
}

/// Ring points per member of a shard director (of weight 1): Varnish's
/// default, so a key lands on the same member as in Varnish.
pub const REPLICAS: u32 = 67;

pub struct Director {
    pub name: String,
    pub kind: Kind,
    members: Mutex<Vec<(String, f64)>>,
    /// Shard: each member's ident (its name on the ring; None: the
    /// backend's name) and its own rampup, in the members' order.
    meta: Mutex<Vec<(Option<String>, Option<f64>)>>,
    next: AtomicUsize,
    /// Shard: (point, member index), sorted; built by reconfigure().
    ring: Mutex<Vec<(u32, usize)>>,
    /// Shard: the `replicas` of the last reconfigure() (67 by default),
    /// and each member's ring points, fixed when it first joined the ring
    /// (as Varnish: a later reconfigure(replicas=) applies to new members).
    replicas: Mutex<(u32, std::collections::HashMap<String, u32>)>,
    /// Shard: the share of requests sent to the next member on the ring, to
    /// keep its cache warm (`set_warmup`, 0 to 1).
    warmup: Mutex<f64>,
    /// Shard: seconds over which a member that came back healthy is given
    /// its full share (`set_rampup`, 0 for at once).
    rampup: Mutex<f64>,
}

/// What a director asks of a member: can it take a request, and for how
/// long has it been able to (seconds; for the shard's rampup).
pub struct MemberState {
    pub usable: bool,
    pub healthy_for: f64,
}

/// How a shard director picks for one request (`.backend(alt=,
/// warmup=, rampup=)`).
#[derive(Clone, Copy, Debug)]
pub struct ShardOpts {
    /// Take the alt-th usable member after the key's (for restarts).
    pub alt: usize,
    /// This request's warmup share instead of the director's (`set_warmup`).
    pub warmup: Option<f64>,
    /// Whether members back from sick ramp up (`set_rampup`).
    pub rampup: bool,
    /// Which members' health counts (`healthy=`).
    pub healthy: Healthy,
}

/// A shard pick's `healthy=`: CHOSEN (the member picked must be healthy,
/// `alt` counts every member), ALL (`alt` counts healthy members only)
/// or IGNORE (health does not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Healthy {
    #[default]
    Chosen,
    All,
    Ignore,
}

impl Default for ShardOpts {
    fn default() -> ShardOpts {
        ShardOpts { alt: 0, warmup: None, rampup: true, healthy: Healthy::Chosen }
    }
}

/// A key's point on the hash circle, as Varnish's VRT_HashStrands32: the
/// SHA-256 of the text, its last four octets read little-endian. The hash
/// and shard directors and `.key()` all use it, so keys map to the same
/// backends as in Varnish.
pub fn point(text: impl AsRef<[u8]>) -> u32 {
    let d = Sha256::digest(text.as_ref());
    u32::from_le_bytes([d[28], d[29], d[30], d[31]])
}

/// A lookup key's point for a shard director's by=HASH on the backend
/// side, as Varnish takes it from the object's digest: the first four
/// octets of the SHA-256 of what vcl_hash hashed (each part followed by a
/// NUL, as our keys are), read big-endian.
pub fn digest_point(key: &[u8]) -> u32 {
    let d = Sha256::digest(key);
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

impl Director {
    pub fn new(name: &str, kind: Kind) -> Director {
        Director {
            name: name.to_string(),
            kind,
            members: Mutex::new(Vec::new()),
            meta: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            ring: Mutex::new(Vec::new()),
            replicas: Mutex::new((REPLICAS, std::collections::HashMap::new())),
            warmup: Mutex::new(0.0),
            rampup: Mutex::new(0.0),
        }
    }

    /// Shard: send this share of requests to the next member (0 to 1).
    pub fn set_warmup(&self, share: f64) {
        *self.warmup.lock().unwrap_or_else(|e| e.into_inner()) = share.clamp(0.0, 1.0);
    }

    /// Shard: a member back from sick gets its share over this many seconds.
    pub fn set_rampup(&self, secs: f64) {
        *self.rampup.lock().unwrap_or_else(|e| e.into_inner()) = secs.max(0.0);
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Vec<(String, f64)>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The members and their weights, in order.
    pub fn member_list(&self) -> Vec<(String, f64)> {
        self.members().clone()
    }

    /// The members' names, in order.
    pub fn member_names(&self) -> Vec<String> {
        self.members().iter().map(|(m, _)| m.clone()).collect()
    }

    pub fn add(&self, member: &str, weight: f64) {
        self.add_shard(member, None, if weight > 0.0 { weight } else { 1.0 }, None);
    }

    /// Add a member; on a shard director with its ident (its name on the
    /// ring, the backend's name by default) and its own rampup. A shard
    /// member whose ident is there already is skipped, as Varnish.
    pub fn add_shard(&self, member: &str, ident: Option<&str>, weight: f64, rampup: Option<f64>) {
        {
            let (mut ms, mut meta) = (self.members(), self.meta());
            let id = ident.unwrap_or(member);
            let dup = ms.iter().zip(meta.iter()).any(|((m, _), (i, _))| i.as_deref().unwrap_or(m) == id);
            if self.kind == Kind::Shard && dup {
                return;
            }
            ms.push((member.to_string(), weight));
            meta.push((ident.map(str::to_string), rampup));
        }
        if self.kind != Kind::Shard {
            return;
        }
        // The shard ring is rebuilt by reconfigure(); Varnish requires the
        // call, we also keep it current for a program that forgets it.
        self.rebuild(None, false);
    }

    pub fn remove(&self, member: &str) {
        self.remove_shard(Some(member), None);
    }

    /// Remove the members with that ident (on a shard director: its name
    /// on the ring), or else every one of that backend.
    pub fn remove_shard(&self, member: Option<&str>, ident: Option<&str>) {
        {
            let (mut ms, mut meta) = (self.members(), self.meta());
            let keep: Vec<bool> = ms
                .iter()
                .zip(meta.iter())
                .map(|((m, _), (i, _))| match ident {
                    Some(id) => i.as_deref().unwrap_or(m) != id,
                    None => Some(m.as_str()) != member,
                })
                .collect();
            let mut k = keep.iter();
            ms.retain(|_| *k.next().unwrap_or(&true));
            let mut k = keep.iter();
            meta.retain(|_| *k.next().unwrap_or(&true));
        }
        if self.kind == Kind::Shard {
            self.rebuild(None, false);
        }
    }

    fn meta(&self) -> std::sync::MutexGuard<'_, Vec<(Option<String>, Option<f64>)>> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shard: rebuild the ring from the members. A member gets `replicas`
    /// (the last one given, 67 at first) times its weight ring points when
    /// it first joins; one already on the ring keeps its points.
    pub fn reconfigure(&self, replicas: Option<u32>) {
        self.rebuild(replicas, true);
    }

    /// The ring from the members; `commit` fixes the points of members
    /// that joined since the last reconfigure() (add/remove without one
    /// keep the ring current without deciding them).
    fn rebuild(&self, replicas: Option<u32>, commit: bool) {
        let (members, meta) = (self.members().clone(), self.meta().clone());
        // Each member's name on the ring: its ident, else its backend's.
        let ids: Vec<&str> =
            members.iter().enumerate().map(|(i, (m, _))| meta.get(i).and_then(|(id, _)| id.as_deref()).unwrap_or(m)).collect();
        let mut reps = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = replicas {
            reps.0 = r.max(1);
        }
        let per = reps.0;
        reps.1.retain(|m, _| ids.contains(&m.as_str()));
        // As Varnish: no member may have more than its share of u32 points.
        let rmax = (u32::MAX - 1) / (members.len().max(1) as u32);
        let mut ring: Vec<(u32, usize)> = Vec::new();
        for (i, ((_, w), id)) in members.iter().zip(&ids).enumerate() {
            let fresh = (f64::from(per) * w).clamp(1.0, f64::from(u32::MAX)) as u32;
            let n = match reps.1.get(*id) {
                Some(n) => *n,
                None if commit => *reps.1.entry(id.to_string()).or_insert(fresh),
                None => fresh,
            };
            // Each point is the hash of the member's name and the replica's
            // number.
            for r in 0..n.min(rmax).min(1 << 20) {
                ring.push((point(format!("{id}{r}")), i));
            }
        }
        ring.sort_unstable();
        *self.ring.lock().unwrap_or_else(|e| e.into_inner()) = ring;
    }

    /// Pick a member: `healthy` says whether a member can take the request
    /// (for a nested director: whether it can pick one); `key` drives hash
    /// and shard (the URL if none).
    pub fn pick(&self, key: Option<&str>, healthy: &dyn Fn(&str) -> bool) -> Option<String> {
        let members = self.members().clone();
        if members.is_empty() {
            return None;
        }
        let n = members.len();
        match self.kind {
            Kind::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|i| &members[(start + i) % n].0).find(|m| healthy(m)).cloned()
            }
            Kind::Fallback { sticky } => {
                let from = if sticky { self.next.load(Ordering::Relaxed).min(n - 1) } else { 0 };
                let order = (from..n).chain(0..from);
                let mut found = None;
                for i in order {
                    if healthy(&members[i].0) {
                        found = Some(i);
                        break;
                    }
                }
                let i = found?;
                if sticky {
                    self.next.store(i, Ordering::Relaxed);
                }
                Some(members[i].0.clone())
            }
            Kind::Random | Kind::Hash => {
                let live: Vec<&(String, f64)> = members.iter().filter(|(m, _)| healthy(m)).collect();
                let total: f64 = live.iter().map(|(_, w)| w).sum();
                if live.is_empty() || total <= 0.0 {
                    return None;
                }
                let r = match (self.kind, key) {
                    (Kind::Hash, Some(k)) => f64::from(point(k)) / (f64::from(u32::MAX) + 1.0),
                    _ => random_unit(),
                };
                let mut at = r * total;
                for (m, w) in &live {
                    if at < *w {
                        return Some(m.clone());
                    }
                    at -= w;
                }
                live.last().map(|(m, _)| m.clone())
            }
            Kind::Shard => {
                let state = |m: &str| MemberState { usable: healthy(m), healthy_for: f64::INFINITY };
                self.pick_shard(&members, point(key.unwrap_or("")), ShardOpts::default(), &state)
            }
        }
    }

    /// Shard for the key at point `p`, as Varnish's sharddir_pick_be: the
    /// members in ring order from the key's point, each once; `alt`
    /// (capped at the members less one) skips that many (only healthy ones
    /// count with healthy=ALL), then the first usable one is taken (any
    /// with IGNORE); none: the last healthy one skipped. With alt 0, a
    /// pick still ramping up (`state` says for how long it has been
    /// healthy) yields to the next healthy member with the odds of how
    /// far along it is (unless that one ramps up too), and one that does
    /// not gives the warmup share of keys to the next.
    pub fn pick_shard(&self, members: &[(String, f64)], p: u32, opts: ShardOpts, state: &dyn Fn(&str) -> MemberState) -> Option<String> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if ring.is_empty() || members.is_empty() {
            return None;
        }
        // The first point at or after the key; past the last point, the
        // last one (Varnish's shard_lookup does not wrap there).
        let start = ring.partition_point(|(q, _)| *q < p).min(ring.len() - 1);
        let mut order: Vec<usize> = Vec::new();
        for i in 0..ring.len() {
            let m = ring[(start + i) % ring.len()].1;
            if m < members.len() && !order.contains(&m) {
                order.push(m);
            }
        }
        let states: Vec<MemberState> = order.iter().map(|&m| state(&members[m].0)).collect();
        let alt = opts.alt.min(order.len().saturating_sub(1));
        let (mut at, mut previous) = (0, None);
        // shard_next(): from `at`, the member after skipping `skip` (of the
        // healthy ones only when `healthy`), remembering the last healthy
        // one passed over.
        let next = |at: &mut usize, mut skip: usize, healthy: bool, previous: &mut Option<usize>| -> Option<usize> {
            while *at < order.len() {
                let i = *at;
                *at += 1;
                if states[i].usable || !healthy {
                    if skip == 0 {
                        return Some(i);
                    }
                    skip -= 1;
                    if states[i].usable {
                        *previous = Some(i);
                    }
                }
            }
            None
        };
        if alt > 0 && next(&mut at, alt - 1, opts.healthy == Healthy::All, &mut previous).is_none() {
            return previous.map(|i| members[order[i]].0.clone());
        }
        let Some(chosen) = next(&mut at, 0, opts.healthy != Healthy::Ignore, &mut previous) else {
            return previous.map(|i| members[order[i]].0.clone());
        };
        let warmup = opts.warmup.unwrap_or_else(|| *self.warmup.lock().unwrap_or_else(|e| e.into_inner())).clamp(0.0, 1.0);
        if alt > 0 || opts.healthy == Healthy::Ignore || (!opts.rampup && warmup == 0.0) {
            return Some(members[order[chosen]].0.clone());
        }
        let Some(other) = next(&mut at, 0, true, &mut previous) else { return Some(members[order[chosen]].0.clone()) };
        let global = *self.rampup.lock().unwrap_or_else(|e| e.into_inner());
        let rampup_of = |i: usize| self.meta().get(order[i]).and_then(|(_, r)| *r).unwrap_or(global);
        let (chosen_r, other_r) = (rampup_of(chosen), rampup_of(other));
        let since = states[chosen].healthy_for;
        let moved = if since < chosen_r {
            opts.rampup && states[other].healthy_for >= other_r && random_unit() * chosen_r >= since
        } else {
            warmup > 0.0 && random_unit() <= warmup
        };
        Some(members[order[if moved { other } else { chosen }]].0.clone())
    }
}

/// A random number in [0, 1) (time and a counter through SHA-256: no
/// dependency for a director's coin).
fn random_unit() -> f64 {
    static N: AtomicUsize = AtomicUsize::new(0);
    let seed = format!("{:?}{}", std::time::SystemTime::now(), N.fetch_add(1, Ordering::Relaxed));
    f64::from(point(seed)) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(kind: Kind, members: &[&str]) -> Director {
        let d = Director::new("d", kind);
        for m in members {
            d.add(m, 1.0);
        }
        d
    }

    #[test]
    fn round_robin_and_fallback_skip_the_sick() {
        let d = dir(Kind::RoundRobin, &["a", "b", "c"]);
        let all = |_: &str| true;
        let picks: Vec<String> = (0..6).map(|_| d.pick(None, &all).unwrap()).collect();
        assert_eq!(picks, ["a", "b", "c", "a", "b", "c"]);
        let no_b = |m: &str| m != "b";
        assert!((0..6).all(|_| d.pick(None, &no_b).unwrap() != "b"));
        assert_eq!(d.pick(None, &|_| false), None);
        let f = dir(Kind::Fallback { sticky: false }, &["a", "b", "c"]);
        assert_eq!(f.pick(None, &all).as_deref(), Some("a"));
        assert_eq!(f.pick(None, &|m| m != "a").as_deref(), Some("b"));
        assert_eq!(f.pick(None, &all).as_deref(), Some("a"), "not sticky: back to the first");
        let s = dir(Kind::Fallback { sticky: true }, &["a", "b", "c"]);
        assert_eq!(s.pick(None, &|m| m != "a").as_deref(), Some("b"));
        assert_eq!(s.pick(None, &all).as_deref(), Some("b"), "sticky: stays on b");
    }

    #[test]
    fn random_follows_weights_and_hash_is_stable() {
        let d = Director::new("r", Kind::Random);
        d.add("heavy", 3.0);
        d.add("light", 1.0);
        let heavy = (0..4000).filter(|_| d.pick(None, &|_| true).as_deref() == Some("heavy")).count();
        assert!((2700..3300).contains(&heavy), "{heavy} of 4000 for weight 3 of 4");
        let h = dir(Kind::Hash, &["a", "b", "c"]);
        let first = h.pick(Some("/some/url"), &|_| true);
        assert!((0..10).all(|_| h.pick(Some("/some/url"), &|_| true) == first));
    }

    #[test]
    fn shard_spreads_keys_and_moves_only_the_removed_share() {
        let d = dir(Kind::Shard, &["s1", "s2", "s3", "s4"]);
        let keys: Vec<String> = (0..20_000).map(|i| format!("/object/{i}")).collect();
        let before: Vec<String> = keys.iter().map(|k| d.pick(Some(k), &|_| true).unwrap()).collect();
        for m in ["s1", "s2", "s3", "s4"] {
            let share = before.iter().filter(|b| *b == m).count() as f64 / keys.len() as f64;
            // Varnish's 67 points per member spread keys less evenly than
            // more points would; the mapping must be Varnish's, so the
            // tolerance is what its ring gives.
            assert!((share - 0.25).abs() <= 0.045, "{m} holds {share:.3} of the keys (25% +-18%)");
        }
        d.remove("s3");
        let after: Vec<String> = keys.iter().map(|k| d.pick(Some(k), &|_| true).unwrap()).collect();
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        let s3 = before.iter().filter(|b| *b == "s3").count();
        assert_eq!(moved, s3, "only s3's keys moved");
        assert!(before.iter().zip(&after).all(|(b, a)| b == "s3" || b == a));
        // Warmup: about that share of a member's keys go to the next one.
        d.set_warmup(0.2);
        let moved = keys.iter().zip(&after).filter(|(k, a)| d.pick(Some(k), &|_| true).as_ref() != Some(a)).count();
        let share = moved as f64 / keys.len() as f64;
        assert!((0.15..0.25).contains(&share), "warmup moved {share:.3}");
        d.set_warmup(0.0);
        // Rampup: a member healthy for a quarter of the rampup takes about a
        // quarter of its keys.
        d.set_rampup(40.0);
        let members = d.member_list();
        let fresh = |m: &str| MemberState { usable: true, healthy_for: if m == "s1" { 10.0 } else { f64::INFINITY } };
        let s1_keys: Vec<&String> = keys.iter().zip(&after).filter(|(_, a)| *a == "s1").map(|(k, _)| k).collect();
        let kept =
            s1_keys.iter().filter(|k| d.pick_shard(&members, point(k), ShardOpts::default(), &fresh).as_deref() == Some("s1")).count();
        let share = kept as f64 / s1_keys.len() as f64;
        assert!((0.18..0.32).contains(&share), "ramping s1 kept {share:.3}");
        let no_ramp = ShardOpts { rampup: false, ..ShardOpts::default() };
        assert!(s1_keys.iter().all(|k| d.pick_shard(&members, point(k), no_ramp, &fresh).as_deref() == Some("s1")));
        // alt=1: the next member on the ring, never the key's own.
        let alt = ShardOpts { alt: 1, rampup: false, ..ShardOpts::default() };
        assert!(s1_keys.iter().all(|k| d.pick_shard(&members, point(k), alt, &fresh).is_some_and(|m| m != "s1")));
        d.set_rampup(0.0);
        // A sick member's keys go to the next on the ring; the others stay.
        let sick: Vec<String> = keys.iter().map(|k| d.pick(Some(k), &|m| m != "s1").unwrap()).collect();
        assert!(after.iter().zip(&sick).all(|(a, s)| a == "s1" || a == s));
    }
}
