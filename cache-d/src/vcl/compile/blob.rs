//! vmod_blob's decoding side: blob.decode, blob.transcode, blob.same,
//! blob.equal, blob.length, blob.sub and the blob.blob() object (its
//! bytes kept on the program when vcl_init makes it); blob.encode is in
//! the vmod module, which also says how a BLOB is carried. Decoding follows vmod_blob: HEX
//! takes an odd digit count as if a 0 led it, `length` (when positive)
//! reads only that many characters of the input, input that is not of
//! the encoding fails the task ("vmod blob error: cannot decode, illegal
//! encoding beginning with ...").

use super::decls::ObjKind;
use super::program::*;
use super::vmod::{blob, blob_bytes, encode_as, enum_arg, unbase64};
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};

const DECODINGS: [&str; 7] = ["IDENTITY", "BASE64", "BASE64URL", "BASE64URLNOPAD", "BASE64CF", "HEX", "URL"];

/// The text of `s` (its first `length` characters when positive) decoded;
/// None when it is not of the encoding.
pub(super) fn decode(dec: &str, s: &str, length: i64) -> Option<Vec<u8>> {
    let s = match usize::try_from(length) {
        Ok(n) if n > 0 && n < s.len() => s.get(..n)?,
        _ => s,
    };
    match dec {
        "HEX" => {
            if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            let digits: Vec<u8> = if s.len() % 2 == 1 { std::iter::once(b'0').chain(s.bytes()).collect() } else { s.bytes().collect() };
            let val = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            Some(digits.chunks(2).map(|p| val(p[0]) << 4 | val(p[1])).collect())
        }
        "BASE64" => unbase64(s),
        "BASE64URL" | "BASE64URLNOPAD" => {
            if s.contains(['+', '/']) {
                return None;
            }
            unbase64(&s.replace('-', "+").replace('_', "/"))
        }
        // '-' and '~' for 62 and 63, '_' the padding.
        "BASE64CF" => {
            if s.contains(['+', '/', '=']) {
                return None;
            }
            unbase64(&s.replace('-', "+").replace('~', "/").replace('_', "="))
        }
        "URL" => {
            let b = s.as_bytes();
            let mut out = Vec::with_capacity(b.len());
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' {
                    let h = s.get(i + 1..i + 3).filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))?;
                    out.push(u8::from_str_radix(h, 16).ok()?);
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            Some(out)
        }
        _ => Some(s.as_bytes().to_vec()),
    }
}

/// The arguments by their place or name, as VCC matches them.
fn by_name<'a>(f: &str, params: &[&str], args: &'a [Expr], names: &[Option<String>]) -> Result<Vec<Option<&'a Expr>>, VclError> {
    let mut out = vec![None; params.len()];
    for (i, (a, n)) in args.iter().zip(names.iter().chain(std::iter::repeat(&None))).enumerate() {
        let at = match n {
            Some(n) => params.iter().position(|p| p == n),
            None => (i < params.len()).then_some(i),
        };
        let Some(at) = at else {
            return err(format!("{f}(): too many arguments, or no argument '{}'", n.as_deref().unwrap_or("")), a.pos());
        };
        out[at] = Some(a);
    }
    Ok(out)
}

