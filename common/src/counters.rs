//! The counter table: the only place counter names, kinds and descriptions live.
//!
//! The daemon writes values by [`C`] index; the segment carries a copy of this
//! table (see [`crate::segment`]) so readers built from another version still
//! show the right labels. Names follow Varnish 7.1 (`MAIN.*`, `MGT.*`), so
//! dashboards built for varnishstat keep working. Note: the issue that asked
//! for these listed `MAIN.sess_drop`; Varnish 7 calls it `MAIN.sess_dropped`
//! and we follow Varnish.

/// Counter (monotonic), gauge (goes up and down) or bitmap (bits of
/// state, such as a backend's last 64 probe results); varnishstat's `flag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Bitmap,
}

impl Kind {
    /// The one-letter code used in the segment and in `cache-stat -j`.
    pub fn code(self) -> u8 {
        match self {
            Kind::Counter => b'c',
            Kind::Gauge => b'g',
            Kind::Bitmap => b'b',
        }
    }
    pub fn from_code(c: u8) -> Option<Kind> {
        match c {
            b'c' => Some(Kind::Counter),
            b'g' => Some(Kind::Gauge),
            b'b' => Some(Kind::Bitmap),
            _ => None,
        }
    }
}

/// Verbosity level: INFO < DIAG < DEBUG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info = 0,
    Diag = 1,
    Debug = 2,
}

impl Level {
    pub fn from_code(c: u8) -> Option<Level> {
        match c {
            0 => Some(Level::Info),
            1 => Some(Level::Diag),
            2 => Some(Level::Debug),
            _ => None,
        }
    }
}

/// How a value is shown: integer, bytes, duration or bitmap (varnishstat's
/// `format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Integer,
    Bytes,
    Duration,
    Bitmap,
}

impl Format {
    pub fn code(self) -> u8 {
        match self {
            Format::Integer => b'i',
            Format::Bytes => b'B',
            Format::Duration => b'd',
            Format::Bitmap => b'b',
        }
    }
    pub fn from_code(c: u8) -> Option<Format> {
        match c {
            b'i' => Some(Format::Integer),
            b'B' => Some(Format::Bytes),
            b'd' => Some(Format::Duration),
            b'b' => Some(Format::Bitmap),
            _ => None,
        }
    }
}

/// One row of the counter table.
#[derive(Clone, Copy, Debug)]
pub struct CounterDef {
    pub name: &'static str,
    pub kind: Kind,
    pub level: Level,
    pub format: Format,
    pub description: &'static str,
}

macro_rules! counter_table {
    ($( $id:ident => $name:literal, $kind:ident, $level:ident, $fmt:ident, $desc:literal; )*) => {
        /// Index of a counter in [`TABLE`] and in the segment.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u16)]
        pub enum C { $($id,)* }

        /// Every counter, in segment order.
        pub static TABLE: &[CounterDef] = &[
            $( CounterDef {
                name: $name,
                kind: Kind::$kind,
                level: Level::$level,
                format: Format::$fmt,
                description: $desc,
            }, )*
        ];
    };
}

