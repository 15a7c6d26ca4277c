//! Just enough of RFC 8941 (Structured Field Values) to tell whether a
//! field parses as a Dictionary: CDN-Cache-Control (RFC 9213 §2.1).

pub struct Parser<'a> {
    pub b: &'a [u8],
    pub i: usize,
}

#[derive(PartialEq)]
enum Item {
    Integer,
    Other,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }
    fn skip(&mut self, ows: bool) {
        while matches!(self.peek(), Some(b' ')) || (ows && self.peek() == Some(b'\t')) {
            self.i += 1;
        }
    }
    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
        self.i - start
    }

    /// §4.2.2; `integers`: keys whose values must be Integers.
    pub fn dictionary(&mut self, integers: &[&str]) -> bool {
        self.skip(false);
        while self.i < self.b.len() {
            let Some(key) = self.key() else { return false };
            let item = if self.eat(b'=') { self.member() } else { Some(Item::Other) };
            match item {
                Some(t) if t == Item::Integer || !integers.contains(&key.as_str()) => {}
                _ => return false,
            }
            if !self.params() {
                return false;
            }
            self.skip(true);
            if self.i == self.b.len() {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
            self.skip(true);
            if self.i == self.b.len() {
                return false;
            }
        }
        true
    }

    fn key(&mut self) -> Option<String> {
        let start = self.i;
        if !self.peek().is_some_and(|c| c.is_ascii_lowercase() || c == b'*') {
            return None;
        }
        self.take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c));
        Some(String::from_utf8_lossy(&self.b[start..self.i]).into_owned())
    }

    fn member(&mut self) -> Option<Item> {
        if !self.eat(b'(') {
            return self.bare();
        }
        loop {
            self.skip(false);
            if self.eat(b')') {
                return Some(Item::Other);
            }
            self.bare()?;
            if !self.params() || !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    fn params(&mut self) -> bool {
        while self.eat(b';') {
            self.skip(false);
            if self.key().is_none() || (self.eat(b'=') && self.bare().is_none()) {
                return false;
            }
        }
        true
    }

    fn bare(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => {
                self.eat(b'-');
                let int = self.take_while(|c| c.is_ascii_digit());
                if !(1..=15).contains(&int) {
                    return None;
                }
                if !self.eat(b'.') {
                    return Some(Item::Integer);
                }
                let frac = self.take_while(|c| c.is_ascii_digit());
                ((1..=3).contains(&frac) && int <= 12).then_some(Item::Other)
            }
            b'"' => {
                self.i += 1;
                loop {
                    match self.peek()? {
                        b'\\' => {
                            self.i += 1;
                            if !matches!(self.peek()?, b'"' | b'\\') {
                                return None;
                            }
                        }
                        b'"' => {
                            self.i += 1;
                            return Some(Item::Other);
                        }
                        0x20..=0x7e => {}
                        _ => return None,
                    }
                    self.i += 1;
                }
            }
            b'*' | b'A'..=b'Z' | b'a'..=b'z' => {
                self.take_while(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c));
                Some(Item::Other)
            }
            b':' => {
                self.i += 1;
                self.take_while(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c));
                self.eat(b':').then_some(Item::Other)
            }
            b'?' => {
                self.i += 1;
                (self.eat(b'0') || self.eat(b'1')).then_some(Item::Other)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Parser;

    /// Hostile and odd bytes: each parses or is refused, never panics.
    #[test]
    fn dictionaries_good_and_hostile() {
        let ok = |v: &[u8]| Parser { b: v, i: 0 }.dictionary(&["max-age"]);
        for good in [&b""[..], b"max-age=60", b"a, b=?0, c=(1 2 \"x\");p=:aGk=:, d=-1.5, e=tok/en:x", b"*k=1;q"] {
            assert!(ok(good), "{}", String::from_utf8_lossy(good));
        }
        let long_int = [b"max-age=".as_slice(), &[b'9'; 16]].concat();
        let deep = [b"a=".as_slice(), &[b'('; 10_000]].concat();
        let bad: [&[u8]; 13] = [
            b"max-age",
            b"max-age=\"1\"",
            b"A=1",
            b"a=\"open",
            b"a=\"\\x\"",
            b"a=(1",
            b"a=:abc",
            b"a=?2",
            b"a,",
            b",a",
            b"a=1 b=2",
            &long_int,
            &deep,
        ];
        for b in bad {
            assert!(!ok(b), "{}", String::from_utf8_lossy(&b[..b.len().min(40)]));
        }
        for b in [&b"a=\xff"[..], b"a=\"\x00\"", b"\xc3\xa9=1", b"a=1;\x80"] {
            assert!(!ok(b));
        }
    }
}
