//! The `--storage s3://BUCKET/PREFIX` value: [`StorageUrl`] and why one is refused,
//! [`UrlError`]. Pure: no I/O, no environment.

use std::fmt;

use object_store::path::Path;

/// The longest prefix accepted. S3 keys hold at most 1024 bytes; half is left for the names
/// Sluice puts under the prefix.
pub const PREFIX_BYTES_MAX: usize = 512;

/// What an `s3://` storage URL should look like, quoted by every URL error.
const URL_FORM: &str = "write s3://BUCKET or s3://BUCKET/PREFIX, e.g. s3://my-bucket/sluice";

/// The parsed value of `--storage s3://BUCKET/PREFIX`: a bucket and an optional key prefix.
///
/// The prefix is kept without leading or trailing '/' (`s3://b//x/y/` is `s3://b/x/y`), so
/// `Display` gives the canonical form the broker logs as `storage: s3://BUCKET/PREFIX`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StorageUrl {
    bucket: String,
    prefix: String,
}

/// Why a storage URL was refused. Each prints as one line that quotes the URL and says what to
/// write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not an `s3://` URL.
    #[error("storage URL `{url}` is not an s3:// URL: {hint}")]
    Scheme {
        /// The URL as given.
        url: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// `s3://` with nothing (or only a prefix) after it.
    #[error("storage URL `{url}` names no bucket: {URL_FORM}")]
    EmptyBucket {
        /// The URL as given.
        url: String,
    },
    /// A bucket name S3 does not accept.
    #[error("storage URL `{url}`: bucket name `{bucket}` {why}")]
    BucketName {
        /// The URL as given.
        url: String,
        /// The bucket part.
        bucket: String,
        /// What is wrong with it and what is allowed.
        why: String,
    },
    /// A prefix Sluice does not accept.
    #[error("storage URL `{url}`: prefix `{prefix}` {why}")]
    Prefix {
        /// The URL as given.
        url: String,
        /// The prefix part.
        prefix: String,
        /// What is wrong with it and what is allowed.
        why: String,
    },
}

impl StorageUrl {
    /// Parses `s3://BUCKET` or `s3://BUCKET/PREFIX`.
    ///
    /// Bucket names follow S3's rules (3–63 bytes of lowercase letters, digits, '.' and '-',
    /// starting and ending with a letter or digit). The prefix is one or more parts separated
    /// by '/', each made of ASCII letters, digits, '-', '_', '.' and '=' (not "." or ".."); a
    /// leading or trailing '/' is dropped.
    pub fn parse(url: &str) -> Result<StorageUrl, UrlError> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(UrlError::Scheme {
                url: url.to_owned(),
                hint: scheme_hint(url),
            });
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some((_userinfo, host)) = bucket.rsplit_once('@') {
            // Never echo what may be a secret: the errors quote the URL without it.
            return Err(UrlError::BucketName {
                url: format!("s3://***@{host}/{prefix}"),
                bucket: format!("***@{host}"),
                why: "has credentials in it: put them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and write s3://BUCKET/PREFIX".to_owned(),
            });
        }
        if bucket.is_empty() {
            return Err(UrlError::EmptyBucket {
                url: url.to_owned(),
            });
        }
        check_bucket_name(bucket).map_err(|why| UrlError::BucketName {
            url: url.to_owned(),
            bucket: bucket.to_owned(),
            why,
        })?;
        let prefix = normalise_prefix(prefix).map_err(|why| UrlError::Prefix {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            why,
        })?;
        Ok(StorageUrl {
            bucket: bucket.to_owned(),
            prefix,
        })
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix without leading or trailing '/'; empty when the URL has none.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of `rel` (a '/'-separated relative name such as `objects/00000000000000000001`)
    /// under the prefix.
    pub fn key(&self, rel: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(rel)
        } else {
            Path::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// The prefix as a path for listing (`None`: the whole bucket).
    pub fn prefix_path(&self) -> Option<Path> {
        (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()))
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

impl std::str::FromStr for StorageUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<StorageUrl, UrlError> {
        StorageUrl::parse(s)
    }
}

/// What to say about a URL that does not start with `s3://`.
fn scheme_hint(url: &str) -> &'static str {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("s3://") || lower.starts_with("s3a://") || lower.starts_with("s3n://") {
        "write the scheme as lowercase s3://, e.g. s3://my-bucket/sluice"
    } else if lower.starts_with("http://") || lower.starts_with("https://") {
        "write s3://BUCKET/PREFIX and put the server's address in AWS_ENDPOINT_URL"
    } else if lower.starts_with("gs://") || lower.starts_with("az://") || lower.contains("://") {
        "only S3 and S3-compatible stores (MinIO, R2, ...) are supported; write s3://BUCKET/PREFIX"
    } else {
        "for local storage leave --storage out (and use --data-dir); for S3 write s3://BUCKET/PREFIX"
    }
}

