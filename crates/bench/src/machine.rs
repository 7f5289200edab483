//! What the benchmark ran on and with: the machine (CPU, memory, kernel, OS), the git commit
//! `sluice` was built from, the CPU time the benchmark process itself used (to tell a
//! saturated load generator from a slow broker), and that of the broker processes under test
//! ([`BrokerCpu`], for CPU seconds per million records).
//!
//! Everything here is best effort: a file the kernel does not expose gives `unknown` or `None`,
//! never an error, because a missing detail must not stop a benchmark. The parsers take the text
//! of the file so tests can feed them any machine.

use std::ffi::c_char;
use std::fs;

use crate::result::Machine;

const UNKNOWN: &str = "unknown";

/// Describes the machine this process runs on.
pub fn machine() -> Machine {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let os_release = fs::read_to_string("/etc/os-release")
        .or_else(|_| fs::read_to_string("/usr/lib/os-release"))
        .unwrap_or_default();
    let cpufreq = "/sys/devices/system/cpu/cpu0/cpufreq";
    let governor = fs::read_to_string(format!("{cpufreq}/scaling_governor")).ok();
    let max_freq = fs::read_to_string(format!("{cpufreq}/cpuinfo_max_freq")).ok();
    let uname = uname();
    Machine {
        hostname: uname
            .as_ref()
            .map_or_else(|| UNKNOWN.to_owned(), |u| u.nodename.clone()),
        cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| UNKNOWN.to_owned()),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
        memory_bytes: mem_total_bytes(&meminfo).unwrap_or(0),
        cpu_governor: governor
            .map(|g| g.trim().to_owned())
            .filter(|g| !g.is_empty()),
        cpu_mhz: max_freq
            .as_deref()
            .and_then(khz_to_mhz)
            .or_else(|| cpu_mhz(&cpuinfo)),
        kernel: uname.map_or_else(
            || UNKNOWN.to_owned(),
            |u| format!("{} {}", u.release, u.machine),
        ),
        os: pretty_name(&os_release).unwrap_or_else(|| UNKNOWN.to_owned()),
    }
}

/// The commit `sluice` was built from (`-dirty` when tracked files had uncommitted changes),
/// or `unknown` when it was not built from a git checkout. Set by `build.rs`.
pub fn git_commit() -> &'static str {
    env!("SLUICE_GIT_COMMIT")
}

/// Machine-wide CPU time counters from the first line of `/proc/stat`: (total, steal), in clock
/// ticks. Steal is time the hypervisor gave this VM's CPUs to someone else; `None` off Linux.
pub fn cpu_steal_ticks() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    parse_steal(text.lines().next()?)
}

fn parse_steal(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    let values: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if values.len() < 8 {
        return None;
    }
    Some((values.iter().sum(), values[7]))
}

/// Share of all CPU time stolen by the hypervisor between two [`cpu_steal_ticks`] readings.
pub fn steal_share(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.0.saturating_sub(before.0);
    if total == 0 {
        0.0
    } else {
        after.1.saturating_sub(before.1) as f64 / total as f64
    }
}

/// CPU seconds (user + system) this process has used so far, over all its threads; 0 if the
/// kernel will not say.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: `rusage` is a plain C struct of integers, for which all zero bytes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage` that outlives the call; RUSAGE_SELF is a
    // valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return 0.0;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CPU seconds (user + system, all threads) process `pid` has used so far, from
/// `/proc/PID/stat`; `None` when it is gone or the kernel will not say.
pub fn pid_cpu_seconds(pid: u32) -> Option<f64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_cpu_ticks(&text)?;
    // SAFETY: sysconf only reads a configuration value.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_s > 0).then(|| ticks as f64 / per_s as f64)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`.
fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The broker processes under test, whose CPU time a repeat records next to its throughput
/// (`--broker-pid`, and the brokers the benchmark started itself).
#[derive(Debug, Clone, Default)]
pub struct BrokerCpu {
    pids: Vec<u32>,
}

impl BrokerCpu {
    pub fn new(pids: Vec<u32>) -> BrokerCpu {
        BrokerCpu { pids }
    }

    /// CPU seconds the brokers have used so far, summed; `None` when there are none to watch or
    /// one of them cannot be read (gone, or not Linux), since a partial sum would mislead.
    pub fn seconds(&self) -> Option<f64> {
        if self.pids.is_empty() {
            return None;
        }
        self.pids.iter().map(|&pid| pid_cpu_seconds(pid)).sum()
    }

    /// The CPU seconds used between `before` (an earlier [`BrokerCpu::seconds`]) and now.
    pub fn since(&self, before: Option<f64>) -> Option<f64> {
        Some(self.seconds()? - before?).filter(|s| *s >= 0.0)
    }
}

/// The fields of `uname(2)` the report uses.
#[derive(Debug)]
struct Uname {
    nodename: String,
    release: String,
    machine: String,
}

fn uname() -> Option<Uname> {
    // SAFETY: `utsname` is a plain C struct of `c_char` arrays, for which all zero bytes is a
    // valid value.
    let mut buf: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is a valid, writable `utsname` that outlives the call.
    if unsafe { libc::uname(&mut buf) } != 0 {
        return None;
    }
    Some(Uname {
        nodename: c_field(&buf.nodename),
        release: c_field(&buf.release),
        machine: c_field(&buf.machine),
    })
}

/// A NUL-terminated `c_char` array as a string (the whole array if it has no NUL), without
/// trusting the terminator to be there.
fn c_field(field: &[c_char]) -> String {
    // `to_ne_bytes` works whether `c_char` is `i8` or `u8` on this target.
    let bytes: Vec<u8> = field
        .iter()
        .map(|c| c.to_ne_bytes()[0])
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The value of the first `key : value` line of `/proc/cpuinfo` with one of `keys`.
fn cpuinfo_field<'a>(cpuinfo: &'a str, keys: &[&str]) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (keys.contains(&key.trim()) && !value.is_empty()).then_some(value)
    })
}

