//! The server's life: what start-up loads before anything fires (`boot`), and leader or
//! standby among servers sharing a PostgreSQL database (`ha`).

pub(crate) mod boot;
pub(crate) mod ha;