/// S3's bucket naming rules; `Err` says what is wrong and what is allowed.
fn check_bucket_name(bucket: &str) -> Result<(), String> {
    const ALLOWED: &str = "S3 bucket names use only lowercase letters, digits, '.' and '-'";
    if let Some((at, c)) = bucket
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'))
    {
        let what = match c {
            ':' => " (the endpoint and its port go in AWS_ENDPOINT_URL, not in the URL)".to_owned(),
            c if c.is_ascii_uppercase() => format!("; write `{}`", bucket.to_ascii_lowercase()),
            _ => String::new(),
        };
        return Err(format!("has {c:?} at byte {at}: {ALLOWED}{what}"));
    }
    if !(3..=63).contains(&bucket.len()) {
        return Err(format!(
            "is {} bytes long: S3 bucket names are 3 to 63 bytes",
            bucket.len()
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(bucket.chars().next()) || !alnum(bucket.chars().last()) {
        return Err("must start and end with a letter or digit".to_owned());
    }
    if bucket.contains("..") {
        return Err("has two '.' in a row: S3 does not allow that".to_owned());
    }
    Ok(())
}

/// Drops a leading or trailing '/' and checks each part; `Err` says what is wrong.
fn normalise_prefix(prefix: &str) -> Result<String, String> {
    const ALLOWED: &str =
        "prefixes use ASCII letters, digits, '-', '_', '.' and '=', with '/' between parts";
    let trimmed = prefix.trim_matches('/');
    if let Some((at, c)) = trimmed
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=' | '/')))
    {
        let what = match c {
            '?' | '#' => " (storage URLs take no query or fragment)",
            _ => "",
        };
        return Err(format!("has {c:?} at byte {at}: {ALLOWED}{what}"));
    }
    if trimmed.len() > PREFIX_BYTES_MAX {
        return Err(format!(
            "is {} bytes long: at most {PREFIX_BYTES_MAX} are allowed",
            trimmed.len()
        ));
    }
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for part in trimmed.split('/') {
        if part.is_empty() {
            return Err(format!(
                "has an empty part ('//'): write `{}`",
                trimmed
                    .split('/')
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join("/")
            ));
        }
        if part == "." || part == ".." {
            return Err(format!(
                "has a `{part}` part: {ALLOWED}, and no part is . or .."
            ));
        }
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> StorageUrl {
        StorageUrl::parse(s).unwrap()
    }

    fn parse_err(s: &str) -> String {
        let e = StorageUrl::parse(s).unwrap_err();
        let line = e.to_string();
        assert!(!line.contains('\n'), "{line}");
        line
    }

    #[test]
    fn urls_parse_and_print_canonically() {
        for (input, bucket, prefix, shown) in [
            ("s3://my-bucket", "my-bucket", "", "s3://my-bucket"),
            ("s3://my-bucket/", "my-bucket", "", "s3://my-bucket"),
            (
                "s3://my-bucket/sluice",
                "my-bucket",
                "sluice",
                "s3://my-bucket/sluice",
            ),
            ("s3://b.1-2/a/b/c/", "b.1-2", "a/b/c", "s3://b.1-2/a/b/c"),
            (
                "s3://abc//x_y/env=prod//",
                "abc",
                "x_y/env=prod",
                "s3://abc/x_y/env=prod",
            ),
        ] {
            let parsed = url(input);
            assert_eq!(parsed.bucket(), bucket, "{input}");
            assert_eq!(parsed.prefix(), prefix, "{input}");
            assert_eq!(parsed.to_string(), shown, "{input}");
            assert_eq!(
                url(shown),
                parsed,
                "Display must parse back to the same URL"
            );
            assert_eq!(input.parse::<StorageUrl>().unwrap(), parsed);
        }
    }

    #[test]
    fn keys_live_under_the_prefix() {
        assert_eq!(
            url("s3://abc/p/q").key("objects/1").as_ref(),
            "p/q/objects/1"
        );
        assert_eq!(url("s3://abc").key("objects/1").as_ref(), "objects/1");
        assert_eq!(url("s3://abc/p").prefix_path().unwrap().as_ref(), "p");
        assert_eq!(url("s3://abc").prefix_path(), None);
    }

    #[test]
    fn other_schemes_are_refused_with_what_to_write() {
        let e = parse_err("http://127.0.0.1:9000/bucket");
        assert!(e.contains("AWS_ENDPOINT_URL"), "{e}");
        let e = parse_err("S3://bucket");
        assert!(e.contains("lowercase s3://"), "{e}");
        let e = parse_err("gs://bucket/p");
        assert!(e.contains("only S3"), "{e}");
        let e = parse_err("./data");
        assert!(e.contains("leave --storage out"), "{e}");
        let e = parse_err("");
        assert!(e.contains("not an s3:// URL"), "{e}");
    }

    #[test]
    fn bad_buckets_are_refused_with_what_to_write() {
        let e = parse_err("s3://");
        assert!(
            e.contains("names no bucket") && e.contains("s3://BUCKET/PREFIX"),
            "{e}"
        );
        let e = parse_err("s3:///prefix");
        assert!(e.contains("names no bucket"), "{e}");
        let e = parse_err("s3://My-Bucket/x");
        assert!(e.contains("write `my-bucket`"), "{e}");
        let e = parse_err("s3://localhost:9000/bucket");
        assert!(e.contains("AWS_ENDPOINT_URL"), "{e}");
        let e = parse_err("s3://key:hunter2@bucket/p");
        assert!(e.contains("has credentials in it"), "{e}");
        assert!(
            !e.contains("hunter2") && e.contains("s3://***@bucket/p"),
            "{e}"
        );
        let e = parse_err("s3://my_bucket");
        assert!(e.contains("'_'") && e.contains("lowercase letters"), "{e}");
        let e = parse_err("s3://ab");
        assert!(e.contains("3 to 63"), "{e}");
        let e = parse_err(&format!("s3://{}", "a".repeat(64)));
        assert!(e.contains("3 to 63"), "{e}");
        let e = parse_err("s3://-abc");
        assert!(e.contains("start and end"), "{e}");
        let e = parse_err("s3://a..b");
        assert!(e.contains("two '.'"), "{e}");
    }

    #[test]
    fn bad_prefixes_are_refused_with_what_to_write() {
        let e = parse_err("s3://bucket/a b");
        assert!(e.contains("' '") && e.contains("ASCII letters"), "{e}");
        let e = parse_err("s3://bucket/a?x=1");
        assert!(e.contains("no query"), "{e}");
        let e = parse_err("s3://bucket/a//b");
        assert!(e.contains("write `a/b`"), "{e}");
        let e = parse_err("s3://bucket/a/../b");
        assert!(e.contains("`..` part"), "{e}");
        let e = parse_err("s3://bucket/ü");
        assert!(e.contains("ASCII"), "{e}");
        let long = format!("s3://bucket/{}", "a".repeat(PREFIX_BYTES_MAX + 1));
        assert!(parse_err(&long).contains("at most 512"));
        let longest = format!("s3://bucket/{}", "a".repeat(PREFIX_BYTES_MAX));
        assert!(StorageUrl::parse(&longest).is_ok());
    }
}
