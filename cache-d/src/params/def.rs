//! What a parameter is: its kind of value, what setting it does, its
//! definition row, and why a value is refused.

/// How a parameter's value is written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Seconds, fractional allowed.
    Seconds,
    /// A size with an optional b/k/M/G suffix.
    Bytes,
    /// A plain count.
    Uint,
    /// on/off (true/false, yes/no, enable/disable).
    Bool,
    /// Named bits (`feature`): `+name`, `-name`, `none`, `default`.
    Bits,
    /// Log tags left out (`vsl_mask`): `-Tag` masks, `+Tag` unmasks.
    TagMask,
    /// Free text (`vcl_path`, `cc_command`...).
    Text,
    /// A fraction, shown as C's `%g` (`acceptor_sleep_decay`).
    Float,
    /// Three numbers `min_pool,max_pool,max_age` (`pool_req`...).
    Pool,
}

/// What setting a parameter does in cache-d.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Takes effect at once (new connections, fetches, VCL loads).
    Live,
    /// Takes effect only when the child (re)starts.
    Restart,
    /// Accepted and shown for Varnish's command lines; cache-d has no use
    /// for it (thread pools, workspaces, the C compiler...).
    Inert,
    /// Known but refused, as varnishd on Linux refuses `accept_filter`
    /// (a FreeBSD feature): shown as not available.
    Unavailable,
}

/// One parameter's definition.
#[derive(Debug)]
pub struct ParamDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub min: Option<&'static str>,
    pub max: Option<&'static str>,
    pub units: &'static str,
    pub description: &'static str,
    pub effect: Effect,
}

/// The longest duration any parameter takes (about a century).
pub const MAX_SECONDS: f64 = 3.0e9;

/// Why a parameter value was refused (the texts are what param.set
/// answers).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("Unknown parameter \"{0}\".")]
    Unknown(String),
    #[error("parameter \"{0}\" is not available on this platform.")]
    Unavailable(&'static str),
    #[error("\"{0}\" is not a size (use e.g. 512k, 80M)")]
    NotASize(String),
    #[error("size \"{0}\" is out of range")]
    SizeOutOfRange(String),
    // The texts from here on are varnishd's.
    #[error("use \"on\" or \"off\"")]
    NotABoolean(String),
    #[error("Could not convert to bytes.\nInvalid number\n  Try something like '80k' or '120M'")]
    NotBytes(String),
    #[error("Not a number ({0})")]
    NotAWholeNumber(String),
    #[error("Invalid number ({0})")]
    NotFinite(String),
    #[error("Must be no more than {MAX_SECONDS:.0} seconds")]
    TooLong,
    #[error("Must be at least {0}")]
    BelowMinimum(&'static str),
    #[error("Must be no more than {0}")]
    AboveMaximum(&'static str),
    /// A size's (varnishd says it with one more newline).
    #[error("Must be no more than {0}\n")]
    SizeAboveMaximum(&'static str),
    /// Seconds' and fractions'.
    #[error("Must be greater or equal to {0}")]
    NotGreaterOrEqual(&'static str),
    #[error("Must be less than or equal to {0}")]
    NotLessOrEqual(&'static str),
    #[error("Unknown {0} ({1})")]
    UnknownBit(&'static str, String),
    #[error("Three fields required: min_pool, max_pool and max_age")]
    PoolFields,
    #[error("min_pool cannot be larger than max_pool")]
    PoolOrder,
    #[error("\"{0}\" is not of the form name=value")]
    NotNameValue(String),
    #[error("Missing '+' or '-' ({0})")]
    MissingSign(String),
    #[error("Unknown VSL tag ({0})")]
    UnknownTag(String),
}
