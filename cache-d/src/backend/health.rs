//! A backend's health as its probe sees it: the probe declaration, the
//! window of recent results and the healthy/sick decision.

use std::time::Duration;

/// A probe declaration (`.probe = { ... }` or `probe name { ... }`).
#[derive(Clone, Debug)]
pub struct ProbeSpec {
    pub url: String,
    /// `.request`: the request lines, sent as they are (CRLF added).
    pub request: Option<Vec<String>>,
    pub expected: u16,
    pub timeout: Duration,
    pub interval: Duration,
    pub window: u32,
    pub threshold: u32,
    pub initial: u32,
}

impl Default for ProbeSpec {
    /// Varnish's defaults.
    fn default() -> ProbeSpec {
        ProbeSpec {
            url: "/".into(),
            request: None,
            expected: 200,
            timeout: Duration::from_secs(2),
            interval: Duration::from_secs(5),
            window: 8,
            threshold: 3,
            initial: 2,
        }
    }
}

/// What the probes have seen: bit 0 is the newest probe.
#[derive(Clone, Debug, Default)]
pub struct ProbeState {
    pub good: u64,
    pub ipv4: u64,
    pub xmit: u64,
    pub recv: u64,
    pub happy: bool,
    /// Average response time of good probes (exponential, as Varnish).
    pub avg: f64,
    pub probes: u64,
}

impl ProbeState {
    /// The state before any probe: `initial` good results.
    pub fn initial(spec: &ProbeSpec) -> ProbeState {
        let bits = if spec.initial >= 64 { u64::MAX } else { (1u64 << spec.initial) - 1 };
        let mut s = ProbeState { good: bits, ipv4: bits, xmit: bits, recv: bits, ..ProbeState::default() };
        s.happy = s.good_in(spec.window) >= spec.threshold;
        s
    }

    /// Good results among the last `window`.
    pub fn good_in(&self, window: u32) -> u32 {
        let mask = if window >= 64 { u64::MAX } else { (1u64 << window) - 1 };
        (self.good & mask).count_ones()
    }

    /// Record one probe; returns (was healthy, is healthy).
    pub fn record(&mut self, spec: &ProbeSpec, ok: Outcome, rtt: f64) -> (bool, bool) {
        let shift = |b: &mut u64, v: bool| *b = (*b << 1) | u64::from(v);
        shift(&mut self.ipv4, ok.connected);
        shift(&mut self.xmit, ok.sent);
        shift(&mut self.recv, ok.received);
        shift(&mut self.good, ok.good);
        if ok.good {
            self.avg = if self.probes == 0 || self.avg == 0.0 { rtt } else { self.avg + (rtt - self.avg) / 4.0 };
        }
        self.probes += 1;
        let was = self.happy;
        self.happy = self.good_in(spec.window) >= spec.threshold;
        (was, self.happy)
    }

    /// The flags of the newest probe, as Backend_health shows them
    /// (`4--X-RH` style: IPv4, IPv6, Unix, xmit error/ok, recv error/ok,
    /// happy).
    pub fn flags(&self) -> String {
        let bit = |b: u64| b & 1 == 1;
        let mut s = String::new();
        s.push(if bit(self.ipv4) { '4' } else { '-' });
        s.push('-');
        s.push('-');
        s.push(if !bit(self.xmit) && bit(self.ipv4) { 'x' } else { '-' });
        s.push(if bit(self.xmit) { 'X' } else { '-' });
        s.push(if !bit(self.recv) && bit(self.xmit) { 'r' } else { '-' });
        s.push(if bit(self.recv) { 'R' } else { '-' });
        s.push(if bit(self.good) { 'H' } else { '-' });
        s
    }
}

/// How far one probe got.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    pub connected: bool,
    pub sent: bool,
    pub received: bool,
    pub good: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_threshold() {
        let spec = ProbeSpec { window: 5, threshold: 3, initial: 2, ..ProbeSpec::default() };
        let mut st = ProbeState::initial(&spec);
        assert!(!st.happy, "2 initial good of 3 needed");
        let good = Outcome { connected: true, sent: true, received: true, good: true };
        let bad = Outcome::default();
        assert_eq!(st.record(&spec, good, 0.001), (false, true), "back healthy at the third good");
        assert_eq!(st.record(&spec, bad, 0.0), (true, true), "3 of the last 5 are still good");
        assert_eq!(st.record(&spec, bad, 0.0), (true, true));
        assert_eq!(st.good_in(5), 3);
        assert_eq!(st.record(&spec, bad, 0.0), (true, false), "went sick: 2 of 5");
        assert_eq!(st.record(&spec, good, 0.002), (false, false));
        assert_eq!(st.record(&spec, good, 0.002), (false, false), "2 of the last 5");
        assert_eq!(st.record(&spec, good, 0.002), (false, true), "back healthy");
        assert_eq!(st.flags(), "4---X-RH");
        st.record(&spec, Outcome { connected: true, ..Outcome::default() }, 0.0);
        assert_eq!(st.flags(), "4--x----");
    }
}
