//! Connection limits: how many connections the listener keeps in all and per client IP.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` connections are open.
    Total { open: usize, max: usize },
    /// `max_connections_per_ip` connections from this IP are open.
    PerIp { open: usize, max: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total { open, max } => {
                write!(f, "{open} connections open (max_connections {max})")
            }
            Refusal::PerIp { open, max } => {
                write!(
                    f,
                    "{open} connections open from this IP (max_connections_per_ip {max})"
                )
            }
        }
    }
}

/// Counts open connections, in all and per IP.
#[derive(Debug)]
pub struct ConnectionLimits {
    max_total: usize,
    max_per_ip: usize,
    open: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl ConnectionLimits {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits {
            max_total,
            max_per_ip,
            open: Mutex::new(Counts::default()),
        })
    }

    /// Counts a new connection from `ip`, or says why it must be refused. The slot is given
    /// back when dropped.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.total >= self.max_total {
            return Err(Refusal::Total {
                open: open.total,
                max: self.max_total,
            });
        }
        let from_ip = open.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.max_per_ip {
            return Err(Refusal::PerIp {
                open: from_ip,
                max: self.max_per_ip,
            });
        }
        open.total += 1;
        *open.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnectionSlot {
            limits: Arc::clone(self),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnectionSlot {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total -= 1;
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_and_per_ip_limits() {
        let limits = ConnectionLimits::new(3, 2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = limits.admit(a).unwrap();
        let _a2 = limits.admit(a).unwrap();
        assert_eq!(
            limits.admit(a).unwrap_err(),
            Refusal::PerIp { open: 2, max: 2 }
        );
        let _b1 = limits.admit(b).unwrap();
        assert_eq!(
            limits.admit(b).unwrap_err(),
            Refusal::Total { open: 3, max: 3 }
        );
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _b2 = limits.admit(b).unwrap();
    }
}
