//! The admin protocol from arbitrary bytes: commands (lines, quoting,
//! here documents) and framed responses read back, never a panic, and
//! here documents never grow past their bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for heredoc in [false, true] {
        let mut r = std::io::BufReader::new(data);
        for _ in 0..64 {
            match common::adm::read_command(&mut r, if heredoc { 4096 } else { 80 }, heredoc) {
                Ok(None) | Err(_) => break,
                Ok(Some(Ok(args))) => assert!(args.iter().all(|a| a.len() <= common::adm::MAX_HEREDOC + 1)),
                Ok(Some(Err(_))) => {}
            }
        }
    }
    let mut r = std::io::BufReader::new(data);
    let _ = common::adm::read_response(&mut r);
    let _ = common::adm::tokenize(&String::from_utf8_lossy(data));
});
