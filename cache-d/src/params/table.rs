//! The parameter table: every parameter varnishd 7.1 has (Varnish's names,
//! types, defaults, limits and units) and cachekit's own, in name order.
//! Those marked `Inert` are accepted and shown but change nothing here.

use super::def::{Effect, Kind, ParamDef};

macro_rules! defs {
    ($( $name:literal $kind:ident $def:literal $min:expr, $max:expr, $units:literal $effect:ident $desc:literal; )*) => {
        /// Every parameter, in `param.show` order.
        pub static DEFS: &[ParamDef] = &[ $( ParamDef {
            name: $name, kind: Kind::$kind, default: $def, min: $min, max: $max,
            units: $units, description: $desc, effect: Effect::$effect,
        }, )* ];
    };
}

// rustfmt leaves macro bodies alone: one parameter a line.
defs! {
    "accept_filter" Bool "-" None, None, "bool" Unavailable "Enable kernel accept-filters (FreeBSD's; not available on this platform, as varnishd on Linux).";
    "acceptor_sleep_decay" Float "0.9" Some("0"), Some("1"), "" Inert "If we run out of resources, such as file descriptors or worker threads, the acceptor will sleep between accepts. (No effect in cache-d: its acceptor does not sleep.)";
    "acceptor_sleep_incr" Seconds "0.000" Some("0.000"), Some("1.000"), "seconds" Inert "If we run out of resources, such as file descriptors or worker threads, the acceptor will sleep between accepts. (No effect in cache-d: its acceptor does not sleep.)";
    "acceptor_sleep_max" Seconds "0.050" Some("0.000"), Some("10.000"), "seconds" Inert "If we run out of resources, such as file descriptors or worker threads, the acceptor will sleep between accepts. (No effect in cache-d: its acceptor does not sleep.)";
    "auto_restart" Bool "on" None, None, "bool" Live "Automatically restart the child/worker process if it dies.";
    "backend_idle_timeout" Seconds "60.000" Some("1.000"), None, "seconds" Live "Timeout before we close unused backend connections.";
    "backend_local_error_holddown" Seconds "10.000" Some("0.000"), None, "seconds" Live "When connecting to backends, certain error codes (EADDRNOTAVAIL, EACCESS, EPERM) signal a local resource shortage or configuration issue for which retrying connection attempts may worsen the situation; new connections are not tried for this long.";
    "backend_remote_error_holddown" Seconds "0.250" Some("0.000"), None, "seconds" Live "When connecting to backends, certain error codes (ECONNREFUSED, ENETUNREACH) signal fundamental connection issues such as the backend not accepting connections or routing problems; new connections are not tried for this long.";
    "ban_cutoff" Uint "0" Some("0"), None, "bans" Inert "Expurge long tail content from the cache to keep the number of bans below this value. (No effect in cache-d.)";
    "ban_dups" Bool "on" None, None, "bool" Live "Eliminate older identical bans when a new ban is added.";
    "ban_lurker_age" Seconds "60.000" Some("0.000"), None, "seconds" Live "The ban lurker will ignore bans until they are this old.";
    "ban_lurker_batch" Uint "1000" Some("1"), None, "" Inert "The ban lurker sleeps ban_lurker_sleep after examining this many objects. (No effect in cache-d.)";
    "ban_lurker_holdoff" Seconds "0.010" Some("0.000"), None, "seconds" Inert "How long the ban lurker sleeps when giving way to lookup due to lock contention. (No effect in cache-d.)";
    "ban_lurker_sleep" Seconds "0.010" Some("0.000"), None, "seconds" Live "How long the ban lurker sleeps between passes (0 disables it).";
    "between_bytes_timeout" Seconds "60.000" Some("0.000"), None, "seconds" Live "We only wait for this many seconds between bytes received from the backend before giving up the fetch.";
    "brotli_quality" Uint "5" Some("0"), Some("11"), "" Live "Brotli quality of the copies beresp.do_brotli makes: 0 is fastest, 11 smallest and far slower (cachekit's own).";
    "cc_command" Text "exec x86_64-linux-gnu-gcc -g -O2 -fstack-protector-strong -Wformat -Werror=format-security -Werror -Wno-error=unused-result -pthread -fpic -shared -Wl,-x -o %o %s" None, None, "" Inert "The command used for compiling the C source code to a dlopen(3) loadable object. (No effect in cache-d: it compiles no C, its vmods are built in.)";
    "cc_warnings" Text " -Wall -Werror -Wno-error=unused-result" None, None, "" Inert "Warnings used when compiling the C source code with the cc_command parameter. (No effect in cache-d: it compiles no C, its vmods are built in.)";
    "cli_limit" Bytes "48k" Some("128b"), Some("99999999b"), "bytes" Live "Maximum size of CLI response.  If the response exceeds this limit, the response code will be 201 instead of 200 and the last line will indicate the truncation.";
    "cli_timeout" Seconds "60.000" Some("0.000"), None, "seconds" Live "Timeout for the child's replies to CLI requests from the manager.";
    "clock_skew" Uint "10" Some("0"), None, "seconds" Inert "How much clockskew we are willing to accept between the backend and our own clock. (No effect in cache-d.)";
    "clock_step" Seconds "1.000" Some("0.000"), None, "seconds" Inert "How much observed clock step we are willing to accept before we panic. (No effect in cache-d.)";
    "connect_timeout" Seconds "3.500" Some("0.000"), None, "seconds" Live "Default connection timeout for backend connections.";
    "critbit_cooloff" Seconds "180.000" Some("60.000"), Some("254.000"), "seconds" Inert "How long the critbit hasher keeps deleted objheads on the cooloff list. (No effect in cache-d.)";
    "debug" Bits "none" None, None, "" Inert "Enable/Disable various kinds of debugging: none, or +name / -name (comma-separated) for: req_state, workspace, waitinglist, syncvsl, hashedge, vclrel, lurker, esi_chop, flush_head, vtc_mode, witness, vsm_keep, slow_acceptor, h2_nocheck, vmod_so_keep, processors, protocol, vcl_keep, lck. (No effect in cache-d.)";
    "default_grace" Seconds "10.000" Some("0.000"), None, "seconds" Live "Default grace period: how long an object is served after its TTL while a fresh one is fetched.";
    "default_keep" Seconds "0.000" Some("0.000"), None, "seconds" Live "Default keep period: how long an expired object is kept for conditional revalidation.";
    "default_ttl" Seconds "120.000" Some("0.000"), None, "seconds" Live "The TTL assigned to objects if neither the backend nor the policy assigns one.";
    "event_loops" Uint "0" Some("0"), Some("256"), "threads" Restart "Threads serving client connections (cachekit's own): each is an event loop with its own poller. New connections fill the first loop until it is busy half of a second; a loop busy most of a second, while another is mostly idle, moves a quarter of its connections to it (HTTP/1 between two requests, HTTP/2 between two polls with its streams, in the clear or TLS). 0: one per CPU the child may run on. Fewer threads than cores cost less CPU per request than one shared pool whose idle workers are woken to steal work.";
    "experimental" Bits "none" None, None, "" Inert "Enable/Disable experimental features: none, or +name / -name for: drop_pools. (No effect in cache-d.)";
    "feature" Bits "+validate_headers" None, None, "" Live "Enable/Disable various minor features: +name or -name (comma-separated), none, default. Known: http2, short_panic, no_coredump, https_scheme, http_date_postel, esi_ignore_https, esi_disable_xml_check, esi_ignore_other_elements, esi_remove_bom, esi_include_onerror, wait_silo, validate_headers, busy_stats_rate, rfc9111 (cachekit's own, off by default: caching as RFC 9111 says where Varnish's defaults differ, see cache-vcl(7) RFC MODE), http3 (cachekit's own, off by default: QUIC and HTTP/3 on the UDP port of every https listener, advertised with Alt-Svc; see cache-d(1) HTTP/3; http2 — off by default, as in Varnish —, http3, validate_headers, rfc9111 and the esi_* ones take effect; the others are accepted for Varnish's command lines).";
    "fetch_chunksize" Bytes "16k" Some("4k"), None, "bytes" Inert "The default chunksize used by fetcher (accepted for Varnish's command lines: cachekit stores a body in the pieces it reads).";
    "fetch_maxchunksize" Bytes "0.25G" Some("64k"), None, "bytes" Inert "The maximum chunksize we attempt to allocate from storage. (No effect in cache-d.)";
    "first_byte_timeout" Seconds "60.000" Some("0.000"), None, "seconds" Live "Default timeout for receiving the first byte from the backend.";
    "gzip_buffer" Bytes "32k" Some("2k"), None, "bytes" Live "Size of malloc buffer used for gzip processing. These buffers are used for in-transit data, for instance gunzip'ed data being sent to a client. Making this space too small results in more overhead, writes to sockets etc, making it too big is probably just a waste of memory.";
    "gzip_level" Uint "6" Some("0"), Some("9"), "" Live "Gzip compression level: 0=debug, 1=fast, 9=best";
    "gzip_memlevel" Uint "8" Some("1"), Some("9"), "" Live "Gzip memory level 1=slow/least, 9=fast/most compression. Memory impact is 1=1k, 2=2k, ... 9=256k.";
    "h2_header_table_size" Bytes "4k" Some("0b"), Some("4294967295b"), "bytes" Live "HTTP2 header table size: the size of the HPACK dynamic table the client may use when encoding headers for us (bounded: a client cannot make us keep more).";
    "h2_initial_window_size" Bytes "65535b" Some("65535b"), Some("2147483647b"), "bytes" Live "HTTP2 initial flow control window size: how much of a request body a client may send on a stream before we read it.";
    "h2_max_concurrent_streams" Uint "100" Some("0"), None, "streams" Live "HTTP2 Maximum number of concurrent streams: the requests a client may have in progress at once on one HTTP2 connection. Streams the client resets still count until their request's work is done, so a client cannot start more work than this by resetting (CVE-2023-44487).";
    "h2_max_frame_size" Bytes "16k" Some("16k"), Some("16777215b"), "bytes" Live "HTTP2 maximum per frame payload size we are willing to accept.";
    "h2_max_header_list_size" Bytes "2147483647b" Some("0b"), Some("4294967295b"), "bytes" Live "HTTP2 maximum size of an uncompressed header list; a request's headers are also bounded by http_req_size (the smaller applies), so an HPACK-compressed header block cannot expand beyond it.";
    "h2_rapid_reset" Seconds "1.000" Some("0.000"), None, "seconds" Live "The upper threshold for how soon after its HEADERS a client's reset of a stream counts as suspect and is subjected to the rate limit of h2_rapid_reset_limit and h2_rapid_reset_period (as Varnish 7.5).";
    "h2_rapid_reset_limit" Uint "100" Some("0"), None, "" Live "HTTP2 RST allowance: the most suspect stream resets (see h2_rapid_reset) and refused streams a client may cause per h2_rapid_reset_period before its connection is closed with GOAWAY ENHANCE_YOUR_CALM (SessClose RAPID_RESET, MAIN.sc_rapid_reset). 0 disables the limit.";
    "h2_rapid_reset_period" Seconds "60.000" Some("1.000"), None, "seconds" Live "HTTP2 sliding window duration for h2_rapid_reset_limit.";
    "h2_rx_window_increment" Bytes "1M" Some("1M"), Some("1G"), "bytes" Live "HTTP2 Receive Window Increments: accepted for Varnish's command lines. cachekit returns credit as request body bytes are consumed, so a stream's window refills to h2_initial_window_size and the connection's to h2_rx_window_low_water.";
    "h2_rx_window_low_water" Bytes "10M" Some("65535b"), Some("1G"), "bytes" Live "HTTP2 Receive Window low water mark: the connection-wide window for request bodies we keep open (ie: POST, PUT etc.).";
    "h2_rxbuf_storage" Text "Transient" None, None, "" Inert "The name of the storage backend that HTTP/2 receive buffers should be allocated from. (No effect in cache-d.)";
    "h3_0rtt" Bool "off" None, None, "bool" Live "Accept QUIC 0-RTT early data (cachekit's own; off: early data could be replayed). On: a request in early data with a safe method (GET, HEAD, OPTIONS) is served at once, and carries Early-Data: 1 (RFC 8470) to the policy and the backend; any other waits until the handshake completes, which a replay never does. For new connections.";
    "h3_alt_svc_max_age" Seconds "86400.000" Some("0.000"), None, "seconds" Live "How long a client may remember that this server speaks HTTP/3 (cachekit's own): the ma of the Alt-Svc field responses over TCP on https listeners carry while feature http3 is on. VCL can change or unset resp.http.Alt-Svc in vcl_deliver.";
    "h3_conn_window" Bytes "1M" Some("64k"), Some("1G"), "bytes" Live "HTTP/3 connection receive window (cachekit's own): the request body bytes a QUIC connection may have in flight to us, all streams together. For new connections.";
    "h3_idle_timeout" Seconds "30.000" Some("1.000"), Some("600.000"), "seconds" Live "QUIC idle timeout (cachekit's own): a connection that sends nothing for this long is gone (RFC 9000 §10.1; the smaller of ours and the client's applies). For new connections.";
    "h3_max_concurrent_streams" Uint "100" Some("1"), Some("10000"), "streams" Live "HTTP/3 request streams a client may have open at once on one QUIC connection (cachekit's own; the MAX_STREAMS we grant). For new connections.";
    "h3_max_field_section_size" Bytes "64k" Some("1k"), Some("1M"), "bytes" Live "The largest HTTP/3 header section we accept (cachekit's own; also bounded by http_req_size, the smaller applies): a QPACK-compressed section cannot expand beyond it. For new connections.";
    "h3_retry_above" Uint "64" Some("0"), None, "handshakes" Live "Address validation under load (cachekit's own): while more than this many QUIC handshakes are in progress, a new one must first prove its address with a Retry (RFC 9000 §8.1.2), so spoofed Initial packets cost a stateless reply. 0: every new connection is validated.";
    "h3_send_window" Bytes "1M" Some("64k"), Some("1G"), "bytes" Live "HTTP/3 send buffer (cachekit's own): the most response bytes a QUIC connection keeps sent but not yet acknowledged, or queued. For new connections.";
    "h3_stream_window" Bytes "256k" Some("16k"), Some("1G"), "bytes" Live "HTTP/3 stream receive window (cachekit's own): the request body bytes one stream may have in flight to us. For new connections.";
    "http1_iovs" Uint "64" Some("5"), Some("1024"), "struct iovec (=16 bytes)" Inert "Number of io vectors to allocate for HTTP1 protocol transmission. (No effect in cache-d: it has no workspaces.)";
    "http_brotli_support" Bool "off" None, None, "bool" Live "Enable Brotli copies (cachekit's own): Accept-Encoding keeps br for clients that take it (br, gzip), beresp.do_brotli stores a Brotli copy next to the object, and clients that sent br get it. Off by default so that VCL sees Accept-Encoding exactly as Varnish washes it.";
    "http_gzip_support" Bool "on" None, None, "bool" Live "Enable gzip support. When enabled Varnish request compressed objects from the backend and store them compressed. If a client does not support gzip encoding Varnish will uncompress compressed objects on demand. Varnish will also rewrite the Accept-Encoding header of clients indicating support for gzip to: Accept-Encoding: gzip. Clients that do not support gzip will have their Accept-Encoding header removed. When gzip support is disabled the variables beresp.do_gzip and beresp.do_gunzip have no effect in VCL.";
    "http_max_hdr" Uint "64" Some("32"), Some("65535"), "header lines" Live "Maximum number of HTTP header lines we allow in a request or response.";
    "http_range_support" Bool "on" None, None, "bool" Live "Enable support for HTTP Range headers.";
    "http_req_hdr_len" Bytes "8k" Some("40b"), None, "bytes" Live "Maximum length of any HTTP client request header we will allow.";
    "http_req_size" Bytes "32k" Some("0.25k"), None, "bytes" Live "Maximum number of bytes of HTTP client request we will deal with.";
    "http_resp_hdr_len" Bytes "8k" Some("40b"), None, "bytes" Live "Maximum length of any HTTP backend response header we will allow.";
    "http_resp_size" Bytes "32k" Some("0.25k"), None, "bytes" Live "Maximum number of bytes of HTTP backend response we will deal with.";
    "idle_send_timeout" Seconds "60.000" Some("0.000"), None, "seconds" Live "Send timeout for individual pieces of data on client connections: a write that cannot proceed for this long closes the connection.";
    "listen_depth" Uint "1024" Some("0"), None, "connections" Inert "Listen queue depth. (No effect in cache-d.)";
    "lru_interval" Seconds "2.000" Some("0.000"), None, "seconds" Inert "Grace period before object moves on LRU list. (No effect in cache-d.)";
    "max_connections" Uint "10000" Some("1"), Some("16777216"), "connections" Restart "Most client connections served at once; more are closed at once and counted in MAIN.sess_dropped (cachekit's own).";
    "max_esi_depth" Uint "5" Some("0"), None, "levels" Live "Maximum depth of esi:include processing.";
    "max_restarts" Uint "4" Some("0"), None, "restarts" Live "Upper limit on how many times a request can restart.";
    "max_retries" Uint "4" Some("0"), None, "retries" Live "Upper limit on how many times a backend fetch can retry.";
    "max_vcl" Uint "100" Some("0"), None, "" Live "Threshold of loaded VCL programs.  (VCL labels are not counted.)  Parameter max_vcl_handling determines behaviour.";
    "max_vcl_handling" Uint "1" Some("0"), Some("2"), "" Live "Behaviour when attempting to exceed max_vcl loaded VCL: 0 - ignore max_vcl, 1 - issue a warning, 2 - refuse loading VCLs.";
    "nuke_limit" Uint "50" Some("0"), None, "allocations" Live "Maximum number of objects we attempt to nuke in order to make space for a object body (per allocation; then the allocation fails and MAIN.n_lru_limited counts it: a body streamed to its clients is delivered unkept, one read whole first (do_stream off, ESI) fails the fetch).";
    "pcre2_depth_limit" Uint "20" Some("1"), None, "" Inert "The recursion depth-limit for the internal match logic in a pcre2_match(). (No effect in cache-d.)";
    "pcre2_jit_compilation" Bool "on" None, None, "bool" Inert "Use the pcre2 JIT compiler if available. (No effect in cache-d.)";
    "pcre2_match_limit" Uint "10000" Some("1"), None, "" Inert "The limit for the number of calls to the internal match logic in pcre2_match(). (No effect in cache-d.)";
    "ping_interval" Uint "3" Some("0"), None, "seconds" Inert "Interval between pings from parent to child. (No effect in cache-d.)";
    "pipe_sess_max" Uint "0" Some("0"), None, "connections" Live "Maximum number of sessions dedicated to pipe transactions (0: no limit).";
    "pipe_timeout" Seconds "60.000" Some("0.000"), None, "seconds" Live "Idle timeout for PIPE sessions. If nothing has been received in either direction for this many seconds, the session is closed (0: never).";
    "pool_req" Pool "10,100,10" None, None, "" Inert "Parameters for per worker pool request memory pool. The three numbers are: min_pool (minimum size of free pool), max_pool (maximum size of free pool), max_age (max age of free element, seconds). (No effect in cache-d: it has no thread pools.)";
    "pool_sess" Pool "10,100,10" None, None, "" Inert "Parameters for per worker pool session memory pool. The three numbers are: min_pool (minimum size of free pool), max_pool (maximum size of free pool), max_age (max age of free element, seconds). (No effect in cache-d: it has no thread pools.)";
    "pool_vbo" Pool "10,100,10" None, None, "" Inert "Parameters for backend object fetch memory pool. The three numbers are: min_pool (minimum size of free pool), max_pool (maximum size of free pool), max_age (max age of free element, seconds). (No effect in cache-d: it has no thread pools.)";
    "prefer_ipv6" Bool "off" None, None, "bool" Inert "Prefer IPv6 address when connecting to backends which have both IPv4 and IPv6 addresses (accepted for Varnish's command lines: cachekit tries the addresses in the order the resolver gives them).";
    "reqbody_min_rate" Bytes "500b" Some("1b"), None, "bytes/second" Live "After timeout_reqbody, a request body must keep arriving at this rate on average: its deadline is timeout_reqbody plus one second per this many bytes received (cachekit's own, as Apache's mod_reqtimeout MinRate).";
    "rush_exponent" Uint "3" Some("2"), None, "requests per request" Inert "How many parked request we start for each completed request on the object. (No effect in cache-d.)";
    "send_buffer" Bytes "512k" Some("0b"), Some("64M"), "bytes" Live "Kernel send buffer asked for each client connection's socket (SO_SNDBUF; Linux doubles it for its bookkeeping), cachekit's own; applies to connections accepted after a change. Fixed, it bounds the memory a slow reader holds in the kernel (the autotuned one grows to net.ipv4.tcp_wmem's maximum, 4 MiB by default), and a large body leaves in pieces as the client reads instead of all at once: measured on loopback, 1 MiB hits at 1,700/s from one event loop had a p99 of 71 ms with the autotuned buffer (segments delivered out of order, retransmitted) and 0.96 ms with 512k. 0: the kernel's autotuning.";
    "send_timeout" Seconds "600.000" Some("0.000"), None, "seconds" Live "Total timeout for sending a response to the client.";
    "shortlived" Seconds "10.000" Some("0.000"), None, "seconds" Live "Objects created with (ttl+grace+keep) shorter than this are counted as short-lived.";
    "sigsegv_handler" Bool "on" None, None, "bool" Inert "Install a signal handler which tries to dump debug information on segmentation faults, bus errors and abort signals. (No effect in cache-d.)";
    "stale_if_error" Bool "on" None, None, "bool" Live "Deliver a stale object (still within grace or keep) instead of an error when its refresh fails: backend down, sick, timed out or answering 5xx (cachekit's own).";
    "syslog_cli_traffic" Bool "on" None, None, "bool" Inert "Log all CLI traffic to syslog(LOG_INFO). (No effect in cache-d.)";
    "tcp_fastopen" Bool "off" None, None, "bool" Inert "Enable TCP Fast Open extension. (No effect in cache-d.)";
    "tcp_keepalive_intvl" Seconds "75.000" Some("1.000"), Some("100.000"), "seconds" Inert "The number of seconds between TCP keep-alive probes. (No effect in cache-d.)";
    "tcp_keepalive_probes" Uint "9" Some("1"), Some("100"), "probes" Inert "The maximum number of TCP keep-alive probes to send before giving up and killing the connection if no response is obtained from the other end. (No effect in cache-d.)";
    "tcp_keepalive_time" Seconds "7200.000" Some("1.000"), Some("7200.000"), "seconds" Inert "The number of seconds a connection needs to be idle before TCP begins sending out keep-alive probes. (No effect in cache-d.)";
    "thread_pool_add_delay" Seconds "0.000" Some("0.000"), None, "seconds" Inert "Wait at least this long after creating a thread. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_destroy_delay" Seconds "1.000" Some("0.010"), None, "seconds" Inert "Wait this long after destroying a thread. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_fail_delay" Seconds "0.200" Some("0.010"), None, "seconds" Inert "Wait at least this long after a failed thread creation before trying to create another thread. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_max" Uint "5000" Some("100"), None, "threads" Inert "The maximum number of worker threads in each pool. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_min" Uint "100" Some("5"), Some("5000"), "threads" Inert "The minimum number of worker threads in each pool. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_reserve" Uint "0" None, Some("95"), "threads" Inert "The number of worker threads reserved for vital tasks in each pool. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_stack" Bytes "80k" Some("16k"), None, "bytes" Inert "Worker thread stack size. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_timeout" Seconds "300.000" Some("10.000"), None, "seconds" Inert "Thread idle threshold. (No effect in cache-d: it has no thread pools.)";
    "thread_pool_watchdog" Seconds "60.000" Some("0.100"), None, "seconds" Inert "Thread queue stuck watchdog. (No effect in cache-d: it has no thread pools.)";
    "thread_pools" Uint "2" Some("1"), Some("32"), "pools" Inert "Number of worker thread pools. (No effect in cache-d: it has no thread pools.)";
    "thread_queue_limit" Uint "20" Some("0"), None, "requests" Inert "Permitted request queue length per thread-pool. (No effect in cache-d: it has no thread pools.)";
    "thread_stats_rate" Uint "10" Some("0"), None, "requests" Inert "Worker threads accumulate statistics, and dump these into the global stats counters if the lock is free when they finish a job (request/fetch etc.) This parameters defines the maximum number of jobs a worker thread may handle, before it is forced to dump its accumulated stats into the global counters. (No effect in cache-d: it has no thread pools.)";
    "timeout_idle" Seconds "5.000" Some("0.000"), Some("3600.000"), "seconds" Live "Idle timeout for client connections: how long to wait for the first byte of a request.";
    "timeout_linger" Seconds "0.050" Some("0.000"), None, "seconds" Inert "How long the worker thread lingers on an idle session before handing it over to the waiter. (No effect in cache-d.)";
    "timeout_req" Seconds "2.000" Some("0.000"), Some("3600.000"), "seconds" Live "Max time to receive a client's request head, from its first byte to the empty line that ends it (Varnish 4's timeout_req); slower heads are closed (SessClose RX_TIMEOUT).";
    "timeout_reqbody" Seconds "20.000" Some("0.000"), Some("86400.000"), "seconds" Live "Time a request body may take before reqbody_min_rate applies; a body slower than that is cut (SessClose RX_BODY) (cachekit's own).";
    "tls_cert_warn" Seconds "2592000.000" Some("0.000"), None, "seconds" Live "A live certificate that expires within this long (or has expired) is counted in MAIN.tls_cert_expiring, marked in tls.cert.list and named in a warning in the manager's log (0: never) (cachekit's own).";
    "transit_buffer" Bytes "1M" Some("64k"), None, "bytes" Live "How far a fetch may read ahead of the slowest client for a body that is not kept: an uncacheable object, or one its store cannot hold (Varnish 7.3's parameter). The bytes every client has been sent are let go, so such a body costs this much memory however large it is and however slowly it is read. Varnish's default, 0b, buffers the whole body; cachekit's is bounded.";
    "vary_notice" Uint "10" Some("1"), None, "variants" Inert "How many variants need to be evaluated to log a Notice that there might be too many variants. (No effect in cache-d.)";
    "vcc_allow_inline_c" Bool "off" None, None, "bool" Inert "Allow inline C code in VCL. (No effect in cache-d: it compiles no C, its vmods are built in.)";
    "vcc_err_unref" Bool "on" None, None, "bool" Live "Unreferenced VCL objects result in error.";
    "vcc_unsafe_path" Bool "on" None, None, "bool" Live "Allow '/' in vmod & include paths. Allow 'import ... from ...'.";
    "vcl_cooldown" Seconds "600.000" Some("1.000"), None, "seconds" Live "How long a VCL is kept warm after being replaced as the active VCL (an auto VCL unused that long shows cold in vcl.list; cachekit keeps its program loaded until vcl.discard).";
    "vcl_path" Text "/etc/varnish:/usr/share/varnish/vcl" None, None, "" Live "Directory (or colon separated list of directories) from which relative VCL filenames (vcl.load and include) are to be found.";
    "vmod_path" Text "/usr/lib/x86_64-linux-gnu/varnish/vmods" None, None, "" Inert "Directory (or colon separated list of directories) where VMODs are to be found. (No effect in cache-d: it compiles no C, its vmods are built in.)";
    "vsl_buffer" Bytes "16k" Some("267"), None, "bytes" Inert "Bytes of (req-/backend-)workspace dedicated to buffering VSL records. (No effect in cache-d.)";
    "vsl_mask" TagMask "-Debug,-ObjProtocol,-ObjStatus,-ObjReason,-ObjHeader,-VCL_trace,-ExpKill,-WorkThread,-Hash,-VfpAcct,-H2RxHdr,-H2RxBody,-H2TxHdr,-H2TxBody,-VdpAcct" None, None, "" Live "Mask individual VSL messages from being logged: default, or +Tag / -Tag to unmask / mask; records with a masked tag are not written.";
    "vsl_reclen" Bytes "255b" Some("16b"), Some("4084b"), "bytes" Live "Maximum number of bytes in a log record.";
    "vsl_space" Bytes "80M" Some("64k"), Some("4G"), "bytes" Restart "The amount of space to allocate for the log ring.";
    "vsm_free_cooldown" Seconds "60.000" Some("10.000"), Some("600.000"), "seconds" Inert "How long VSM memory is kept warm after a deallocation (granularity approximately 2 seconds). (No effect in cache-d.)";
    "workspace_backend" Bytes "96k" Some("1k"), None, "bytes" Inert "Bytes of HTTP protocol workspace for backend HTTP req/resp. (No effect in cache-d: it has no workspaces.)";
    "workspace_client" Bytes "96k" Some("9k"), None, "bytes" Inert "Bytes of HTTP protocol workspace for clients HTTP req/resp. (No effect in cache-d: it has no workspaces.)";
    "workspace_session" Bytes "0.75k" Some("384b"), None, "bytes" Inert "Allocation size for session structure and workspace. (No effect in cache-d: it has no workspaces.)";
    "workspace_thread" Bytes "2k" Some("0.25k"), Some("8k"), "bytes" Inert "Bytes of auxiliary workspace per thread. (No effect in cache-d: it has no workspaces.)";
}

