//! Who is behind the request being handled (`Actor`), for audit events: an admin socket
//! peer's uid, or an API identity (`api:NAME`). Set while a request is handled
//! (`requests/audit.rs`, parked requests answered after start-up) and cleared after.

/// Who is behind the request being handled.
#[derive(Default)]
pub(crate) struct Actor {
    uid: Option<u32>,
    name: Option<String>,
}

impl Actor {
    /// A request from the admin socket is handled as its peer (`None`: nobody known).
    pub(crate) fn admin(&mut self, uid: Option<u32>) {
        self.uid = uid;
    }

    /// The admin socket peer's request is handled.
    pub(crate) fn admin_done(&mut self) {
        self.uid = None;
    }

    /// A request from the HTTP API or `/ws` is handled as `who`.
    pub(crate) fn api(&mut self, who: String) {
        self.name = Some(who);
    }

    /// The API request is handled.
    pub(crate) fn api_done(&mut self) {
        self.name = None;
    }

    /// The admin socket peer's uid.
    pub(crate) fn uid(&self) -> Option<u32> {
        self.uid
    }

    /// The API identity (`api:NAME`).
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}
