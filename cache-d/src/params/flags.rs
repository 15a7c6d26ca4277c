//! Varnish 7.1's flags on parameters: `param.show -j`'s "flags" and the
//! NB lines of `param.show -l`, in Varnish's order.

use super::def::{Effect, ParamDef};

/// (flag, NB text, the parameters varnishd 7.1 gives it); must_restart
/// and protected come from cache-d's own state.
const FLAGS: &[(&str, &str, &[&str])] = &[
    (
        "obj_sticky",
        "NB: This parameter is evaluated only when objects are created. To change it for all objects, restart or ban everything.",
        &["default_grace", "default_keep", "default_ttl"],
    ),
    (
        "delayed_effect",
        "NB: This parameter may take quite some time to take (full) effect.",
        &[
            "idle_send_timeout",
            "send_timeout",
            "thread_pool_destroy_delay",
            "thread_pool_max",
            "thread_pool_min",
            "thread_pool_reserve",
            "thread_pool_stack",
            "thread_pool_timeout",
            "thread_pools",
            "workspace_backend",
            "workspace_client",
            "workspace_session",
            "workspace_thread",
        ],
    ),
    (
        "experimental",
        "NB: We do not know yet if it is a good idea to change this parameter, or if the default value is even sensible. Caution is advised, and feedback is most welcome.",
        &[
            "acceptor_sleep_decay",
            "acceptor_sleep_incr",
            "acceptor_sleep_max",
            "backend_local_error_holddown",
            "backend_remote_error_holddown",
            "ban_cutoff",
            "ban_lurker_holdoff",
            "fetch_chunksize",
            "fetch_maxchunksize",
            "gzip_buffer",
            "lru_interval",
            "nuke_limit",
            "rush_exponent",
            "tcp_keepalive_intvl",
            "tcp_keepalive_probes",
            "tcp_keepalive_time",
            "thread_pool_add_delay",
            "thread_pool_destroy_delay",
            "thread_pool_fail_delay",
            "thread_pool_timeout",
            "thread_pool_watchdog",
            "thread_pools",
            "thread_queue_limit",
            "thread_stats_rate",
            "timeout_linger",
        ],
    ),
    (
        "must_reload",
        "NB: This parameter will not take any effect until the VCL programs have been reloaded.",
        &["cc_command", "cc_warnings"],
    ),
    ("must_restart", "NB: This parameter will not take any effect until the child process has been restarted.", &[]),
    (
        "wizard",
        "NB: Do not change this parameter, unless a developer tell you to do so.",
        &["critbit_cooloff", "h2_rx_window_increment", "h2_rx_window_low_water", "http1_iovs"],
    ),
    ("protected", "NB: This parameter is protected and can not be changed.", &[]),
    (
        "build_options",
        "NB: The actual default value for this parameter depends on the Varnish build environment and options.",
        &["cc_command", "cc_warnings", "vcl_path", "vmod_path"],
    ),
];

/// `d`'s flags with their NB texts, in Varnish's order: varnishd's own,
/// must_restart where cache-d needs a restart, protected under `-r`.
pub fn flags(d: &ParamDef, protected: bool) -> Vec<(&'static str, &'static str)> {
    let on = |flag: &str, names: &[&str]| match flag {
        "must_restart" => d.effect == Effect::Restart,
        "protected" => protected,
        _ => names.contains(&d.name),
    };
    FLAGS.iter().filter(|(flag, _, names)| on(flag, names)).map(|(flag, note, _)| (*flag, *note)).collect()
}
