//! The `pilotd` binary's library: the command line (`cli`) and one file per subcommand
//! (`cmd`), the edge above both modes. ARCHITECTURE.md lists the crates and who imports whom.

pub mod cli;
pub mod cmd;
