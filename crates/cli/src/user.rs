//! `sluice user add|list|delete`: the SASL users of a broker, written straight into its user
//! file (DATA_DIR/security/users.json). Works before the first start and while the broker
//! runs (it re-reads the file within a few seconds). Online, through a running broker,
//! Kafka's own tool does the same: `kafka-configs --alter --entity-type users`
//! (AlterUserScramCredentials, `sluice_server::scram_admin`).

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use sluice_security::{DEFAULT_ITERATIONS, ScramCredential, ScramMechanism, UserStore};

/// Longest password read from stdin; more is a mistake (a file piped in).
const PASSWORD_INPUT_MAX_BYTES: usize = 4096;

/// Manage the SASL users of a broker (SCRAM-SHA-256, SCRAM-SHA-512; PLAIN logins are checked
/// against the same credentials).
///
/// Examples:
///   printf '%s' "$PASSWORD" | sluice user add alice --mechanism SCRAM-SHA-512 --password-stdin
///   sluice user list
///   sluice user delete alice [--mechanism SCRAM-SHA-256]
///
/// Writes DATA_DIR/security/users.json directly: works before the broker's first start, and a
/// running broker re-reads the file within a few seconds. Passwords are never stored, only
/// salted SCRAM keys. Through a running broker, Kafka's tool works too:
///   kafka-configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \
///     --add-config 'SCRAM-SHA-512=[password=...]'
/// See docs/security.md.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct UserArgs {
    #[command(subcommand)]
    command: UserCommand,
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    Add(AddArgs),
    List(ListArgs),
    Delete(DeleteArgs),
}

/// The broker's data directory.
#[derive(Debug, clap::Args)]
struct DataDir {
    /// The broker's data directory [default: ./sluice-data]
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "sluice-data")]
    data_dir: PathBuf,
}

/// Add a user's credential for one mechanism, or replace it.
///
/// Example:
///   printf '%s' "$PASSWORD" | sluice user add alice --mechanism SCRAM-SHA-512 --password-stdin
///
/// The password is read from stdin (one trailing newline is dropped), never from the command
/// line, where other users of the machine could see it. For PLAIN logins add either mechanism.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct AddArgs {
    /// The user name (the client's sasl.username)
    name: String,
    /// SCRAM-SHA-512 or SCRAM-SHA-256
    #[arg(long)]
    mechanism: String,
    /// Read the password from stdin (required: passwords are not taken as arguments)
    #[arg(long)]
    password_stdin: bool,
    /// PBKDF2 iterations, from 4096 to 16384, as Kafka allows [default: 4096]
    #[arg(long)]
    iterations: Option<u32>,
    #[command(flatten)]
    dir: DataDir,
}

/// List the users and their mechanisms (never keys or salts).
#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    dir: DataDir,
}

/// Delete a user, or one of its credentials.
#[derive(Debug, clap::Args)]
struct DeleteArgs {
    /// The user name
    name: String,
    /// Delete only this mechanism's credential [default: every credential of the user]
    #[arg(long)]
    mechanism: Option<String>,
    #[command(flatten)]
    dir: DataDir,
}

fn mechanism(name: &str) -> anyhow::Result<ScramMechanism> {
    ScramMechanism::from_name(name)
        .with_context(|| format!("unknown mechanism '{name}'; use SCRAM-SHA-512 or SCRAM-SHA-256"))
}

/// An object-storage broker's users live in its bucket, which its next start restores over the
/// local file: a change made here would be lost. Before the first start there is no bucket
/// copy yet, and the first start uploads the local file.
fn refuse_object_storage(data_dir: &std::path::Path) -> anyhow::Result<()> {
    if data_dir.join("objstore").is_dir() {
        bail!(
            "{} belongs to an object-storage broker (--storage), whose users are kept in its bucket: change them while it runs, with kafka-configs --alter --entity-type users (or AdminClient's alterUserScramCredentials)",
            data_dir.display()
        );
    }
    Ok(())
}

pub fn run(args: UserArgs) -> anyhow::Result<()> {
    match args.command {
        UserCommand::Add(a) => {
            let mechanism = mechanism(&a.mechanism)?;
            if !a.password_stdin {
                bail!(
                    "give the password on stdin with --password-stdin (printf '%s' \"$PASSWORD\" | sluice user add ...)"
                );
            }
            let password = read_password()?;
            let credential = ScramCredential::from_password(
                mechanism,
                &password,
                a.iterations.unwrap_or(DEFAULT_ITERATIONS),
                &mut rand::rng(),
            )
            .context("cannot make the credential")?;
            refuse_object_storage(&a.dir.data_dir)?;
            let store = UserStore::open(&a.dir.data_dir)?;
            store.upsert(&a.name, credential)?;
            println!("user {} has a {} credential", a.name, mechanism.name());
        }
        UserCommand::List(a) => {
            let store = UserStore::open(&a.dir.data_dir)?;
            for name in store.list() {
                let mechanisms: Vec<String> = store
                    .describe(&name)
                    .unwrap_or_default()
                    .iter()
                    .map(|c| format!("{} (iterations {})", c.mechanism.name(), c.iterations))
                    .collect();
                println!("{name}\t{}", mechanisms.join(", "));
            }
        }
        UserCommand::Delete(a) => {
            refuse_object_storage(&a.dir.data_dir)?;
            let store = UserStore::open(&a.dir.data_dir)?;
            let deleted = match a.mechanism.as_deref() {
                Some(m) => store.delete(&a.name, mechanism(m)?)?,
                None => store.delete_user(&a.name)?,
            };
            if !deleted {
                bail!("no such user or credential: {}", a.name);
            }
            println!("deleted {}", a.name);
        }
    }
    Ok(())
}

/// The password on stdin, without one trailing newline (`echo` adds one).
fn read_password() -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(PASSWORD_INPUT_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .context("reading the password from stdin")?;
    if bytes.len() > PASSWORD_INPUT_MAX_BYTES {
        bail!("the password on stdin is longer than {PASSWORD_INPUT_MAX_BYTES} bytes");
    }
    let mut password = String::from_utf8(bytes).context("the password is not UTF-8")?;
    if password.ends_with('\n') {
        password.pop();
        if password.ends_with('\r') {
            password.pop();
        }
    }
    if password.is_empty() {
        bail!("empty password on stdin");
    }
    Ok(password)
}
