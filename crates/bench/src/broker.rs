//! Brokers the benchmark starts itself (`--broker-cmd`, once per broker), so that `correctness`
//! can SIGKILL and restart them. Only these processes are ever signalled, each by its own PID.
//!
//! - [`BrokerProcess`]: one command, the address it listens on, its log file and its PID(s).
//! - [`Brokers`]: every command of a campaign, started together, killed in turn (kill `i` hits
//!   broker `i mod count`, see [`victim`]) and stopped together. Dropping it stops them all, so
//!   an error or a panic anywhere in a campaign leaves no broker running; on Linux each broker
//!   also dies with the benchmark process if that is killed outright (`PR_SET_PDEATHSIG`).

use std::fs::{File, OpenOptions};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::result::{BrokerKill, StartedBroker};

/// How long a started broker has to accept connections before the start counts as failed.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `stop` waits after SIGTERM for a clean shutdown before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug)]
pub struct BrokerProcess {
    command: String,
    /// Where this broker accepts Kafka connections (`host:port`; of a list, the first counts).
    address: String,
    log: PathBuf,
    child: Option<Child>,
    /// Every PID this broker had, first start first (a restart adds one).
    pids: Vec<u32>,
}

impl BrokerProcess {
    /// `command` is run by `sh -c "exec COMMAND"`, so the shell is replaced and the PID is the
    /// broker's; its output goes to `log`. `address` is where it listens.
    pub fn new(command: &str, address: &str, log: PathBuf) -> Self {
        Self {
            command: command.into(),
            address: address.into(),
            log,
            child: None,
            pids: Vec::new(),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Starts the broker and waits until its address accepts connections.
    pub fn start(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_listening()
    }

    /// Runs the command; does not wait for it to listen.
    fn spawn(&mut self) -> Result<(), String> {
        let out = self.log_file()?;
        let err = out.try_clone().map_err(|e| format!("broker log: {e}"))?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("exec {}", self.command))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start the broker ({}): {e}", self.command))?;
        self.pids.push(child.id());
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the spawned broker accepts connections at its address.
    fn wait_listening(&mut self) -> Result<(), String> {
        self.wait_listening_with(&mut std::thread::sleep)
    }

    /// [`BrokerProcess::wait_listening`], letting time pass through `pass` between checks.
    fn wait_listening_with(&mut self, pass: &mut dyn FnMut(Duration)) -> Result<(), String> {
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "the broker exited ({status}) before accepting connections; see {}",
                    self.log.display()
                ));
            }
            if reachable(&self.address) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the broker did not listen on {} within {} s; see {}",
                    self.address,
                    LISTEN_TIMEOUT.as_secs(),
                    self.log.display()
                ));
            }
            pass(Duration::from_millis(50));
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .map_err(|e| format!("cannot kill the broker: {e}"))?;
            let _ = child.wait();
        }
        Ok(())
    }

    /// SIGTERM and wait up to 20 s for a clean shutdown; SIGKILL after that.
    pub fn stop(&mut self) {
        self.terminate();
        self.reap_by(Instant::now() + STOP_TIMEOUT);
    }

    /// Sends SIGTERM to a running broker (by its PID); does not wait.
    fn terminate(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: `pid` is our own child, not yet reaped, so it cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }

    /// Waits until the broker has exited or `deadline` passed, then SIGKILLs it if needed and
    /// reaps it.
    fn reap_by(&mut self, deadline: Instant) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// What the broker's binary says of its version (`BINARY --version`), if anything.
    pub fn version(&self) -> Option<String> {
        let binary = binary_of(&self.command)?;
        let output = Command::new(binary)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        (output.status.success() && !text.is_empty()).then_some(text)
    }

    fn log_file(&self) -> Result<File, String> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The program a broker command runs: its first word, past an `env` wrapper (with its options)
