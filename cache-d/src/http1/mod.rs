//! HTTP/1.1 on tokio sockets: buffered connections (`conn`), message heads
//! and their framing (`head`), body transfer (`body`), the client socket
//! with its send deadlines (`clientio`), and the client transport the
//! request state machine reads and writes through (`transport`).

pub mod body;
pub mod clientio;
pub mod conn;
pub mod head;
pub mod transport;

#[cfg(test)]
mod tests;
