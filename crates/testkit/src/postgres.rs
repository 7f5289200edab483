//! [`PostgresServer`]: a real PostgreSQL server, the metadata store of a Sluice cluster, as a
//! child process on a free 127.0.0.1 port with a fresh temporary directory.
//!
//! `initdb` makes a new cluster with password authentication (SCRAM-SHA-256) for one superuser,
//! `sluice`, with a random password, so tests can check that a wrong password is refused. The
//! server is started directly (no `pg_ctl`), so the PID this crate holds is the postmaster's
//! own: [`PostgresServer::kill`] is a crash, [`PostgresServer::stop`] a fast shutdown, and
//! dropping the server always ends it and removes the directory.
//!
//! PostgreSQL refuses to run as root. When the tests run as root (CI does), `initdb` and the
//! server run as the `postgres` system user (the Debian package creates it): the child process
//! switches to its uid and gid before it starts, and the temporary directory is handed to it.
//!
//! The binaries come from `SLUICE_PG_BIN_DIR`, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's layout). `scripts/test.sh` installs Debian's `postgresql` package when neither is
//! there. Without them the tests fail with a message that says how to get them: a missing
//! PostgreSQL must never turn into silently skipped tests.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{end_child, random_token};

/// How long [`PostgresServer::start`] and [`PostgresServer::restart`] wait for the server to
/// accept connections. It takes about a second; the bound is generous for a busy 2-core
/// machine but still fails a hung start instead of hanging the test.
pub const PG_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`PostgresServer::stop`] waits after SIGINT (fast shutdown) before SIGKILL.
pub const PG_STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The superuser every server started here has.
pub const PG_USER: &str = "sluice";

/// The database every server started here has besides `postgres`.
pub const PG_DATABASE: &str = "sluice";

/// How many bytes of the server's log a failure message quotes.
const LOG_TAIL_BYTES: u64 = 4096;

/// How the server is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgOptions {
    /// `fsync` and `synchronous_commit` on, as in production. Off (the default for tests)
    /// keeps everything else the same but makes commits cheap; a fast shutdown still writes
    /// every committed change out, so [`PostgresServer::stop`] then
    /// [`PostgresServer::restart`] keeps the data. Benchmarks of commit rates turn it on.
    pub durable: bool,
    /// `max_connections`.
    pub max_connections: u32,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            durable: false,
            max_connections: 100,
        }
    }
}

/// A PostgreSQL server child process on 127.0.0.1, stopped and cleaned up on drop.
#[derive(Debug)]
pub struct PostgresServer {
    bin_dir: PathBuf,
    /// Holds `data/` (the cluster) and `postgres.log`; removed on drop.
    root: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    password: String,
    /// The uid and gid the server runs as, when the tests run as root.
    run_as: Option<(u32, u32)>,
    options: PgOptions,
}

impl PostgresServer {
    /// [`PostgresServer::start_with`] the default [`PgOptions`].
    pub fn start() -> PostgresServer {
        PostgresServer::start_with(PgOptions::default())
    }

    /// Makes a new cluster in a fresh directory, starts it on a free loopback port, waits
    /// until it accepts connections and creates the database [`PG_DATABASE`]. Panics (with
    /// the server's log tail) when the binaries are missing or the server does not come up
    /// within [`PG_READY_TIMEOUT`].
    pub fn start_with(options: PgOptions) -> PostgresServer {
        let bin_dir = pg_bin_dir();
        let run_as = postgres_user_if_root();
        let root = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .expect("create a temporary directory for PostgreSQL");
        if let Some((uid, gid)) = run_as {
            chown(root.path(), uid, gid);
        }
        let port = super::free_port();
        let server = PostgresServer {
            bin_dir,
            root,
            child: None,
            port,
            password: random_token(24),
            run_as,
            options,
        };
        server.initdb();
        let mut server = server;
        server.spawn_and_wait();
        server.psql("postgres", &format!("CREATE DATABASE {PG_DATABASE}"));
        server
    }

    /// `postgres://sluice:PASSWORD@127.0.0.1:PORT/sluice`.
    pub fn url(&self) -> String {
        self.url_for(PG_DATABASE)
    }

    /// The URL of another database of this server (see [`PostgresServer::create_database`]).
    pub fn url_for(&self, database: &str) -> String {
        format!(
            "postgres://{PG_USER}:{}@127.0.0.1:{}/{database}",
            self.password, self.port
        )
    }

    /// The superuser's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the postmaster runs.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Creates another empty database.
    pub fn create_database(&self, name: &str) {
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
    }

