//! Text made safe to stand in the page's HTML and SVG, in element content and in quoted
//! attributes alike. Its own room so that the page (`render`) and its chart (`chart`) both
//! escape the same way without importing each other.

/// `s` with the five characters that could open markup or close an attribute replaced by
/// their entities.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
