//! The owner's status page on 127.0.0.1 (`[page] port`): the decision and its reasons, the
//! workers, the week (the `schedule` grid), the learned availability and recent outcomes,
//! with Snooze and Resume buttons. Plain HTML forms: it works without JavaScript, which only
//! reloads it every 10 s.
//!
//! Who may look and press: a browser cannot show peer credentials, so the page trusts what
//! the control socket already proved. `pilotd open`, run by the owner, asks the daemon over
//! the socket (authorised by SO_PEERCRED, like `snooze`) for a one-time key, valid 2 minutes,
//! and opens `http://127.0.0.1:PORT/?key=…`. The page trades the key for a session cookie
//! (HttpOnly, SameSite=Strict, 12 h) and redirects to `/`, so the key leaves the address bar
//! and cannot be used again. Without a session the page says how to get one and shows
//! nothing else.
//!
//! Cross-site requests are refused three ways: the `Host` must be this listener (no DNS
//! rebinding), a POST whose `Origin` or `Sec-Fetch-Site` says another site is refused, and
//! every form carries the session's CSRF token.
//!
//! Its parts: `keys` (one-time keys and sessions, and the session cookie), `http` (routes,
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
