//! A minimal AWS Signature Version 4 signer: enough for the bodyless, query-less S3 requests
//! the test helpers send themselves (CreateBucket). Real S3 traffic in Sluice goes through the
//! `object_store` crate, which signs its own requests.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The parts of a request that are signed. The path must already be URI-encoded and the
/// request must have no query string.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// `host[:port]`, exactly as sent in the `Host` header.
    pub host: &'a str,
    pub path: &'a str,
    pub payload: &'a [u8],
}

/// Who signs, for which region and service.
#[derive(Debug)]
pub struct Credentials<'a> {
    pub access_key: &'a str,
    pub secret_key: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

/// The headers to send with the request: `host`, `x-amz-date`, `x-amz-content-sha256` and
/// `authorization`.
#[derive(Debug)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
}

/// Signs `request` as of `now`.
pub fn sign(request: &Request<'_>, creds: &Credentials<'_>, now: SystemTime) -> Signed {
    let amz_date = amz_date(now);
    let date = &amz_date[..8];
    let payload_hash = hex::encode(Sha256::digest(request.payload));
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "{}\n{}\n\nhost:{}\nx-amz-content-sha256:{}\nx-amz-date:{}\n\n{}\n{}",
        request.method,
        request.path,
        request.host,
        payload_hash,
        amz_date,
        signed_headers,
        payload_hash
    );
    let scope = format!("{date}/{}/{}/aws4_request", creds.region, creds.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let key = signing_key(creds.secret_key, date, creds.region, creds.service);
    let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, \
         Signature={signature}",
        creds.access_key
    );
    Signed {
        headers: vec![
            ("host".to_owned(), request.host.to_owned()),
            ("x-amz-date".to_owned(), amz_date),
            ("x-amz-content-sha256".to_owned(), payload_hash),
            ("authorization".to_owned(), authorization),
        ],
    }
}

/// The derived key: HMAC chain over date, region, service and `aws4_request`.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// `YYYYMMDDTHHMMSSZ` in UTC.
pub fn amz_date(now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (the well-known
/// era-based conversion: 400-year eras of 146,097 days, years starting in March).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn amz_date_formats_utc() {
        assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
        // 2000-02-29 12:34:56 UTC, a leap day.
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(amz_date(t), "20000229T123456Z");
        // 2026-12-31 23:59:59 UTC.
        let t = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(amz_date(t), "20261231T235959Z");
    }

    #[test]
    fn signing_key_matches_the_published_example() {
        // The key-derivation example in AWS's Signature Version 4 documentation.
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex::encode(key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn sign_produces_the_four_headers() {
        let signed = sign(
            &Request {
                method: "PUT",
                host: "127.0.0.1:9000",
                path: "/bucket",
                payload: b"",
            },
            &Credentials {
                access_key: "AK",
                secret_key: "SK",
                region: "us-east-1",
                service: "s3",
            },
            UNIX_EPOCH + Duration::from_secs(951_827_696),
        );
        let names: Vec<_> = signed.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "host",
                "x-amz-date",
                "x-amz-content-sha256",
                "authorization"
            ]
        );
        let auth = &signed.headers[3].1;
        assert!(auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AK/20000229/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="
        ));
        // The SHA-256 of the empty payload.
        assert_eq!(
            signed.headers[2].1,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
