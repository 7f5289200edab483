//! Parsing of the two client messages of a SCRAM exchange (RFC 5802 section 7), with no
//! I/O and no crypto. Every malformed input is an [`AuthError`], never a panic.
//!
//! ```text
//! client-first = gs2-header client-first-bare
//! gs2-header   = ("n" / "y" / "p=" cb-name) "," ["a=" saslname] ","
//! client-first-bare = ["m=" ext ","] "n=" saslname ",r=" c-nonce ["," extensions]
//! client-final = "c=" base64 ",r=" nonce ["," extensions] ",p=" base64
//! ```
//!
//! Kafka's extensions (`key=value` after the nonce) are accepted and ignored, except
//! `tokenauth=true` (delegation-token login), which is refused until delegation tokens exist.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::error::AuthError;

const FIRST: &str = "client-first";
const FINAL: &str = "client-final";

/// A parsed client-first message, borrowing from the input.
#[derive(Debug)]
pub(crate) struct ClientFirst<'a> {
    /// The gs2 header exactly as sent, e.g. `n,,`; client-final's `c=` must be its base64.
    pub gs2_header: &'a str,
    /// The decoded authorization id, if any.
    pub authzid: Option<String>,
    /// The decoded user name (`=2C` and `=3D` unescaped).
    pub username: String,
    pub nonce: &'a str,
    /// Everything after the gs2 header; part of the AuthMessage.
    pub bare: &'a str,
}

/// A parsed client-final message.
#[derive(Debug)]
pub(crate) struct ClientFinal<'a> {
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    pub proof: Vec<u8>,
    /// The message up to (not including) `,p=`; part of the AuthMessage.
    pub without_proof: &'a str,
}

fn utf8<'a>(message: &'static str, bytes: &'a [u8]) -> Result<&'a str, AuthError> {
    std::str::from_utf8(bytes).map_err(|_| AuthError::malformed(message, "not valid UTF-8"))
}

/// RFC 5802 `printable` without `,`: what a nonce may contain.
pub(crate) fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Decodes a `saslname`: `=2C` is `,`, `=3D` is `=`, any other `=` is an error.
pub(crate) fn decode_saslname(message: &'static str, raw: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(pos) = rest.find('=') {
        out.push_str(&rest[..pos]);
        let escape = rest.get(pos..pos + 3);
        match escape {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => {
                return Err(AuthError::malformed(
                    message,
                    "'=' in a name must be escaped as =2C or =3D",
                ));
            }
        }
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    if out.contains('\0') {
        return Err(AuthError::malformed(message, "NUL in a name"));
    }
    Ok(out)
}

/// Encodes a name as a `saslname` (the client side; used by tests).
#[cfg(test)]
pub(crate) fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn refuse_token_auth(extensions: &str) -> Result<(), AuthError> {
    for ext in extensions.split(',') {
        let Some((key, value)) = ext.split_once('=') else {
            return Err(AuthError::malformed(
                FIRST,
                "an extension must be key=value",
            ));
        };
        if key.is_empty() {
            return Err(AuthError::malformed(FIRST, "an extension has an empty key"));
        }
        // Kafka treats `tokenauth` as on when its value is "true" in any case.
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            return Err(AuthError::TokenAuthNotSupported);
        }
    }
    Ok(())
}

pub(crate) fn parse_client_first(bytes: &[u8]) -> Result<ClientFirst<'_>, AuthError> {
    let msg = utf8(FIRST, bytes)?;
    // gs2-cbind-flag
    let after_flag = if let Some(rest) = msg.strip_prefix("n,") {
        rest
    } else if let Some(rest) = msg.strip_prefix("y,") {
        // "y": the client could bind but thinks we cannot; we indeed cannot, so proceed.
        rest
    } else if msg.starts_with("p=") {
        return Err(AuthError::ChannelBindingNotSupported);
    } else {
        return Err(AuthError::malformed(
            FIRST,
            "must start with a gs2 header \"n,\" or \"y,\"",
        ));
    };
    let Some((authzid_field, bare)) = after_flag.split_once(',') else {
        return Err(AuthError::malformed(FIRST, "gs2 header is not terminated"));
    };
    let gs2_header = &msg[..msg.len() - bare.len()];
    let authzid = if authzid_field.is_empty() {
        None
    } else if let Some(raw) = authzid_field.strip_prefix("a=") {
        Some(decode_saslname(FIRST, raw)?)
    } else {
        return Err(AuthError::malformed(
            FIRST,
            "the second gs2 field must be empty or a=authzid",
        ));
    };

    if bare.starts_with("m=") {
        return Err(AuthError::MandatoryExtension);
    }
    let mut fields = bare.splitn(3, ',');
    let name_field = fields.next().unwrap_or("");
    let Some(raw_name) = name_field.strip_prefix("n=") else {
        return Err(AuthError::malformed(FIRST, "expected n=username"));
    };
    let username = decode_saslname(FIRST, raw_name)?;
    if username.is_empty() {
        return Err(AuthError::malformed(FIRST, "empty user name"));
    }
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return Err(AuthError::malformed(
            FIRST,
            "expected r=nonce after the user name",
        ));
    };
    if !valid_nonce(nonce) {
        return Err(AuthError::malformed(
            FIRST,
            "nonce must be non-empty printable ASCII without ','",
        ));
    }
    if let Some(extensions) = fields.next() {
        refuse_token_auth(extensions)?;
    }
    Ok(ClientFirst {
        gs2_header,
        authzid,
        username,
        nonce,
        bare,
    })
}

