//! `sluice api-key new|hash`: make keys for the HTTP API. The server stores only a key's
//! SHA-256 (in `[[http_api_keys]]` of its config file); the key itself is shown once, here.
//!
//! Works offline: nothing here talks to a server.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::io::Read;

use anyhow::{Context, bail};
use base64::Engine;
use clap::Subcommand;
use sluice_http::auth::{ApiKeyConfig, Auth, hash_key_hex};

/// Prefix of every generated key, so a key is recognisable in a config or a leak scan.
const KEY_PREFIX: &str = "sk_";

/// Random bytes in a generated key (256 bits).
const KEY_RANDOM_BYTES: usize = 32;

/// Longest key `hash` reads from stdin; keys are short, so more is a mistake (a file piped in).
const KEY_INPUT_MAX_BYTES: usize = 4096;

/// Make API keys for the HTTP API.
///
/// Examples:
///   sluice api-key new --name billing --read 'orders.*' --write invoices
///   echo -n "$KEY" | sluice api-key hash
///
/// The server keeps only each key's SHA-256, in `[[http_api_keys]]` tables of its config file
/// (`sluice serve --config FILE`); it reloads the file when it changes, so a new key works
/// without a restart. Clients send the key as `Authorization: Bearer <key>`.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ApiKeyArgs {
    #[command(subcommand)]
    command: ApiKeyCommand,
}

#[derive(Debug, Subcommand)]
enum ApiKeyCommand {
    New(NewArgs),
    Hash(HashArgs),
}

/// Generate a new random key and its config block.
///
/// Example:
///   sluice api-key new --name billing --read 'orders.*' --write invoices --admin 'billing-*'
///
/// Prints the key (shown only now: store it where the client can read it), then a
/// `[[http_api_keys]]` block with the key's SHA-256, ready to paste into the server's config
/// file. Patterns match topic names: `*` matches any run of characters, everything else is
/// literal, "*" alone means every topic. A key with no grants can still read /metrics.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct NewArgs {
    /// Name of the key, as it appears in logs and in 403 answers [default: key-<first 8 hex
    /// digits of its SHA-256>]
    #[arg(long)]
    name: Option<String>,
    /// Topics the key may read (records, offsets); repeat for several patterns
    #[arg(long, value_name = "PATTERN")]
    read: Vec<String>,
    /// Topics the key may produce to; repeat for several patterns
    #[arg(long, value_name = "PATTERN")]
    write: Vec<String>,
    /// Topics the key may create and delete; repeat for several patterns
    #[arg(long, value_name = "PATTERN")]
    admin: Vec<String>,
    /// The principal the broker's ACLs know the key as when `sluice serve --authorizer acl`
    /// is on (then ACLs decide what the key may do, and --read/--write/--admin do not apply)
    /// [default: User:NAME]
    #[arg(long, value_name = "TYPE:NAME")]
    principal: Option<String>,
}

/// Print the SHA-256 of a key read from stdin.
///
/// Example:
///   echo -n "$KEY" | sluice api-key hash
///
/// For keys made elsewhere: put the printed hex digest in the `sha256` of a
/// `[[http_api_keys]]` block. Surrounding whitespace (a trailing newline from `echo`) is not
/// part of the key.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct HashArgs {}

pub fn run(args: ApiKeyArgs) -> anyhow::Result<()> {
    match args.command {
        ApiKeyCommand::New(args) => new(args),
        ApiKeyCommand::Hash(_) => hash(),
    }
}

fn new(args: NewArgs) -> anyhow::Result<()> {
    let mut random = [0u8; KEY_RANDOM_BYTES];
    getrandom::fill(&mut random)
        .map_err(|e| anyhow::anyhow!("reading random bytes from the operating system: {e}"))?;
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
    );
    let sha256 = hash_key_hex(&key);
    let name = args.name.unwrap_or_else(|| format!("key-{}", &sha256[..8]));
    let config = ApiKeyConfig {
        name,
        sha256,
        read: args.read,
        write: args.write,
        admin: args.admin,
        principal: args.principal,
    };
    // The same checks the server applies, so what is printed is accepted as is.
    Auth::new(vec![config.clone()]).map_err(anyhow::Error::msg)?;
    let block = toml::to_string(&config).context("formatting the config block")?;
    println!("{key}");
    println!();
    println!("# Add to the server's config file; the key above is not stored anywhere.");
    println!("[[http_api_keys]]");
    print!("{block}");
    Ok(())
}

fn hash() -> anyhow::Result<()> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(KEY_INPUT_MAX_BYTES as u64 + 1)
        .read_to_end(&mut input)
        .context("reading the key from stdin")?;
    if input.len() > KEY_INPUT_MAX_BYTES {
        bail!("stdin holds more than {KEY_INPUT_MAX_BYTES} bytes; pipe in just the key");
    }
    let text = String::from_utf8(input).context("the key on stdin is not UTF-8 text")?;
    let key = text.trim();
    if key.is_empty() {
        bail!("no key on stdin; example: echo -n \"$KEY\" | sluice api-key hash");
    }
    println!("{}", hash_key_hex(key));
    Ok(())
}
