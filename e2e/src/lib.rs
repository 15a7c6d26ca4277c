//! The test harness every end-to-end test uses (real processes on
//! loopback, free ports, temp instance dirs), and the source-layout checks.

pub mod dns;
pub mod harness;
pub mod layout;