/// blob.decode(decoding, length, encoded) and blob.transcode(decoding,
/// encoding, case, length, encoded).
fn decoder(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let trans = name == "blob.transcode";
    let params: &[&str] = if trans { &["decoding", "encoding", "case", "length", "encoded"] } else { &["decoding", "length", "encoded"] };
    let a = by_name(name, params, args, names)?;
    let get = |p: &str| a[params.iter().position(|x| *x == p).unwrap_or(0)];
    let dec = get("decoding").map_or(Ok("IDENTITY".to_string()), |e| enum_arg(e, &DECODINGS, "decoding"))?;
    let (enc, case) = if trans {
        let enc = get("encoding").map_or(Ok("IDENTITY".to_string()), |e| enum_arg(e, &DECODINGS, "encoding"))?;
        let case = get("case").map_or(Ok("DEFAULT".to_string()), |e| enum_arg(e, &["LOWER", "UPPER", "DEFAULT"], "case"))?;
        (enc, case)
    } else {
        (String::new(), String::new())
    };
    let length = get("length").map(|e| sc.expr(e)).transpose()?;
    let Some(encoded) = get("encoded") else { return err(format!("{name}() needs encoded="), pos) };
    let encoded = sc.expr(encoded)?;
    Ok(Box::new(move |t, c| {
        let n = length.as_ref().map_or(0, |l| l(t, c).num().unwrap_or(0.0) as i64);
        let s = encoded(t, c).text();
        match decode(&dec, &s, n) {
            Some(b) if trans => match encode_as(&enc, &case, &b) {
                Ok(s) => Val::Str(s),
                Err(why) => {
                    fail(t, why);
                    Val::None
                }
            },
            Some(b) => blob(&b),
            None => {
                let head: String = s.chars().take(40).collect();
                fail(t, format!("vmod blob error: cannot decode, illegal encoding beginning with \"{head}\""));
                Val::None
            }
        }
    }))
}

/// The functions of this module; None for a name it does not know.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    Some(match name {
        "blob.decode" | "blob.transcode" => decoder(name, args, names, pos, sc),
        "blob.length" => super::vmod::one_arg(args, name, 1, pos, sc).map(|mut a| -> ExprFn {
            let x = a.remove(0);
            Box::new(move |t, c| match x(t, c) {
                Val::None => Val::Int(0),
                v => Val::Int(blob_bytes(&v).len() as i64),
            })
        }),
        // Equal bytes; an unset BLOB equals only another.
        "blob.equal" => super::vmod::one_arg(args, name, 2, pos, sc).map(|a| -> ExprFn {
            let mut a = a.into_iter();
            let (x, y) = (a.next().expect("2 args"), a.next().expect("2 args"));
            Box::new(move |t, c| match (x(t, c), y(t, c)) {
                (Val::None, Val::None) => Val::Bool(true),
                (Val::None, _) | (_, Val::None) => Val::Bool(false),
                (x, y) => Val::Bool(blob_bytes(&x) == blob_bytes(&y)),
            })
        }),
        "blob.sub" => sub(args, names, pos, sc),
        "blob.same" => same(args, pos, sc),
        _ => return None,
    })
}

/// blob.sub(blob, length, offset = 0): that many bytes from the offset;
/// past the end, or of an empty BLOB, the task fails.
fn sub(args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let a = by_name("blob.sub", &["blob", "length", "offset"], args, names)?;
    let (Some(b), Some(n)) = (a[0], a[1]) else { return err("blob.sub() takes a BLOB and a length", pos) };
    let (b, n, off) = (sc.expr(b)?, sc.expr(n)?, a[2].map(|e| sc.expr(e)).transpose()?);
    Ok(Box::new(move |t, c| {
        let v = b(t, c);
        let bytes = if matches!(v, Val::None) { Vec::new() } else { blob_bytes(&v) };
        let n = n(t, c).num().unwrap_or(0.0).max(0.0) as u64;
        let off = off.as_ref().map_or(0, |o| o(t, c).num().unwrap_or(0.0).max(0.0) as u64);
        if bytes.is_empty() {
            fail(t, "vmod blob error: blob is empty in blob.sub()".into());
            return Val::None;
        }
        let len = bytes.len() as u64;
        if off > len || n > len || off + n > len {
            fail(t, format!("vmod blob error: size {n} from offset {off} requires more bytes than blob length {len} in blob.sub()"));
            return Val::None;
        }
        blob(&bytes[off as usize..(off + n) as usize])
    }))
}

