//! vmod saintmode's directors at run time (the VCL side is
//! vcl::compile::saintmode): one per backend, with the list of objects
//! (by hash) the backend failed on. The director is sick for a listed
//! object, and for every object once `threshold` are listed; expired
//! entries leave the list only when a health check walks it, as in the
//! vmod (so a count includes them until then).

use std::sync::Mutex;

/// One saintmode director.
pub struct Saint {
    /// The object's name (the director's).
    pub name: String,
    /// The backend it stands for.
    pub backend: String,
    /// The vmod keeps it unsigned: a negative one never trips.
    pub threshold: u32,
    /// (object hash, until when), newest first.
    troubles: Mutex<Vec<(Vec<u8>, f64)>>,
}

/// What a health check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// This object is on the list.
    Blacklisted,
    /// The list holds `threshold` objects or more.
    Threshold,
}

impl Saint {
    pub fn new(name: &str, backend: &str, threshold: i64) -> Saint {
        Saint { name: name.to_string(), backend: backend.to_string(), threshold: threshold as u32, troubles: Mutex::new(Vec::new()) }
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<u8>, f64)>> {
        self.troubles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Put an object on the list until `until`.
    pub fn blacklist(&self, digest: &[u8], until: f64) {
        self.list().insert(0, (digest.to_vec(), until));
    }

    pub fn count(&self) -> usize {
        self.list().len()
    }

    /// The vmod's is_digest_healthy: entries expired at `now` leave the
    /// list (up to the first entry for `digest`, where the walk stops).
    pub fn check(&self, digest: Option<&[u8]>, now: f64) -> Health {
        let mut list = self.list();
        let mut listed = false;
        let mut i = 0;
        while i < list.len() {
            if list[i].1 < now {
                list.remove(i);
                continue;
            }
            if digest.is_some_and(|d| d == list[i].0.as_slice()) {
                listed = true;
                break;
            }
            i += 1;
        }
        match (listed, self.threshold as usize <= list.len()) {
            (true, _) => Health::Blacklisted,
            (false, true) => Health::Threshold,
            _ => Health::Healthy,
        }
    }

    /// The director's healthy(): with no list (or no threshold) only the
    /// backend's own health counts (the caller checks it).
    pub fn healthy(&self, digest: Option<&[u8]>, now: f64) -> Health {
        if self.threshold == 0 || self.count() == 0 {
            return Health::Healthy;
        }
        self.check(digest, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_sick_while_listed_and_all_past_the_threshold() {
        let s = Saint::new("sm", "b", 2);
        assert_eq!(s.healthy(Some(b"a"), 0.0), Health::Healthy);
        s.blacklist(b"a", 10.0);
        assert_eq!(s.healthy(Some(b"a"), 5.0), Health::Blacklisted);
        assert_eq!(s.healthy(Some(b"b"), 5.0), Health::Healthy);
        s.blacklist(b"b", 10.0);
        assert_eq!(s.healthy(Some(b"c"), 5.0), Health::Threshold);
        // Expired entries stay counted until a check walks past them.
        assert_eq!(s.count(), 2);
        assert_eq!(s.healthy(Some(b"c"), 11.0), Health::Healthy);
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn a_negative_threshold_never_trips_and_zero_disables() {
        let s = Saint::new("sm", "b", -1);
        s.blacklist(b"a", 10.0);
        assert_eq!(s.healthy(Some(b"x"), 0.0), Health::Healthy);
        let z = Saint::new("sm", "b", 0);
        z.blacklist(b"a", 10.0);
        assert_eq!(z.healthy(Some(b"a"), 0.0), Health::Healthy);
        // The client-side check has no such shortcut.
        assert_eq!(z.check(None, 0.0), Health::Threshold);
    }
}
