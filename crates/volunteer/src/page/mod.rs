//! The owner's status page on 127.0.0.1 (`[page] port`): the decision and its reasons, the
//! workers, the week (the `schedule` grid), the learned availability and recent outcomes,
//! with Snooze and Resume buttons. Plain HTML forms: it works without JavaScript, which only
//! reloads it every 10 s.
//!
//! Who may look and press: a browser cannot show peer credentials, and anything in the
//! address it is given is in its argv, which every local user can read. So the page trusts
//! what the control socket already proved, and the uid the kernel keeps with every socket.
//! `pilotd open`, run by the owner, asks the daemon over the socket (authorised by
//! SO_PEERCRED, like `snooze`) to invite its uid, and opens `http://127.0.0.1:PORT/open`, an
//! address with no secret in it. The page's listener learns the uid of each connection's
//! client socket (`service::loopback`, sock_diag); `/open` on a connection of the invited uid,
//! within 2 minutes, once, gets a session cookie (HttpOnly, SameSite=Strict, 12 h, named for
//! the port) and a redirect to `/`. A session serves only connections of its own uid: the
//! browser sends the cookie to every port of 127.0.0.1, so another user's server may get it,
//! and from another uid it opens nothing. Without a session the page says how to get one and
//! shows nothing else. Invitations are handed out only while pilotd holds the page's port:
//! when another program took it first, `pilotd open` says so and sends no one there.
//!
//! Cross-site requests are refused three ways: the `Host` must be this listener (no DNS
//! rebinding), a POST whose `Origin` or `Sec-Fetch-Site` says another site is refused, and
//! every form carries the session's CSRF token. A navigation to `/open` another site started
//! (`Sec-Fetch-Site`) does not use up the owner's invitation.
//!
//! Its parts: `keys` (invitations and sessions, and the session cookie), `http` (routes,
//! the cross-site checks and the headers of every answer, served through `service::http`
//! like the metrics), `render` (the HTML), `chart` (the weekly chart of what the machine
//! gave, inline SVG) and `markup` (the escaping both use). A press is carried out by the
//! owner's request core (`owner`), as a request on the control socket is; the page imports
//! `owner`, never `control`.

mod chart;
mod http;
mod keys;
mod markup;
mod render;

pub use http::{LIMITS, PageError, bind, serve};
pub use keys::{Doors, KeyError};