/// blob.same(BLOB, BLOB): whether both are the same object, as Varnish
/// compares pointers: two unset BLOBs, or one blob object's .get() twice
/// (a BLOB made by a call is a new one each time, however alike).
fn same(args: &[Expr], pos: Pos, sc: &Scope<'_>) -> Result<ExprFn, VclError> {
    let [x, y] = args else { return err(format!("blob.same() takes 2 argument(s), not {}", args.len()), pos) };
    let getter = |e: &Expr| match e {
        Expr::Call { name, args, .. } if args.is_empty() => {
            name.strip_suffix(".get").filter(|o| sc.objects.get(*o) == Some(&ObjKind::Blob)).map(str::to_string)
        }
        _ => None,
    };
    let one_object = matches!((getter(x), getter(y)), (Some(a), Some(b)) if a == b);
    let (x, y) = (sc.expr(x)?, sc.expr(y)?);
    Ok(Box::new(move |t, c| {
        let both_unset = matches!((x(t, c), y(t, c)), (Val::None, Val::None));
        Val::Bool(one_object || both_unset)
    }))
}

/// `new b = blob.blob(decoding, encoded)` in vcl_init: the text decoded
/// once; text not of the encoding fails vcl_init.
pub(super) fn object_new(obj: &str, args: &[Expr], names: &[Option<String>], sc: &Scope<'_>) -> Result<StmtFn, VclError> {
    let a = by_name("blob.blob", &["decoding", "encoded"], args, names)?;
    let dec = a[0].map_or(Ok("IDENTITY".to_string()), |e| enum_arg(e, &DECODINGS, "decoding"))?;
    let Some(encoded) = a[1] else { return err("blob.blob() needs encoded=", Pos::default()) };
    let encoded = sc.expr(encoded)?;
    let obj = obj.to_string();
    Ok(Box::new(move |t, c| {
        let s = encoded(t, c).text();
        match decode(&dec, &s, 0) {
            Some(b) => {
                c.blobs.lock().unwrap_or_else(|e| e.into_inner()).insert(obj.clone(), std::sync::Arc::new(b));
            }
            None => fail(t, format!("vmod blob error: cannot create blob {obj}, illegal encoding beginning with \"{s}\"")),
        }
        Flow::Next
    }))
}

/// A blob object's .get() and .encode(encoding = IDENTITY, case = DEFAULT).
pub(super) fn object_call(obj: &str, method: &str, args: &[Expr], names: &[Option<String>], pos: Pos) -> Result<ExprFn, VclError> {
    let obj = obj.to_string();
    let bytes = move |c: &Compiled| c.blobs.lock().unwrap_or_else(|e| e.into_inner()).get(&obj).cloned().unwrap_or_default();
    match method {
        "get" if args.is_empty() => Ok(Box::new(move |_, c| blob(&bytes(c)))),
        "encode" => {
            let a = by_name("encode", &["encoding", "case"], args, names)?;
            let enc = a[0].map_or(Ok("IDENTITY".to_string()), |e| enum_arg(e, &DECODINGS, "encoding"))?;
            let case = a[1].map_or(Ok("DEFAULT".to_string()), |e| enum_arg(e, &["LOWER", "UPPER", "DEFAULT"], "case"))?;
            Ok(Box::new(move |t, c| match encode_as(&enc, &case, &bytes(c)) {
                Ok(s) => Val::Str(s),
                Err(why) => {
                    fail(t, why);
                    Val::None
                }
            }))
        }
        m => err(format!("Symbol not found: '{m}' (a blob object has .get() and .encode())"), pos),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_as_vmod_blob() {
        assert_eq!(decode("HEX", "abc", 0).unwrap(), [0x0a, 0xbc]);
        assert_eq!(decode("HEX", "abcd", 2).unwrap(), [0xab]);
        assert!(decode("HEX", "xy", 0).is_none());
        assert_eq!(decode("BASE64", "Zm9v", 0).unwrap(), b"foo");
        assert_eq!(decode("BASE64URLNOPAD", "_-8", 0).unwrap(), [0xff, 0xef]);
        assert_eq!(decode("URL", "a%20b", 0).unwrap(), b"a b");
        assert!(decode("URL", "a%2", 0).is_none());
        assert_eq!(decode("IDENTITY", "foo", 0).unwrap(), b"foo");
    }
}
