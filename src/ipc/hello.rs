//! The first frame of every link: who is speaking and which build it comes from.
//!
//! It lives in `ipc` and not in `wire` because the channel checks it before any link's
//! messages flow; `ipc` is the transport and imports none of the message types.

use serde::{Deserialize, Serialize};

/// Version of the internal link protocol; every binary of one build shares it.
pub(crate) const PROTO_VERSION: u32 = 1;

/// Who is at the other end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Role {
    Supervisor,
    Hub,
    Main,
    Db,
    Blocking,
    Ctl,
}

impl Role {
    pub(crate) const CHILDREN: [Role; 4] = [Role::Hub, Role::Main, Role::Db, Role::Blocking];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Supervisor => "supervisor",
            Role::Hub => "hub",
            Role::Main => "main",
            Role::Db => "db",
            Role::Blocking => "blocking",
            Role::Ctl => "saltpeterctl",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Role> {
        Role::CHILDREN.into_iter().find(|r| r.name() == name)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// First frame on every link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub role: Role,
    pub proto_version: u32,
    pub pid: u32,
}
