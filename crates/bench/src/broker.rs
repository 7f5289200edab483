//! A broker the benchmark starts itself (`--broker-cmd`), so that `correctness` can SIGKILL and
//! restart it. Only this process is ever signalled, by its own PID.

use std::fs::{File, OpenOptions};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct BrokerProcess {
    command: String,
    bootstrap: String,
    log: PathBuf,
    child: Option<Child>,
}

impl BrokerProcess {
    /// `command` is run by `sh -c "exec COMMAND"`, so the shell is replaced and the PID is the
    /// broker's; its output goes to `log`.
    pub fn new(command: &str, bootstrap: &str, log: PathBuf) -> Self {
        Self {
            command: command.into(),
            bootstrap: bootstrap.into(),
            log,
            child: None,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the broker and waits until its bootstrap address accepts connections.
    pub fn start(&mut self) -> Result<(), String> {
        let out = self.log_file()?;
        let err = out.try_clone().map_err(|e| format!("broker log: {e}"))?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {}", self.command))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start the broker ({}): {e}", self.command))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
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
            if reachable(&self.bootstrap) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the broker did not listen on {} within 60 s",
                    self.bootstrap
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
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
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: `pid` is our own child, not yet reaped, so it cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
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
        let binary = self.command.split_whitespace().next()?;
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