#[cfg(test)]
mod tests {
    use super::{Effect, DEFS};

    /// Every parameter of varnishd 7.1.1 (`varnishd -x parameter`), so
    /// that this runs without varnishd; the e2e test `params_as_varnishd`
    /// compares the two lists live.
    const VARNISHD_7_1_1: &[&str] = &[
        "accept_filter",
        "acceptor_sleep_decay",
        "acceptor_sleep_incr",
        "acceptor_sleep_max",
        "auto_restart",
        "backend_idle_timeout",
        "backend_local_error_holddown",
        "backend_remote_error_holddown",
        "ban_cutoff",
        "ban_dups",
        "ban_lurker_age",
        "ban_lurker_batch",
        "ban_lurker_holdoff",
        "ban_lurker_sleep",
        "between_bytes_timeout",
        "cc_command",
        "cc_warnings",
        "cli_limit",
        "cli_timeout",
        "clock_skew",
        "clock_step",
        "connect_timeout",
        "critbit_cooloff",
        "debug",
        "default_grace",
        "default_keep",
        "default_ttl",
        "experimental",
        "feature",
        "fetch_chunksize",
        "fetch_maxchunksize",
        "first_byte_timeout",
        "gzip_buffer",
        "gzip_level",
        "gzip_memlevel",
        "h2_header_table_size",
        "h2_initial_window_size",
        "h2_max_concurrent_streams",
        "h2_max_frame_size",
        "h2_max_header_list_size",
        "h2_rx_window_increment",
        "h2_rx_window_low_water",
        "h2_rxbuf_storage",
        "http1_iovs",
        "http_gzip_support",
        "http_max_hdr",
        "http_range_support",
        "http_req_hdr_len",
        "http_req_size",
        "http_resp_hdr_len",
        "http_resp_size",
        "idle_send_timeout",
        "listen_depth",
        "lru_interval",
        "max_esi_depth",
        "max_restarts",
        "max_retries",
        "max_vcl",
        "max_vcl_handling",
        "nuke_limit",
        "pcre2_depth_limit",
        "pcre2_jit_compilation",
        "pcre2_match_limit",
        "ping_interval",
        "pipe_sess_max",
        "pipe_timeout",
        "pool_req",
        "pool_sess",
        "pool_vbo",
        "prefer_ipv6",
        "rush_exponent",
        "send_timeout",
        "shortlived",
        "sigsegv_handler",
        "syslog_cli_traffic",
        "tcp_fastopen",
        "tcp_keepalive_intvl",
        "tcp_keepalive_probes",
        "tcp_keepalive_time",
        "thread_pool_add_delay",
        "thread_pool_destroy_delay",
        "thread_pool_fail_delay",
        "thread_pool_max",
        "thread_pool_min",
        "thread_pool_reserve",
        "thread_pool_stack",
        "thread_pool_timeout",
        "thread_pool_watchdog",
        "thread_pools",
        "thread_queue_limit",
        "thread_stats_rate",
        "timeout_idle",
        "timeout_linger",
        "vary_notice",
        "vcc_allow_inline_c",
        "vcc_err_unref",
        "vcc_unsafe_path",
        "vcl_cooldown",
        "vcl_path",
        "vmod_path",
        "vsl_buffer",
        "vsl_mask",
        "vsl_reclen",
        "vsl_space",
        "vsm_free_cooldown",
        "workspace_backend",
        "workspace_client",
        "workspace_session",
        "workspace_thread",
    ];