counter_table! {
    MgtUptime => "MGT.uptime", Counter, Info, Duration, "Management process uptime";
    MgtChildStart => "MGT.child_start", Counter, Diag, Integer, "Child process started";
    MgtChildExit => "MGT.child_exit", Counter, Diag, Integer, "Child process normal exit";
    MgtChildStop => "MGT.child_stop", Counter, Diag, Integer, "Child process unexpected exit";
    MgtChildDied => "MGT.child_died", Counter, Diag, Integer, "Child process died (signal)";
    MgtChildDump => "MGT.child_dump", Counter, Diag, Integer, "Child process core dumped";
    MgtChildPanic => "MGT.child_panic", Counter, Diag, Integer, "Child process panic";
    MainUptime => "MAIN.uptime", Counter, Info, Duration, "Child process uptime";
    SessConn => "MAIN.sess_conn", Counter, Info, Integer, "Sessions accepted";
    SessFail => "MAIN.sess_fail", Counter, Info, Integer, "Session accept failures";
    SessDropped => "MAIN.sess_dropped", Counter, Info, Integer, "Sessions dropped for lack of a worker";
    SessClosed => "MAIN.sess_closed", Counter, Info, Integer, "Session Closed";
    SessClosedErr => "MAIN.sess_closed_err", Counter, Info, Integer, "Session Closed with error";
    SessReadahead => "MAIN.sess_readahead", Counter, Info, Integer, "Session Read Ahead";
    ScRemClose => "MAIN.sc_rem_close", Counter, Diag, Integer, "Session OK  REM_CLOSE";
    ScReqClose => "MAIN.sc_req_close", Counter, Diag, Integer, "Session OK  REQ_CLOSE";
    ScReqHttp10 => "MAIN.sc_req_http10", Counter, Diag, Integer, "Session Err REQ_HTTP10";
    ScRxBad => "MAIN.sc_rx_bad", Counter, Diag, Integer, "Session Err RX_BAD";
    ScRxBody => "MAIN.sc_rx_body", Counter, Diag, Integer, "Session Err RX_BODY";
    ScRxJunk => "MAIN.sc_rx_junk", Counter, Diag, Integer, "Session Err RX_JUNK";
    ScRxOverflow => "MAIN.sc_rx_overflow", Counter, Diag, Integer, "Session Err RX_OVERFLOW";
    ScRxTimeout => "MAIN.sc_rx_timeout", Counter, Diag, Integer, "Session Err RX_TIMEOUT";
    ScRxCloseIdle => "MAIN.sc_rx_close_idle", Counter, Diag, Integer, "Session OK  RX_CLOSE_IDLE";
    ScTxPipe => "MAIN.sc_tx_pipe", Counter, Diag, Integer, "Session OK  TX_PIPE";
    ScTxError => "MAIN.sc_tx_error", Counter, Diag, Integer, "Session Err TX_ERROR";
    ScTxEof => "MAIN.sc_tx_eof", Counter, Diag, Integer, "Session OK  TX_EOF";
    ScRespClose => "MAIN.sc_resp_close", Counter, Diag, Integer, "Session OK  RESP_CLOSE";
    ScVclFailure => "MAIN.sc_vcl_failure", Counter, Diag, Integer, "Session Err VCL_FAILURE";
    ScRangeShort => "MAIN.sc_range_short", Counter, Diag, Integer, "Session Err RANGE_SHORT";
    ScRapidReset => "MAIN.sc_rapid_reset", Counter, Diag, Integer, "Session Err RAPID_RESET";
    ClientReq400 => "MAIN.client_req_400", Counter, Info, Integer, "Client requests received, subject to 400 errors";
    ClientReq => "MAIN.client_req", Counter, Info, Integer, "Good client requests received";
    ClientReq417 => "MAIN.client_req_417", Counter, Info, Integer, "Client requests received, subject to 417 errors";
    ReqReset => "MAIN.req_reset", Counter, Info, Integer, "Requests reset";
    CacheHit => "MAIN.cache_hit", Counter, Info, Integer, "Cache hits";
    CacheHitGrace => "MAIN.cache_hit_grace", Counter, Info, Integer, "Cache grace hits";
    CacheHitpass => "MAIN.cache_hitpass", Counter, Info, Integer, "Cache hits for pass.";
    CacheHitmiss => "MAIN.cache_hitmiss", Counter, Info, Integer, "Cache hits for miss.";
    CacheMiss => "MAIN.cache_miss", Counter, Info, Integer, "Cache misses";
    BerespUncacheable => "MAIN.beresp_uncacheable", Counter, Info, Integer, "Uncacheable backend responses";
    BerespShortlived => "MAIN.beresp_shortlived", Counter, Info, Integer, "Shortlived objects";
    BackendConn => "MAIN.backend_conn", Counter, Info, Integer, "Backend conn. success";
    BackendUnhealthy => "MAIN.backend_unhealthy", Counter, Info, Integer, "Backend conn. not attempted";
    BackendBusy => "MAIN.backend_busy", Counter, Info, Integer, "Backend conn. too many";
    BackendFail => "MAIN.backend_fail", Counter, Info, Integer, "Backend conn. failures";
    BackendReuse => "MAIN.backend_reuse", Counter, Info, Integer, "Backend conn. reuses";
    BackendRecycle => "MAIN.backend_recycle", Counter, Info, Integer, "Backend conn. recycles";
    BackendRetry => "MAIN.backend_retry", Counter, Info, Integer, "Backend conn. retry";
    BackendReq => "MAIN.backend_req", Counter, Info, Integer, "Backend requests made";
    FetchHead => "MAIN.fetch_head", Counter, Info, Integer, "Fetch no body (HEAD)";
    FetchLength => "MAIN.fetch_length", Counter, Info, Integer, "Fetch with Length";
    FetchChunked => "MAIN.fetch_chunked", Counter, Info, Integer, "Fetch chunked";
    FetchEof => "MAIN.fetch_eof", Counter, Info, Integer, "Fetch EOF";
    FetchNone => "MAIN.fetch_none", Counter, Info, Integer, "Fetch no body";
    Fetch204 => "MAIN.fetch_204", Counter, Info, Integer, "Fetch no body (204)";
    Fetch304 => "MAIN.fetch_304", Counter, Info, Integer, "Fetch no body (304)";
    FetchFailed => "MAIN.fetch_failed", Counter, Info, Integer, "Fetch failed (all causes)";
    BusySleep => "MAIN.busy_sleep", Counter, Info, Integer, "Number of requests sent to sleep on busy objhdr";
    BusyWakeup => "MAIN.busy_wakeup", Counter, Info, Integer, "Number of requests woken after sleep on busy objhdr";
    BusyKilled => "MAIN.busy_killed", Counter, Info, Integer, "Number of requests killed after sleep on busy objhdr";
    NExpired => "MAIN.n_expired", Counter, Info, Integer, "Number of expired objects";
    NLruNuked => "MAIN.n_lru_nuked", Counter, Info, Integer, "Number of LRU nuked objects";
    NLruLimited => "MAIN.n_lru_limited", Counter, Info, Integer, "Reached nuke_limit";
    LostHdr => "MAIN.losthdr", Counter, Info, Integer, "HTTP header overflows";
    SSess => "MAIN.s_sess", Counter, Info, Integer, "Total sessions seen";
    SPipe => "MAIN.s_pipe", Counter, Info, Integer, "Total pipe sessions seen";
    SPass => "MAIN.s_pass", Counter, Info, Integer, "Total pass-ed requests seen";
    SFetch => "MAIN.s_fetch", Counter, Info, Integer, "Total backend fetches initiated";
    SBgfetch => "MAIN.s_bgfetch", Counter, Info, Integer, "Total backend background fetches initiated";
    SSynth => "MAIN.s_synth", Counter, Info, Integer, "Total synthetic responses made";
    SReqHdrbytes => "MAIN.s_req_hdrbytes", Counter, Info, Bytes, "Request header bytes";
    SReqBodybytes => "MAIN.s_req_bodybytes", Counter, Info, Bytes, "Request body bytes";
    SRespHdrbytes => "MAIN.s_resp_hdrbytes", Counter, Info, Bytes, "Response header bytes";
    SRespBodybytes => "MAIN.s_resp_bodybytes", Counter, Info, Bytes, "Response body bytes";
    SPipeHdrbytes => "MAIN.s_pipe_hdrbytes", Counter, Info, Bytes, "Request header bytes received for piped sessions";
    SPipeIn => "MAIN.s_pipe_in", Counter, Info, Bytes, "Piped bytes from client";
    SPipeOut => "MAIN.s_pipe_out", Counter, Info, Bytes, "Piped bytes to client";
    NPipe => "MAIN.n_pipe", Gauge, Info, Integer, "Number of ongoing pipe sessions";
    PipeLimited => "MAIN.pipe_limited", Counter, Info, Integer, "Pipes hit pipe_sess_max";
    NPurges => "MAIN.n_purges", Counter, Info, Integer, "Number of purge operations executed";
    NObjPurged => "MAIN.n_obj_purged", Counter, Info, Integer, "Number of purged objects";
    XkeyKeys => "MAIN.xkey_keys", Gauge, Info, Integer, "Surrogate keys indexed (cachekit)";
    XkeyPurges => "MAIN.xkey_purges", Counter, Info, Integer, "xkey.purge() calls (cachekit)";
    XkeySoftpurges => "MAIN.xkey_softpurges", Counter, Info, Integer, "xkey.softpurge() calls (cachekit)";
    XkeyObjPurged => "MAIN.xkey_obj_purged", Counter, Info, Integer, "Objects removed by xkey.purge() (cachekit)";
    XkeyObjSoftpurged => "MAIN.xkey_obj_softpurged", Counter, Info, Integer, "Objects made stale by xkey.softpurge() (cachekit)";
    Bans => "MAIN.bans", Gauge, Info, Integer, "Count of bans";
    BansCompleted => "MAIN.bans_completed", Gauge, Diag, Integer, "Number of bans marked 'completed'";
    BansObj => "MAIN.bans_obj", Gauge, Diag, Integer, "Number of bans using obj.*";
    BansReq => "MAIN.bans_req", Gauge, Diag, Integer, "Number of bans using req.*";
    BansAdded => "MAIN.bans_added", Counter, Diag, Integer, "Bans added";
    BansDeleted => "MAIN.bans_deleted", Counter, Diag, Integer, "Bans deleted";
    BansTested => "MAIN.bans_tested", Counter, Diag, Integer, "Bans tested against objects (lookup)";
    BansTestsTested => "MAIN.bans_tests_tested", Counter, Diag, Integer, "Ban tests tested against objects (lookup)";
    BansObjKilled => "MAIN.bans_obj_killed", Counter, Diag, Integer, "Objects killed by bans (lookup)";
    BansLurkerTested => "MAIN.bans_lurker_tested", Counter, Diag, Integer, "Bans tested against objects (lurker)";
    BansLurkerObjKilled => "MAIN.bans_lurker_obj_killed", Counter, Diag, Integer, "Objects killed by bans (lurker)";
    BansDups => "MAIN.bans_dups", Counter, Diag, Integer, "Bans superseded by other bans";
    NObject => "MAIN.n_object", Gauge, Info, Integer, "object structs made";
    NObjectcore => "MAIN.n_objectcore", Gauge, Info, Integer, "objectcore structs made";
    NObjecthead => "MAIN.n_objecthead", Gauge, Info, Integer, "objecthead structs made";
    NBackend => "MAIN.n_backend", Gauge, Info, Integer, "Number of backends";
    NVcl => "MAIN.n_vcl", Gauge, Info, Integer, "Number of loaded VCLs in total";
    NVclAvail => "MAIN.n_vcl_avail", Gauge, Diag, Integer, "Number of VCLs available";
    NVclDiscard => "MAIN.n_vcl_discard", Gauge, Diag, Integer, "Number of discarded VCLs";
    VclFail => "MAIN.vcl_fail", Counter, Info, Integer, "VCL failures";
    ShmRecords => "MAIN.shm_records", Counter, Diag, Integer, "SHM records";
    ShmWrites => "MAIN.shm_writes", Counter, Diag, Integer, "SHM writes";
    ShmCycles => "MAIN.shm_cycles", Counter, Diag, Integer, "SHM cycles through buffer";
    EsiReq => "MAIN.esi_req", Counter, Info, Integer, "ESI subrequests";
    EsiErrors => "MAIN.esi_errors", Counter, Diag, Integer, "ESI parse errors (unlock)";
    EsiWarnings => "MAIN.esi_warnings", Counter, Diag, Integer, "ESI parse warnings (unlock)";
    NGzip => "MAIN.n_gzip", Counter, Info, Integer, "Gzip operations";
    NGunzip => "MAIN.n_gunzip", Counter, Info, Integer, "Gunzip operations";
    NTestGunzip => "MAIN.n_test_gunzip", Counter, Info, Integer, "Test gunzip operations";
    NBrotli => "MAIN.n_brotli", Counter, Info, Integer, "Brotli copies made (cachekit)";
    TlsHandshakes => "MAIN.tls_handshakes", Counter, Info, Integer, "TLS handshakes completed (cachekit)";
    TlsHandshakeFail => "MAIN.tls_handshake_fail", Counter, Info, Integer, "TLS handshakes failed or timed out (cachekit)";
    TlsCertExpiring => "MAIN.tls_cert_expiring", Gauge, Info, Integer, "Live certificates within tls_cert_warn of their end (cachekit)";
    H3Conn => "MAIN.h3_conn", Counter, Info, Integer, "QUIC connections established for HTTP/3 (cachekit)";
    H3HandshakeFail => "MAIN.h3_handshake_fail", Counter, Info, Integer, "QUIC handshakes failed or timed out (cachekit)";
    H3Retry => "MAIN.h3_retry", Counter, Diag, Integer, "QUIC Retry packets sent to validate a client's address (cachekit)";
    H3Refused => "MAIN.h3_refused", Counter, Diag, Integer, "QUIC connections refused: feature http3 off, or max_connections reached (cachekit)";
    H3Streams => "MAIN.h3_streams", Counter, Info, Integer, "HTTP/3 request streams served (cachekit)";
    H3StreamErrors => "MAIN.h3_stream_errors", Counter, Diag, Integer, "HTTP/3 request streams that failed before a request (bad headers, reset) (cachekit)";
}