/// and `NAME=VALUE` assignments, which would otherwise answer `--version` for the broker.
fn binary_of(command: &str) -> Option<&str> {
    let mut words = command.split_whitespace().peekable();
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    while words.peek().is_some_and(|w| assignment(w)) {
        words.next();
    }
    if words.peek() == Some(&"env") {
        words.next();
        while let Some(&w) = words.peek() {
            if !(w.starts_with('-') || assignment(w)) {
                break;
            }
            words.next();
            // env's options that take their value as the next word.
            if matches!(w, "-u" | "--unset" | "-C" | "--chdir") {
                words.next();
            }
        }
    }
    words.next()
}

/// On Linux, asks the kernel to SIGKILL the child when the thread that started it dies (the
/// benchmark's own thread, which lives for the whole campaign): a benchmark killed outright
/// cannot run its destructors, and must not leave brokers behind holding ports and data
/// directories. The flag survives `exec`, so it holds for the broker that replaces `sh`.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: between fork and exec the closure only calls async-signal-safe functions
    // (prctl, getppid) and allocates nothing (raw OS errors carry no heap data).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the flag was set: then nobody will stop us.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

/// Every broker a campaign started (`--broker-cmd`, in command-line order).
#[derive(Debug)]
pub struct Brokers {
    members: Vec<BrokerProcess>,
    /// Kills done so far in the whole campaign; the next one hits [`victim`] of this.
    kills_done: u32,
}

/// The broker that kill number `kill` (from 0, counted over the whole campaign) hits among
/// `count`: round-robin, so consecutive kills hit different brokers whenever there are several.
pub fn victim(kill: u32, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    (kill as usize) % count
}

