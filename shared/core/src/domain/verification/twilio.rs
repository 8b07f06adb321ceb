//! Twilio: `X-Twilio-Signature`, the base64 HMAC-SHA1 keyed by the account's auth token of the
//! URL Twilio was given followed by the form parameters sorted by name, each name then its
//! value (<https://www.twilio.com/docs/usage/webhooks/webhooks-security>). A JSON body is
//! signed through the URL instead: its query carries `bodySHA256`, the hex SHA-256 of the body.
//! The URL is the address's public inbox URL (`--public-url`, or the API's domain on AWS), with
//! the query as received; as Twilio's own libraries do, it is also tried with its port added or
//! removed. No timestamp is signed. The delivery id is `I-Twilio-Idempotency-Token`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::hmac;

use super::{as_key, one_header, Checked, Reason, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &["x-twilio-signature", "i-twilio-idempotency-token"];
/// The most form parameters read; a body with more does not verify.
const MAX_PARAMS: usize = 10_000;

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    let header = one_header(d.headers, "x-twilio-signature")?;
    let sig = STANDARD.decode(header).map_err(|_| Reason::BadSignature)?;
    let url = d.url.ok_or(Reason::BadSignature)?;
    let key = hmac::Key::new(
        hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        config.secret.expose().as_bytes(),
    );
    let params = signed_params(d, url)?;
    let matched = url_variants(url).iter().any(|u| {
        params.iter().any(|p| {
            let mut data = u.clone().into_bytes();
            data.extend_from_slice(p.as_bytes());
            hmac::verify(&key, &data, &sig).is_ok()
        })
    });
    if !matched {
        return Err(Reason::BadSignature);
    }
    Ok(one_header(d.headers, "i-twilio-idempotency-token")
        .ok()
        .and_then(as_key))
}

/// What follows the URL in the signed text: the sorted form parameters (with repeated
/// name/value pairs kept, and once each, as Twilio's libraries differ), or nothing for a body
/// the URL signs by its `bodySHA256`, or for no body at all.
fn signed_params(d: &Signed<'_>, url: &str) -> Result<Vec<String>, Reason> {
    let form = one_header(d.headers, "content-type").is_ok_and(|ct| {
        ct.split(';').next().is_some_and(|e| {
            e.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
    });
    if form {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (k, v) in form_urlencoded::parse(d.body) {
            if pairs.len() == MAX_PARAMS {
                return Err(Reason::BadSignature);
            }
            pairs.push((k.into_owned(), v.into_owned()));
        }
        pairs.sort();
        let joined = |pairs: &[(String, String)]| {
            pairs.iter().fold(String::new(), |mut s, (k, v)| {
                s.push_str(k);
                s.push_str(v);
                s
            })
        };
        let all = joined(&pairs);
        pairs.dedup();
        let once = joined(&pairs);
        return Ok(if once == all {
            vec![all]
        } else {
            vec![all, once]
        });
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let declared = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "bodySHA256")
        .map(|(_, v)| v.into_owned());
    match declared {
        Some(h) if h.eq_ignore_ascii_case(&crate::domain::ids::sha256_hex(d.body)) => {
            Ok(vec![String::new()])
        }
        Some(_) => Err(Reason::BadSignature),
        // Nothing signs a body: only an empty one verifies.
        None if d.body.is_empty() => Ok(vec![String::new()]),
        None => Err(Reason::BadSignature),
    }
}

/// `url`, and `url` with its port removed (when it has one) or its scheme's default port added.
fn url_variants(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return out;
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_end = authority.rfind(']').map_or(0, |i| i + 1);
    match authority[host_end..].rfind(':').map(|i| host_end + i) {
        Some(colon) => out.push(format!("{scheme}://{}{tail}", &authority[..colon])),
        None => {
            let port = if scheme.eq_ignore_ascii_case("https") {
                443
            } else {
                80
            };
            out.push(format!("{scheme}://{authority}:{port}{tail}"));
        }
    }
    out
}

/// The header Twilio would send for a form `body` posted to `url`.
pub(super) fn sign(secret: &str, id: &str, url: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    let mut data = url.to_owned();
    for (k, v) in pairs {
        data.push_str(&k);
        data.push_str(&v);
    }
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
    let tag = hmac::sign(&key, data.as_bytes());
    vec![
        ("x-twilio-signature", STANDARD.encode(tag.as_ref())),
        ("i-twilio-idempotency-token", id.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::url_variants;

    #[test]
    fn ports_are_tried_both_ways() {
        assert_eq!(
            url_variants("https://a.example/x?y=1"),
            ["https://a.example/x?y=1", "https://a.example:443/x?y=1"]
        );
        assert_eq!(
            url_variants("http://127.0.0.1:8080/x"),
            ["http://127.0.0.1:8080/x", "http://127.0.0.1/x"]
        );
        assert_eq!(
            url_variants("http://[::1]/x"),
            ["http://[::1]/x", "http://[::1]:80/x"]
        );
        assert_eq!(url_variants("nonsense"), ["nonsense"]);
    }
}