/// The counters every backend carries, named `VBE.<vcl>.<backend>.<field>`
/// (Varnish 7.1's set). They live in the segment's dynamic slots, made
/// when a program's backends are and freed with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vbe {
    Happy,
    BereqHdrbytes,
    BereqBodybytes,
    BerespHdrbytes,
    BerespBodybytes,
    PipeHdrbytes,
    PipeOut,
    PipeIn,
    Conn,
    Req,
    Unhealthy,
    Busy,
    Fail,
    FailEacces,
    FailEaddrnotavail,
    FailEconnrefused,
    FailEnetunreach,
    FailEtimedout,
    FailOther,
    Helddown,
}

const fn field(name: &'static str, kind: Kind, level: Level, format: Format, description: &'static str) -> CounterDef {
    CounterDef { name, kind, level, format, description }
}

/// The fields of [`Vbe`], in order.
pub static VBE: [CounterDef; 20] = [
    field("happy", Kind::Bitmap, Level::Info, Format::Bitmap, "Happy health probes"),
    field("bereq_hdrbytes", Kind::Counter, Level::Info, Format::Bytes, "Request header bytes"),
    field("bereq_bodybytes", Kind::Counter, Level::Info, Format::Bytes, "Request body bytes"),
    field("beresp_hdrbytes", Kind::Counter, Level::Info, Format::Bytes, "Response header bytes"),
    field("beresp_bodybytes", Kind::Counter, Level::Info, Format::Bytes, "Response body bytes"),
    field("pipe_hdrbytes", Kind::Counter, Level::Info, Format::Bytes, "Pipe request header bytes"),
    field("pipe_out", Kind::Counter, Level::Info, Format::Bytes, "Piped bytes to backend"),
    field("pipe_in", Kind::Counter, Level::Info, Format::Bytes, "Piped bytes from backend"),
    field("conn", Kind::Gauge, Level::Info, Format::Integer, "Concurrent connections used"),
    field("req", Kind::Counter, Level::Info, Format::Integer, "Backend requests sent"),
    field("unhealthy", Kind::Counter, Level::Info, Format::Integer, "Fetches not attempted due to backend being unhealthy"),
    field("busy", Kind::Counter, Level::Info, Format::Integer, "Fetches not attempted due to backend being busy"),
    field("fail", Kind::Counter, Level::Info, Format::Integer, "Connections failed"),
    field("fail_eacces", Kind::Counter, Level::Diag, Format::Integer, "Connections failed with EACCES or EPERM"),
    field("fail_eaddrnotavail", Kind::Counter, Level::Diag, Format::Integer, "Connections failed with EADDRNOTAVAIL"),
    field("fail_econnrefused", Kind::Counter, Level::Diag, Format::Integer, "Connections failed with ECONNREFUSED"),
    field("fail_enetunreach", Kind::Counter, Level::Diag, Format::Integer, "Connections failed with ENETUNREACH"),
    field("fail_etimedout", Kind::Counter, Level::Diag, Format::Integer, "Connections failed ETIMEDOUT"),
    field("fail_other", Kind::Counter, Level::Diag, Format::Integer, "Connections failed for other reason"),
    field("helddown", Kind::Counter, Level::Diag, Format::Integer, "Connection opens not attempted"),
];