impl Brokers {
    /// One broker per command, each listening on [`broker_address`]; output to `broker.log` in
    /// `dir` for one broker (as always), `broker-<i>.log` for several. Starts nothing.
    pub fn new(commands: &[String], bootstrap: &str, dir: &Path) -> Result<Self, String> {
        let count = commands.len();
        let mut members = Vec::with_capacity(count);
        for (index, command) in commands.iter().enumerate() {
            if command.trim().is_empty() {
                return Err(format!("--broker-cmd number {} is empty", index + 1));
            }
            let address = broker_address(command, index, count, bootstrap)?;
            if let Some(other) = members
                .iter()
                .position(|m: &BrokerProcess| m.address == address)
            {
                return Err(format!(
                    "brokers {other} and {index} would both listen on {address}: each \
                     --broker-cmd must bind its own address"
                ));
            }
            let log = if count == 1 {
                dir.join("broker.log")
            } else {
                dir.join(format!("broker-{index}.log"))
            };
            members.push(BrokerProcess::new(command, &address, log));
        }
        Ok(Self {
            members,
            kills_done: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&BrokerProcess> {
        self.members.get(index)
    }

    /// Starts every broker, then waits until each accepts connections. Refuses an address
    /// something already listens on: the load would go to that stranger while the kills hit
    /// ours. On an error the brokers already started keep running until [`Brokers::stop_all`]
    /// or the drop.
    pub fn start_all(&mut self) -> Result<(), String> {
        for (index, b) in self.members.iter().enumerate() {
            if reachable(&b.address) {
                return Err(format!(
                    "something already listens on {} (broker {index}'s address): stop it, or \
                     give the broker another address",
                    b.address
                ));
            }
        }
        for b in &mut self.members {
            b.spawn()?;
        }
        for (index, b) in self.members.iter_mut().enumerate() {
            b.wait_listening()
                .map_err(|e| format!("broker {index}: {e}"))?;
        }
        Ok(())
    }

    /// The broker the next [`Brokers::kill_next`] hits.
    pub fn next_victim(&self) -> usize {
        victim(self.kills_done, self.members.len())
    }

    /// SIGKILLs the next broker in turn, waits `restart_delay`, runs its command again and
    /// waits until it accepts connections. `t_s` is the caller's clock (seconds since the
    /// repeat started), recorded with the kill. All waiting goes through `pass(duration)`,
    /// which must let about that much time pass (the caller keeps reporting meanwhile: the
    /// other brokers carry the load while this one is down).
    pub fn kill_next(
        &mut self,
        restart_delay: Duration,
        t_s: f64,
        mut pass: impl FnMut(Duration),
    ) -> Result<BrokerKill, String> {
        let index = self.next_victim();
        let Some(broker) = self.members.get_mut(index) else {
            return Err("no broker to kill: pass --broker-cmd".into());
        };
        let pid = broker.pid().ok_or_else(|| {
            format!(
                "broker {index} ({}) is not running; see {}",
                broker.address,
                broker.log.display()
            )
        })?;
        let at = crate::campaign::rfc3339(SystemTime::now());
        let killed = Instant::now();
        broker.kill().map_err(|e| format!("broker {index}: {e}"))?;
        self.kills_done += 1;
        pass(restart_delay);
        broker
            .spawn()
            .and_then(|()| broker.wait_listening_with(&mut pass))
            .map_err(|e| format!("restarting broker {index}: {e}"))?;
        Ok(BrokerKill {
            broker: index as u32,
            address: broker.address.clone(),
            at,
            t_s,
            pid,
            restarted_pid: broker.pid().unwrap_or(0),
            down_s: killed.elapsed().as_secs_f64(),
        })
    }

    /// SIGTERMs every running broker at once, waits up to 20 s for them all, then SIGKILLs and
    /// reaps whatever is left. Idempotent.
    pub fn stop_all(&mut self) {
        for b in &mut self.members {
            b.terminate();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for b in &mut self.members {
            b.reap_by(deadline);
        }
    }

    /// The version the first broker's binary reports.
    pub fn version(&self) -> Option<String> {
        self.members.first().and_then(BrokerProcess::version)
    }

    /// For the campaign's record: each broker's address, command (secrets hidden), log file
    /// and every PID it had.
    pub fn describe(&self) -> Vec<StartedBroker> {
        self.members
            .iter()
            .enumerate()
            .map(|(index, b)| StartedBroker {
                index: index as u32,
                address: b.address.clone(),
                command: redact(&b.command),
                log: b
                    .log
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                pids: b.pids.clone(),
            })
            .collect()
    }
}

impl Drop for Brokers {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Where broker `index` of `count` listens. One broker: the (first) bootstrap address, as it
/// always was. Several: the `--kafka-addr` its command gives, else the `index`-th entry of a
/// bootstrap list with one entry per broker.
pub fn broker_address(
    command: &str,
    index: usize,
    count: usize,
    bootstrap: &str,
) -> Result<String, String> {
    let entries: Vec<&str> = bootstrap
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if count <= 1 {
        return Ok(bootstrap.to_string());
    }
    if let Some(address) = flag_value(command, "--kafka-addr") {
        return Ok(address);
    }
    if entries.len() == count {
        return Ok(entries[index].to_string());
    }
    Err(format!(
        "cannot tell where broker {index} listens: give its command --kafka-addr HOST:PORT, or \
         list one --bootstrap address per --broker-cmd in the same order ({count} commands, \
         {} bootstrap address(es))",
        entries.len()
    ))
}

/// The value of `--flag VALUE` or `--flag=VALUE` in a shell command line (quotes stripped).
fn flag_value(command: &str, flag: &str) -> Option<String> {
    let unquote = |s: &str| s.trim_matches(|c| c == '\'' || c == '"').to_string();
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        if word == flag {
            return words.next().map(unquote).filter(|v| !v.is_empty());
        }
        if let Some(value) = word
            .strip_prefix(flag)
            .and_then(|rest| rest.strip_prefix('='))
        {
            return Some(unquote(value)).filter(|v| !v.is_empty());
        }
    }
    None
}

/// A command line fit for a results file: URL passwords (`scheme://user:PASSWORD@host`),
/// values of secret-looking `NAME=VALUE` words (environment variables, libpq key words) and of
/// secret-looking `--flags` become `***`. Words are rejoined with single spaces.
pub fn redact(command: &str) -> String {
    let secret_name = |name: &str| {
        let upper = name.to_ascii_uppercase();
        ["SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL"]
            .iter()
            .any(|s| upper.contains(s))
            || upper.ends_with("_KEY")
            || upper == "KEY"
    };
    let mut out: Vec<String> = Vec::new();
    let mut hide_next = false;
    for word in command.split_whitespace() {
        if hide_next {
            hide_next = false;
            out.push("***".into());
            continue;
        }
        let mut word = hide_url_password(word);
        if let Some(flag) = word.strip_prefix("--") {
            match flag.split_once('=') {
                Some((name, _)) if secret_name(name) => word = format!("--{name}=***"),
                None if secret_name(flag) => hide_next = true,
                _ => {}
            }
        } else if let Some((name, _)) = word.split_once('=') {
            let plain = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '\'' || c == '"');
            if plain && secret_name(name) {
                word = format!("{name}=***");
            }
        }
        out.push(word);
    }
    out.join(" ")
}

/// `scheme://user:PASSWORD@host...` -> `scheme://user:***@host...`; other words unchanged.
fn hide_url_password(word: &str) -> String {
    let Some(scheme_end) = word.find("://") else {
        return word.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &word[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return word.to_string();
    };
    let Some(colon) = rest[..at].find(':') else {
        return word.to_string();
    };
    format!(
        "{}{}***{}",
        &word[..rest_start],
        &rest[..=colon],
        &rest[at..]
    )
}

/// Whether something accepts TCP connections at `address` (the first of a bootstrap list).
pub fn reachable(address: &str) -> bool {
    let first = address.split(',').next().unwrap_or(address).trim();
    let Ok(addrs) = first.to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn kills_go_round_robin_over_the_brokers() {
        let order: Vec<usize> = (0..7).map(|k| victim(k, 3)).collect();
        assert_eq!(order, [0, 1, 2, 0, 1, 2, 0]);
        assert!((0..10).all(|k| victim(k, 1) == 0));
        // Two brokers: never the same one twice in a row.
        assert!((0..9).all(|k| victim(k, 2) != victim(k + 1, 2)));
        assert_eq!(victim(5, 0), 0);
    }

    #[test]
    fn each_broker_listens_where_its_command_or_the_bootstrap_list_says() {
        // One broker: the bootstrap, untouched (as before several were possible).
        assert_eq!(
            broker_address("sluice serve --kafka-addr 127.0.0.1:1", 0, 1, "localhost:9"),
            Ok("localhost:9".to_string())
        );
        // Several: the command's own --kafka-addr wins.
        let cmd = "env A=b sluice serve --kafka-addr 127.0.0.1:19093 --http-addr off";
        assert_eq!(
            broker_address(cmd, 1, 2, "127.0.0.1:19092"),
            Ok("127.0.0.1:19093".to_string())
        );
        assert_eq!(
            broker_address("sluice serve --kafka-addr='h:2'", 0, 2, "x:1"),
            Ok("h:2".to_string())
        );
        // Else the bootstrap entry of the same position.
        assert_eq!(
            broker_address("kafka-server-start.sh b.properties", 1, 2, "a:1, b:2"),
            Ok("b:2".to_string())
        );
        let err = broker_address("kafka-server-start.sh b.properties", 1, 3, "a:1,b:2")
            .expect_err("no way to tell");
        assert!(
            err.contains("--kafka-addr") && err.contains("3 commands"),
            "{err}"
        );
    }

    #[test]
    fn two_brokers_on_one_address_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cmds = [
            "sluice serve --kafka-addr 127.0.0.1:5".to_string(),
            "sluice serve --kafka-addr 127.0.0.1:5".to_string(),
        ];
        let err = Brokers::new(&cmds, "127.0.0.1:5", dir.path()).expect_err("same address");
        assert!(err.contains("127.0.0.1:5"), "{err}");
        let err = Brokers::new(&[" ".to_string()], "127.0.0.1:5", dir.path()).expect_err("empty");
        assert!(err.contains("empty"), "{err}");
    }

    #[test]
    fn the_version_is_asked_of_the_broker_not_of_its_env_wrapper() {
        assert_eq!(binary_of("sluice serve"), Some("sluice"));
        assert_eq!(
            binary_of("env -u X AWS_REGION=us-east-1 A=b /bin/sluice serve --x=y"),
            Some("/bin/sluice")
        );
        assert_eq!(binary_of("RUST_LOG=info ./sluice serve"), Some("./sluice"));
        assert_eq!(binary_of("env"), None);
        assert_eq!(binary_of(""), None);
    }

    #[test]
    fn secrets_stay_out_of_the_recorded_command() {
        let cmd = "env AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=s3cr3t PGPASSWORD=pw \
                   sluice serve --metadata postgres://sluice:hunter2@127.0.0.1:5432/db \
                   --storage s3://bucket/p --sasl-password topsecret --api-token=abc \
                   --kafka-addr 127.0.0.1:1";
        let shown = redact(cmd);
        for secret in ["s3cr3t", "pw ", "hunter2", "topsecret", "abc"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("AWS_ACCESS_KEY_ID=minio"), "{shown}");
        assert!(
            shown.contains("postgres://sluice:***@127.0.0.1:5432/db"),
            "{shown}"
        );
        assert!(shown.contains("s3://bucket/p"), "{shown}");
        assert!(shown.contains("--kafka-addr 127.0.0.1:1"), "{shown}");
        assert_eq!(
            redact("sluice serve --data-dir /tmp/x"),
            "sluice serve --data-dir /tmp/x"
        );
    }

    /// Whether `pid` is still a process (not reaped).
    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    /// Real processes (`sleep`), each "listening" through a socket this test holds: kills
    /// alternate between the two, each restart gets a new PID, and stopping ends every one.
    #[cfg(target_os = "linux")]
    #[test]
    fn kills_alternate_between_started_brokers_and_stop_ends_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        // No --kafka-addr: each pairs with the bootstrap entry of its position.
        let cmds = ["sleep 120".to_string(), "sleep 121".to_string()];
        let mut brokers = Brokers::new(&cmds, &addrs.join(","), dir.path()).unwrap();
        // The addresses are taken (by this test): a start must refuse them.
        let err = brokers.start_all().expect_err("address in use");
        assert!(err.contains("already listens"), "{err}");
        // Spawn and wait one by one instead (the sockets stand in for the brokers' own).
        for b in &mut brokers.members {
            b.spawn().unwrap();
            b.wait_listening().unwrap();
        }
        let first: Vec<u32> = (0..2)
            .map(|i| brokers.get(i).unwrap().pid().unwrap())
            .collect();
        let mut killed = Vec::new();
        for k in 0..3 {
            let mut passed = Duration::ZERO;
            let kill = brokers
                .kill_next(Duration::from_millis(10), f64::from(k), |d| {
                    passed += d;
                    std::thread::sleep(d);
                })
                .unwrap();
            // The restart delay went through the caller's clock.
            assert!(passed >= Duration::from_millis(10), "{passed:?}");
            assert!(!alive(kill.pid), "pid {} survived its SIGKILL", kill.pid);
            assert_ne!(kill.pid, kill.restarted_pid);
            assert_eq!(kill.address, addrs[kill.broker as usize]);
            assert_eq!(kill.t_s, f64::from(k));
            killed.push(kill);
        }
        let order: Vec<u32> = killed.iter().map(|k| k.broker).collect();
        assert_eq!(order, [0, 1, 0]);
        assert_eq!(killed[0].pid, first[0]);
        assert_eq!(killed[1].pid, first[1]);
        assert_eq!(killed[2].pid, killed[0].restarted_pid);
        assert_eq!(brokers.next_victim(), 1);

        let described = brokers.describe();
        assert_eq!(described.len(), 2);
        assert_eq!(described[0].pids.len(), 3);
        assert_eq!(described[1].pids.len(), 2);
        assert_eq!(described[1].log, "broker-1.log");
        assert!(dir.path().join("broker-0.log").is_file());
        let running: Vec<u32> = (0..2)
            .map(|i| brokers.get(i).unwrap().pid().unwrap())
            .collect();
        assert!(running.iter().all(|&p| alive(p)));
        let stopping = Instant::now();
        drop(brokers);
        assert!(running.iter().all(|&p| !alive(p)), "a broker outlived drop");
        assert!(stopping.elapsed() < Duration::from_secs(10));
    }
}