    #[test]
    fn every_varnishd_7_1_parameter_is_in_the_table() {
        assert_eq!(VARNISHD_7_1_1.len(), 109);
        let missing: Vec<_> = VARNISHD_7_1_1.iter().filter(|n| !DEFS.iter().any(|d| d.name == **n)).collect();
        assert!(missing.is_empty(), "varnishd 7.1 parameters cache-d lacks: {missing:?}");
        // Those not listed are cachekit's own and say so.
        for d in DEFS.iter().filter(|d| !VARNISHD_7_1_1.contains(&d.name)) {
            assert!(d.effect != Effect::Inert, "{}: cachekit's own parameter marked inert", d.name);
        }
    }

    #[test]
    fn the_man_page_names_every_inert_parameter() {
        let man = include_str!("../../../man/cache-d.1");
        for d in DEFS.iter().filter(|d| d.effect != Effect::Live && d.effect != Effect::Restart) {
            assert!(man.contains(d.name), "man/cache-d.1 does not name {}, which cache-d accepts without effect", d.name);
        }
    }

    #[test]
    fn inert_parameters_say_so() {
        for d in DEFS.iter().filter(|d| d.effect == Effect::Inert) {
            let says = d.description.contains("No effect in cache-d") || d.description.contains("accepted for Varnish's command lines");
            assert!(says, "{}: an inert parameter's description says it has no effect", d.name);
        }
    }
}
