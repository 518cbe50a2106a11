//! The owner: what may be asked and by whom (request), the two doors (control, page), and init's questions.

pub mod control;
pub(crate) mod page;
pub mod questions;
pub mod request;
