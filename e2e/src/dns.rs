//! A DNS server for tests, on 127.0.0.1: it answers A and AAAA queries
//! from a table the test changes while cache-d runs (a resolver the test
//! controls, for dynamic backends), and can be made to fail (SERVFAIL) or
//! to answer that a name does not exist. UDP and TCP on one port: an
//! answer larger than the query allows in a datagram goes out truncated,
//! and the resolver asks again over TCP (so a name can have thousands of
//! addresses: some 2,600 IPv4 ones fit in a TCP message as hickory writes
//! it, each record with its name in full).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
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
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Dns {
    pub fn start() -> Dns {
        let (sock, tcp) = (0..50)
            .find_map(|_| {
                let sock = UdpSocket::bind("127.0.0.1:0").ok()?;
                let tcp = TcpListener::bind(("127.0.0.1", sock.local_addr().ok()?.port())).ok()?;
                Some((sock, tcp))
            })
            .expect("bind the test DNS server (UDP and TCP on one port)");
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let port = sock.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let (st, st2) = (state.clone(), state.clone());
        let threads = vec![std::thread::spawn(move || serve(&sock, &st)), std::thread::spawn(move || serve_tcp(&tcp, &st2))];
        Dns { port, state, threads }
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
        for t in self.threads.drain(..) {
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
        let r = answer(&q, st);
        let bytes = match r.to_vec() {
            Ok(b) if b.len() > usize::from(q.max_payload()) => r.truncate().to_vec(),
            other => other,
        };
        if let Ok(bytes) = bytes {
            let _ = sock.send_to(&bytes, from);
        }
    }
}

/// Queries over TCP (RFC 1035 §4.2.2: each message after its length in
/// two bytes), one connection at a time.
fn serve_tcp(l: &TcpListener, st: &State) {
    while !st.stop.load(Ordering::SeqCst) {
        let Ok((mut c, _)) = l.accept() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = c.set_nonblocking(false);
        let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
        while let Some(q) = read_tcp(&mut c) {
            st.queries.fetch_add(1, Ordering::SeqCst);
            let Ok(bytes) = answer(&q, st).to_vec() else { break };
            let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_be_bytes();
            if c.write_all(&[&len[..], &bytes].concat()).is_err() {
                break;
            }
        }
    }
}

fn read_tcp(c: &mut TcpStream) -> Option<Message> {
    let mut len = [0u8; 2];
    c.read_exact(&mut len).ok()?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    c.read_exact(&mut msg).ok()?;
    Message::from_vec(&msg).ok()
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