pub(crate) fn parse_client_final(bytes: &[u8]) -> Result<ClientFinal<'_>, AuthError> {
    let msg = utf8(FINAL, bytes)?;
    // The proof is always the last attribute; a base64 value has no ',' so the last
    // ",p=" is the start of it.
    let Some(pos) = msg.rfind(",p=") else {
        return Err(AuthError::malformed(FINAL, "expected a final p=proof"));
    };
    let without_proof = &msg[..pos];
    let proof = BASE64
        .decode(&msg[pos + 3..])
        .map_err(|_| AuthError::malformed(FINAL, "proof is not valid base64"))?;
    let mut fields = without_proof.splitn(3, ',');
    let Some(cbind) = fields.next().and_then(|f| f.strip_prefix("c=")) else {
        return Err(AuthError::malformed(
            FINAL,
            "expected c=channel-binding first",
        ));
    };
    let channel_binding = BASE64
        .decode(cbind)
        .map_err(|_| AuthError::malformed(FINAL, "channel binding is not valid base64"))?;
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return Err(AuthError::malformed(FINAL, "expected r=nonce second"));
    };
    if !valid_nonce(nonce) {
        return Err(AuthError::malformed(
            FINAL,
            "nonce must be non-empty printable ASCII without ','",
        ));
    }
    // Any further attributes are extensions, which RFC 5802 lets a server ignore.
    Ok(ClientFinal {
        channel_binding,
        nonce,
        proof,
        without_proof,
    })
}

pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saslname_escaping() {
        assert_eq!(decode_saslname(FIRST, "a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        for bad in ["a=", "a=2", "a=2c", "=41", "x=3Dy="] {
            assert!(decode_saslname(FIRST, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn client_first_variants() {
        let cf = parse_client_first(b"n,,n=user,r=abc").unwrap();
        assert_eq!(
            (cf.gs2_header, cf.username.as_str(), cf.nonce, cf.bare),
            ("n,,", "user", "abc", "n=user,r=abc")
        );
        assert_eq!(cf.authzid, None);
        let cf = parse_client_first(b"n,a=al=2Cice,n=al=2Cice,r=abc,foo=bar").unwrap();
        assert_eq!(cf.authzid.as_deref(), Some("al,ice"));
        assert_eq!(cf.gs2_header, "n,a=al=2Cice,");
        assert!(parse_client_first(b"y,,n=u,r=x").is_ok());
        assert!(parse_client_first(b"n,,n=u,r=x,tokenauth=false").is_ok());
        // Extension keys are case-sensitive in Kafka; only `tokenauth` counts.
        assert!(parse_client_first(b"n,,n=u,r=x,TOKENAUTH=true").is_ok());
    }

    #[test]
    fn client_first_refusals() {
        use AuthError::*;
        // `None`: some `Malformed` error.
        let cases: &[(&[u8], Option<AuthError>)] = &[
            (b"p=tls-unique,,n=u,r=x", Some(ChannelBindingNotSupported)),
            (b"n,,m=x,n=u,r=x", Some(MandatoryExtension)),
            (b"n,,n=u,r=x,tokenauth=true", Some(TokenAuthNotSupported)),
            (b"n,,n=u,r=x,tokenauth=TRUE", Some(TokenAuthNotSupported)),
            (b"", None),
            (b"n,", None),
            (b"n,,", None),
            (b"n,,n=,r=x", None),
            (b"n,,n=u", None),
            (b"n,,n=u,r=", None),
            (b"n,,n=u,r=a b", None),
            (b"n,,r=x,n=u", None),
            (b"n,b=x,n=u,r=x", None),
            (b"x,,n=u,r=x", None),
            (b"n,,n=u,r=x,noequals", None),
            (b"n,,n=u,r=x,=v", None),
            (b"n,,n=u\xff,r=x", None),
            (b"n,,n=u\0,r=x", None),
        ];
        for (input, expected) in cases {
            let shown = String::from_utf8_lossy(input);
            match (parse_client_first(input), expected) {
                (Ok(cf), _) => panic!("{shown:?} parsed as {cf:?}"),
                (Err(e), Some(expected)) => assert_eq!(&e, expected, "{shown:?}"),
                (Err(e), None) => assert!(matches!(e, Malformed { .. }), "{shown:?}: {e}"),
            }
        }
    }

    #[test]
    fn client_final_variants_and_refusals() {
        let cf = parse_client_final(b"c=biws,r=abc,p=AAAA").unwrap();
        assert_eq!(cf.channel_binding, b"n,,");
        assert_eq!((cf.nonce, cf.without_proof), ("abc", "c=biws,r=abc"));
        assert_eq!(cf.proof, vec![0, 0, 0]);
        assert!(parse_client_final(b"c=biws,r=abc,x=1,p=AAAA").is_ok());
        for bad in [
            &b""[..],
            b"c=biws,r=abc",
            b"c=biws,r=abc,p=!!",
            b"c=!!,r=abc,p=AAAA",
            b"r=abc,c=biws,p=AAAA",
            b"c=biws,p=AAAA",
            b"c=biws,r=,p=AAAA",
            b"c=biws,r=abc,p=AAAA,x=1",
            b"\xff,p=AAAA",
        ] {
            assert!(
                parse_client_final(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
