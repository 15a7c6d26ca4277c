//! fnmatch(3) without flags, as varnishstat's `-f` uses it: `*` matches any
//! run of bytes (dots included), `?` one byte, `[...]` a class (`!`/`^`
//! negates, `a-z` ranges), `\` escapes the next byte.

/// True if `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // Position after the last `*` seen, and the text position it resumes at.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi + 1, ti));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, next)) = class(&p[pi..], t[ti]) {
                        if hit {
                            pi += next;
                            ti += 1;
                            continue;
                        }
                    } else if t[ti] == b'[' {
                        // An unclosed `[` is an ordinary byte.
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == t[ti] {
                        pi += 2;
                        ti += 1;
                        continue;
                    }
                }
                c => {
                    if c == t[ti] {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Match one byte against the class at the start of `p` (which starts with
/// `[`). Returns (matched, pattern bytes consumed), or None if unclosed.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some(b'!') | Some(b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        let lo = p[i];
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            if lo <= c && c <= p[i + 2] {
                hit = true;
            }
            i += 3;
        } else {
            if lo == c {
                hit = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn star_crosses_dots() {
        assert!(matches("MAIN.*", "MAIN.client_req"));
        assert!(matches("*req*", "MAIN.s_req_hdrbytes"));
        assert!(matches("M*req", "MAIN.client_req"));
        assert!(!matches("MAIN.*", "MGT.uptime"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
    }

    #[test]
    fn classes_and_escapes() {
        assert!(matches("MAIN.s_re[qs]p_*", "MAIN.s_resp_hdrbytes"));
        assert!(matches("MAIN.s_re[!x]*", "MAIN.s_req_hdrbytes"));
        assert!(matches("a?c", "abc"));
        assert!(matches("a\\*c", "a*c"));
        assert!(!matches("a\\*c", "abc"));
        assert!(matches("[a-c]x", "bx"));
        assert!(matches("[", "["));
    }
}