impl Vbe {
    pub fn def(self) -> &'static CounterDef {
        &VBE[self as usize]
    }
}

/// The counters of each store, named `SMA.<store>.<field>` (malloc),
/// `SMF.<store>.<field>` (file) or `SMP.<store>.<field>` (persistent),
/// in the segment's dynamic slots. The first seven are Varnish's; the
/// disk stores add the rest (cachekit's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stv {
    CReq,
    CFail,
    CBytes,
    CFreed,
    GAlloc,
    GBytes,
    GSpace,
    CDiskReads,
    CDiskReadBytes,
    CCorrupt,
    CDiskWrites,
    CDiskWriteFail,
    CRecovered,
}

/// How many of [`STV`] every store has (the rest: disk stores only).
pub const STV_MEMORY: usize = 7;

/// The fields of [`Stv`], in order.
pub static STV: [CounterDef; 13] = [
    field("c_req", Kind::Counter, Level::Info, Format::Integer, "Allocator requests"),
    field("c_fail", Kind::Counter, Level::Info, Format::Integer, "Allocator failures"),
    field("c_bytes", Kind::Counter, Level::Info, Format::Bytes, "Bytes allocated"),
    field("c_freed", Kind::Counter, Level::Info, Format::Bytes, "Bytes freed"),
    field("g_alloc", Kind::Gauge, Level::Info, Format::Integer, "Allocations outstanding"),
    field("g_bytes", Kind::Gauge, Level::Info, Format::Bytes, "Bytes outstanding"),
    field("g_space", Kind::Gauge, Level::Info, Format::Bytes, "Bytes available"),
    field("c_disk_reads", Kind::Counter, Level::Info, Format::Integer, "Bodies read from disk (hits not in memory) (cachekit)"),
    field("c_disk_read_bytes", Kind::Counter, Level::Info, Format::Bytes, "Bytes read from disk (cachekit)"),
    field("c_corrupt", Kind::Counter, Level::Info, Format::Integer, "Objects dropped for a checksum mismatch or read error (cachekit)"),
    field("c_disk_writes", Kind::Counter, Level::Info, Format::Integer, "Objects written to disk (cachekit)"),
    field("c_disk_write_fail", Kind::Counter, Level::Info, Format::Integer, "Objects not written: I/O error or too large (cachekit)"),
    field("c_recovered", Kind::Counter, Level::Info, Format::Integer, "Objects found on disk at start (cachekit)"),
];

impl Stv {
    pub fn def(self) -> &'static CounterDef {
        &STV[self as usize]
    }
}

impl C {
    pub fn def(self) -> &'static CounterDef {
        &TABLE[self as usize]
    }
}

/// Longest name and description the segment stores; checked by a test.
pub const NAME_MAX: usize = 127;
pub const DESC_MAX: usize = 123;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_fits_the_segment_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for d in TABLE {
            assert!(d.name.len() <= NAME_MAX, "{}", d.name);
            assert!(d.description.len() <= DESC_MAX, "{}", d.name);
            assert!(d.name.is_ascii() && !d.name.contains(' '), "{}", d.name);
            assert!(seen.insert(d.name), "duplicate {}", d.name);
        }
        assert_eq!(C::MainUptime.def().name, "MAIN.uptime");
        assert_eq!(C::H3StreamErrors as usize, TABLE.len() - 1);
        assert_eq!(Stv::CCorrupt.def().name, "c_corrupt");
        assert_eq!(Vbe::Helddown as usize, VBE.len() - 1);
        assert_eq!(Vbe::Conn.def().name, "conn");
    }
}