    /// Runs one SQL script in `database` with `psql` (stopping at the first error) and
    /// returns what it printed (unaligned, tuples only). Panics, quoting psql's error, if it
    /// fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin_dir.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", PG_USER, "-d", database, "-c", sql])
            .env("PGPASSWORD", &self.password)
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops the server with a fast shutdown (SIGINT: open sessions are ended, committed work
    /// is written out), then SIGKILL if it has not exited within [`PG_STOP_TIMEOUT`]. Does
    /// nothing if it is not running.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            end_child(child, libc::SIGINT, PG_STOP_TIMEOUT);
        }
    }

    /// Ends the server at once, as a crash would: SIGQUIT (immediate shutdown: the postmaster
    /// ends its backends without writing anything out; committed work is recovered from the
    /// WAL at the next start), then SIGKILL if it lingers. Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            end_child(child, libc::SIGQUIT, PG_STOP_TIMEOUT);
        }
    }

    /// Stops the server if it runs, then starts it again on the same directory, port and
    /// password, and waits until it accepts connections.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn_and_wait();
    }

    /// Starts a stopped server again (nothing if it runs).
    pub fn start_again(&mut self) {
        if !self.is_running() {
            self.child = None;
            self.spawn_and_wait();
        }
    }

    /// The last few KiB of the server's log (all starts, appended).
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            out = String::from_utf8_lossy(&bytes).into_owned();
        }
        format!("--- PostgreSQL log tail ---\n{out}--- end of PostgreSQL log ---")
    }

    fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("postgres.log")
    }

    /// A command for one of the server's binaries, as the user the server runs as.
    fn command(&self, bin: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(bin));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
            // The postgres user's home, so nothing looks for root's.
            cmd.env("HOME", self.root.path());
        }
        cmd.current_dir(self.root.path());
        cmd
    }

    fn initdb(&self) {
        let pwfile = self.root.path().join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", self.password)).expect("write the password file");
        if let Some((uid, gid)) = self.run_as {
            chown(&pwfile, uid, gid);
        }
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", PG_USER, "--auth=scram-sha-256", "--no-sync"])
            .args(["--encoding=UTF8", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        let _ = std::fs::remove_file(&pwfile);
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn spawn_and_wait(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open PostgreSQL's log file");
        if let Some((uid, gid)) = self.run_as {
            chown(&self.log_path(), uid, gid);
        }
        let log_err = log.try_clone().expect("clone PostgreSQL's log file handle");
        let on_off = if self.options.durable { "on" } else { "off" };
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            // The socket directory is the test's own (the default may not be writable).
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.root.path().display()
            ))
            .args(["-c", &format!("fsync={on_off}")])
            .args(["-c", &format!("synchronous_commit={on_off}")])
            .args(["-c", &format!("full_page_writes={on_off}")])
            .args([
                "-c",
                &format!("max_connections={}", self.options.max_connections),
            ])
            .args(["-c", "shared_buffers=32MB"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let deadline = Instant::now() + PG_READY_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                panic!("postgres exited at start ({status})\n{}", self.log_tail());
            }
            if self.accepts_connections() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "postgres did not accept connections within {PG_READY_TIMEOUT:?}\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn accepts_connections(&self) -> bool {
        Command::new(self.bin_dir.join("pg_isready"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-t",
                "2",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The directory of PostgreSQL's server binaries: `SLUICE_PG_BIN_DIR` if set, else the newest
/// `/usr/lib/postgresql/<version>/bin` that has `initdb`.
pub fn pg_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLUICE_PG_BIN_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("initdb").is_file(),
            "SLUICE_PG_BIN_DIR={} has no initdb; point it at PostgreSQL's bin directory",
            dir.display()
        );
        return dir;
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb. Run \
             scripts/test.sh (it installs Debian's postgresql package) or set \
             SLUICE_PG_BIN_DIR to PostgreSQL's bin directory"
        ),
    }
}

/// The `postgres` user's uid and gid when this process runs as root (PostgreSQL refuses
/// root); `None` otherwise.
fn postgres_user_if_root() -> Option<(u32, u32)> {
    // SAFETY: geteuid takes no arguments and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let out = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .expect("run id");
    let uid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "running as root, and there is no `postgres` user to run PostgreSQL as \
                 (PostgreSQL refuses root); install Debian's postgresql package, which \
                 creates it"
            )
        });
    let out = Command::new("id")
        .args(["-g", "postgres"])
        .output()
        .expect("run id");
    let gid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the postgres user's gid");
    Some((uid, gid))
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {} to the postgres user: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_restarts_and_keeps_data() {
        let mut pg = PostgresServer::start();
        pg.psql(
            PG_DATABASE,
            "CREATE TABLE t (v int); INSERT INTO t VALUES (42)",
        );
        assert_eq!(pg.psql(PG_DATABASE, "SELECT v FROM t").trim(), "42");
        let pid = pg.pid().expect("running");
        pg.restart();
        assert_ne!(pg.pid(), Some(pid));
        assert_eq!(pg.psql(PG_DATABASE, "SELECT v FROM t").trim(), "42");
        pg.kill();
        assert!(!pg.is_running());
        pg.start_again();
        assert_eq!(pg.psql(PG_DATABASE, "SELECT v FROM t").trim(), "42");
    }

    #[test]
    fn a_wrong_password_is_refused() {
        let pg = PostgresServer::start();
        let out = Command::new(pg_bin_dir().join("psql"))
            .args(["-X", "-h", "127.0.0.1", "-p", &pg.port().to_string()])
            .args(["-U", PG_USER, "-d", PG_DATABASE, "-c", "SELECT 1"])
            .env("PGPASSWORD", "not-the-password")
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("password authentication failed"), "{err}");
    }
}
