//! The server's life: what start-up loads before anything fires (`boot`), and leader or
//! standby among servers sharing a PostgreSQL database (`ha`).

pub mod boot;
pub mod ha;
