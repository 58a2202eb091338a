//! Who may use the admin socket.
//!
//! The admin group is `saltpeter_config.admin_group`, else the group `saltpeter` when it
//! exists. The supervisor gives the socket that group (mode 0660) right after binding it,
//! so members can connect at all; the hub then checks every connection's peer
//! credentials (SO_PEERCRED): root, the daemon's own user, or a member of the admin group
//! (primary or supplementary group, read from `/proc/PID/status`). Everyone else gets one
//! refusal and the connection closes. The decision itself is a pure function.

use nix::unistd::{Gid, Group};

/// The group allowed when `admin_group` is not configured (if it exists).
pub(crate) const DEFAULT_ADMIN_GROUP: &str = "saltpeter";

#[derive(Debug, thiserror::Error)]
pub(crate) enum AccessError {
    #[error("admin_group {0} does not exist on this host")]
    NoSuchGroup(String),
    #[error("could not look up group {name}: {source}")]
    Lookup { name: String, source: nix::Error },
}

/// Why a peer may not use the admin socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Denied {
    #[error("uid {uid} is neither root nor a member of the admin group {group}")]
    NotMember { uid: u32, group: String },
    #[error(
        "uid {uid} is not root, and no admin group is configured (saltpeter_config.admin_group)"
    )]
    NoGroup { uid: u32 },
}

/// The admin group by name and id: the configured one (which must exist), else
/// `saltpeter` if it exists, else none.
pub(crate) fn admin_group(configured: Option<&str>) -> Result<Option<(String, Gid)>, AccessError> {
    let lookup = |name: &str| {
        Group::from_name(name).map_err(|source| AccessError::Lookup {
            name: name.to_string(),
            source,
        })
    };
    match configured {
        Some(name) => match lookup(name)? {
            Some(g) => Ok(Some((name.to_string(), g.gid))),
            None => Err(AccessError::NoSuchGroup(name.to_string())),
        },
        None => Ok(lookup(DEFAULT_ADMIN_GROUP)?.map(|g| (DEFAULT_ADMIN_GROUP.to_string(), g.gid))),
    }
}

/// A connecting process as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
    /// Supplementary groups (empty when `/proc` could not tell).
    pub groups: Vec<u32>,
}

/// Whether `peer` may use the socket of a daemon running as `daemon_uid`.
pub(crate) fn decide(
    peer: &Peer,
    daemon_uid: u32,
    group: Option<(&str, u32)>,
) -> Result<(), Denied> {
    if peer.uid == 0 || peer.uid == daemon_uid {
        return Ok(());
    }
    match group {
        Some((_, gid)) if peer.gid == gid || peer.groups.contains(&gid) => Ok(()),
        Some((name, _)) => Err(Denied::NotMember {
            uid: peer.uid,
            group: name.to_string(),
        }),
        None => Err(Denied::NoGroup { uid: peer.uid }),
    }
}

/// The supplementary groups of `pid`, from the `Groups:` line of `/proc/PID/status`.
pub(crate) fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|status| parse_groups(&status))
        .unwrap_or_default()
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid,
            pid: 1,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn root_daemon_user_and_group_members_are_allowed() {
        let group = Some(("ops", 500));
        assert!(decide(&peer(0, 0, &[]), 999, group).is_ok());
        assert!(decide(&peer(999, 999, &[]), 999, None).is_ok());
        assert!(decide(&peer(1000, 500, &[]), 999, group).is_ok());
        assert!(decide(&peer(1000, 1000, &[27, 500]), 999, group).is_ok());
        let err = decide(&peer(1000, 1000, &[27]), 999, group)
            .unwrap_err()
            .to_string();
        assert!(err.contains("uid 1000") && err.contains("ops"), "{err}");
        let err = decide(&peer(1000, 500, &[]), 999, None).unwrap_err();
        assert_eq!(err, Denied::NoGroup { uid: 1000 });
        assert!(err.to_string().contains("admin_group"));
    }

    #[test]
    fn groups_line_is_parsed() {
        let status = "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 27 1000 \n";
        assert_eq!(parse_groups(status), vec![4, 27, 1000]);
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        assert!(supplementary_groups(std::process::id() as i32).len() < 100_000);
    }

    #[test]
    fn a_missing_configured_group_is_an_error() {
        assert!(matches!(
            admin_group(Some("no-such-group-for-saltpeter")),
            Err(AccessError::NoSuchGroup(_))
        ));
        let root = admin_group(Some("root")).unwrap().unwrap();
        assert_eq!(root.1.as_raw(), 0);
    }
}
