//! Why a session ends: Varnish's SessClose reasons, each with its
//! MAIN.sc_* counter.

use common::counters::C;

use crate::vcl::model::Req;

/// Why a session ended (SessClose reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    RemClose,
    ReqClose,
    ReqHttp10,
    RxJunk,
    RxOverflow,
    RxTimeout,
    RxBody,
    RxCloseIdle,
    TxError,
    RespClose,
    TxPipe,
    /// The request's task failed (a caught panic).
    VclFailure,
    /// An HTTP/2 client reset or made us refuse too many streams.
    RapidReset,
    /// A Range delivery whose body ended before the range did.
    RangeShort,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::RemClose => "REM_CLOSE",
            Reason::ReqClose => "REQ_CLOSE",
            Reason::ReqHttp10 => "REQ_HTTP10",
            Reason::RxJunk => "RX_JUNK",
            Reason::RxOverflow => "RX_OVERFLOW",
            Reason::RxTimeout => "RX_TIMEOUT",
            Reason::RxBody => "RX_BODY",
            Reason::RxCloseIdle => "RX_CLOSE_IDLE",
            Reason::TxError => "TX_ERROR",
            Reason::RespClose => "RESP_CLOSE",
            Reason::TxPipe => "TX_PIPE",
            Reason::VclFailure => "VCL_FAILURE",
            Reason::RapidReset => "RAPID_RESET",
            Reason::RangeShort => "RANGE_SHORT",
        }
    }
    /// Varnish's MAIN.sc_* counter for this reason.
    pub fn counter(self) -> C {
        match self {
            Reason::RemClose => C::ScRemClose,
            Reason::ReqClose => C::ScReqClose,
            Reason::ReqHttp10 => C::ScReqHttp10,
            Reason::RxJunk => C::ScRxJunk,
            Reason::RxOverflow => C::ScRxOverflow,
            Reason::RxTimeout => C::ScRxTimeout,
            Reason::RxBody => C::ScRxBody,
            Reason::RxCloseIdle => C::ScRxCloseIdle,
            Reason::TxError => C::ScTxError,
            Reason::RespClose => C::ScRespClose,
            Reason::TxPipe => C::ScTxPipe,
            Reason::VclFailure => C::ScVclFailure,
            Reason::RapidReset => C::ScRapidReset,
            Reason::RangeShort => C::ScRangeShort,
        }
    }
    pub fn is_error(self) -> bool {
        !matches!(self, Reason::RemClose | Reason::ReqClose | Reason::ReqHttp10 | Reason::RxCloseIdle | Reason::RespClose | Reason::TxPipe)
    }
}

/// Why the session ends after a response that went out whole.
pub fn close_reason(keep: bool, req: &Req) -> Option<Reason> {
    if keep {
        None
    } else if req.minor == 0 {
        Some(Reason::ReqHttp10)
    } else if req.headers.get("connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close")) {
        Some(Reason::ReqClose)
    } else {
        Some(Reason::RespClose)
    }
}