/// The CPU model: `model name` on x86; ARM and other kernels name it differently.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo_field(cpuinfo, &["model name"])
        .or_else(|| cpuinfo_field(cpuinfo, &["Hardware", "Processor", "cpu model", "cpu"]))
        .map(str::to_owned)
}

/// `cpu MHz` of the first CPU: its clock when the file was read, the fallback when cpufreq does
/// not tell the maximum.
fn cpu_mhz(cpuinfo: &str) -> Option<f64> {
    cpuinfo_field(cpuinfo, &["cpu MHz"])?
        .parse()
        .ok()
        .filter(|mhz: &f64| *mhz > 0.0)
}

/// `cpuinfo_max_freq` (kHz) in MHz.
fn khz_to_mhz(text: &str) -> Option<f64> {
    let khz: u64 = text.trim().parse().ok()?;
    (khz > 0).then(|| khz as f64 / 1000.0)
}

/// `MemTotal` of `/proc/meminfo` in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut words = line.split_whitespace();
    let amount: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        Some("B") | None => 1,
        Some(_) => return None,
    };
    amount.checked_mul(unit)
}

/// `PRETTY_NAME` of an os-release file, unquoted.
fn pretty_name(os_release: &str) -> Option<String> {
    let value = os_release
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?;
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|&q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)))
        .unwrap_or(value);
    (!unquoted.is_empty()).then(|| unquoted.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
        model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\ncpu MHz\t\t: 2899.968\n\
        \nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n\
        cpu MHz\t\t: 3100.000\n";

    #[test]
    fn cpu_model_and_clock_from_cpuinfo() {
        assert_eq!(
            cpu_model(X86_CPUINFO).as_deref(),
            Some("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz")
        );
        assert_eq!(cpu_mhz(X86_CPUINFO), Some(2899.968));
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nHardware\t: BCM2835\n";
        assert_eq!(cpu_model(arm).as_deref(), Some("BCM2835"));
        assert_eq!(cpu_mhz(arm), None);
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn cpufreq_is_in_khz() {
        assert_eq!(khz_to_mhz("3500000\n"), Some(3500.0));
        assert_eq!(khz_to_mhz("garbage"), None);
        assert_eq!(khz_to_mhz("0"), None);
    }

    #[test]
    fn memory_from_meminfo() {
        let meminfo = "MemTotal:       65842796 kB\nMemFree:         1234 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(65_842_796 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots\n"), None);
    }

    #[test]
    fn os_from_os_release() {
        let text = "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n";
        assert_eq!(pretty_name(text).as_deref(), Some("Ubuntu 24.04.1 LTS"));
        assert_eq!(
            pretty_name("PRETTY_NAME=Alpine\n").as_deref(),
            Some("Alpine")
        );
        assert_eq!(
            pretty_name("PRETTY_NAME='Arch Linux'").as_deref(),
            Some("Arch Linux")
        );
        assert_eq!(pretty_name("PRETTY_NAME=\"\"\n"), None);
        assert_eq!(pretty_name("NAME=x\n"), None);
    }

    #[test]
    fn c_fields_stop_at_nul() {
        let field: Vec<c_char> = b"6.8.0\0junk"
            .iter()
            .map(|&b| c_char::from_ne_bytes([b]))
            .collect();
        assert_eq!(c_field(&field), "6.8.0");
        let unterminated: Vec<c_char> =
            b"abc".iter().map(|&b| c_char::from_ne_bytes([b])).collect();
        assert_eq!(c_field(&unterminated), "abc");
    }

    #[test]
    fn this_machine_is_described() {
        let m = machine();
        assert!(m.nproc >= 1);
        assert!(!m.hostname.is_empty());
        assert!(!m.kernel.is_empty());
        if cfg!(target_os = "linux") {
            assert!(m.memory_bytes > 0);
            assert_ne!(m.kernel, UNKNOWN);
        }
    }

    #[test]
    fn git_commit_is_a_hash_or_unknown() {
        let commit = git_commit();
        let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
        assert!(
            commit == UNKNOWN || (hash.len() >= 40 && hash.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit}"
        );
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_seconds();
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = process_cpu_seconds();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn process_cpu_is_utime_plus_stime_past_the_command_name() {
        // A command name with a space and a parenthesis of its own.
        let stat = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 731 52 0 0 20 0 \
                    30 0 100 1000000 2000 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(783));
        assert_eq!(parse_stat_cpu_ticks("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat_cpu_ticks("no parenthesis"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn broker_cpu_reads_live_processes_and_gives_up_on_gone_ones() {
        let me = BrokerCpu::new(vec![std::process::id()]);
        let before = me.seconds();
        assert!(before.is_some());
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(me.since(before).is_some_and(|s| s >= 0.0));
        assert_eq!(BrokerCpu::default().seconds(), None);
        // PIDs above the kernel's pid_max (at most 2^22) never exist.
        let gone = BrokerCpu::new(vec![std::process::id(), u32::MAX]);
        assert_eq!(gone.seconds(), None);
    }

    #[test]
    fn steal_comes_from_the_eighth_cpu_field() {
        let line = "cpu  100 5 50 800 10 1 2 32 0 0";
        assert_eq!(parse_steal(line), Some((1000, 32)));
        assert_eq!(parse_steal("intr 1 2 3"), None);
        assert_eq!(steal_share((1000, 32), (2000, 132)), 0.1);
    }
}
