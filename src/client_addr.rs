//! What counts as one client when a limit or a throttle is kept per address (the hub's
//! connection caps and credential throttle, main's records of refused hellos).
//!
//! An IPv4 address is one client. An IPv6 host usually holds a whole /64 (privacy
//! addresses, SLAAC), so a cap keyed on the exact address would let one host take as
//! many shares as it likes: IPv6 is keyed by its /64.

use std::net::IpAddr;

/// The key an address is counted under.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut seg = v6.segments();
                seg[4..].iter_mut().for_each(|s| *s = 0);
                IpAddr::V6(seg.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_by_its_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client_key(mapped), v4);
        assert_ne!(client_key(v4), client_key("10.0.0.2".parse().unwrap()));
    }
}
