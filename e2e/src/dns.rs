//! A DNS server for tests, on 127.0.0.1: it answers A and AAAA queries
//! from a table the test changes while cache-d runs (a resolver the test
//! controls, for dynamic backends), and can be made to fail (SERVFAIL) or
//! to answer that a name does not exist.

use std::collections::HashMap;
use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};

#[derive(Default)]
struct State {
    /// Name (lower case, no trailing dot) → addresses.
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
    /// Answer SERVFAIL to everything.
    failing: AtomicBool,
    queries: AtomicU64,
    stop: AtomicBool,
}

pub struct Dns {
    pub port: u16,
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Dns {
    pub fn start() -> Dns {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the test DNS server");
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let port = sock.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        let thread = std::thread::spawn(move || serve(&sock, &st));
        Dns { port, state, thread: Some(thread) }
    }

    /// `name` resolves to `addrs` from now on (none: it does not exist).
    pub fn set(&self, name: &str, addrs: &[&str]) {
        let addrs = addrs.iter().map(|a| a.parse().expect("an address")).collect();
        self.state.names.lock().unwrap().insert(name.trim_end_matches('.').to_ascii_lowercase(), addrs);
    }

    /// Answer SERVFAIL to every query (a DNS outage) until turned off.
    pub fn fail(&self, on: bool) {
        self.state.failing.store(on, Ordering::SeqCst);
    }

    /// Queries answered so far.
    pub fn queries(&self) -> u64 {
        self.state.queries.load(Ordering::SeqCst)
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(sock: &UdpSocket, st: &State) {
    let mut buf = [0u8; 1500];
    while !st.stop.load(Ordering::SeqCst) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
        st.queries.fetch_add(1, Ordering::SeqCst);
        if let Ok(bytes) = answer(&q, st).to_vec() {
            let _ = sock.send_to(&bytes, from);
        }
    }
}

fn answer(q: &Message, st: &State) -> Message {
    let mut r = Message::response(q.metadata.id, OpCode::Query);
    r.metadata.recursion_available = true;
    r.metadata.authoritative = true;
    for query in &q.queries {
        r.add_query(query.clone());
    }
    if st.failing.load(Ordering::SeqCst) {
        r.metadata.response_code = ResponseCode::ServFail;
        return r;
    }
    let names = st.names.lock().unwrap();
    for query in &q.queries {
        let name = query.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
        let Some(addrs) = names.get(&name).filter(|a| !a.is_empty()) else {
            r.metadata.response_code = ResponseCode::NXDomain;
            continue;
        };
        for a in addrs {
            let rdata = match (a, query.query_type()) {
                (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                _ => continue,
            };
            // A short TTL: the director's own ttl decides in the tests.
            r.add_answer(Record::from_rdata(query.name().clone(), 1, rdata));
        }
    }
    r
}
